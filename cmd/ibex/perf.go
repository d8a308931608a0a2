package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ibex-rdma/ibex/perf"
)

// newPerfCmd is `ibex perf TEST [flags] [SERVER]`, perftest's tools in
// one command.
func newPerfCmd() *cobra.Command {
	var (
		cfg      perf.Config
		duration int
		asJSON   bool
		plotFile string
	)
	names := make([]string, 0, 8)
	for _, t := range perf.Tests() {
		names = append(names, t.String())
	}
	cmd := &cobra.Command{
		Use:   "perf TEST [flags] [SERVER]",
		Short: "perftest's benchmarks (ib_write_bw, ib_write_lat, ...) on any device",
		Long: "Run one of perftest's benchmarks: " + strings.Join(names, ", ") + ".\n\n" +
			"Without SERVER, wait for clients on -p (default 18515) and serve one after another;\n" +
			"with SERVER (a host name or address), connect to it and run the test. Flags keep\n" +
			"perftest's names and defaults, the report its columns, and the TCP exchange its\n" +
			"format, so the other end may be perftest itself (on a RoCE device). Bandwidth\n" +
			"reports add, below the table, the CPU this process spent (user+sys, getrusage)\n" +
			"per GB moved and as a share of one core (also in --json).",
		Example: "  ibex perf write_bw -d shm0                # server\n" +
			"  ibex perf write_bw -d shm0 localhost      # client\n" +
			"  ibex perf write_lat -d udp0 -a 10.0.0.1   # all sizes over RoCEv2/UDP",
		Args:      cobra.RangeArgs(1, 2),
		ValidArgs: names,
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := perf.ParseTest(args[0])
			if err != nil {
				return err
			}
			cfg.Test = t
			if len(args) == 2 {
				cfg.Peer = args[1]
			}
			if duration < 0 {
				return fmt.Errorf("perf: -D %d: negative duration", duration)
			}
			cfg.Duration = time.Duration(duration) * time.Second
			out := cmd.OutOrStdout()
			opt := perf.Options{Out: out, Err: cmd.ErrOrStderr()}
			if asJSON {
				opt.Out = nil
			}
			report := func(results []perf.Result) error {
				if asJSON {
					b, err := json.MarshalIndent(results, "", "  ")
					if err != nil {
						return err
					}
					fmt.Fprintln(out, string(b))
				}
				if plotFile != "" {
					return perf.Plot(plotFile, t, cfg.Device, results)
				}
				return nil
			}
			if cfg.Peer == "" {
				return perf.Serve(cmd.Context(), cfg, opt, report)
			}
			results, err := perf.Run(cmd.Context(), cfg, opt)
			if err != nil {
				return err
			}
			return report(results)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&cfg.Device, "ib-dev", "d", "", "device (default: the first one, as perftest)")
	f.IntVarP(&cfg.Size, "size", "s", 0, "message size in bytes (default 65536 for bandwidth, 2 for latency)")
	f.IntVarP(&cfg.Iters, "iters", "n", 0, "iterations per QP (default 5000 for bandwidth, 1000 for latency)")
	f.BoolVarP(&cfg.All, "all", "a", false, "run sizes from 2 B to 8 MiB")
	f.IntVarP(&duration, "duration", "D", 0, "run for this many seconds instead of -n iterations")
	f.IntVarP(&cfg.QPs, "qp", "q", 0, "number of QPs (default 1)")
	f.IntVarP(&cfg.TxDepth, "tx-depth", "t", 0, "outstanding requests per QP (default 128; 1 for latency)")
	f.IntVarP(&cfg.Port, "port", "p", perf.DefaultPort, "TCP port of the exchange")
	f.BoolVar(&cfg.Gbits, "report_gbits", false, "report bandwidth in Gb/sec instead of MiB/sec")
	f.BoolVar(&asJSON, "json", false, "print the results as JSON instead of the perftest report")
	f.StringVar(&plotFile, "plot", "", "draw size against bandwidth or latency into this PNG/SVG/PDF file")
	return cmd
}
