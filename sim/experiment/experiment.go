// Package experiment is `ibex sim run` as a library: a collective or
// traffic pattern over a topology, on the packet or the flow engine, for
// a range of sizes and a number of seeds, with link and switch failures
// (given or drawn at random) measured against the same run without them.
//
// Run runs a Config and returns a Result: a Row per size and seed, the
// spread of each size's times over the seeds, and the busiest ports of
// the last run. Result.WriteText writes the report `ibex sim run` prints
// (Config.Out gets the same text as the rows come), Result.WriteJSON its
// --json form. Point runs a single size with a single seed.
package experiment

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"syscall"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/internal/units"
	"github.com/ibex-rdma/ibex/sim/des"
	"github.com/ibex-rdma/ibex/sim/fabric"
	"github.com/ibex-rdma/ibex/sim/flow"
	"github.com/ibex-rdma/ibex/sim/packet"
	"github.com/ibex-rdma/ibex/sim/place"
	"github.com/ibex-rdma/ibex/sim/topo"
)

// ErrConfig is wrapped by the errors of a bad Config; they name the
// field ("experiment: Seeds 0: want 1 to 100000").
var ErrConfig = errors.New("bad experiment config")

// Engine is the simulator a run uses.
type Engine uint8

const (
	// EnginePacket simulates every packet and credit (sim/packet); the
	// default.
	EnginePacket Engine = iota
	// EngineFlow gives flows max-min fair rates per step (sim/flow).
	EngineFlow
)

// String returns "packet" or "flow".
func (e Engine) String() string {
	switch e {
	case EnginePacket:
		return "packet"
	case EngineFlow:
		return "flow"
	}
	return fmt.Sprintf("Engine(%d)", uint8(e))
}

// ParseEngine is the inverse of String.
func ParseEngine(s string) (Engine, error) {
	for _, e := range []Engine{EnginePacket, EngineFlow} {
		if s == e.String() {
			return e, nil
		}
	}
	return 0, fmt.Errorf("experiment: %w: engine %q: want packet or flow", ErrConfig, s)
}

// Workload is what runs: a collective with an algorithm, or a
// point-to-point pattern.
type Workload struct {
	// Collective is the operation; 0: all_reduce (unless Pattern is set).
	Collective algo.Collective
	// Algorithm is how it is computed; 0: ring, or direct for all_to_all.
	Algorithm algo.Algorithm
	// Pattern, if set, is a point-to-point pattern run instead of a
	// collective (Collective and Algorithm must be 0). A permutation is
	// drawn from each run's seed.
	Pattern packet.Pattern
	// Pipeline splits every slot of the algorithm into this many pieces
	// (coll/algo's pipeline), 1 to 1024; 0: 1.
	Pipeline int
}

// filled is w with its defaults.
func (w Workload) filled() Workload {
	if w.Pattern == 0 {
		if w.Collective == 0 {
			w.Collective = algo.AllReduce
		}
		if w.Algorithm == 0 {
			w.Algorithm = algo.Ring
			if w.Collective == algo.AllToAll {
				w.Algorithm = algo.Direct
			}
		}
	}
	if w.Pipeline == 0 {
		w.Pipeline = 1
	}
	return w
}

// Schedule makes w's schedule over ranks (a permutation drawn from seed)
// and its name for reports: "ring all_reduce", "permutation". Its errors
// are coll/algo's and sim/packet's.
func (w Workload) Schedule(ranks int, seed uint64) (*algo.Schedule, string, error) {
	w = w.filled()
	if w.Pattern != 0 {
		s, err := packet.PatternSchedule(w.Pattern, ranks, seed)
		return s, w.Pattern.String(), err
	}
	s, err := algo.Generate(w.Collective, w.Algorithm, ranks, 0, w.Pipeline)
	return s, fmt.Sprintf("%v %v", w.Algorithm, w.Collective), err
}

// SwitchFailure fails every link of a switch at a simulated time.
type SwitchFailure struct {
	Switch string // its name: leaf0, spine3, core7
	At     des.Time
	// When is At as the report writes it (`ibex sim run` passes the time
	// as typed); "": At's String.
	When string
}

// Config is one experiment. Zero fields take the defaults their comments
// give; Run checks the rest.
type Config struct {
	// Graph is the topology (required); Topology names its file in the
	// JSON report.
	Graph    *topo.Graph
	Topology string

	Workload
	// Hier runs all_reduce as NCCL does across nodes: ring
	// reduce-scatter in each host, Algorithm (ring or tree) per rail
	// across hosts, ring all-gather in each host. EngineFlow only, over
	// whole hosts.
	Hier bool

	// GPUs is the ranks: the first GPUs of the topology, node by node; 0:
	// all. On, if set instead, is the ranks' GPUs in rank order (host ×
	// GPUs per host + index; the ranks of a host contiguous).
	GPUs int
	On   []int32
	// Channels run the schedule side by side, 1 to 64; 0: NICs per host
	// (times the planes).
	Channels int
	// LocalNIC sends between hosts from the sending GPU's own NIC instead
	// of the NIC on the receiving GPU's rail (PXN).
	LocalNIC bool
	// Params are the fabric's constants; zero fields take fabric.Defaults
	// (fabric.CheckParams fills and checks them).
	Params fabric.Params
	Engine Engine

	// The sizes: MinBytes, then times Factor while at most MaxBytes.
	// MaxBytes 0: MinBytes (a MinBytes of 0 runs size 0 only); Factor 0:
	// 2.
	MinBytes, MaxBytes int64
	Factor             int64
	// Seed is the first seed (it salts the ECMP hashes and draws the
	// permutation and the random failures); every size runs with Seeds
	// seeds from Seed on, 1 to 100000 (0: 1), and reports their spread.
	Seed  uint64
	Seeds int
	// Iterations runs the operation this many times back to back in one
	// simulation, 1 to 65536; 0: 1.
	Iterations int

	// Failures and SwitchFailures fail links at simulated times.
	// RandomFailures more switch-to-switch links fail, drawn from each
	// run's seed, at times uniform in FailWindow (0: the run's time
	// without failures). With any failure, every run is also run without
	// failures, and each Row compares the two.
	Failures       []fabric.Failure
	SwitchFailures []SwitchFailure
	RandomFailures int
	FailWindow     des.Time

	// Trace, if set, is the file the last run writes a Chrome / Perfetto
	// trace to (EnginePacket only), with at most TraceLimit step spans
	// (0: sim/packet's 200,000).
	Trace      string
	TraceLimit int
	// Top is how many of the last run's busiest ports each Row lists
	// (Row.Links) and the report shows; 0: none.
	Top int

	// Out, if set, receives the text report as the rows come: what
	// Result.WriteText writes.
	Out io.Writer
	// Progress, if set, is called before each packet-level run with a
	// label ("ring all_reduce 64M seed 1"); what it returns gets the run's
	// packet.Progress reports (packet.Config.OnProgress).
	Progress func(label string) func(packet.Progress)
}

// Result is what an experiment measured.
type Result struct {
	Topology string
	Graph    *topo.Graph
	Name     string // the workload: "ring all_reduce", "permutation"
	Ranks    int
	Channels int           // as the report gives them: Config.Channels or NICs per host times planes
	Params   fabric.Params // filled by fabric.CheckParams: the values the engines used
	Config   Config        // the experiment's configuration, defaults filled
	// Compared says the runs had failures and were also run without.
	Compared bool
	// Rows are the runs: every size (in order) with every seed.
	Rows []Row
	// Spreads are each size's times over the seeds, with more than one
	// seed.
	Spreads []Spread
	// Ports are the last run's ports that sent, busiest first.
	Ports []fabric.PortStat
	// TraceSpans and TraceDropped are the step spans written to the trace
	// and those left out past the limit.
	TraceSpans, TraceDropped int64
	// PeakRSS is the process's peak resident set when the last run ended.
	PeakRSS int64
}

// Row is one size with one seed, as `ibex sim run --json` prints it.
type Row struct {
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
	Links       []Link    `json:"hottest_links"`

	// Slowed are the iterations (from 1) that took longer than without
	// the failures; RandomFailures the failures drawn for this run.
	Slowed         []int            `json:"-"`
	RandomFailures []fabric.Failure `json:"-"`

	traceSpans, traceDropped int64 // Point.Run's, for Result
}

// Link is one of a Row's busiest ports.
type Link struct {
	Port   string  `json:"port"`
	Tier   string  `json:"tier"`
	Bytes  int64   `json:"bytes"`
	Util   float64 `json:"utilisation"`
	WaitUS float64 `json:"credit_wait_us"` // with RoCE the PFC pause time
	Drops  int64   `json:"drops,omitempty"`
	Failed bool    `json:"failed,omitempty"`
}

// Spread is one size's times over its seeds.
type Spread struct {
	Bytes            int64
	Seeds            int
	FirstSeed        uint64
	Min, Median, Max float64 // µs
}

// NewSpread is the spread of times (µs, one per seed from firstSeed).
// The median of an even number is the upper of the middle two.
func NewSpread(bytes int64, firstSeed uint64, times []float64) Spread {
	t := slices.Clone(times)
	sort.Float64s(t)
	s := Spread{Bytes: bytes, Seeds: len(t), FirstSeed: firstSeed}
	if len(t) > 0 {
		s.Min, s.Median, s.Max = t[0], t[len(t)/2], t[len(t)-1]
	}
	return s
}

// check fills c's defaults and checks it, with errors naming the field.
func (c Config) check() (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return c, fmt.Errorf("experiment: %w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	c.Workload = c.Workload.filled()
	if c.Factor == 0 {
		c.Factor = 2
	}
	if c.Seeds == 0 {
		c.Seeds = 1
	}
	if c.Iterations == 0 {
		c.Iterations = 1
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = c.MinBytes
	}
	g := c.Graph
	switch {
	case g == nil:
		return bad("Graph: none")
	case c.Pattern != 0 && (c.Pattern < packet.AllToAll || c.Pattern > packet.Permutation):
		return bad("Pattern %d: not a pattern", c.Pattern)
	case c.Pattern != 0 && (c.Collective != 0 || c.Algorithm != 0):
		return bad("Pattern %v with Collective %v, Algorithm %v: give a pattern or a collective", c.Pattern, c.Collective, c.Algorithm)
	case c.Pipeline < 1 || c.Pipeline > 1024:
		return bad("Pipeline %d: want 1 to 1024", c.Pipeline)
	case c.Engine != EnginePacket && c.Engine != EngineFlow:
		return bad("Engine %d: want EnginePacket or EngineFlow", c.Engine)
	case c.Hier && c.Engine != EngineFlow:
		return bad("Hier: needs EngineFlow")
	case c.Trace != "" && c.Engine != EnginePacket:
		return bad("Trace: needs EnginePacket")
	case c.Trace != "" && (c.TraceLimit < 0 || c.TraceLimit > 1<<26):
		return bad("TraceLimit %d: want 1 to %d (0: 200,000)", c.TraceLimit, 1<<26)
	case c.GPUs < 0 || c.GPUs > g.NumGPUs():
		return bad("GPUs %d: the topology has %d GPUs (0: all)", c.GPUs, g.NumGPUs())
	case c.GPUs != 0 && c.On != nil:
		return bad("GPUs %d and On: give one", c.GPUs)
	case c.Channels < 0 || c.Channels > 64:
		return bad("Channels %d: want 1 to 64 (0: NICs per host)", c.Channels)
	case c.Seeds < 1 || c.Seeds > 100000:
		return bad("Seeds %d: want 1 to 100000", c.Seeds)
	case c.Iterations < 1 || c.Iterations > 1<<16:
		return bad("Iterations %d: want 1 to %d", c.Iterations, 1<<16)
	case c.Top < 0:
		return bad("Top %d: want 0 or more", c.Top)
	case c.RandomFailures < 0:
		return bad("RandomFailures %d: want 0 or more", c.RandomFailures)
	case c.FailWindow < 0:
		return bad("FailWindow %v: want 0 or more", c.FailWindow)
	case c.Factor < 2:
		return bad("Factor %d: want 2 or more", c.Factor)
	case c.MinBytes < 0 || c.MaxBytes < c.MinBytes:
		return bad("MinBytes %d, MaxBytes %d: want 0 <= MinBytes <= MaxBytes", c.MinBytes, c.MaxBytes)
	case g.GPUsOnHost() == 0:
		return bad("Graph: hosts with different numbers of NICs; the workload needs the same number on every host")
	}
	if _, err := fabric.CheckParams(c.Params); err != nil {
		return c, fmt.Errorf("experiment: %w: Params: %w", ErrConfig, err)
	}
	gpn := g.GPUsOnHost()
	if c.On != nil {
		if _, err := place.New(c.On, len(c.On), g.NumGPUs(), gpn); err != nil {
			return c, fmt.Errorf("experiment: %w: On: %w", ErrConfig, err)
		}
	}
	ranks := c.ranks()
	if c.Hier && (c.Collective != algo.AllReduce || (c.Algorithm != algo.Ring && c.Algorithm != algo.Tree) || c.On != nil || ranks%gpn != 0) {
		return bad("Hier: all_reduce with Algorithm ring or tree over whole hosts (GPUs a multiple of %d)", gpn)
	}
	if _, _, err := c.Workload.Schedule(ranks, c.Seed); err != nil {
		return c, fmt.Errorf("experiment: %w: Workload: %w", ErrConfig, err)
	}
	for i, f := range c.Failures {
		if f.Link < 0 || int(f.Link) >= len(g.Links) {
			return bad("Failures[%d]: link %d: the topology has links 0 to %d", i, f.Link, len(g.Links)-1)
		}
		if f.At < 0 {
			return bad("Failures[%d]: at %v: want a time >= 0", i, f.At)
		}
	}
	for i, f := range c.SwitchFailures {
		if _, err := switchLinks(g, f); err != nil {
			return bad("SwitchFailures[%d]: %v", i, err)
		}
	}
	if c.RandomFailures > 0 {
		if _, err := flow.RandomFailures(g, c.RandomFailures, 1, c.Seed); err != nil {
			return c, fmt.Errorf("experiment: %w: RandomFailures %d: %w", ErrConfig, c.RandomFailures, err)
		}
	}
	return c, nil
}

// ranks is the number of ranks c runs.
func (c Config) ranks() int {
	switch {
	case c.On != nil:
		return len(c.On)
	case c.GPUs != 0:
		return c.GPUs
	}
	return c.Graph.NumGPUs()
}

// switchLinks are the failures of every link of switch f.Switch.
func switchLinks(g *topo.Graph, f SwitchFailure) ([]fabric.Failure, error) {
	if f.At < 0 {
		return nil, fmt.Errorf("switch %s at %v: want a time >= 0", f.Switch, f.At)
	}
	for id := range g.Nodes {
		if g.Nodes[id].Kind == topo.KindSwitch && g.NodeName(topo.NodeID(id)) == f.Switch {
			return flow.SwitchFailure(g, topo.NodeID(id), f.At)
		}
	}
	return nil, fmt.Errorf("no switch %q (switches are named like leaf0, spine3, core7)", f.Switch)
}

// Run runs the experiment: every size with every seed, and with failures
// also each without them (first, as its random failures' window may be
// its time). Run's errors name the size and seed of the run that failed;
// a run's error comes without a Result. With Out set, a write error on
// it is returned once all has run, with the Result.
func Run(cfg Config) (*Result, error) {
	c, err := cfg.check()
	if err != nil {
		return nil, err
	}
	g := c.Graph
	p, _ := fabric.CheckParams(c.Params) // checked by check
	ranks := c.ranks()
	sched, name, _ := c.Workload.Schedule(ranks, c.Seed) // checked by check
	fails := slices.Clone(c.Failures)
	for _, f := range c.SwitchFailures {
		fs, _ := switchLinks(g, f) // checked by check
		fails = append(fails, fs...)
	}
	gpn := g.GPUsOnHost()
	res := &Result{Topology: c.Topology, Graph: g, Name: name, Ranks: ranks, Channels: c.Channels, Params: p, Config: c,
		Compared: len(fails) > 0 || c.RandomFailures > 0}
	if res.Channels == 0 {
		res.Channels = gpn * max(g.Planes, 1)
	}
	perHost := min(ranks, gpn)
	var rep *text
	if c.Out != nil {
		rep = &text{w: c.Out}
		rep.head(res)
	}
	for size := c.MinBytes; size <= c.MaxBytes; size *= c.Factor {
		var times []float64
		for k := range c.Seeds {
			seed := c.Seed + uint64(k)
			if k > 0 && c.Pattern == packet.Permutation {
				if sched, _, err = c.Workload.Schedule(ranks, seed); err != nil {
					return nil, err
				}
			}
			last := (size == 0 || size*c.Factor > c.MaxBytes) && k == c.Seeds-1
			pt := Point{Config: packet.Config{Graph: g, Params: c.Params, Seed: seed, Schedule: sched, Name: name, Bytes: size,
				Channels: c.Channels, LocalNIC: c.LocalNIC, Failures: fails, GPUs: c.On, Iterations: c.Iterations, TraceLimit: c.TraceLimit},
				Engine: c.Engine, Hier: c.Hier, Pipeline: c.Pipeline}
			var base Row
			if res.Compared {
				// The same run without failures, to measure what they cost.
				bp := pt
				bp.Failures = nil
				if base, _, err = c.point(bp, false); err != nil {
					return nil, fmt.Errorf("%s, %d bytes, seed %d, without failures: %w", name, size, seed, err)
				}
			}
			var rf []fabric.Failure
			if c.RandomFailures > 0 {
				window := c.FailWindow
				if window == 0 {
					window = des.Time(base.TimeUS*float64(c.Iterations)*float64(des.Microsecond)) + 1
				}
				if rf, err = flow.RandomFailures(g, c.RandomFailures, window, seed); err != nil {
					return nil, fmt.Errorf("%s, %d bytes, seed %d: RandomFailures: %w", name, size, seed, err)
				}
				pt.Failures = append(slices.Clone(fails), rf...)
				if rep != nil {
					rep.drawn(g, seed, rf)
				}
			}
			row, ports, err := c.point(pt, last)
			if err != nil {
				return nil, fmt.Errorf("%s, %d bytes, seed %d: %w", name, size, seed, err)
			}
			if last && c.Trace != "" {
				res.TraceSpans, res.TraceDropped = row.traceSpans, row.traceDropped
			}
			row.RandomFailures = rf
			if res.Compared {
				row.BaseTimeUS = base.TimeUS
				for i := range min(len(row.IterUS), len(base.IterUS)) {
					if row.IterUS[i] > base.IterUS[i] {
						row.Slowed = append(row.Slowed, i+1)
					}
				}
				row.ItersHit = len(row.Slowed)
			}
			row.BusBWPerNIC = row.BusBW / float64(perHost)
			row.Seed = seed
			for i, ps := range ports {
				if i == c.Top {
					break
				}
				w := ps.Wait
				if p.LinkLayer == fabric.LinkRoCE {
					w = ps.PauseTime
				}
				row.Links = append(row.Links, Link{Port: ps.Name, Tier: ps.Tier.String(), Bytes: ps.Bytes, Util: ps.Util,
					WaitUS: float64(w) / float64(des.Microsecond), Drops: ps.Drops, Failed: ps.Failed})
			}
			res.Ports = ports
			res.Rows = append(res.Rows, row)
			times = append(times, row.TimeUS)
			if rep != nil {
				rep.row(res, len(res.Rows)-1)
			}
		}
		if len(times) > 1 {
			res.Spreads = append(res.Spreads, NewSpread(size, c.Seed, times))
			if rep != nil {
				rep.spread(res.Spreads[len(res.Spreads)-1])
			}
		}
		if size == 0 {
			break
		}
	}
	res.PeakRSS = PeakRSS()
	if rep != nil {
		rep.tail(res)
		return res, rep.err
	}
	return res, nil
}

// point runs one of Run's runs; trace says whether it writes c.Trace.
func (c Config) point(pt Point, trace bool) (Row, []fabric.PortStat, error) {
	if trace && c.Trace != "" {
		f, err := os.Create(c.Trace)
		if err != nil {
			return Row{}, nil, fmt.Errorf("experiment: Trace %s: %w", c.Trace, err)
		}
		defer f.Close()
		pt.Trace = f
	}
	if c.Progress != nil && pt.Engine == EnginePacket {
		pt.OnProgress = c.Progress(fmt.Sprintf("%s %s seed %d", pt.Name, units.FormatBytes(pt.Bytes), pt.Seed))
	}
	return pt.Run()
}

// Point is one size with one seed on an engine: the packet engine runs
// Config as it is; the flow engine runs its schedule (or with Hier, NCCL's
// hierarchical all_reduce, in Pipeline pieces) over the same GPUs,
// failures and iterations, without Trace, TraceLimit and OnProgress.
type Point struct {
	packet.Config
	Engine   Engine
	Hier     bool
	Pipeline int // Hier's pipeline; 0: 1
}

// Run runs the point. The Row lacks what Run adds from the experiment:
// BusBWPerNIC, Seed, Links and the comparison without failures.
func (pt Point) Run() (Row, []fabric.PortStat, error) {
	cfg := pt.Config
	row := Row{Engine: pt.Engine.String(), Bytes: cfg.Bytes, Routing: cfg.Params.Routing.String()}
	switch pt.Engine {
	case EnginePacket:
		if pt.Hier {
			return row, nil, fmt.Errorf("experiment: %w: Hier needs EngineFlow", ErrConfig)
		}
		res, err := packet.Run(cfg)
		if err != nil {
			return row, nil, err
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
		row.IterUS = iterUS(res.Iters)
		row.traceSpans, row.traceDropped = res.TraceSpans, res.TraceDropped
		return row, res.Ports, nil
	case EngineFlow:
		if cfg.Trace != nil {
			return row, nil, fmt.Errorf("experiment: %w: Trace needs EnginePacket", ErrConfig)
		}
		fc := flow.Config{Graph: cfg.Graph, Params: cfg.Params, Seed: cfg.Seed, LocalNIC: cfg.LocalNIC, Failures: cfg.Failures,
			Name: cfg.Name, Ranks: cfg.Schedule.Ranks, Bytes: cfg.Bytes, Collective: cfg.Schedule.Collective, Iterations: cfg.Iterations}
		if pt.Hier {
			gpn := cfg.Graph.GPUsOnHost()
			s := cfg.Schedule
			if s.Collective != algo.AllReduce || (s.Algorithm != algo.Ring && s.Algorithm != algo.Tree) || cfg.GPUs != nil || gpn == 0 || s.Ranks%gpn != 0 {
				return row, nil, fmt.Errorf("experiment: %w: Hier: all_reduce with Algorithm ring or tree over whole hosts (GPUs a multiple of %d)", ErrConfig, gpn)
			}
			ph, err := flow.Hierarchical(s.Algorithm, s.Ranks/gpn, gpn, cfg.Bytes, max(pt.Pipeline, 1))
			if err != nil {
				return row, nil, err
			}
			fc.Phases, fc.Name = ph, "hierarchical "+cfg.Name
		} else {
			var groups [][]int32
			if cfg.GPUs != nil {
				groups = [][]int32{cfg.GPUs}
			}
			fc.Phases = []flow.Phase{{Schedule: cfg.Schedule, Bytes: cfg.Bytes, Groups: groups, Channels: cfg.Channels}}
		}
		res, err := flow.Run(fc)
		if err != nil {
			return row, nil, err
		}
		row.Name, row.Ranks = res.Name, res.Ranks
		row.TimeUS = float64(res.Time) / float64(des.Microsecond) / float64(len(res.Iters))
		row.AlgBW, row.BusBW = res.AlgBW/1e9, res.BusBW/1e9
		row.IterUS = iterUS(res.Iters)
		row.Events, row.WallS = uint64(res.Solves), res.Wall.Seconds()
		row.EventsPerS = float64(res.Solves) / res.Wall.Seconds()
		return row, res.Ports, nil
	}
	return row, nil, fmt.Errorf("experiment: %w: Engine %d: want EnginePacket or EngineFlow", ErrConfig, pt.Engine)
}

// iterUS is each iteration's length in µs, from when each ended.
func iterUS(ends []des.Time) []float64 {
	var out []float64
	var prev des.Time
	for _, e := range ends {
		out = append(out, float64(e-prev)/float64(des.Microsecond))
		prev = e
	}
	return out
}

// PeakRSS is the process's peak resident set in bytes, from getrusage
// (0 if it fails).
func PeakRSS() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Maxrss * 1024
}
