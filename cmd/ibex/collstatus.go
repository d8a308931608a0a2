package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/ibex-rdma/ibex/coll"
)

// newCollStatusCmd is `ibex coll status`, NCCL's ncclras client: it asks a
// status port (coll's health service, NCCL RAS's protocol) and prints the
// answer.
func newCollStatusCmd() *cobra.Command {
	var addr string
	var asJSON, verbose bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "status",
		Short: "the health of the running communicators: dead, stalled, silent and mismatched ranks (as NCCL's ncclras)",
		Long: "Ask a status port for the health of the communicators whose rank 0 runs there, as NCCL's ncclras\n" +
			"client does: per communicator its ranks' collective counts, then the errors and warnings that name\n" +
			"the outliers (DEAD: a rank's connection to rank 0's service closed without a goodbye, its pid is\n" +
			"gone, or it is silent; NOT_HEARD_FROM; STALLED: behind the others, or still in a call they\n" +
			"finished, for 5 heartbeats; FAILED; MISMATCH: ranks at one collective whose calls differ; COUNTS).\n" +
			"-v adds every rank: pid, host, health, the call and step it is in, since when.\n\n" +
			"A process that holds a communicator's rank 0 serves the port on IBEX_RAS_ADDR (default\n" +
			"localhost:28028); every communicator's service also answers on its own address, which a failed\n" +
			"call's error names. The protocol is plain text: `echo verbose status | nc localhost 28028`.",
		Example: "  ibex coll status\n  ibex coll status -v --addr node7:28028\n  ibex coll status --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runCollStatus(cmd.Context(), cmd.OutOrStdout(), addr, asJSON, verbose, timeout)
		},
	}
	def := os.Getenv("IBEX_RAS_ADDR")
	if def == "" || def == "off" {
		def = "localhost:28028"
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", def, "the status port (host:port; default IBEX_RAS_ADDR, else localhost:28028)")
	f.BoolVar(&asJSON, "json", false, "print the status as JSON (every rank, the findings)")
	f.BoolVarP(&verbose, "verbose", "v", false, "list every rank, and name outliers in groups under half of the ranks")
	f.DurationVarP(&timeout, "timeout", "t", 5*time.Second, "give up on the port after this long")
	return cmd
}

func runCollStatus(ctx context.Context, out io.Writer, addr string, asJSON, verbose bool, timeout time.Duration) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	q := "STATUS\n"
	if verbose || asJSON {
		q = "VERBOSE STATUS\n"
	}
	if asJSON {
		q = "SET FORMAT json\n" + q
	}
	b, err := coll.QueryStatus(ctx, addr, q)
	if err != nil {
		return fmt.Errorf("coll status: %w (is a communicator's rank 0 running there? --addr or IBEX_RAS_ADDR names the port)", err)
	}
	_, err = out.Write(b)
	return err
}
