package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/sys/unix"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/internal/units"
	"github.com/ibex-rdma/ibex/sim/des"
	"github.com/ibex-rdma/ibex/sim/experiment"
	"github.com/ibex-rdma/ibex/sim/fabric"
	"github.com/ibex-rdma/ibex/sim/flow"
	"github.com/ibex-rdma/ibex/sim/packet"
	"github.com/ibex-rdma/ibex/sim/place"
	"github.com/ibex-rdma/ibex/sim/topo"
)

type simRunOptions struct {
	min, max    string
	factor      int64
	algo        string
	gpus        int
	on          string
	channels    int
	pipeline    int
	routing     string
	seed        uint64
	vls         int
	buffer      string
	creditUnit  int
	chunk       string
	slots       int
	qps         int
	msgOverhead time.Duration
	nicLatency  time.Duration
	retry       time.Duration
	localNIC    bool
	fail        []string
	asJSON      bool
	trace       string
	traceLimit  int
	top         int
	progress    bool
	engine      string
	hier        bool
	seeds       int
	iters       int
	linkLayer   string
	cc          string
	pfcXoff     string
	pfcHeadroom string
	ecnKmin     string
	ecnKmax     string
	ecnPmax     float64
	failSwitch  []string
	failRandom  int
	failWindow  time.Duration
}

// defaultSimRunOptions are sim run's flag defaults; sweep and plan start
// from them for the flags they do not have.
func defaultSimRunOptions() simRunOptions {
	d := fabric.Defaults
	return simRunOptions{min: "64M", factor: 2, pipeline: 1, routing: "dmodk", seed: 1, vls: d.VLs, creditUnit: d.CreditUnit,
		slots: d.Slots, qps: d.QPsPerConn, msgOverhead: desDuration(d.MsgOverhead), nicLatency: desDuration(d.NICLatency),
		retry: desDuration(d.RetryTimeout), top: 10, progress: true, engine: "packet", linkLayer: "ib", cc: "auto",
		ecnPmax: d.ECNPmax, iters: 1, seeds: 1, traceLimit: 200_000}
}

// desDuration is a simulated time as a time.Duration (whole nanoseconds).
func desDuration(t des.Time) time.Duration { return time.Duration(t / des.Nanosecond) }

func newSimRunCmd() *cobra.Command {
	d := defaultSimRunOptions()
	var o simRunOptions
	cmd := &cobra.Command{
		Use:   "run TOPOLOGY [COLLECTIVE|PATTERN] [flags]",
		Short: "Simulate a collective or traffic pattern on a topology, packet by packet or at flow level",
		Long: "Run a coll/algo schedule (all_reduce, all_gather, reduce_scatter, broadcast, reduce,\n" +
			"all_to_all; --algo ring, tree, rhd, rd, direct) or a point-to-point pattern (alltoall,\n" +
			"incast, permutation: every flow carries the size) over the GPUs of a topology file, at\n" +
			"packet level: InfiniBand credit flow control per VL, output-queued cut-through switches,\n" +
			"NICs sending RDMA WRITEs of one NCCL chunk each. Prints a row per size as nccl-tests does\n" +
			"(time, algbw, busbw, and busbw per NIC), then the hottest links of the last size with\n" +
			"their utilisation and credit-stall time (PortXmitWait).\n\n" +
			"Ranks are the first --gpus GPUs, node by node. With several GPUs per host the schedule runs\n" +
			"in --channels channels (default: NICs per host), channel c rotating each host's GPUs by c,\n" +
			"and traffic between hosts leaves by the NIC on the receiving GPU's rail (PXN), as NCCL\n" +
			"does on rail-optimized fabrics. Traffic inside a host goes over NVLink (a rate and a\n" +
			"latency, no packets).\n\n" +
			"The topology file's schema, every field with its unit and default: docs/sim-yaml.md.",
		Example: "  ibex sim run examples/superpod-1024gpu.yaml all_reduce -b 64M --engine flow\n" +
			"  ibex sim run examples/superpod-1su.yaml all_reduce --gpus 32 -b 1M -e 1G -f 4\n" +
			"  ibex sim run examples/fattree-2tier-k64-2to1.yaml permutation --gpus 512 -b 1M --routing ecmp --seed 3\n" +
			"  ibex sim run examples/fattree-2tier-k64.yaml all_reduce --gpus 64 -b 16M --fail leaf0:32@20us --retry-timeout 1ms --trace run.json",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			what := "all_reduce"
			if len(args) == 2 {
				what = args[1]
			}
			return runSimRun(cmd.OutOrStdout(), cmd.ErrOrStderr(), args[0], what, o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.min, "minbytes", "b", d.min, "smallest size (K, M, G suffixes)")
	f.StringVarP(&o.max, "maxbytes", "e", "", "largest size (default: the smallest)")
	f.Int64VarP(&o.factor, "stepfactor", "f", d.factor, "multiply the size by this each step")
	f.StringVar(&o.algo, "algo", "", "algorithm: ring, tree, rhd, rd, direct (default ring; direct for all_to_all)")
	f.IntVar(&o.gpus, "gpus", 0, "ranks: the first N GPUs of the topology (default all)")
	f.StringVar(&o.on, "on", "", "ranks on these GPUs, in rank order: a list of GPU numbers and ranges (host × GPUs per host + index), e.g. 0-7,64-71")
	f.IntVar(&o.channels, "channels", 0, "channels (default: NICs per host)")
	f.IntVar(&o.pipeline, "pipeline", d.pipeline, "split every slot of the algorithm into this many pieces (coll/algo's pipeline)")
	f.StringVar(&o.routing, "routing", d.routing, "dmodk (OpenSM ftree), ecmp (hash per QP) or adaptive (least-loaded port); a comma list runs each (dmodk,adaptive)")
	f.Uint64Var(&o.seed, "seed", d.seed, "seed: salts the ECMP hashes and draws the permutation; the same seed replays a run")
	f.IntVar(&o.vls, "vls", d.vls, "data VLs, 1 to 8 (QP i on VL i mod VLs)")
	f.StringVar(&o.buffer, "buffer", "", "receive buffer per port per VL (default 64K)")
	f.IntVar(&o.creditUnit, "credit-unit", d.creditUnit, "bytes per credit, 1 to 4096")
	f.StringVar(&o.chunk, "chunk", "", "bytes per message (default 512K: NCCL_BUFFSIZE/NCCL_STEPS)")
	f.IntVar(&o.slots, "slots", d.slots, "messages in flight per connection, 1 to 1024 (default: NCCL_STEPS)")
	f.IntVar(&o.qps, "qps", d.qps, "QPs per connection, 1 to 64")
	f.DurationVar(&o.msgOverhead, "msg-overhead", d.msgOverhead, "per-message gap at the sending QP (> 0)")
	f.DurationVar(&o.nicLatency, "nic-latency", d.nicLatency, "receiving NIC's wire-to-memory latency (> 0)")
	f.DurationVar(&o.retry, "retry-timeout", d.retry, "how long a QP waits before resending packets a link failure lost (> 0; default 4.096us x 2^20, NCCL_IB_TIMEOUT=20)")
	f.BoolVar(&o.localNIC, "local-nic", false, "send between hosts from the sending GPU's own NIC instead of PXN")
	f.StringArrayVar(&o.fail, "fail", nil, "fail a link at a simulated time: PORT@TIME (leaf0:32@50us, host3.nic1@1ms) or LINKNUMBER@TIME; repeatable")
	f.BoolVar(&o.asJSON, "json", false, "print the results as JSON")
	f.StringVar(&o.trace, "trace", "", "write a Chrome / Perfetto trace (JSON) of the last size to this file")
	f.IntVar(&o.traceLimit, "trace-limit", 200_000, "step spans the trace keeps; later ones are dropped (and counted on stderr)")
	f.IntVar(&o.top, "top", d.top, "hottest links to list")
	f.BoolVar(&o.progress, "progress", d.progress, "show packet-level runs' progress on stderr: a bar on a terminal, otherwise a line every 10 s and one at the end")
	f.StringVar(&o.engine, "engine", d.engine, "packet (every packet and credit) or flow (max-min fair rates per step; 100k GPUs in seconds)")
	f.BoolVar(&o.hier, "hier", false, "all_reduce as NCCL does across nodes: ring reduce-scatter in each host, --algo (ring or tree) per rail across hosts, ring all-gather in each host (flow engine)")
	f.StringVar(&o.linkLayer, "link-layer", d.linkLayer, "ib (InfiniBand: credit flow control per VL) or roce (RoCEv2: Ethernet framing, PFC, ECN)")
	f.StringVar(&o.cc, "cc", d.cc, "congestion control: auto (DCQCN with roce, none with ib), none (roce: PFC and NCCL's admission only, as Meta runs), dcqcn")
	f.StringVar(&o.pfcXoff, "pfc-xoff", "", "roce: PFC Xoff per ingress port and priority (default 256K)")
	f.StringVar(&o.pfcHeadroom, "pfc-headroom", "", "roce: PFC headroom above Xoff (default: computed per port so nothing is dropped)")
	f.StringVar(&o.ecnKmin, "ecn-kmin", "", "roce: ECN marking starts above this many bytes queued (default 64K)")
	f.StringVar(&o.ecnKmax, "ecn-kmax", "", "roce: ECN marks every packet above this (default 256K)")
	f.Float64Var(&o.ecnPmax, "ecn-pmax", d.ecnPmax, "roce: marking probability at ecn-kmax, > 0 and <= 1")
	f.IntVar(&o.iters, "iters", d.iters, "run the operation this many times back to back in one simulation, reporting each iteration's time when links fail")
	f.StringArrayVar(&o.failSwitch, "fail-switch", nil, "fail every link of a switch at a simulated time: NAME@TIME (spine3@1ms); repeatable")
	f.IntVar(&o.failRandom, "fail-random", 0, "fail this many switch-to-switch links, drawn from --seed, at random times within --fail-window")
	f.DurationVar(&o.failWindow, "fail-window", 0, "window of --fail-random's times (default: the run's time without failures)")
	f.IntVar(&o.seeds, "seeds", d.seeds, "run every size with this many seeds from --seed on and report the spread (ECMP collisions)")
	return cmd
}

// simRow is one size's result, as --json prints it.
type simRow = experiment.Row

// runSimRun is `ibex sim run`: the flags checked (each error naming its
// flag) and turned into an experiment.Config, then one experiment per
// routing of --routing, its report printed as the rows come (or as JSON
// at the end).
func runSimRun(out, errOut io.Writer, path, what string, o simRunOptions) error {
	if err := checkSimRunFlags(o); err != nil {
		return err
	}
	// Every routing's parameters are checked before the first runs.
	routings := []string{o.routing}
	if rs := strings.Split(o.routing, ","); len(rs) > 1 {
		routings = rs
		for i := range rs {
			routings[i] = strings.TrimSpace(rs[i])
		}
	}
	params := make([]fabric.Params, len(routings))
	for i, r := range routings {
		o2 := o
		o2.routing = r
		p, err := simParams(o2)
		if err != nil {
			return err
		}
		params[i] = p
	}
	cfg, err := simRunConfig(path, what, o)
	if err != nil {
		return err
	}
	if !o.asJSON {
		cfg.Out = out
	}
	if o.progress && errOut != nil {
		cfg.Progress = func(label string) func(packet.Progress) { return newSimProgress(errOut, label).report }
	}
	// One report per routing, one after the other.
	for _, p := range params {
		cfg.Params = p
		res, err := experiment.Run(cfg)
		if res == nil {
			return fmt.Errorf("sim run: %w", err)
		}
		if res.TraceDropped > 0 && errOut != nil {
			fmt.Fprintf(errOut, "ibex sim run: --trace %s: %d step spans written, %d later ones dropped (the limit; raise it with --trace-limit)\n",
				o.trace, res.TraceSpans, res.TraceDropped)
		}
		if err != nil {
			return err // writing the report
		}
		if o.asJSON {
			if err := res.WriteJSON(out); err != nil {
				return err
			}
		}
	}
	return nil
}

// simRunConfig loads the topology and turns the flags that need it (and
// the sizes) into an experiment, each error naming its flag. The params
// are left for the caller.
func simRunConfig(path, what string, o simRunOptions) (experiment.Config, error) {
	var cfg experiment.Config
	s, err := topo.Load(path)
	if err != nil {
		return cfg, err
	}
	g, err := s.Build()
	if err != nil {
		return cfg, fmt.Errorf("%s: %w", path, err)
	}
	ranks := o.gpus
	if ranks == 0 {
		ranks = g.NumGPUs()
	}
	if ranks < 1 || ranks > g.NumGPUs() {
		return cfg, fmt.Errorf("sim run: --gpus %d: %s has %d GPUs", o.gpus, path, g.NumGPUs())
	}
	gpn := g.GPUsOnHost()
	var on []int32
	if o.on != "" {
		if o.gpus != 0 {
			return cfg, fmt.Errorf("sim run: --gpus and --on: give one")
		}
		if on, err = parseGPUList(o.on, g.NumGPUs()); err != nil {
			return cfg, err
		}
		if _, err := place.New(on, len(on), g.NumGPUs(), gpn); err != nil && gpn > 0 {
			return cfg, fmt.Errorf("sim run: --on %q: %w", o.on, err)
		}
		ranks = len(on)
	}
	w, err := simWorkload(what, o.algo, o.pipeline)
	if err != nil {
		return cfg, err
	}
	sched, _, err := simSchedule(what, o.algo, ranks, o.pipeline, o.seed)
	if err != nil {
		return cfg, err
	}
	fails, err := parseFailures(g, o.fail)
	if err != nil {
		return cfg, err
	}
	sw, err := parseSwitchFailures(g, o.failSwitch)
	if err != nil {
		return cfg, err
	}
	lo, err := units.ParseBytes(o.min)
	if err != nil {
		return cfg, fmt.Errorf("sim run: -b %q: %w", o.min, err)
	}
	hi := lo
	if o.max != "" {
		if hi, err = units.ParseBytes(o.max); err != nil {
			return cfg, fmt.Errorf("sim run: -e %q: %w", o.max, err)
		}
	}
	if lo < 0 || hi < lo {
		return cfg, fmt.Errorf("sim run: sizes -b %s -e %s: want 0 <= min <= max", o.min, o.max)
	}
	if gpn == 0 {
		return cfg, fmt.Errorf("sim run: %s: hosts with different numbers of NICs; the workload needs the same number on every host", path)
	}
	if o.hier {
		if err := checkHier(g, sched, on); err != nil {
			return cfg, fmt.Errorf("sim run: %w", err)
		}
	}
	if o.failRandom > 0 {
		if _, err := flow.RandomFailures(g, o.failRandom, 1, o.seed); err != nil {
			return cfg, fmt.Errorf("sim run: --fail-random: %w", err)
		}
	}
	engine, _ := experiment.ParseEngine(o.engine) // checked by checkSimRunFlags
	return experiment.Config{Graph: g, Topology: path, Workload: w, Hier: o.hier, GPUs: o.gpus, On: on,
		Channels: o.channels, LocalNIC: o.localNIC, Engine: engine, MinBytes: lo, MaxBytes: hi, Factor: o.factor,
		Seed: o.seed, Seeds: o.seeds, Iterations: o.iters, Failures: fails, SwitchFailures: sw,
		RandomFailures: o.failRandom, FailWindow: des.Time(o.failWindow.Nanoseconds()) * des.Nanosecond,
		Trace: o.trace, TraceLimit: o.traceLimit, Top: o.top}, nil
}

// checkHier checks that --hier can run sched: all_reduce by ring or tree
// over whole hosts.
func checkHier(g *topo.Graph, sched *algo.Schedule, on []int32) error {
	gpn := g.GPUsOnHost()
	if c, a := sched.Collective, sched.Algorithm; c != algo.AllReduce || (a != algo.Ring && a != algo.Tree) || on != nil || gpn == 0 || sched.Ranks%gpn != 0 {
		return fmt.Errorf("--hier: all_reduce with --algo ring or tree over whole hosts (--gpus a multiple of %d)", gpn)
	}
	return nil
}

// simOne runs one size with one seed on o's engine: sim sweep's rows,
// without a trace or progress (trace and errOut are not used).
func simOne(cfg packet.Config, o simRunOptions, _ bool, _ io.Writer) (simRow, []fabric.PortStat, error) {
	e, err := experiment.ParseEngine(o.engine)
	if err != nil {
		return simRow{}, nil, fmt.Errorf("--engine %q: want packet or flow", o.engine)
	}
	if o.hier {
		if e != experiment.EngineFlow {
			return simRow{}, nil, fmt.Errorf("--hier needs --engine flow")
		}
		if err := checkHier(cfg.Graph, cfg.Schedule, cfg.GPUs); err != nil {
			return simRow{}, nil, err
		}
	}
	cfg.Iterations = o.iters
	return experiment.Point{Config: cfg, Engine: e, Hier: o.hier, Pipeline: o.pipeline}.Run()
}

// simWorkload reads a collective (with --algo) or a pattern.
func simWorkload(what, algoName string, pipeline int) (experiment.Workload, error) {
	w := experiment.Workload{Pipeline: pipeline}
	if pat, err := packet.ParsePattern(what); err == nil {
		if algoName != "" {
			return w, fmt.Errorf("sim run: --algo %s: %s is a pattern, not a collective", algoName, what)
		}
		w.Pattern = pat
		return w, nil
	}
	c, err := algo.ParseCollective(strings.TrimSuffix(what, "_perf"))
	if err != nil {
		return w, fmt.Errorf("sim run: %q is neither a collective (all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all) nor a pattern (alltoall, incast, permutation)", what)
	}
	w.Collective = c
	if algoName != "" {
		if w.Algorithm, err = algo.ParseAlgorithm(algoName); err != nil {
			return w, fmt.Errorf("sim run: --algo: %w", err)
		}
	}
	return w, nil
}

// simSchedule makes the schedule of a collective (with an algorithm) or
// a pattern, and its name for reports.
func simSchedule(what, algoName string, ranks, pipeline int, seed uint64) (*algo.Schedule, string, error) {
	w, err := simWorkload(what, algoName, pipeline)
	if err != nil {
		return nil, "", err
	}
	s, name, err := w.Schedule(ranks, seed)
	if err != nil && w.Pattern == 0 {
		return nil, "", fmt.Errorf("sim run: %w", err)
	}
	return s, name, err
}

// simParams turns the flags into checked fabric parameters: each flag's
// range is checked here, naming the flag, and then the combination by
// fabric.CheckParams.
func simParams(o simRunOptions) (fabric.Params, error) {
	for _, r := range []struct {
		flag    string
		v, a, b int
	}{{"vls", o.vls, 1, 8}, {"credit-unit", o.creditUnit, 1, 4096}, {"slots", o.slots, 1, 1024}, {"qps", o.qps, 1, 64}} {
		if r.v < r.a || r.v > r.b {
			return fabric.Params{}, fmt.Errorf("sim run: --%s %d: want %d to %d", r.flag, r.v, r.a, r.b)
		}
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"msg-overhead", o.msgOverhead}, {"nic-latency", o.nicLatency}, {"retry-timeout", o.retry}} {
		if d.v <= 0 || d.v > time.Hour {
			return fabric.Params{}, fmt.Errorf("sim run: --%s %v: want a duration above 0 and up to 1h", d.flag, d.v)
		}
	}
	if !(o.ecnPmax > 0 && o.ecnPmax <= 1) {
		return fabric.Params{}, fmt.Errorf("sim run: --ecn-pmax %g: want above 0 and up to 1", o.ecnPmax)
	}
	p := fabric.Params{VLs: o.vls, CreditUnit: o.creditUnit, Slots: o.slots, QPsPerConn: o.qps,
		MsgOverhead:  des.Time(o.msgOverhead.Nanoseconds()) * des.Nanosecond,
		NICLatency:   des.Time(o.nicLatency.Nanoseconds()) * des.Nanosecond,
		RetryTimeout: des.Time(o.retry.Nanoseconds()) * des.Nanosecond,
		ECNPmax:      o.ecnPmax}
	var err error
	if p.Routing, err = fabric.ParseRouting(o.routing); err != nil {
		return p, fmt.Errorf("sim run: --routing: %w", err)
	}
	if p.LinkLayer, err = fabric.ParseLinkLayer(o.linkLayer); err != nil {
		return p, fmt.Errorf("sim run: --link-layer: %w", err)
	}
	if p.CC, err = fabric.ParseCongestionControl(o.cc); err != nil {
		return p, fmt.Errorf("sim run: --cc: %w", err)
	}
	for _, b := range []struct {
		flag, v string
		dst     *int
	}{{"buffer", o.buffer, &p.Buffer}, {"chunk", o.chunk, &p.Chunk}, {"pfc-xoff", o.pfcXoff, &p.PFCXoff},
		{"pfc-headroom", o.pfcHeadroom, &p.PFCHeadroom}, {"ecn-kmin", o.ecnKmin, &p.ECNKmin}, {"ecn-kmax", o.ecnKmax, &p.ECNKmax}} {
		if b.v == "" {
			continue
		}
		n, err := units.ParseBytes(b.v)
		if err != nil || n <= 0 || n > 1<<30 {
			return p, fmt.Errorf("sim run: --%s %q: want a size from 1 byte to 1G", b.flag, b.v)
		}
		*b.dst = int(n)
	}
	// The engines fill the defaults themselves (sim plan sets the link
	// layer per design after this), so p goes back unfilled.
	if _, err := fabric.CheckParams(p); err != nil {
		return p, fmt.Errorf("sim run: flags %s: %w", strings.Join(paramFlags(o), " "), err)
	}
	return p, nil
}

// paramFlags lists the link-layer flags of o as typed, for an error about
// their combination.
func paramFlags(o simRunOptions) []string {
	out := []string{"--link-layer " + o.linkLayer, "--cc " + o.cc, "--routing " + o.routing}
	for _, f := range []struct{ flag, v string }{{"pfc-xoff", o.pfcXoff}, {"pfc-headroom", o.pfcHeadroom}, {"ecn-kmin", o.ecnKmin}, {"ecn-kmax", o.ecnKmax}} {
		if f.v != "" {
			out = append(out, "--"+f.flag+" "+f.v)
		}
	}
	return out
}

// checkSimRunFlags checks the flags that do not go into fabric.Params,
// before anything is loaded or run.
func checkSimRunFlags(o simRunOptions) error {
	switch {
	case o.engine != "packet" && o.engine != "flow":
		return fmt.Errorf("sim run: --engine %q: want packet or flow", o.engine)
	case o.hier && o.engine != "flow":
		return fmt.Errorf("sim run: --hier needs --engine flow")
	case o.trace != "" && o.engine != "packet":
		return fmt.Errorf("sim run: --trace needs --engine packet")
	case o.gpus < 0:
		return fmt.Errorf("sim run: --gpus %d: want 1 or more (0: all)", o.gpus)
	case o.channels < 0 || o.channels > 64:
		return fmt.Errorf("sim run: --channels %d: want 1 to 64 (0: NICs per host)", o.channels)
	case o.pipeline < 1 || o.pipeline > 1024:
		return fmt.Errorf("sim run: --pipeline %d: want 1 to 1024", o.pipeline)
	case o.seeds < 1 || o.seeds > 100000:
		return fmt.Errorf("sim run: --seeds %d: want 1 to 100000", o.seeds)
	case o.iters < 1 || o.iters > 1<<16:
		return fmt.Errorf("sim run: --iters %d: want 1 to %d", o.iters, 1<<16)
	case o.trace != "" && (o.traceLimit < 1 || o.traceLimit > 1<<26):
		return fmt.Errorf("sim run: --trace-limit %d: want 1 to %d", o.traceLimit, 1<<26)
	case o.top < 0:
		return fmt.Errorf("sim run: --top %d: want 0 or more", o.top)
	case o.failRandom < 0:
		return fmt.Errorf("sim run: --fail-random %d: want 0 or more", o.failRandom)
	case o.failWindow < 0:
		return fmt.Errorf("sim run: --fail-window %v: want 0 or more", o.failWindow)
	case o.factor < 2:
		return fmt.Errorf("sim run: -f %d: want a factor >= 2", o.factor)
	}
	return checkOutputFile("sim run: --trace", o.trace, nil)
}

// checkOutputFile checks, before any work, that path can be written: its
// directory exists and is writable, and path is not a directory (nor a
// file that cannot be written). With exts, the name must end in one of
// them. An empty path is no output.
func checkOutputFile(what, path string, exts []string) error {
	if path == "" {
		return nil
	}
	if exts != nil && !slices.Contains(exts, strings.ToLower(strings.TrimPrefix(filepath.Ext(path), "."))) {
		return fmt.Errorf("%s %s: want a file name ending in .%s", what, path, strings.Join(exts, ", ."))
	}
	if st, err := os.Stat(path); err == nil {
		if st.IsDir() {
			return fmt.Errorf("%s %s: is a directory", what, path)
		}
		if err := syscall.Access(path, 2); err != nil {
			return fmt.Errorf("%s %s: not writable: %w", what, path, err)
		}
		return nil
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s %s: directory %s does not exist", what, path, dir)
	case err != nil:
		return fmt.Errorf("%s %s: %w", what, path, err)
	case !st.IsDir():
		return fmt.Errorf("%s %s: %s is not a directory", what, path, dir)
	}
	if err := syscall.Access(dir, 2); err != nil {
		return fmt.Errorf("%s %s: directory %s is not writable: %w", what, path, dir, err)
	}
	return nil
}

// parseGPUList reads --on: comma-separated GPU numbers and ranges a-b.
func parseGPUList(s string, total int) ([]int32, error) {
	var out []int32
	for _, part := range strings.Split(s, ",") {
		a, b, isRange := strings.Cut(strings.TrimSpace(part), "-")
		lo, err1 := strconv.Atoi(a)
		hi, err2 := lo, error(nil)
		if isRange {
			hi, err2 = strconv.Atoi(b)
		}
		if err1 != nil || err2 != nil || lo < 0 || hi < lo || hi >= total {
			return nil, fmt.Errorf("sim run: --on %q: %q: want GPU numbers or ranges a-b within 0 to %d", s, part, total-1)
		}
		for g := lo; g <= hi; g++ {
			out = append(out, int32(g))
		}
	}
	return out, nil
}

// parseSwitchFailures reads --fail-switch values: NAME@TIME.
func parseSwitchFailures(g *topo.Graph, specs []string) ([]experiment.SwitchFailure, error) {
	var out []experiment.SwitchFailure
	for _, s := range specs {
		what, when, ok := strings.Cut(s, "@")
		d, err := time.ParseDuration(when)
		if !ok || err != nil || d < 0 {
			return nil, fmt.Errorf("sim run: --fail-switch %q: want NAME@TIME, e.g. spine3@1ms", s)
		}
		sw := topo.NodeID(-1)
		for id := range g.Nodes {
			if g.Nodes[id].Kind == topo.KindSwitch && g.NodeName(topo.NodeID(id)) == what {
				sw = topo.NodeID(id)
				break
			}
		}
		if sw < 0 {
			return nil, fmt.Errorf("sim run: --fail-switch %q: no switch %q (switches are named like leaf0, spine3, core7)", s, what)
		}
		out = append(out, experiment.SwitchFailure{Switch: what, At: des.Time(d.Nanoseconds()) * des.Nanosecond, When: when})
	}
	return out, nil
}

// parseFailures reads --fail values: PORT@TIME or LINK@TIME.
func parseFailures(g *topo.Graph, specs []string) ([]fabric.Failure, error) {
	var out []fabric.Failure
	var byName map[string]topo.PortID
	for _, s := range specs {
		what, when, ok := strings.Cut(s, "@")
		if !ok {
			return nil, fmt.Errorf("sim run: --fail %q: want PORT@TIME or LINK@TIME, e.g. leaf0:32@50us", s)
		}
		d, err := time.ParseDuration(when)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("sim run: --fail %q: time %q: want a duration >= 0 such as 50us or 1.5ms", s, when)
		}
		var l topo.LinkID = topo.NoLink
		if n, err := strconv.Atoi(what); err == nil {
			if n < 0 || n >= len(g.Links) {
				return nil, fmt.Errorf("sim run: --fail %q: link %d: the topology has links 0 to %d", s, n, len(g.Links)-1)
			}
			l = topo.LinkID(n)
		} else {
			if byName == nil {
				byName = make(map[string]topo.PortID, len(g.Ports))
				for p := range g.Ports {
					byName[g.PortName(topo.PortID(p))] = topo.PortID(p)
				}
			}
			p, ok := byName[what]
			if !ok {
				return nil, fmt.Errorf("sim run: --fail %q: no port %q (ports are named like leaf0:32, spine1:3, host3.nic1)", s, what)
			}
			if l = g.Ports[p].Link; l == topo.NoLink {
				return nil, fmt.Errorf("sim run: --fail %q: port %s has no cable", s, what)
			}
		}
		out = append(out, fabric.Failure{At: des.Time(d.Nanoseconds()) * des.Nanosecond, Link: l})
	}
	return out, nil
}

// simProgress shows how far a packet-level run is on stderr: on a
// terminal an mpb bar (bytes handed to NICs and NVLink against the run's
// total, events and simulated time against their estimated end, time
// left, and the hint --engine flow when that is long), elsewhere a plain
// line now and then (never a \r or cursor frame), and in both a last
// line at 100% when the run ends.
type simProgress struct {
	w      io.Writer
	tty    bool
	label  string
	start  time.Time
	every  time.Duration // between plain lines
	nextAt time.Time

	p   *mpb.Progress
	bar *mpb.Bar
	mu  sync.Mutex // last, read by the bar's decorator on mpb's goroutine
	// last is the latest report.
	last packet.Progress
}

// longRun is the estimate of time left above which the progress line
// suggests the flow engine.
const longRun = time.Minute

func newSimProgress(w io.Writer, label string) *simProgress {
	return &simProgress{w: w, tty: isTerminal(w), label: label, start: time.Now(), every: 10 * time.Second}
}

// isTerminal says whether w is a terminal with a window size (mpb draws
// nothing on one without).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err != nil {
		return false
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	return err == nil && ws.Col > 0
}

// status is the line's text after the bar: events and simulated time
// against their estimated end (at the bytes' rate so far), and the wall
// time left.
func (s *simProgress) status(p packet.Progress, elapsed time.Duration) string {
	frac := float64(p.Done) / float64(max(p.Total, 1))
	if p.End {
		return fmt.Sprintf("%d events, simulated %v, %.1fs", p.Events, p.Now, elapsed.Seconds())
	}
	if frac <= 0 {
		return fmt.Sprintf("%d events, simulated %v, %.0fs", p.Events, p.Now, elapsed.Seconds())
	}
	left := time.Duration(float64(elapsed) * (1 - frac) / frac).Round(time.Second)
	line := fmt.Sprintf("%.3gM of ~%.3gM events, simulated %v of ~%v, %v left", float64(p.Events)/1e6, float64(p.Events)/frac/1e6,
		p.Now, des.Time(float64(p.Now)/frac), left)
	if left > longRun {
		line += " (--engine flow runs this at flow level in seconds)"
	}
	return line
}

// report is packet.Config.OnProgress.
func (s *simProgress) report(p packet.Progress) {
	if p.Total <= 0 {
		return
	}
	s.mu.Lock()
	s.last = p
	s.mu.Unlock()
	now := time.Now()
	if !s.tty {
		// Plain lines: the first once the run has got going (a run of
		// fewer than 65,536 events prints none), then every s.every, and
		// the last at the end if any was printed.
		switch {
		case p.End && !s.nextAt.IsZero():
		case p.End, p.Events == 0, now.Before(s.nextAt):
			return
		}
		s.nextAt = now.Add(s.every)
		fmt.Fprintf(s.w, "%s: %5.1f%%  %s\n", s.label, 100*float64(p.Done)/float64(p.Total), s.status(p, now.Sub(s.start)))
		return
	}
	if s.bar == nil {
		if p.End || p.Events == 0 {
			return
		}
		s.p = mpb.New(mpb.WithOutput(s.w), mpb.WithWidth(100), mpb.WithRefreshRate(250*time.Millisecond))
		s.bar = s.p.AddBar(p.Total,
			mpb.PrependDecorators(decor.Name(s.label+" "), decor.Percentage(decor.WCSyncSpace)),
			mpb.AppendDecorators(decor.Any(func(decor.Statistics) string {
				s.mu.Lock()
				defer s.mu.Unlock()
				return s.status(s.last, time.Since(s.start))
			})))
	}
	s.bar.SetCurrent(p.Done)
	if p.End {
		s.finish(p.Done == p.Total)
	}
}

// finish ends the bar: complete at 100% (ok), or aborted where it was.
func (s *simProgress) finish(ok bool) {
	if s.bar == nil {
		return
	}
	if ok {
		s.bar.SetCurrent(s.last.Total)
	} else {
		s.bar.Abort(false)
	}
	s.p.Wait()
	s.bar, s.p = nil, nil
}
