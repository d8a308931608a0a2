package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ibex-rdma/ibex/perf"
	"github.com/ibex-rdma/ibex/perf/oob"
)

// newPerfCmd is `ibex perf TEST [flags] [SERVER]`, perftest's tools in
// one command.
func newPerfCmd() *cobra.Command {
	var (
		cfg      perf.Config
		duration int
		asJSON   bool
		plotFile string
		version  bool
		outJSON  bool
		jsonFile string
		output   string
		gidIndex int
		ibPort   int
		connType string
		cpuFreq  bool
		cpuUtil  bool
	)
	names := make([]string, 0, 8)
	for _, t := range perf.Tests() {
		names = append(names, t.String())
	}
	cmd := &cobra.Command{
		Use:   "perf TEST [flags] [SERVER]",
		Short: "perftest's benchmarks (ib_write_bw, ib_write_lat, ...) on any device",
		Long: "Run one of perftest's benchmarks: " + strings.Join(names, ", ") + ".\n\n" +
			"Without SERVER, print \"Waiting for client to connect...\", serve one client on -p\n" +
			"(default 18515) and exit, as ib_write_bw does (--serve-forever: serve one client\n" +
			"after another); with SERVER (a host name or address), connect to it and run the\n" +
			"test. Flags keep perftest's names, ranges and defaults, the report its columns,\n" +
			"and the TCP exchange its format, so the other end may be perftest itself (on a\n" +
			"RoCE device). Bandwidth reports add, below the table, the CPU this process spent\n" +
			"(user+sys, getrusage) per GB moved and as a share of one core (also in --json).\n\n" +
			"Without -d, the first device that reaches another process: shm0 (this host), so\n" +
			"`ibex perf write_bw &` and `ibex perf write_bw localhost` work on one host.\n" +
			"udp0 (RoCEv2 over UDP) binds UDP port 4791 on the address in IBEX_UDP_ADDR\n" +
			"(default: the first non-loopback IPv4 address); two processes on one host each\n" +
			"need their own address, e.g. IBEX_UDP_ADDR=127.0.0.2 for the server and\n" +
			"IBEX_UDP_ADDR=127.0.0.3 for the client. A device that cannot start fails at once,\n" +
			"on the side that sees it, before anything waits for the peer.",
		Example: "  ibex perf write_bw -d shm0 & ibex perf write_bw -d shm0 localhost; wait\n" +
			"  IBEX_UDP_ADDR=127.0.0.2 ibex perf write_bw -d udp0 &\n" +
			"  IBEX_UDP_ADDR=127.0.0.3 ibex perf write_bw -d udp0 127.0.0.1; wait\n" +
			"  ibex perf write_lat -d udp0 -a 10.0.0.1   # all sizes over RoCEv2/UDP",
		Args: func(cmd *cobra.Command, args []string) error {
			if version {
				return nil
			}
			return cobra.RangeArgs(1, 2)(cmd, args)
		},
		ValidArgs: names,
		RunE: func(cmd *cobra.Command, args []string) error {
			if version {
				// perftest: printf("Version: %s\n", user_param->version).
				fmt.Fprintf(cmd.OutOrStdout(), "Version: %s\n", oob.Version)
				return nil
			}
			t, err := perf.ParseTest(args[0])
			if err != nil {
				return err
			}
			cfg.Test = t
			if len(args) == 2 {
				cfg.Peer = args[1]
			}
			if err := checkPerfFlags(cmd); err != nil {
				return err
			}
			switch {
			case duration < 0:
				return fmt.Errorf("perf: -D %d: Duration period must be positive", duration)
			case gidIndex != 0:
				return fmt.Errorf("perf: -x %d: ibex devices have one GID, index 0 (the only valid -x)", gidIndex)
			case ibPort != 1:
				return fmt.Errorf("perf: -i %d: ibex devices have one port, 1 (the only valid -i)", ibPort)
			case connType == "UC" || connType == "UD" || connType == "XRC" || connType == "DC" || connType == "SRD":
				return fmt.Errorf("perf: -c %s: not supported yet (ibex perf runs RC only)", connType)
			case connType != "RC":
				return fmt.Errorf("perf: -c %s: want RC (UC, UD, XRC, DC, SRD are perftest's others, not supported yet)", connType)
			case output != "" && output != "bandwidth" && output != "message_rate" && output != "latency":
				return fmt.Errorf("perf: --output %s: Invalid verbosity level output flag. Please use bandwidth, latency, message_rate", output)
			}
			if cpuFreq {
				fmt.Fprintln(cmd.ErrOrStderr(), "perf: -F: noted; ibex times with the monotonic clock, so CPU frequency does not matter")
			}
			if cpuUtil {
				fmt.Fprintln(cmd.ErrOrStderr(), "perf: --cpu_util: noted; bandwidth reports always end with this process's CPU use (CPU[s/GB] line)")
			}
			cfg.Duration = time.Duration(duration) * time.Second
			stopMetrics, err := serveMetrics(cmd.Context(), cmd.ErrOrStderr(), "perf", metricsAddr(cmd))
			if err != nil {
				return err
			}
			defer stopMetrics()
			out := cmd.OutOrStdout()
			opt := perf.Options{Out: out, Err: cmd.ErrOrStderr()}
			if asJSON || output != "" {
				opt.Out = nil
			}
			if outJSON && jsonFile == "" {
				jsonFile = "perftest_out.json" // perftest's DEFAULT_JSON_FILE_NAME
			}
			report := func(results []perf.Result) error {
				if asJSON || jsonFile != "" {
					b, err := json.MarshalIndent(results, "", "  ")
					if err != nil {
						return err
					}
					if asJSON {
						fmt.Fprintln(out, string(b))
					}
					if jsonFile != "" {
						if err := os.WriteFile(jsonFile, append(b, '\n'), 0o644); err != nil {
							return fmt.Errorf("perf: --out_json_file: %w", err)
						}
					}
				}
				if output != "" {
					// perftest's --output prints the one figure of the
					// last line.
					if len(results) > 0 {
						r := results[len(results)-1]
						switch output {
						case "bandwidth":
							fmt.Fprintf(out, "%.2f\n", r.BWAvg)
						case "message_rate":
							fmt.Fprintf(out, "%.6f\n", r.MsgRate)
						case "latency":
							fmt.Fprintf(out, "%.2f\n", r.TTypical)
						}
					}
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
	f.StringVarP(&cfg.Device, "ib-dev", "d", "", "device (default: the first that reaches another process, shm0)")
	f.VarP(sizeFlag{&cfg.Size}, "size", "s", "message size in bytes, with an optional K, M or G suffix (default 65536 for bandwidth, 2 for latency)")
	f.VarP(rangeFlag{p: &cfg.Iters, name: "Iteration num", min: perf.MinIters, max: perf.MaxIters}, "iters", "n", "iterations per QP, 5 to 100000000 (default 5000 for bandwidth, 1000 for latency)")
	f.BoolVarP(&cfg.All, "all", "a", false, "run sizes from 2 B to 8 MiB")
	f.IntVarP(&duration, "duration", "D", 0, "run for this many seconds instead of -n iterations")
	f.IntVarP(&cfg.QPs, "qp", "q", 0, "number of QPs (default 1)")
	f.IntVarP(&cfg.TxDepth, "tx-depth", "t", 0, "outstanding requests per QP (default 128; 1 for latency)")
	cfg.Port = perf.DefaultPort
	f.VarP(rangeFlag{p: &cfg.Port, name: "Port", min: 1, max: 65535}, "port", "p", "TCP port of the exchange (default 18515)")
	f.BoolVar(&cfg.ServeForever, "serve-forever", false, "server: serve one client after another instead of exiting after one")
	f.BoolVar(&cfg.Gbits, "report_gbits", false, "report bandwidth in Gb/sec instead of MiB/sec")
	f.BoolVar(&asJSON, "json", false, "print the results as JSON instead of the perftest report")
	f.StringVar(&plotFile, "plot", "", "draw size against bandwidth or latency into this PNG/SVG/PDF file")
	f.String("metrics", "", metricsFlagHelp)

	// perftest's other flags, spelled as in its usage text.
	f.BoolVarP(&version, "version", "V", false, "print perftest's protocol version this speaks and exit")
	f.BoolVarP(&cfg.Duplex, "bidirectional", "b", false, "both ends post; each reports the sum (write_bw, read_bw, atomic_bw; on both ends)")
	f.BoolVar(&cfg.ReportBoth, "report-both", false, "with -b, also report this end's and the peer's results separately")
	f.BoolVarP(&cfg.Events, "events", "e", false, "sleep on CQ events (the completion channel) instead of busy polling (not with -D)")
	f.VarP(rangeFlag{p: &cfg.Inline, name: "Max inline", min: 0, max: 1024}, "inline_size", "I", "max inline data: WRITE and SEND payloads up to this size go inline (default 0)")
	f.IntVarP(&gidIndex, "gid-index", "x", 0, "GID index (only 0: ibex devices have one GID)")
	f.VarP(mtuFlag{&cfg.MTU}, "mtu", "m", "MTU, 256 to 4096 (default the port's)")
	f.StringVarP(&connType, "connection", "c", "RC", "connection type (RC; UC, UD: not supported yet)")
	f.IntVarP(&ibPort, "ib-port", "i", 1, "port of the device (only 1)")
	f.VarP(rangeFlag{p: &cfg.QPTimeout, name: "QP Timeout", min: 1, max: 31}, "qp-timeout", "u", "QP timeout: 4.096 us x 2^N, 1 to 31 (default 14)")
	f.VarP(rangeFlag{p: &cfg.CQMod, name: "CQ moderation", min: 1, max: 1024}, "cq-mod", "Q", "signal one request in this many (default 100)")
	f.VarP(rangeFlag{p: &cfg.PostList, name: "Send Post List size", min: 1, max: 8192}, "post_list", "l", "bandwidth tests: requests per post call (default 1; -n a multiple of it, -Q defaults to it)")
	f.BoolVar(&outJSON, "out_json", false, "also save the results as JSON in --out_json_file")
	f.StringVar(&jsonFile, "out_json_file", "", "file for --out_json (default perftest_out.json in the working directory)")
	f.StringVar(&output, "output", "", "print only one figure: bandwidth, message_rate or latency")
	f.BoolVarP(&cpuFreq, "CPU-freq", "F", false, "accepted with a note: ibex does not time with CPU cycles")
	f.BoolVar(&cpuUtil, "cpu_util", false, "accepted with a note: bandwidth reports always show CPU use")
	// Flags with no meaning here: accepted by the parser so that the
	// error names the reason, not "unknown flag".
	for _, r := range perfRejected {
		if r.arg {
			f.StringP(r.long, r.short, "", "not supported: "+r.why)
		} else {
			f.BoolP(r.long, r.short, false, "not supported: "+r.why)
		}
	}
	return cmd
}

// perfRejected are perftest's flags that ibex perf refuses, with why.
var perfRejected = []struct {
	long, short string
	arg         bool
	why         string
}{
	{"rdma_cm", "R", false, "ibex has no rdma_cm; the QPs connect through the TCP exchange"},
	{"comm_rdma_cm", "z", false, "ibex has no rdma_cm; the exchange is TCP"},
	{"report-cycles", "C", false, "ibex reports microseconds from the monotonic clock, not CPU cycles"},
	{"report-histogram", "H", false, "latency histograms are not supported yet (the report has the 99% and 99.9% percentiles)"},
	{"report-unsorted", "U", false, "unsorted latency samples are not supported yet"},
	{"limit_bw", "w", true, "rate limiting is not supported yet"},
	{"limit_msgrate", "y", true, "rate limiting is not supported yet"},
	{"use_cuda", "", true, "ibex registers host memory only (no GPU memory)"},
	{"dualport", "O", false, "ibex devices have one port"},
	{"use-srq", "", false, "SRQs are not supported yet"},
	{"odp", "", false, "on-demand paging: every ibex MR is already pageable Go memory"},
}

// checkPerfFlags rejects the refused flags that were given, naming the
// reason, before anything starts.
func checkPerfFlags(cmd *cobra.Command) error {
	for _, r := range perfRejected {
		fl := cmd.Flags().Lookup(r.long)
		if fl == nil || !fl.Changed {
			continue
		}
		name := "--" + r.long
		if r.short != "" {
			name = "-" + r.short
		}
		return fmt.Errorf("perf: %s: not supported: %s", name, r.why)
	}
	return nil
}

// sizeFlag is -s: perf.ParseSize, perftest's suffixes and range.
type sizeFlag struct{ p *int }

func (f sizeFlag) String() string {
	if f.p == nil || *f.p == 0 {
		return ""
	}
	return strconv.Itoa(*f.p)
}
func (f sizeFlag) Set(s string) error {
	v, err := perf.ParseSize(s)
	if err != nil {
		return err
	}
	*f.p = v
	return nil
}
func (sizeFlag) Type() string { return "size" }

// rangeFlag is an integer flag checked as perftest's CHECK_VALUE_IN_RANGE
// does, with its messages.
type rangeFlag struct {
	p        *int
	name     string
	min, max int
}

func (f rangeFlag) String() string {
	if f.p == nil || *f.p == 0 {
		return ""
	}
	return strconv.Itoa(*f.p)
}
func (f rangeFlag) Set(s string) error {
	v, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		return fmt.Errorf("%s argument %s should be an integer", f.name, s)
	}
	if v < int64(f.min) || v > int64(f.max) {
		return fmt.Errorf("%s should be between %d and %d", f.name, f.min, f.max)
	}
	*f.p = int(v)
	return nil
}
func (rangeFlag) Type() string { return "int" }

// mtuFlag is -m: 256, 512, 1024, 2048 or 4096.
type mtuFlag struct{ p *int }

func (f mtuFlag) String() string {
	if f.p == nil || *f.p == 0 {
		return ""
	}
	return strconv.Itoa(*f.p)
}
func (f mtuFlag) Set(s string) error {
	v, err := strconv.Atoi(s)
	if err != nil || v < 256 || v > 4096 || v&(v-1) != 0 {
		return fmt.Errorf("MTU %s: want 256, 512, 1024, 2048 or 4096", s)
	}
	*f.p = v
	return nil
}
func (mtuFlag) Type() string { return "int" }

var _ pflag.Value = sizeFlag{}
