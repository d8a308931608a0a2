// Package packet is ibex's packet-level fabric simulator: InfiniBand links
// with credit-based flow control per virtual lane (or RoCEv2 links with
// PFC per priority, ECN marking and DCQCN), output-queued switches with
// VL arbitration and cut-through forwarding, NICs whose QPs send RDMA
// WRITE messages packet by packet, and a workload that runs any coll/algo
// schedule (or a point-to-point pattern) over chosen GPUs the way NCCL's
// Simple protocol does: per channel, per connection, messages of one chunk
// with a bounded number in flight.
//
// A run is deterministic: the engine is sim/des, routing is sim/route's
// (D-mod-k, ECMP by QP hash, or adaptive), the seed salts the ECMP hashes
// and seeds the random source of ECN marking, so one seed replays a run
// exactly.
//
// The run's constants (fabric.Params), link failures and per-port
// statistics are sim/fabric's, which sim/flow shares.
package packet

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/sim/des"
	"github.com/ibex-rdma/ibex/sim/fabric"
	"github.com/ibex-rdma/ibex/sim/place"
	"github.com/ibex-rdma/ibex/sim/route"
	"github.com/ibex-rdma/ibex/sim/topo"
)

// Config is one simulated operation.
type Config struct {
	Graph  *topo.Graph
	Router *route.Router // nil: route.New(Graph)
	Params fabric.Params
	Seed   uint64

	// The workload: Schedule over Bytes (nccl-tests' size: the whole buffer
	// of all_reduce, broadcast and reduce; all ranks' blocks of
	// reduce_scatter, all_gather and all_to_all), in elements of ElemSize
	// bytes (default 4).
	Schedule *algo.Schedule
	Name     string // for reports; default Schedule.String()
	Bytes    int64
	ElemSize int
	// Channels run the schedule side by side, each on 1/Channels of the
	// data; channel c rotates the ranks within each host by c, so that with
	// PXN channel c's traffic between hosts uses rail c, in plane
	// place.Plane(c) of a multi-plane fabric. Default: the GPUs per host
	// times the planes.
	Channels int
	// GPUs are the ranks' GPUs, rank r on GPUs[r] (host × GPUs per host +
	// index), ranks of one host contiguous. Nil: the first Schedule.Ranks
	// GPUs in order.
	GPUs []int32
	// LocalNIC sends between hosts from the sending GPU's own NIC; by
	// default (PXN, as NCCL on rail-optimized fabrics) from the NIC on the
	// receiving GPU's rail.
	LocalNIC bool

	Failures []fabric.Failure
	// Iterations runs the operation this many times (default 1), each rank
	// starting the next when it has finished the last, as a training loop
	// calls NCCL; Result.Iters has when each ended.
	Iterations int

	// Trace, if set, receives a Chrome / Perfetto trace (JSON) of the run:
	// a span per rank's step, up to TraceLimit spans (default 200,000),
	// and counter tracks of each link tier's utilisation and queued bytes,
	// sampled every TraceInterval of simulated time (default 10 µs).
	Trace         io.Writer
	TraceLimit    int
	TraceInterval des.Time
	// OnProgress, if set, is called with how far the run is: as it starts,
	// about every 65,536 events, and when it has ended (Done == Total then,
	// unless it failed). It runs on the simulation's goroutine.
	OnProgress func(Progress)
}

// Progress is how far a run is: Done of Total payload bytes handed to NICs
// or NVLink (resends not counted), the simulated time and the events
// handled so far. End is set on the last call.
type Progress struct {
	Done, Total int64
	Now         des.Time
	Events      uint64
	End         bool
}

// Result is what a run measured.
type Result struct {
	Name    string // the schedule or pattern
	Ranks   int
	Bytes   int64
	Time    des.Time   // until the last rank finished (AlgBW and BusBW are per iteration)
	Iters   []des.Time // when each iteration's last rank finished it
	AlgBW   float64    // bytes/s: Bytes / Time
	BusBW   float64    // bytes/s: AlgBW × nccl-tests' factor
	Factor  float64    // algo.BusFactor(Schedule.Collective, Ranks)
	Events  uint64
	Wall    time.Duration
	Packets int64 // injected
	Payload int64 // bytes injected by NICs (equal to delivered: Verify)
	NVLink  int64 // messages that stayed inside a host
	// Lost is the payload bytes lost and sent again, LostPkts the
	// packets. With InfiniBand: stranded by link failures (resent after
	// the retry timeout), never anything else. With RoCE also dropped for
	// want of buffer, and discarded by receivers out of sequence
	// (go-back-N: the packets after a lost one).
	Lost, LostPkts int64
	LostWire       int64 // the bytes on the wire of those lost in the fabric (not the discarded)
	// MaxBuffer is the fullest any input buffer got, bytes (never above
	// Params.Buffer; with RoCE, never above the port's Xoff + headroom).
	MaxBuffer int64
	// Ports are the ports that sent (or with RoCE dropped, paused or sent
	// PAUSE frames or CNPs), busiest first.
	Ports []fabric.PortStat
	// Wait is the total credit-stall time over all ports.
	Wait des.Time

	// TraceSpans is the step spans written to Config.Trace, TraceDropped
	// those left out past Config.TraceLimit.
	TraceSpans, TraceDropped int64

	// RoCE totals over all ports (PortStat's), and the packets receivers
	// discarded out of sequence.
	PauseTime                          des.Time
	PauseFrames, Drops, ECNMarks, CNPs int64
	Discards                           int64
}

// EventsPerSec is the simulator's speed on this run.
func (r *Result) EventsPerSec() float64 { return float64(r.Events) / r.Wall.Seconds() }

// ErrConfig is wrapped by errors about a Config, its Params included: it
// is fabric.ErrConfig.
var ErrConfig = fabric.ErrConfig

// Run simulates cfg and returns what it measured, after checking the
// run's conservation laws (Verify).
func Run(cfg Config) (*Result, error) {
	wall := time.Now()
	m, err := build(cfg)
	if err != nil {
		return nil, err
	}
	if err := m.run(wall); err != nil {
		return nil, err
	}
	if err := m.n.Verify(); err != nil {
		return nil, err
	}
	return m.result(cfg, time.Since(wall)), nil
}

// model is one run's fabric and workload.
type model struct {
	cfg Config
	sim *des.Sim
	n   *Net
	w   *work
}

func build(cfg Config) (*model, error) {
	bad := func(format string, args ...any) (*model, error) {
		return nil, fmt.Errorf("packet: %w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	g, s := cfg.Graph, cfg.Schedule
	switch {
	case g == nil:
		return bad("no topology")
	case s == nil:
		return bad("no schedule")
	case cfg.Bytes < 0:
		return bad("size %d bytes: want >= 0", cfg.Bytes)
	case cfg.ElemSize < 0 || cfg.ElemSize > 16:
		return bad("element size %d: want 1 to 16 (0: 4)", cfg.ElemSize)
	case cfg.Channels < 0 || cfg.Channels > 64:
		return bad("channels %d: want 1 to 64 (0: NICs per host)", cfg.Channels)
	case g.NumHosts == 0 || g.NumNICs == 0:
		return bad("topology %q has no hosts", g.Name)
	}
	p, err := fabric.CheckParams(cfg.Params)
	if err != nil {
		return nil, fmt.Errorf("packet: %w", err)
	}
	esize := cfg.ElemSize
	if esize == 0 {
		esize = 4
	}
	gpn := g.GPUsOnHost()
	if gpn == 0 {
		return bad("topology %q: hosts with different numbers of NICs; the workload needs the same number on every host", g.Name)
	}
	nch := cfg.Channels
	if nch == 0 {
		nch = gpn * max(g.Planes, 1)
	}
	pl, err := place.New(cfg.GPUs, s.Ranks, g.NumGPUs(), gpn)
	if err != nil {
		return nil, fmt.Errorf("packet: %w: %w", ErrConfig, err)
	}
	r := cfg.Router
	if r != nil && r.Graph() != g {
		return bad("the router was built for topology %q, not this %q", r.Graph().Name, g.Name)
	}
	if r == nil {
		r, err = route.New(g)
		var u *route.UnreachableError
		if err != nil && !errors.As(err, &u) {
			return nil, err
		}
	}
	sim := des.New(cfg.Seed)
	n, err := newNet(g, r, p, sim)
	if err != nil {
		return nil, err
	}
	if cfg.Iterations < 0 || cfg.Iterations > 1<<16 {
		return bad("iterations %d: want 1 to %d (0: 1)", cfg.Iterations, 1<<16)
	}
	w, err := newWork(n, s, cfg.Bytes, esize, nch, pl, !cfg.LocalNIC, cfg.Seed, max(cfg.Iterations, 1))
	if err != nil {
		return nil, err
	}
	n.ll.initQPs()
	for _, f := range cfg.Failures {
		if f.Link < 0 || int(f.Link) >= len(g.Links) {
			return bad("failure of link %d: the topology has %d links", f.Link, len(g.Links))
		}
		if f.At < 0 {
			return bad("failure of %s at %v: want a time >= 0", g.LinkName(f.Link), f.At)
		}
		sim.After(f.At, evFail, int32(f.Link), 0, 0)
	}
	if cfg.Trace != nil {
		w.trace = newTracer(cfg.TraceLimit, cfg.TraceInterval, g, gpn)
		sim.After(w.trace.interval, evSample, 0, 0, 0)
	}
	return &model{cfg: cfg, sim: sim, n: n, w: w}, nil
}

// run starts every rank and handles events until all are done.
func (m *model) run(wall time.Time) error {
	report := m.cfg.OnProgress
	status := func(end bool) Progress {
		return Progress{Done: min(m.w.cutBytes, m.w.totalBytes), Total: m.w.totalBytes, Now: m.sim.Now(), Events: m.sim.Events(), End: end}
	}
	m.w.start()
	if report != nil {
		report(status(false))
	}
	k := 0
	stop := func() bool {
		if m.n.err != nil {
			return true
		}
		if k++; k&0xffff == 0 && report != nil {
			report(status(false))
		}
		return false
	}
	m.sim.Run(m.n, 0, stop)
	if report != nil {
		report(status(true))
	}
	if m.n.err != nil {
		return m.n.err
	}
	if m.w.left > 0 {
		return m.stuck()
	}
	if m.w.trace != nil {
		if err := m.w.trace.write(m.cfg.Trace, m); err != nil {
			return fmt.Errorf("packet: writing the trace: %w", err)
		}
	}
	return nil
}

// stuck explains a run that ran out of events with ranks unfinished (a
// schedule whose sends and receives do not match).
func (m *model) stuck() error {
	for i := range m.w.procs {
		p := &m.w.procs[i]
		if int(p.step) < len(m.w.steps[p.rank]) {
			return fmt.Errorf("packet: %w: at %v rank %d (channel %d) waits in step %d of %d with %d transfers unfinished and nothing in flight: the schedule's sends and receives do not match",
				ErrConfig, m.sim.Now(), p.rank, p.ch, p.step, len(m.w.steps[p.rank]), p.pending)
		}
	}
	return fmt.Errorf("packet: %d ranks unfinished", m.w.left)
}

func (m *model) result(cfg Config, wall time.Duration) *Result {
	s := cfg.Schedule
	res := &Result{
		Name: cfg.Name, Ranks: s.Ranks, Bytes: cfg.Bytes, Time: m.w.end,
		Events: m.sim.Events(), Wall: wall, Packets: m.n.injectedPkts, Payload: m.n.injected,
		NVLink: m.w.nvChunks, Lost: m.n.lost, LostPkts: m.n.lostPkts, LostWire: m.n.lostWire, MaxBuffer: m.n.ll.maxBuffer(),
		Factor: algo.BusFactor(s.Collective, s.Ranks), Discards: m.n.discards,
	}
	res.Iters = m.w.iterEnd
	if t := m.w.trace; t != nil {
		res.TraceSpans, res.TraceDropped = int64(len(t.spans)), t.dropped
	}
	if m.w.end > 0 {
		res.AlgBW = float64(cfg.Bytes) * float64(len(m.w.iterEnd)) / m.w.end.Seconds()
		res.BusBW = res.AlgBW * res.Factor
	}
	if res.Name == "" {
		res.Name = s.String()
	}
	res.Ports = m.n.portStats(m.w.end)
	for _, p := range res.Ports {
		res.Wait += p.Wait
		res.PauseTime += p.PauseTime
		res.PauseFrames += p.PauseFrames
		res.Drops += p.Drops
		res.ECNMarks += p.ECNMarks
		res.CNPs += p.CNPs
	}
	return res
}

// portStats lists the ports that sent, busiest first (ties by port).
func (n *Net) portStats(end des.Time) []fabric.PortStat {
	var out []fabric.PortStat
	for i := range n.ports {
		op := &n.ports[i]
		if op.txPkts == 0 && op.pauseTime == 0 && op.pauseFrames == 0 && op.drops == 0 && op.cnps == 0 {
			continue
		}
		ps := fabric.PortStat{Port: topo.PortID(i), Bytes: op.txBytes, Pkts: op.txPkts, Wait: op.stall, Failed: op.dead,
			Name: n.g.PortName(topo.PortID(i)) + " -> " + n.g.PortName(op.peer), Tier: n.g.Links[op.link].Tier,
			MaxQueue: op.maxQueued, PauseTime: op.pauseTime, PauseFrames: op.pauseFrames, Drops: op.drops, ECNMarks: op.marks, CNPs: op.cnps}
		if end > 0 {
			ps.Util = float64(op.busy) / float64(end)
		}
		out = append(out, ps)
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].Bytes > out[b].Bytes })
	return out
}

// Verify checks the run's conservation laws: every byte and packet
// injected was delivered (or lost and resent, and the resend delivered:
// injected + resent = delivered + lost, and resent = lost), no packet is
// left in a queue or on a wire, and on every link and VL the sender's
// credits plus those on their way back equal the receiver's buffer
// (nothing in it); with RoCE, no buffer holds anything and no priority is
// left paused.
func (n *Net) Verify() error {
	if n.injected+n.resent != n.delivered+n.lost || n.injectedPkts+n.resentPkts != n.deliveredPkts+n.lostPkts || n.resent != n.lost {
		return fmt.Errorf("packet: %d bytes in %d packets injected and %d in %d resent; %d bytes in %d packets delivered and %d in %d lost: %w",
			n.injected, n.injectedPkts, n.resent, n.resentPkts, n.delivered, n.deliveredPkts, n.lost, n.lostPkts, ErrDrop)
	}
	if len(n.free) != len(n.pkts) {
		return fmt.Errorf("packet: %d packets still held at the end: %w", len(n.pkts)-len(n.free), ErrDrop)
	}
	return n.ll.verify()
}
