package flow

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/sim/des"
	"github.com/ibex-rdma/ibex/sim/fabric"
	"github.com/ibex-rdma/ibex/sim/place"
	"github.com/ibex-rdma/ibex/sim/route"
	"github.com/ibex-rdma/ibex/sim/topo"
)

// Phase is one schedule run on several groups of GPUs at once, each group
// moving Bytes (nccl-tests' size for the schedule's collective).
type Phase struct {
	Name     string
	Schedule *algo.Schedule
	Groups   [][]int32 // each group's GPUs in rank order; nil: one group, the first Ranks GPUs
	Bytes    int64
	Channels int // per group; 0: the most ranks a group has on one host, times the planes
}

// Config is one flow-level simulation: phases run one after the other.
type Config struct {
	Graph  *topo.Graph
	Router *route.Router
	// Params are sim/packet's too: rates come from the graph, and the
	// flow engine uses the headers, message size and overhead, NIC and
	// NVLink figures and the routing policy, so that the two agree.
	Params   fabric.Params
	Seed     uint64
	Phases   []Phase
	LocalNIC bool
	Failures []fabric.Failure
	// Name and Collective, Ranks and Bytes describe the whole operation for
	// its algbw and busbw (default: the single phase's).
	Name       string
	Collective algo.Collective
	Ranks      int
	Bytes      int64
	ElemSize   int
	// NoReuse solves every step afresh instead of reusing the solution of
	// an earlier step with the same flows.
	NoReuse bool
	// Iterations runs the phases this many times back to back (default 1),
	// as a training job repeats its all-reduce; Result.Iters has each one's
	// end, so a failure's effect shows per iteration.
	Iterations int
}

// Result is what a flow-level run measured.
type Result struct {
	Name         string
	Ranks        int
	Bytes        int64
	Time         des.Time
	AlgBW, BusBW float64
	Wall         time.Duration
	Steps        int64 // global steps over all phases
	Solves       int64 // max-min solves
	Reused       int64 // steps whose solution was reused
	Flows        int64 // flows over all steps, reused ones included
	Ports        []fabric.PortStat
	// Iters is when each iteration ended; AlgBW and BusBW are per
	// iteration (Time / Iterations).
	Iters []des.Time
}

// ErrConfig is wrapped by errors about a Config.
var ErrConfig = errors.New("bad flow simulation config")

// engine is one run's state.
type engine struct {
	cfg  Config
	g    *topo.Graph
	r    *route.Router
	p    fabric.Params
	gpn  int
	nic0 topo.NodeID
	lat  des.Time // switch

	capacity []float64 // per resource, bytes/s: ports, then NVLink egress and ingress per GPU
	prop     []des.Time
	toSw     []bool
	nports   int

	mm   MaxMin
	fl   Flows
	f    []flowInfo
	rate []float64
	left []float64
	done []float64
	act  []int32

	memo    map[[2]uint64]*memoEntry
	bytes   []float64 // per resource: bytes carried
	stepB   []float64 // per resource: bytes carried in this step
	touched []int32   // resources with stepB != 0
	scratch []int32
	fail    []fabric.Failure
	now     des.Time
	res     Result
	phaseNo uint64 // phases begun, part of the reuse key
	// Per-proc clocks, for phases stepped through programs: a proc's step
	// begins when its own previous step ended, not when every proc's did.
	async       bool
	clock, next []des.Time
	arr         []des.Time // per flow of the step: data in, after the step began
	path        []topo.PortID
	load        []int32 // adaptive: flows assigned per port this step
	salt        uint32
}

type flowInfo struct {
	wire     float64 // bytes on the wire
	alone    float64 // seconds it would take alone: wire / its slowest resource + message overheads
	lat      des.Time
	from, to int32 // sending and receiving procs (group, channel, rank) of the phase
}

type memoEntry struct {
	dur   des.Time
	uses  int64
	bytes []resBytes // what one use carries
	arr   []des.Time // per flow: its data is in, after its step began (per-proc clocks)
}

type resBytes struct {
	res   int32
	bytes float64
}

// Run simulates cfg at flow level.
func Run(cfg Config) (*Result, error) {
	wall := time.Now()
	e, err := newEngine(cfg)
	if err != nil {
		return nil, err
	}
	iters := max(cfg.Iterations, 1)
	for range iters {
		for i := range cfg.Phases {
			if err := e.phase(&cfg.Phases[i]); err != nil {
				return nil, err
			}
		}
		e.res.Iters = append(e.res.Iters, e.now)
	}
	e.finish(time.Since(wall))
	return &e.res, nil
}

func newEngine(cfg Config) (*engine, error) {
	bad := func(format string, args ...any) (*engine, error) {
		return nil, fmt.Errorf("flow: %w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	g := cfg.Graph
	switch {
	case g == nil:
		return bad("no topology")
	case len(cfg.Phases) == 0:
		return bad("no phases")
	case g.NumHosts == 0:
		return bad("topology %q has no hosts", g.Name)
	case cfg.ElemSize < 0 || cfg.ElemSize > 16:
		return bad("element size %d: want 1 to 16 (0: 4)", cfg.ElemSize)
	case cfg.Iterations < 0 || cfg.Iterations > 1<<20:
		return bad("iterations %d: want 1 to %d (0: 1)", cfg.Iterations, 1<<20)
	}
	p, err := fabric.CheckParams(cfg.Params)
	if err != nil {
		return nil, fmt.Errorf("flow: %w", err)
	}
	r := cfg.Router
	if r == nil {
		r, err = route.New(g)
		var u *route.UnreachableError
		if err != nil && !errors.As(err, &u) {
			return nil, err
		}
	}
	e := &engine{cfg: cfg, g: g, r: r, p: p, gpn: g.GPUsOnHost(), nic0: topo.NodeID(g.NumHosts),
		lat: des.Time(g.SwitchLatency.Nanoseconds()) * des.Nanosecond, memo: map[[2]uint64]*memoEntry{},
		salt: uint32(cfg.Seed * 0x9e3779b97f4a7c15 >> 32)}
	if e.gpn == 0 {
		return bad("topology %q: hosts with different numbers of NICs; the workload needs the same number on every host", g.Name)
	}
	e.nports = len(g.Ports)
	nres := e.nports + 2*g.NumGPUs()
	e.capacity = make([]float64, nres)
	e.prop = make([]des.Time, e.nports)
	e.toSw = make([]bool, e.nports)
	e.bytes = make([]float64, nres)
	e.stepB = make([]float64, nres)
	e.load = make([]int32, e.nports)
	for i, gp := range g.Ports {
		if gp.Link == topo.NoLink {
			e.capacity[i] = 1 // never used; positive for the solver
			continue
		}
		l := &g.Links[gp.Link]
		e.capacity[i] = float64(l.Rate) / 8
		e.prop[i] = des.Time(float64(l.Length) * p.PropNsPerM * float64(des.Nanosecond))
		e.toSw[i] = g.Nodes[g.Ports[gp.Peer].Node].Kind == topo.KindSwitch
	}
	for i := e.nports; i < nres; i++ {
		e.capacity[i] = p.NVLinkRate
	}
	e.fail = append(e.fail, cfg.Failures...)
	sort.SliceStable(e.fail, func(a, b int) bool { return e.fail[a].At < e.fail[b].At })
	for _, f := range e.fail {
		if f.Link < 0 || int(f.Link) >= len(g.Links) || f.At < 0 {
			return bad("failure of link %d at %v: want a link 0 to %d and a time >= 0", f.Link, f.At, len(g.Links)-1)
		}
	}
	return e, nil
}

// stepper gives a phase's global steps: the sends of every rank of every
// group and channel in step i, and a key equal for steps with the same
// flows (0 when it cannot tell: the flows are then hashed).
type stepper interface {
	steps() int
	each(i int, emit func(from, to int, src, n int))
	key(i int) uint64
}

// programs steps through materialized per-rank programs (any schedule).
type programs struct{ s *algo.Schedule }

func (p programs) steps() int { return p.s.NumSteps }
func (p programs) each(i int, emit func(from, to, src, n int)) {
	for r := range p.s.Ranks {
		prog := p.s.Program(r)
		if i < len(prog) {
			for _, t := range prog[i].Sends {
				emit(r, t.Peer, t.Src, t.Len)
			}
		}
	}
}
func (p programs) key(int) uint64 { return 0 }

// ring steps a ring schedule by its rank symmetry: in step i rank r sends
// what rank 0 sends, to its own successor, from slots shifted by r. Only
// rank 0's program is computed.
type ring struct {
	n    int
	prog []algo.Step
	w    int // slots
}

func (rg ring) steps() int { return len(rg.prog) }
func (rg ring) each(i int, emit func(from, to, src, n int)) {
	for _, t := range rg.prog[i].Sends {
		d := t.Peer
		for r := range rg.n {
			emit(r, (r+d)%rg.n, (t.Src+r*(rg.w/rg.n))%rg.w, t.Len)
		}
	}
}
func (rg ring) key(i int) uint64 {
	// Uniform slots (checked by the caller): every step moves the same
	// bytes between the same pairs.
	k := uint64(1)
	for _, t := range rg.prog[i].Sends {
		k = k*31 + uint64(t.Len)
	}
	return k
}

// phase runs one phase to its end.
func (e *engine) phase(ph *Phase) error {
	s := ph.Schedule
	if s == nil {
		return fmt.Errorf("flow: %w: phase %q has no schedule", ErrConfig, ph.Name)
	}
	groups := ph.Groups
	if groups == nil {
		groups = [][]int32{nil}
	}
	pls := make([]*place.Placement, len(groups))
	nch := ph.Channels
	for k, gr := range groups {
		pl, err := place.New(gr, s.Ranks, e.g.NumGPUs(), e.gpn)
		if err != nil {
			return fmt.Errorf("flow: phase %q group %d: %w", ph.Name, k, err)
		}
		pls[k] = pl
		if ph.Channels == 0 {
			nch = max(nch, pl.MaxPerHost()*max(e.g.Planes, 1))
		}
	}
	if nch < 1 || nch > 64 {
		return fmt.Errorf("flow: %w: phase %q: %d channels, want 1 to 64", ErrConfig, ph.Name, nch)
	}
	esize := e.cfg.ElemSize
	if esize == 0 {
		esize = 4
	}
	off := place.SlotOffsets(s, ph.Bytes, esize, nch)
	e.phaseNo++
	var st stepper = programs{s}
	if s.Steps == nil && s.Algorithm == algo.Ring && s.Ranks > 1 && uniform(off) &&
		(s.Collective == algo.AllReduce || s.Collective == algo.ReduceScatter || s.Collective == algo.AllGather) {
		st = ring{n: s.Ranks, prog: s.Program(0), w: s.Slots}
	} else if tr := int64(s.Ranks) * int64(s.NumSteps); tr > 1<<26 {
		return fmt.Errorf("flow: %w: phase %q: %v has %d rank-steps; the flow engine takes up to %d for schedules other than ring (and ring needs a size divisible into equal slots)",
			ErrConfig, ph.Name, s, tr, 1<<26)
	} else {
		s.Materialize()
	}
	_, e.async = st.(programs)
	if e.async {
		n := len(pls) * nch * s.Ranks
		e.clock = grow(e.clock, n)
		e.next = grow(e.next, n)
		for i := range e.clock {
			e.clock[i] = e.now
		}
	}
	for i := range st.steps() {
		if err := e.step(st, i, pls, nch, off); err != nil {
			return err
		}
	}
	return nil
}

func uniform(off [][]int64) bool {
	d := off[0][1] - off[0][0]
	for _, o := range off {
		for i := 1; i < len(o); i++ {
			if o[i]-o[i-1] != d {
				return false
			}
		}
	}
	return true
}

// step builds step i's flows, solves them (or reuses a solution) and
// advances the clock by the step's time.
func (e *engine) step(st stepper, i int, pls []*place.Placement, nch int, off [][]int64) error {
	e.res.Steps++
	key := st.key(i)
	var mk [2]uint64
	if key != 0 && !e.cfg.NoReuse && !e.failurePending() {
		// A stepper's key is only good within its phase.
		mk = [2]uint64{key, e.phaseNo<<40 | uint64(len(pls))<<8 | uint64(nch)}
		if m := e.memo[mk]; m != nil {
			m.uses++
			e.res.Reused++
			e.now += m.dur
			return nil
		}
	}
	e.fl.Reset()
	e.f = e.f[:0]
	clear(e.load)
	h1, h2 := uint64(14695981039346656037), uint64(1099511628211)
	var err error
	ranks := 0
	if len(pls) > 0 {
		ranks = len(pls[0].GPUs)
	}
	for k, pl := range pls {
		for c := range nch {
			qp := uint32(k*nch+c) << 20
			base := int32((k*nch + c) * ranks)
			st.each(i, func(from, to, src, n int) {
				if err != nil {
					return
				}
				b := off[c][src+n] - off[c][src]
				if b == 0 {
					return
				}
				a, d := pl.GPU(c, from), pl.GPU(c, to)
				h1 = (h1 ^ uint64(a)<<32 ^ uint64(d)) * 1099511628211
				h2 = (h2 ^ uint64(b)) * 14695981039346656037
				err = e.addFlow(a, d, b, qp|uint32(from), place.Plane(e.g, e.gpn, c))
				if err == nil {
					f := &e.f[len(e.f)-1]
					f.from, f.to = base+int32(from), base+int32(to)
				}
			})
		}
	}
	if err != nil {
		return err
	}
	e.res.Flows += int64(len(e.f))
	if key == 0 && !e.cfg.NoReuse && !e.failurePending() {
		mk = [2]uint64{h1, h2}
		if m := e.memo[mk]; m != nil {
			m.uses++
			e.res.Reused++
			e.advance(m.dur, m.arr)
			return nil
		}
	}
	dur, err := e.solveStep()
	if err != nil {
		return err
	}
	var m *memoEntry
	if mk != ([2]uint64{}) {
		m = &memoEntry{dur: dur, uses: 1}
		if e.async {
			m.arr = slices.Clone(e.arr[:len(e.f)])
		}
		e.memo[mk] = m
	}
	for _, r := range e.touched {
		e.bytes[r] += e.stepB[r]
		if m != nil {
			m.bytes = append(m.bytes, resBytes{r, e.stepB[r]})
		}
		e.stepB[r] = 0
	}
	e.touched = e.touched[:0]
	e.advance(dur, e.arr)
	return nil
}

// advance moves the clocks past a step that took dur (flow i's data in
// arr[i] after its start). With per-proc clocks, a flow starts when its
// sender's step begins; the sender's step ends when its flows are
// acknowledged, the receiver's when it has begun the step and the data is
// in; procs without flows keep their time.
func (e *engine) advance(dur des.Time, arr []des.Time) {
	if !e.async {
		e.now += dur
		return
	}
	copy(e.next, e.clock)
	for i := range e.f {
		f := &e.f[i]
		in := e.clock[f.from] + arr[i]
		e.next[f.from] = max(e.next[f.from], in+f.lat)
		e.next[f.to] = max(e.next[f.to], in)
	}
	e.clock, e.next = e.next, e.clock
	for _, c := range e.clock {
		e.now = max(e.now, c)
	}
}

func (e *engine) failurePending() bool { return len(e.fail) > 0 }

// addFlow adds a flow of b bytes from GPU a to GPU d in plane.
func (e *engine) addFlow(a, d int32, b int64, qp uint32, plane int) error {
	p := &e.p
	src, dst, intra := place.EndpointsIn(e.g, e.gpn, a, d, !e.cfg.LocalNIC, plane)
	if intra {
		nv := int32(e.nports)
		e.fl.Add(nv+a, nv+int32(e.g.NumGPUs())+d)
		e.f = append(e.f, flowInfo{wire: float64(b), alone: float64(b) / p.NVLinkRate, lat: p.NVLinkLatency})
		return nil
	}
	var err error
	e.path, err = e.route(src, dst, qp, e.path[:0])
	if err != nil {
		return err
	}
	msgs := (b + int64(p.Chunk) - 1) / int64(p.Chunk)
	mtu := int64(e.g.MTU)
	var pkts int64
	for left := b; left > 0; left -= min(left, int64(p.Chunk)) {
		pkts += (min(left, int64(p.Chunk)) + mtu - 1) / mtu
	}
	wire := float64(b + pkts*int64(p.HeaderBytes) + msgs*int64(p.FirstBytes))
	lat := p.NICLatency
	slow := math.Inf(1)
	res := e.scratch[:0]
	for _, pt := range e.path {
		res = append(res, int32(pt))
		lat += e.prop[pt]
		if e.toSw[pt] {
			lat += e.lat
		}
		slow = min(slow, e.capacity[pt])
		e.load[pt]++
	}
	e.fl.Add(res...)
	e.scratch = res
	e.f = append(e.f, flowInfo{wire: wire, alone: wire/slow + float64(msgs)*p.MsgOverhead.Seconds(), lat: lat})
	return nil
}

// route is the path from NIC src to NIC dst under the routing policy.
func (e *engine) route(src, dst topo.NodeID, qp uint32, buf []topo.PortID) ([]topo.PortID, error) {
	switch e.p.Routing {
	case fabric.RouteDModK:
		return e.r.Path(src, dst, route.PolicyDModK, 0, buf)
	case fabric.RouteECMP:
		return e.r.Path(src, dst, route.PolicyECMP, route.FlowHash(src, dst, qp^e.salt), buf)
	}
	// Adaptive: at each hop the eligible port with the fewest flows so far
	// in this step (flows are placed in a fixed order, so a run replays).
	n := src
	for range len(e.g.Nodes) {
		p := e.r.Adaptive(n, dst, e.loadOf)
		if p == topo.NoPort {
			return buf, fmt.Errorf("flow: %s has no route to %s: %w", e.g.NodeName(n), e.g.NodeName(dst), route.ErrUnreachable)
		}
		buf = append(buf, p)
		n = e.g.Ports[e.g.Ports[p].Peer].Node
		if n == dst {
			return buf, nil
		}
	}
	return buf, fmt.Errorf("flow: no path from %s to %s: %w", e.g.NodeName(src), e.g.NodeName(dst), route.ErrTopology)
}

func (e *engine) loadOf(p topo.PortID) int64 { return int64(e.load[p]) }

// solveStep runs the step's flows to their ends: rates are solved, the
// clock moves to the next flow's end, that flow leaves and the rest are
// solved again. A flow is done at the later of its fluid end and its time
// alone (message overheads are not shared), plus its latency both ways
// (the data's last byte, then the acknowledgement). It returns the step's
// length.
func (e *engine) solveStep() (des.Time, error) {
	nf := len(e.f)
	e.rate = grow(e.rate, nf)
	e.left = grow(e.left, nf)
	e.done = grow(e.done, nf)
	for i := range nf {
		e.left[i] = e.f[i].wire
	}
	act := e.act[:0]
	for i := range nf {
		act = append(act, int32(i))
	}
	var sub Flows
	var t float64
	for len(act) > 0 {
		if e.failDue(e.dueBy(t)) {
			if err := e.reroute(act); err != nil {
				return 0, err
			}
		}
		sub.Reset()
		for _, fi := range act {
			sub.Add(e.fl.Res[e.fl.Off[fi]:e.fl.Off[fi+1]]...)
		}
		e.mm.Solve(e.capacity, &sub, e.rate)
		e.res.Solves++
		dt := math.Inf(1)
		for j, fi := range act {
			dt = min(dt, e.left[fi]/e.rate[j])
		}
		if len(e.fail) > 0 {
			dt = min(dt, e.untilFailure(e.fail[0], t))
		}
		t += dt
		keep := act[:0]
		for j, fi := range act {
			moved := e.rate[j] * dt
			if e.left[fi]-moved <= e.f[fi].wire*1e-12 {
				moved = e.left[fi]
			}
			e.left[fi] -= moved
			for _, r := range e.fl.Res[e.fl.Off[fi]:e.fl.Off[fi+1]] {
				if e.stepB[r] == 0 {
					e.touched = append(e.touched, r)
				}
				e.stepB[r] += moved
			}
			if e.left[fi] == 0 {
				e.done[fi] = t
			} else {
				keep = append(keep, fi)
			}
		}
		act = keep
	}
	e.act = act
	var end des.Time
	e.arr = grow(e.arr, nf)
	for i := range nf {
		f := &e.f[i]
		e.arr[i] = des.Time(max(e.done[i], f.alone)*float64(des.Second)) + f.lat
		end = max(end, e.arr[i]+f.lat)
	}
	return end, nil
}

// untilFailure is the time from t seconds into the step to failure f, in
// seconds (0 if it is due).
func (e *engine) untilFailure(f fabric.Failure, t float64) float64 {
	return max(f.At.Seconds()-t-e.now.Seconds(), 0)
}

// dueBy is the time up to which failures are due t seconds into the step:
// now plus t truncated to picoseconds, or a failure's own time if t has
// reached it as solveStep counts (t + untilFailure == t). The two can
// disagree: a failure at 61 ps is 6.1e-11 s after now = 0, t steps to
// exactly that, and 6.1e-11 * 1e12 = 60.99999999999999 truncates to 60 ps.
// Without the second test such a failure never applied and t never moved
// (every later step to it is 0 or too small to change t), so solveStep
// looped forever; with it, the failure applies at once. A run it changes
// is one that hung: where the first test is false and the second true, t
// cannot move while the failure is pending.
func (e *engine) dueBy(t float64) des.Time {
	now := e.now + des.Time(t*float64(des.Second))
	for _, f := range e.fail {
		if f.At <= now {
			continue
		}
		if t+e.untilFailure(f, t) > t {
			break
		}
		now = f.At
	}
	return now
}

// failDue applies the failures due by now; it says whether there were any.
func (e *engine) failDue(now des.Time) bool {
	any := false
	for len(e.fail) > 0 && e.fail[0].At <= now {
		r, err := e.r.WithFailed(e.fail[0].Link)
		var u *route.UnreachableError
		if err == nil || errors.As(err, &u) {
			e.r = r
		}
		e.fail = e.fail[1:]
		any = true
	}
	return any
}

// reroute gives the active flows new paths after a failure, placing
// them in order (adaptive routing counts the flows placed so far on each
// port, as at the start of a step); finished flows keep theirs.
func (e *engine) reroute(act []int32) error {
	active := make([]bool, len(e.f))
	for _, fi := range act {
		active[fi] = true
	}
	clear(e.load)
	var nf Flows
	for i := range e.f {
		res := e.fl.Res[e.fl.Off[i]:e.fl.Off[i+1]]
		if !active[i] || len(res) == 0 || int(res[0]) >= e.nports {
			nf.Add(res...)
			continue
		}
		src := e.g.Ports[res[0]].Node
		dst := e.g.Ports[e.g.Ports[res[len(res)-1]].Peer].Node
		var err error
		e.path, err = e.route(src, dst, uint32(i), e.path[:0])
		if err != nil {
			return fmt.Errorf("flow: at %v after a link failure: %w", e.now, err)
		}
		r32 := make([]int32, len(e.path))
		for k, p := range e.path {
			r32[k] = int32(p)
			e.load[p]++
		}
		nf.Add(r32...)
	}
	e.fl = nf
	return nil
}

func (e *engine) finish(wall time.Duration) {
	cfg := &e.cfg
	res := &e.res
	res.Wall, res.Time = wall, e.now
	res.Name, res.Ranks, res.Bytes = cfg.Name, cfg.Ranks, cfg.Bytes
	coll := cfg.Collective
	if len(cfg.Phases) == 1 {
		s := cfg.Phases[0].Schedule
		if res.Name == "" {
			res.Name = s.String()
		}
		if res.Ranks == 0 {
			res.Ranks = s.Ranks
		}
		if res.Bytes == 0 {
			res.Bytes = cfg.Phases[0].Bytes
		}
		if coll == 0 {
			coll = s.Collective
		}
	}
	if e.now > 0 {
		res.AlgBW = float64(res.Bytes) * float64(len(res.Iters)) / e.now.Seconds()
		res.BusBW = res.AlgBW * algo.BusFactor(coll, res.Ranks)
	}
	for _, m := range e.memo {
		for _, rb := range m.bytes {
			e.bytes[rb.res] += rb.bytes * float64(m.uses-1)
		}
	}
	for p := range e.nports {
		if e.bytes[p] == 0 {
			continue
		}
		gp := &e.g.Ports[p]
		ps := fabric.PortStat{Port: topo.PortID(p), Name: e.g.PortName(topo.PortID(p)) + " -> " + e.g.PortName(gp.Peer),
			Tier: e.g.Links[gp.Link].Tier, Bytes: int64(math.Round(e.bytes[p])), Failed: e.r.Dead(gp.Link)}
		if e.now > 0 {
			ps.Util = e.bytes[p] / e.capacity[p] / e.now.Seconds()
		}
		res.Ports = append(res.Ports, ps)
	}
	sort.SliceStable(res.Ports, func(a, b int) bool { return res.Ports[a].Bytes > res.Ports[b].Bytes })
}
