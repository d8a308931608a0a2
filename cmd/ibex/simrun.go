package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
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
	"github.com/ibex-rdma/ibex/sim/fabric"
	"github.com/ibex-rdma/ibex/sim/flow"
	"github.com/ibex-rdma/ibex/sim/packet"
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
			"latency, no packets).",
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
type simRow struct {
	Name        string    `json:"name"`
	Engine      string    `json:"engine"`
	Seed        uint64    `json:"seed"`
	Ranks       int       `json:"ranks"`
	Bytes       int64     `json:"bytes"`
	TimeUS      float64   `json:"time_us"`
	AlgBW       float64   `json:"algbw_GBps"`
	BusBW       float64   `json:"busbw_GBps"`
	BusBWPerNIC float64   `json:"busbw_per_nic_GBps"`
	WaitUS      float64   `json:"credit_wait_us"` // InfiniBand; with RoCE the PFC pause time
	PauseFrames int64     `json:"pfc_pause_frames,omitempty"`
	Drops       int64     `json:"drops,omitempty"`
	ECNMarks    int64     `json:"ecn_marks,omitempty"`
	CNPs        int64     `json:"cnps,omitempty"`
	Lost        int64     `json:"lost_packets,omitempty"`
	MaxBuffer   int64     `json:"max_buffer_bytes"`
	Packets     int64     `json:"packets"`
	Events      uint64    `json:"events"` // packet: events handled; flow: max-min solves
	Routing     string    `json:"routing"`
	IterUS      []float64 `json:"iteration_us,omitempty"` // each iteration's length
	BaseTimeUS  float64   `json:"time_without_failures_us,omitempty"`
	ItersHit    int       `json:"iterations_slowed,omitempty"`
	WallS       float64   `json:"wall_s"`
	EventsPerS  float64   `json:"events_per_s"`
	Links       []link    `json:"hottest_links"`
}

type link struct {
	Port   string  `json:"port"`
	Tier   string  `json:"tier"`
	Bytes  int64   `json:"bytes"`
	Util   float64 `json:"utilisation"`
	WaitUS float64 `json:"credit_wait_us"` // with RoCE the PFC pause time
	Drops  int64   `json:"drops,omitempty"`
	Failed bool    `json:"failed,omitempty"`
}

func runSimRun(out, errOut io.Writer, path, what string, o simRunOptions) error {
	if err := checkSimRunFlags(o); err != nil {
		return err
	}
	if rs := strings.Split(o.routing, ","); len(rs) > 1 {
		// Every routing's parameters are checked before the first runs.
		for _, r := range rs {
			o2 := o
			o2.routing = strings.TrimSpace(r)
			if _, err := simParams(o2); err != nil {
				return err
			}
		}
		// One report per routing, one after the other.
		for _, r := range rs {
			o2 := o
			o2.routing = strings.TrimSpace(r)
			if err := runSimRun(out, errOut, path, what, o2); err != nil {
				return err
			}
		}
		return nil
	}
	s, err := topo.Load(path)
	if err != nil {
		return err
	}
	g, err := s.Build()
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	ranks := o.gpus
	if ranks == 0 {
		ranks = g.NumGPUs()
	}
	if ranks < 1 || ranks > g.NumGPUs() {
		return fmt.Errorf("sim run: --gpus %d: %s has %d GPUs", o.gpus, path, g.NumGPUs())
	}
	var on []int32
	if o.on != "" {
		if o.gpus != 0 {
			return fmt.Errorf("sim run: --gpus and --on: give one")
		}
		if on, err = parseGPUList(o.on, g.NumGPUs()); err != nil {
			return err
		}
		ranks = len(on)
	}
	sched, name, err := simSchedule(what, o.algo, ranks, o.pipeline, o.seed)
	if err != nil {
		return err
	}
	p, err := simParams(o)
	if err != nil {
		return err
	}
	fails, err := parseFailures(g, o.fail)
	if err != nil {
		return err
	}
	sw, err := parseSwitchFailures(g, o.failSwitch)
	if err != nil {
		return err
	}
	linkFails := len(fails)
	fails = append(fails, sw...)
	compare := len(fails) > 0 || o.failRandom > 0
	lo, err := units.ParseBytes(o.min)
	if err != nil {
		return fmt.Errorf("sim run: -b %q: %w", o.min, err)
	}
	hi := lo
	if o.max != "" {
		if hi, err = units.ParseBytes(o.max); err != nil {
			return fmt.Errorf("sim run: -e %q: %w", o.max, err)
		}
	}
	if lo < 0 || hi < lo {
		return fmt.Errorf("sim run: sizes -b %s -e %s: want 0 <= min <= max", o.min, o.max)
	}
	gpn := g.GPUsOnHost()
	if gpn == 0 {
		return fmt.Errorf("sim run: %s: hosts with different numbers of NICs; the workload needs the same number on every host", path)
	}
	perHost := min(ranks, gpn)
	nch := o.channels
	if nch == 0 {
		nch = gpn * max(g.Planes, 1)
	}
	ew := &errWriter{w: out}
	if !o.asJSON {
		c := g.Counts()
		ew.printf("# ibex sim: %s (%s): %d hosts, %d GPUs, %d switches, %v links\n",
			c.Name, topoShape(c), c.Hosts, c.GPUs, c.Switches.Total, c.Capacity.Of(topo.LinkHostLeaf)/topo.Rate(max(c.Links.Of(topo.LinkHostLeaf), 1)))
		if o.hier {
			ew.printf("# hierarchical: ring reduce-scatter in each host, %s across hosts per rail, ring all-gather in each host\n", name)
		}
		p, err := fabric.CheckParams(p) // the values the engine will use
		if err != nil {
			return err
		}
		lanes := fmt.Sprintf("%d VL(s), buffer %s/VL", p.VLs, units.FormatBytes(int64(p.Buffer)))
		if p.LinkLayer == fabric.LinkRoCE {
			lanes = fmt.Sprintf("RoCEv2, %d priorities, PFC Xoff %s, congestion control %v", p.VLs, units.FormatBytes(int64(p.PFCXoff)), p.CC)
		}
		ew.printf("# %s over %d GPUs, %d channel(s), %s, %v routing, chunk %s, %d slots, %d QP(s)/connection, %s, seed %d\n",
			name, ranks, nch, map[bool]string{true: "own NIC", false: "PXN"}[o.localNIC], p.Routing,
			units.FormatBytes(int64(p.Chunk)), p.Slots, p.QPsPerConn, lanes, o.seed)
		for _, f := range fails[:linkFails] {
			ew.printf("# link %s fails at %v\n", g.LinkName(f.Link), f.At)
		}
		for _, f := range o.failSwitch {
			name, when, _ := strings.Cut(f, "@")
			ew.printf("# switch %s fails at %s (all its links)\n", name, when)
		}
		if o.iters > 1 {
			ew.printf("# %d iterations back to back; time and bandwidth are per iteration\n", o.iters)
		}
		ev, evs := "events", "Mev/s"
		if o.engine == "flow" {
			ev, evs = "solves", "Msolve/s"
		}
		wait := "creditwait(us)"
		if p.LinkLayer == fabric.LinkRoCE {
			wait = "pause(us)"
		}
		ew.printf("# engine %s\n#\n# %12s %12s %12s %12s %12s %14s %12s %8s %8s", o.engine, "size(B)", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "busbw/NIC", wait, ev, "wall(s)", evs)
		if o.seeds > 1 {
			ew.printf(" %8s", "seed")
		}
		ew.printf("\n")
	}
	var rows []simRow
	var lastPorts []fabric.PortStat
	for size := lo; size <= hi; size *= o.factor {
		var times []float64
		for k := range o.seeds {
			seed := o.seed + uint64(k)
			if k > 0 && o.seeds > 1 && what == "permutation" {
				if sched, _, err = simSchedule(what, o.algo, ranks, o.pipeline, seed); err != nil {
					return err
				}
			}
			cfg := packet.Config{Graph: g, Params: p, Seed: seed, Schedule: sched, Name: name, Bytes: size,
				Channels: o.channels, LocalNIC: o.localNIC, Failures: fails, GPUs: on}
			var base simRow
			if compare {
				// The same run without failures, to measure what they cost.
				bc := cfg
				bc.Failures = nil
				if base, _, err = simOne(bc, o, false, errOut); err != nil {
					return fmt.Errorf("sim run: %s, %d bytes, seed %d, without failures: %w", name, size, seed, err)
				}
				if o.failRandom > 0 {
					window := des.Time(o.failWindow.Nanoseconds()) * des.Nanosecond
					if window == 0 {
						window = des.Time(base.TimeUS*float64(o.iters)*float64(des.Microsecond)) + 1
					}
					rf, err := flow.RandomFailures(g, o.failRandom, window, seed)
					if err != nil {
						return fmt.Errorf("sim run: --fail-random: %w", err)
					}
					cfg.Failures = append(slices.Clone(fails), rf...)
					for _, f := range rf {
						if !o.asJSON {
							ew.printf("# seed %d: link %s fails at %v\n", seed, g.LinkName(f.Link), f.At)
						}
					}
				}
			}
			row, ports, err := simOne(cfg, o, size*o.factor > hi && k == o.seeds-1, errOut)
			if err != nil {
				return fmt.Errorf("sim run: %s, %d bytes, seed %d: %w", name, size, seed, err)
			}
			if compare {
				row.BaseTimeUS = base.TimeUS
				var hit []string
				for i := range min(len(row.IterUS), len(base.IterUS)) {
					if row.IterUS[i] > base.IterUS[i] {
						hit = append(hit, strconv.Itoa(i+1))
					}
				}
				row.ItersHit = len(hit)
				if !o.asJSON {
					h := "none"
					if len(hit) > 0 {
						h = strings.Join(hit, ",")
					}
					ew.printf("# failures, %v routing: %.1f us without, %.1f us with (%+.2f%%); iterations slowed: %s of %d\n",
						p.Routing, base.TimeUS*float64(o.iters), row.TimeUS*float64(o.iters), 100*(row.TimeUS/base.TimeUS-1), h, o.iters)
				}
			}
			row.BusBWPerNIC = row.BusBW / float64(perHost)
			row.Seed = seed
			for i, ps := range ports {
				if i == o.top {
					break
				}
				w := ps.Wait
				if p.LinkLayer == fabric.LinkRoCE {
					w = ps.PauseTime
				}
				row.Links = append(row.Links, link{Port: ps.Name, Tier: ps.Tier.String(), Bytes: ps.Bytes, Util: ps.Util,
					WaitUS: float64(w) / float64(des.Microsecond), Drops: ps.Drops, Failed: ps.Failed})
			}
			lastPorts = ports
			rows = append(rows, row)
			times = append(times, row.TimeUS)
			if !o.asJSON {
				ew.printf("  %12d %12.1f %12.2f %12.2f %12.2f %14.1f %12d %8.2f %8.2f", size, row.TimeUS, row.AlgBW, row.BusBW,
					row.BusBWPerNIC, row.WaitUS, row.Events, row.WallS, row.EventsPerS/1e6)
				if o.seeds > 1 {
					ew.printf(" %8d", seed)
				}
				ew.printf("\n")
			}
		}
		if len(times) > 1 && !o.asJSON {
			sort.Float64s(times)
			med := times[len(times)/2]
			ew.printf("# %d seeds from %d: time min %.1f, median %.1f, max %.1f us (max %+.1f%% over min)\n",
				len(times), o.seed, times[0], med, times[len(times)-1], 100*(times[len(times)-1]/times[0]-1))
		}
		if size == 0 {
			break
		}
	}
	if o.asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"topology": path, "rows": rows, "peak_rss_bytes": peakRSS()})
	}
	if o.top > 0 && len(lastPorts) > 0 {
		ew.printf("#\n# hottest links (last size; busiest first; utilisation over the whole run)\n")
		wait := "creditwait(us)"
		if p.LinkLayer == fabric.LinkRoCE {
			wait = "pause(us)"
		}
		ew.printf("# %-44s %-10s %12s %6s %14s\n", "port -> port", "tier", "bytes", "util", wait)
		for _, l := range rows[len(rows)-1].Links {
			mark := ""
			if l.Failed {
				mark = "  FAILED"
			}
			ew.printf("# %-44s %-10s %12d %5.1f%% %14.1f%s\n", l.Port, l.Tier, l.Bytes, 100*l.Util, l.WaitUS, mark)
		}
	}
	ew.printf("# peak memory (max RSS) %.1f MiB\n", float64(peakRSS())/(1<<20))
	return ew.err
}

// peakRSS is the process's peak resident set, from getrusage.
func peakRSS() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Maxrss * 1024
}

// simOne runs one size with one seed on the chosen engine. trace says
// whether this run writes the trace file; notes (spans the trace dropped)
// go to errOut.
func simOne(cfg packet.Config, o simRunOptions, trace bool, errOut io.Writer) (simRow, []fabric.PortStat, error) {
	row := simRow{Engine: o.engine, Bytes: cfg.Bytes, Routing: cfg.Params.Routing.String()}
	switch o.engine {
	case "packet":
		if o.hier {
			return row, nil, fmt.Errorf("--hier needs --engine flow")
		}
		if trace && o.trace != "" {
			f, err := os.Create(o.trace)
			if err != nil {
				return row, nil, fmt.Errorf("--trace: %w", err)
			}
			defer f.Close()
			cfg.Trace = f
		}
		cfg.Iterations = o.iters
		cfg.TraceLimit = o.traceLimit
		var pr *simProgress
		if o.progress && errOut != nil {
			pr = newSimProgress(errOut, fmt.Sprintf("%s %s seed %d", cfg.Name, units.FormatBytes(cfg.Bytes), cfg.Seed))
			cfg.OnProgress = pr.report
		}
		res, err := packet.Run(cfg)
		if pr != nil {
			pr.finish(err == nil)
		}
		if err != nil {
			return row, nil, err
		}
		if res.TraceDropped > 0 && errOut != nil {
			fmt.Fprintf(errOut, "ibex sim run: --trace %s: %d step spans written, %d later ones dropped (the limit; raise it with --trace-limit)\n",
				o.trace, res.TraceSpans, res.TraceDropped)
		}
		row.Name, row.Ranks = res.Name, res.Ranks
		row.TimeUS = float64(res.Time) / float64(des.Microsecond) / float64(len(res.Iters))
		row.AlgBW, row.BusBW = res.AlgBW/1e9, res.BusBW/1e9
		row.WaitUS, row.MaxBuffer, row.Packets = float64(res.Wait)/float64(des.Microsecond), res.MaxBuffer, res.Packets
		if cfg.Params.LinkLayer == fabric.LinkRoCE {
			row.WaitUS = float64(res.PauseTime) / float64(des.Microsecond)
		}
		row.PauseFrames, row.Drops, row.ECNMarks, row.CNPs, row.Lost = res.PauseFrames, res.Drops, res.ECNMarks, res.CNPs, res.LostPkts
		row.Events, row.WallS, row.EventsPerS = res.Events, res.Wall.Seconds(), res.EventsPerSec()
		var prev des.Time
		for _, e := range res.Iters {
			row.IterUS = append(row.IterUS, float64(e-prev)/float64(des.Microsecond))
			prev = e
		}
		return row, res.Ports, nil
	case "flow":
		if o.trace != "" {
			return row, nil, fmt.Errorf("--trace needs --engine packet")
		}
		fc := flow.Config{Graph: cfg.Graph, Params: cfg.Params, Seed: cfg.Seed, LocalNIC: cfg.LocalNIC, Failures: cfg.Failures,
			Name: cfg.Name, Ranks: cfg.Schedule.Ranks, Bytes: cfg.Bytes, Collective: cfg.Schedule.Collective, Iterations: o.iters}
		if o.hier {
			gpn := cfg.Graph.GPUsOnHost()
			c, a := cfg.Schedule.Collective, cfg.Schedule.Algorithm
			if c != algo.AllReduce || (a != algo.Ring && a != algo.Tree) || cfg.GPUs != nil || cfg.Schedule.Ranks%gpn != 0 {
				return row, nil, fmt.Errorf("--hier: all_reduce with --algo ring or tree over whole hosts (--gpus a multiple of %d)", gpn)
			}
			ph, err := flow.Hierarchical(a, cfg.Schedule.Ranks/gpn, gpn, cfg.Bytes, o.pipeline)
			if err != nil {
				return row, nil, err
			}
			fc.Phases, fc.Name = ph, "hierarchical "+cfg.Name
		} else {
			fc.Phases = []flow.Phase{{Schedule: cfg.Schedule, Bytes: cfg.Bytes, Groups: gpuGroups(cfg.GPUs), Channels: cfg.Channels}}
		}
		res, err := flow.Run(fc)
		if err != nil {
			return row, nil, err
		}
		row.Name, row.Ranks = res.Name, res.Ranks
		row.TimeUS = float64(res.Time) / float64(des.Microsecond) / float64(len(res.Iters))
		row.AlgBW, row.BusBW = res.AlgBW/1e9, res.BusBW/1e9
		var prev des.Time
		for _, e := range res.Iters {
			row.IterUS = append(row.IterUS, float64(e-prev)/float64(des.Microsecond))
			prev = e
		}
		row.Events, row.WallS = uint64(res.Solves), res.Wall.Seconds()
		row.EventsPerS = float64(res.Solves) / res.Wall.Seconds()
		return row, res.Ports, nil
	}
	return row, nil, fmt.Errorf("--engine %q: want packet or flow", o.engine)
}

func gpuGroups(gpus []int32) [][]int32 {
	if gpus == nil {
		return nil
	}
	return [][]int32{gpus}
}

// simSchedule makes the schedule of a collective (with an algorithm) or
// a pattern, and its name for reports.
func simSchedule(what, algoName string, ranks, pipeline int, seed uint64) (*algo.Schedule, string, error) {
	if pat, err := packet.ParsePattern(what); err == nil {
		if algoName != "" {
			return nil, "", fmt.Errorf("sim run: --algo %s: %s is a pattern, not a collective", algoName, what)
		}
		s, err := packet.PatternSchedule(pat, ranks, seed)
		return s, pat.String(), err
	}
	c, err := algo.ParseCollective(strings.TrimSuffix(what, "_perf"))
	if err != nil {
		return nil, "", fmt.Errorf("sim run: %q is neither a collective (all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all) nor a pattern (alltoall, incast, permutation)", what)
	}
	if algoName == "" {
		algoName = "ring"
		if c == algo.AllToAll {
			algoName = "direct"
		}
	}
	a, err := algo.ParseAlgorithm(algoName)
	if err != nil {
		return nil, "", fmt.Errorf("sim run: --algo: %w", err)
	}
	s, err := algo.Generate(c, a, ranks, 0, pipeline)
	if err != nil {
		return nil, "", fmt.Errorf("sim run: %w", err)
	}
	return s, fmt.Sprintf("%v %v", a, c), nil
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
func parseSwitchFailures(g *topo.Graph, specs []string) ([]fabric.Failure, error) {
	var out []fabric.Failure
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
		fs, err := flow.SwitchFailure(g, sw, des.Time(d.Nanoseconds())*des.Nanosecond)
		if err != nil {
			return nil, err
		}
		out = append(out, fs...)
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
