// Command ibex is the command-line front end of the ibex software RDMA
// stack: it lists devices (ibex devices), exercises every verbs operation on
// a device (ibex demo, also what plain `ibex` runs) and prints its version.
//
// The command is kept thin: flags are turned into calls of the verbs
// package, and the output formatting lives in functions that write to an
// io.Writer so the tests can check it.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"

	"github.com/spf13/cobra"

	_ "github.com/ibex-rdma/ibex/provider/ibexd"    // the daemon's devices (udp0 through ibexd), when one runs
	_ "github.com/ibex-rdma/ibex/provider/loopback" // registers loop0
	_ "github.com/ibex-rdma/ibex/provider/shm"      // registers shm0 (shared memory between processes)
	_ "github.com/ibex-rdma/ibex/provider/udp"      // registers udp0 (RoCEv2 over UDP)
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	prof := startProfile(os.Getenv("IBEX_CPUPROFILE"))
	err := newRootCmd().ExecuteContext(ctx)
	prof()
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "ibex: %v\n", err)
		os.Exit(exitCode(err))
	}
}

// startProfile writes a CPU profile of the whole run to path, if not
// empty (IBEX_CPUPROFILE=FILE ibex ...; read it with go tool pprof), and
// returns what ends it.
func startProfile(path string) func() {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "ibex: IBEX_CPUPROFILE=%s: %v\n", path, err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}

// newRootCmd builds the command tree. Errors are returned, not printed:
// main prints them as "ibex: <err>".
func newRootCmd() *cobra.Command {
	demoOpt := defaultDemoOptions()
	root := &cobra.Command{
		Use:   "ibex",
		Short: "ibex, a pure-Go software RDMA stack",
		Long: "ibex is a pure-Go software RDMA stack with the verbs API of libibverbs.\n\n" +
			"Without a subcommand, ibex runs the demo on the default device (see `ibex demo`).",
		Args:          cobra.NoArgs,
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), cmd.OutOrStdout(), demoOpt)
		},
	}
	addDemoFlags(root, &demoOpt)
	root.PersistentPreRunE = serveMetricsFromEnv // IBEX_METRICS (metrics.go)
	root.AddCommand(newCheckCmd())
	root.AddCommand(newCaptureCmd())
	root.AddCommand(newAttackCmd())
	root.AddCommand(newKVCmd())
	root.AddCommand(newDevicesCmd(), newDemoCmd(), newPerfCmd(), newCollCmd(), newSimCmd(), newDaemonCmd(), newStatCmd(), newStoreCmd(), newVersionCmd())
	return root
}

func newDemoCmd() *cobra.Command {
	opt := defaultDemoOptions()
	cmd := &cobra.Command{
		Use:   "demo [-d DEVICE] [--size N]",
		Short: "Connect two RC QPs on a device and run every verbs operation",
		Long: "Open the device twice (a client and a server context), register memory,\n" +
			"create CQs and two RC QPs, exchange connection info in its text form,\n" +
			"connect, then run SEND, SEND_WITH_IMM, RDMA_WRITE, RDMA_WRITE_WITH_IMM,\n" +
			"RDMA_READ, the atomics, a gather SEND and an inline SEND, and finally an\n" +
			"RDMA_WRITE with a wrong rkey to show the error and flush path. Every result\n" +
			"is checked; the first wrong one ends the demo with an error naming the step.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), cmd.OutOrStdout(), opt)
		},
	}
	addDemoFlags(cmd, &opt)
	return cmd
}

func addDemoFlags(cmd *cobra.Command, opt *demoOptions) {
	cmd.Flags().StringVarP(&opt.Device, "device", "d", opt.Device, "device to open")
	cmd.Flags().IntVar(&opt.Size, "size", opt.Size, "message size in bytes for SEND, RDMA_WRITE and RDMA_READ")
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the ibex version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "ibex %s\n", version())
			return err
		},
	}
}

// version is the main module's version from the build info, or "devel"
// for a build from a work tree.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok || bi.Main.Version == "" || bi.Main.Version == "(devel)" {
		return "devel"
	}
	return bi.Main.Version
}

// errWriter remembers the first write error so formatting code can write
// freely and check once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}
