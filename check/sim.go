package check

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/sim/des"
	"github.com/ibex-rdma/ibex/sim/fabric"
	"github.com/ibex-rdma/ibex/sim/flow"
	"github.com/ibex-rdma/ibex/sim/route"
	"github.com/ibex-rdma/ibex/sim/topo"
)

// The simulated check runs the same schedule and tests as Measure on
// sim/flow (whose times agree with sim/packet's on an idle path), one
// message at a time, on a simulated clock:
//
//   - Rank r is host r's first GPU and its NIC in plane 0 (so every pair
//     crosses the fabric); routing is D-mod-k.
//   - A round's pairs start together; each is simulated alone (pairs of
//     one round do not load each other's links here), and the round ends
//     with its slowest pair.
//   - A degraded cable runs at Factor times its rate, both ways, for the
//     whole run.
//   - A flapping cable is up for the first half of every Period and down
//     for the second (from time 0). A message starts on the fabric as it
//     is at that moment (routes recomputed without the cable while it is
//     down, as sim/route does for a failure). A message with no route, or
//     whose route the cable leaves while it is under way, is lost: it is
//     sent again a retry timeout later (fabric.Params.RetryTimeout), at
//     most 7 times (RC's retry count), after which the pair is broken.
//   - A direction's Iters messages are one transfer (a QP pipelines them),
//     then the 8-byte acknowledgement. The latency is half a ping-pong:
//     the flow engine's time of an 8-byte message, which includes its
//     acknowledgement's way back.

// retryCount is RC's retry_cnt: resends of a message before the QP
// fails.
const retryCount = 7

// SimConfig is a simulated check's fabric.
type SimConfig struct {
	Graph *topo.Graph // required
	File  string      // the topology file, for the report
	// Ranks are hosts 0 to Ranks-1; 0: every host, if at most 64.
	Ranks int
	// Params are the fabric's constants (zero fields: fabric.Defaults).
	Params  fabric.Params
	Degrade []Degrade
	Flap    []Flap
}

// Degrade runs a cable at Factor (0 < Factor <= 1) times its rate.
type Degrade struct {
	Link   topo.LinkID
	Factor float64
	Spec   string // as given, for the report
}

// Flap takes a cable down for the second half of every Period.
type Flap struct {
	Link   topo.LinkID
	Period des.Time
	Spec   string
}

// ParseLink finds a cable by a port at either end (leaf0:8, host3.nic0),
// by its name as reports print it ("leaf0:8 - spine0:0"), or by number.
func ParseLink(g *topo.Graph, s string) (topo.LinkID, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n < 0 || n >= len(g.Links) {
			return topo.NoLink, fmt.Errorf("link %d: the topology has links 0 to %d", n, len(g.Links)-1)
		}
		return topo.LinkID(n), nil
	}
	for p := range g.Ports {
		if g.PortName(topo.PortID(p)) == s {
			if l := g.Ports[p].Link; l != topo.NoLink {
				return l, nil
			}
			return topo.NoLink, fmt.Errorf("port %s has no cable", s)
		}
	}
	for l := range g.Links {
		if g.LinkName(topo.LinkID(l)) == s {
			return topo.LinkID(l), nil
		}
	}
	return topo.NoLink, fmt.Errorf("no port or cable %q (ports are named like leaf0:8, spine1:3, host3.nic0)", s)
}

// ParseDegrade reads LINK=FACTOR: the cable at FACTOR of its rate (0.25:
// a 400G cable running at 100G).
func ParseDegrade(g *topo.Graph, s string) (Degrade, error) {
	link, v, ok := strings.Cut(s, "=")
	f, err := strconv.ParseFloat(v, 64)
	if !ok || err != nil || !(f > 0 && f <= 1) {
		return Degrade{}, fmt.Errorf("%w: degrade %q: want LINK=FACTOR, FACTOR the fraction of the rate left (0.25), above 0 and at most 1", ErrConfig, s)
	}
	l, err := ParseLink(g, link)
	if err != nil {
		return Degrade{}, fmt.Errorf("%w: degrade %q: %v", ErrConfig, s, err)
	}
	return Degrade{Link: l, Factor: f, Spec: s}, nil
}

// ParseFlap reads LINK=PERIOD: the cable down for the second half of
// every PERIOD (a Go duration: 2ms, 500us).
func ParseFlap(g *topo.Graph, s string) (Flap, error) {
	link, v, ok := strings.Cut(s, "=")
	d, err := time.ParseDuration(v)
	if !ok || err != nil || d <= 0 {
		return Flap{}, fmt.Errorf("%w: flap %q: want LINK=PERIOD, PERIOD a duration above 0 (2ms)", ErrConfig, s)
	}
	l, err := ParseLink(g, link)
	if err != nil {
		return Flap{}, fmt.Errorf("%w: flap %q: %v", ErrConfig, s, err)
	}
	return Flap{Link: l, Period: des.Time(d.Nanoseconds()) * des.Nanosecond, Spec: s}, nil
}

// Sim is a simulated check's fabric, after Simulate: it knows the
// routes, so it can say which cables the slow pairs share (Locate).
type Sim struct {
	g      *topo.Graph // the topology with its degraded cables
	params fabric.Params
	cfg    Config
	ranks  int
	gpus   []int32
	nics   []topo.NodeID
	flaps  []Flap

	routers map[uint64]*route.Router // by the mask of flaps down
	evals   map[opKey]eval
	ring    *algo.Schedule
	buf     []topo.PortID
}

// opKey is one message (src -> dst, bytes) or, with src -1, one
// all-reduce, on the fabric with the flaps of down down.
type opKey struct {
	src, dst int
	bytes    int64
	down     uint64
}

// eval is an op's outcome on one state of the fabric.
type eval struct {
	reach bool
	d     des.Time
	cross uint64 // the flapping cables its routes cross
}

// errRetry is a message lost more than retryCount times.
var errRetry = errors.New("retry count exceeded")

// Simulate runs the check on the simulated fabric and returns the
// figures, and the Sim that ran them.
func Simulate(cfg Config, sc SimConfig) (*Figures, *Sim, error) {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, nil, err
	}
	g := sc.Graph
	if g == nil {
		return nil, nil, fmt.Errorf("%w: no topology", ErrConfig)
	}
	gpn := g.GPUsOnHost()
	if gpn == 0 {
		return nil, nil, fmt.Errorf("%w: topology %s: its hosts have different GPU counts; a simulated check puts one rank on each host's first GPU", ErrConfig, g.Name)
	}
	n := sc.Ranks
	switch {
	case n == 0 && g.NumHosts > 64:
		return nil, nil, fmt.Errorf("%w: topology %s has %d hosts: say how many to check (ranks on hosts 0..N-1; %d pairs for 64)", ErrConfig, g.Name, g.NumHosts, 64*63/2)
	case n == 0:
		n = g.NumHosts
	case n < 2 || n > g.NumHosts:
		return nil, nil, fmt.Errorf("%w: %d ranks: topology %s has %d hosts (want 2 to %d)", ErrConfig, n, g.Name, g.NumHosts, g.NumHosts)
	}
	if len(sc.Flap) > 64 {
		return nil, nil, fmt.Errorf("%w: %d flapping cables: at most 64", ErrConfig, len(sc.Flap))
	}
	params, err := fabric.CheckParams(sc.Params)
	if err != nil {
		return nil, nil, err
	}
	// The degraded cables are a copy's: the graph's slices are shared
	// read-only by whoever loaded it.
	dg := *g
	dg.Links = slices.Clone(g.Links)
	info := &SimInfo{File: sc.File}
	for _, d := range sc.Degrade {
		if d.Link < 0 || int(d.Link) >= len(dg.Links) || !(d.Factor > 0 && d.Factor <= 1) {
			return nil, nil, fmt.Errorf("%w: degrade link %d by %g", ErrConfig, d.Link, d.Factor)
		}
		dg.Links[d.Link].Rate = max(topo.Rate(float64(dg.Links[d.Link].Rate)*d.Factor), 1)
		info.Degrade = append(info.Degrade, d.Spec)
	}
	for _, f := range sc.Flap {
		if f.Link < 0 || int(f.Link) >= len(dg.Links) || f.Period <= 0 {
			return nil, nil, fmt.Errorf("%w: flap link %d every %v", ErrConfig, f.Link, f.Period)
		}
		info.Flap = append(info.Flap, f.Spec)
	}
	s := &Sim{g: &dg, params: params, cfg: cfg, ranks: n, flaps: sc.Flap,
		routers: map[uint64]*route.Router{}, evals: map[opKey]eval{}}
	for h := range n {
		gpu := int32(h * gpn)
		s.gpus = append(s.gpus, gpu)
		s.nics = append(s.nics, g.GPUNIC(int(gpu), 0))
	}
	if s.ring, err = algo.Generate(algo.AllReduce, algo.Ring, n, 0, 1); err != nil {
		return nil, nil, err
	}

	f := newFigures(Shape{Ranks: n, Transport: "sim", Topology: g.Name, Config: cfg})
	f.Sim = info
	for h := range n {
		f.Hosts = append(f.Hosts, g.NodeName(g.Host(h)))
	}
	var now des.Time
	byPair := map[[2]int]Pair{}
	for _, round := range Rounds(n) {
		end := now
		for _, pr := range round {
			p, t, err := s.pair(now, pr[0], pr[1])
			if err != nil {
				return nil, nil, err
			}
			byPair[pr] = p
			end = max(end, t)
		}
		now = end
	}
	for a := range n {
		for b := a + 1; b < n; b++ {
			f.Pairs = append(f.Pairs, byPair[[2]int{a, b}])
		}
	}
	ar, err := s.allReduce(now)
	if err != nil {
		return nil, nil, err
	}
	f.AllReduce = ar
	return f, s, nil
}

// pair simulates the tests of pair {a, b} from t, as Measure runs them.
func (s *Sim) pair(t des.Time, a, b int) (Pair, des.Time, error) {
	hops, err := s.hops(a, b)
	if err != nil {
		return Pair{}, t, err
	}
	// The class a pair's figures are held against: pairs under one leaf
	// are nearer than pairs across the spines, and not slow for that.
	p := Pair{A: a, B: b, Transport: fmt.Sprintf("sim-%dhop", hops)}
	broken := func(what string, err error) (Pair, des.Time, error) {
		if !errors.Is(err, errRetry) {
			return p, t, err
		}
		p.BWAB, p.BWBA, p.LatUs = 0, 0, 0
		p.Err = what + ": " + err.Error()
		return p, t, nil
	}
	for dir, bw := range []*float64{&p.BWAB, &p.BWBA} {
		src, dst := a, b
		if dir == 1 {
			src, dst = b, a
		}
		runs := make([]float64, 0, s.cfg.Repeats)
		for range s.cfg.Repeats {
			// The messages go back to back (the QP pipelines them): one
			// transfer of them all.
			start := t
			if t, err = s.iterate(t, opKey{src: src, dst: dst, bytes: s.cfg.Bytes * int64(s.cfg.Iters)}); err != nil {
				return broken(fmt.Sprintf("%d->%d bw", src, dst), err)
			}
			if t, err = s.iterate(t, opKey{src: dst, dst: src, bytes: LatBytes}); err != nil {
				return broken(fmt.Sprintf("%d->%d bw", src, dst), err)
			}
			runs = append(runs, float64(s.cfg.Bytes*int64(s.cfg.Iters))/(t-start).Seconds()/1e9)
		}
		*bw = slices.Max(runs)
	}
	rtt := make([]des.Time, 0, s.cfg.LatIters)
	for range s.cfg.LatIters {
		start := t
		for _, op := range []opKey{{src: a, dst: b, bytes: LatBytes}, {src: b, dst: a, bytes: LatBytes}} {
			if t, err = s.iterate(t, op); err != nil {
				return broken("latency", err)
			}
		}
		rtt = append(rtt, t-start)
	}
	slices.Sort(rtt)
	p.LatUs = float64(rtt[len(rtt)/2]) / 2 / float64(des.Microsecond)
	return p, t, nil
}

// allReduce simulates the all-reduce's timed iterations from t (ring,
// the flow engine's nccl-tests-sized run).
func (s *Sim) allReduce(t des.Time) (AllReduce, error) {
	ar := AllReduce{Bytes: s.cfg.AllReduceBytes}
	start := t
	var err error
	for range s.cfg.AllReduceIters {
		if t, err = s.iterate(t, opKey{src: -1, bytes: s.cfg.AllReduceBytes}); errors.Is(err, errRetry) {
			ar.Err = err.Error()
			return ar, nil
		} else if err != nil {
			return ar, fmt.Errorf("check: simulated all_reduce: %w", err)
		}
	}
	per := (t - start).Seconds() / float64(s.cfg.AllReduceIters)
	ar.TimeUs = per * 1e6
	ar.AlgBW = float64(ar.Bytes) / per / 1e9
	ar.BusBW = ar.AlgBW * algo.BusFactor(algo.AllReduce, s.ranks)
	return ar, nil
}

// iterate runs one op from t and returns when it ends: on the fabric as
// it is at its start, again a retry timeout after it is lost (no route,
// or a flapping cable on its route went down under it). A message's
// bytes delivered before the loss stay delivered (RC resends from the
// first lost packet); an all-reduce starts over.
func (s *Sim) iterate(t des.Time, op opKey) (des.Time, error) {
	for range retryCount + 1 {
		op.down = s.downAt(t)
		e, err := s.eval(op)
		if err != nil {
			return t, err
		}
		if e.reach {
			lost, hit := s.nextDown(t, t+e.d, e.cross)
			if !hit {
				return t + e.d, nil
			}
			if op.src >= 0 {
				done := int64(float64(op.bytes) * float64(lost-t) / float64(e.d))
				op.bytes = max(op.bytes-done, 1)
			}
			t = lost
		}
		t += s.params.RetryTimeout
	}
	return t, errRetry
}

// downAt is the mask of the flapping cables down at t.
func (s *Sim) downAt(t des.Time) uint64 {
	var m uint64
	for i, f := range s.flaps {
		if t%f.Period >= f.Period/2 {
			m |= 1 << i
		}
	}
	return m
}

// nextDown is the first time in (from, to) a flapping cable of mask goes
// down.
func (s *Sim) nextDown(from, to des.Time, mask uint64) (des.Time, bool) {
	first, hit := des.Time(math.MaxInt64), false
	for i, f := range s.flaps {
		if mask&(1<<i) == 0 {
			continue
		}
		d := from - from%f.Period + f.Period/2
		if d <= from {
			d += f.Period
		}
		if d < to && d < first {
			first, hit = d, true
		}
	}
	return first, hit
}

// router is the routing with the flaps of mask down.
func (s *Sim) router(mask uint64) (*route.Router, error) {
	if r, ok := s.routers[mask]; ok {
		return r, nil
	}
	var down []topo.LinkID
	for i, f := range s.flaps {
		if mask&(1<<i) != 0 {
			down = append(down, f.Link)
		}
	}
	r, err := route.New(s.g, down...)
	if err != nil && !errors.Is(err, route.ErrUnreachable) {
		return nil, err
	}
	s.routers[mask] = r
	return r, nil
}

// eval is op's time and the flapping cables it crosses, or that it has
// no route, on the fabric of op.down; cached.
func (s *Sim) eval(op opKey) (eval, error) {
	if e, ok := s.evals[op]; ok {
		return e, nil
	}
	r, err := s.router(op.down)
	if err != nil {
		return eval{}, err
	}
	// The ways the op's data and acknowledgements go.
	var ends [][2]int
	if op.src < 0 {
		for i := range s.ranks {
			ends = append(ends, [2]int{i, (i + 1) % s.ranks})
		}
	} else {
		ends = [][2]int{{op.src, op.dst}}
	}
	e := eval{reach: true}
	for _, ab := range ends {
		for _, way := range [][2]int{ab, {ab[1], ab[0]}} {
			src, dst := s.nics[way[0]], s.nics[way[1]]
			if !r.Reachable(src, dst) {
				e.reach = false
				s.evals[op] = e
				return e, nil
			}
			if s.buf, err = r.Path(src, dst, route.PolicyDModK, 0, s.buf[:0]); err != nil {
				return eval{}, err
			}
			e.cross |= s.flapsOn(s.buf)
		}
	}
	fc := flow.Config{Graph: s.g, Router: r, Params: s.params, LocalNIC: true}
	if op.src < 0 {
		fc.Phases = []flow.Phase{{Schedule: s.ring, Groups: [][]int32{s.gpus}, Bytes: op.bytes, Channels: 1}}
	} else {
		fc.Phases = []flow.Phase{{Schedule: oneWay, Groups: [][]int32{{s.gpus[op.src], s.gpus[op.dst]}}, Bytes: op.bytes, Channels: 1}}
	}
	res, err := flow.Run(fc)
	if err != nil {
		return eval{}, fmt.Errorf("check: simulate: %w", err)
	}
	e.d = res.Time
	s.evals[op] = e
	return e, nil
}

// flapsOn is the mask of the flapping cables a path's ports lead over.
func (s *Sim) flapsOn(path []topo.PortID) uint64 {
	var m uint64
	for _, p := range path {
		l := s.g.Ports[p].Link
		for i, f := range s.flaps {
			if f.Link == l {
				m |= 1 << i
			}
		}
	}
	return m
}

// oneWay is a 2-rank schedule: rank 0 sends its whole buffer to rank 1.
var oneWay = &algo.Schedule{Ranks: 2, Slots: 1, NumSteps: 1, Steps: [][]algo.Step{
	{{Sends: []algo.Transfer{{Peer: 1, Len: 1}}}},
	{{Recvs: []algo.Transfer{{Peer: 0, Len: 1}}}},
}}

// hops is the number of cables on pair {a, b}'s route from a to b with
// every cable up.
func (s *Sim) hops(a, b int) (int, error) {
	r, err := s.router(0)
	if err != nil {
		return 0, err
	}
	if s.buf, err = r.Path(s.nics[a], s.nics[b], route.PolicyDModK, 0, s.buf[:0]); err != nil {
		return 0, fmt.Errorf("check: route %d->%d: %w", a, b, err)
	}
	return len(s.buf), nil
}

// cables is the set of cables pair {a, b}'s routes cross both ways on
// the fabric with every cable up.
func (s *Sim) cables(a, b int) (map[topo.LinkID]bool, error) {
	r, err := s.router(0)
	if err != nil {
		return nil, err
	}
	out := map[topo.LinkID]bool{}
	for _, way := range [][2]int{{a, b}, {b, a}} {
		if s.buf, err = r.Path(s.nics[way[0]], s.nics[way[1]], route.PolicyDModK, 0, s.buf[:0]); err != nil {
			return nil, err
		}
		for _, p := range s.buf {
			out[s.g.Ports[p].Link] = true
		}
	}
	return out, nil
}

// Locate names the cables that explain r's slow and broken pairs
// (r.Suspects): greedily, the cable the most unexplained slow pairs
// cross, fewer fast pairs breaking ties, as long as more slow pairs than
// fast ones cross it. A degraded host cable is its host's; a degraded
// switch cable is the one its slow pairs share.
func (s *Sim) Locate(r *Report) error {
	bad := map[[2]int]bool{}
	for _, l := range r.Slow {
		bad[[2]int{l.A, l.B}] = true
	}
	for _, p := range r.Broken {
		bad[[2]int{p.A, p.B}] = true
	}
	if len(bad) == 0 {
		return nil
	}
	slowOn := map[topo.LinkID][][2]int{}
	fastOn := map[topo.LinkID]int{}
	for a := range s.ranks {
		for b := a + 1; b < s.ranks; b++ {
			cs, err := s.cables(a, b)
			if err != nil {
				return err
			}
			for l := range cs {
				if bad[[2]int{a, b}] {
					slowOn[l] = append(slowOn[l], [2]int{a, b})
				} else {
					fastOn[l]++
				}
			}
		}
	}
	explained := map[[2]int]bool{}
	for len(explained) < len(bad) {
		best, bestNew := topo.NoLink, 0
		for l, pairs := range slowOn {
			fresh := 0
			for _, p := range pairs {
				if !explained[p] {
					fresh++
				}
			}
			if fresh == 0 || len(pairs) <= fastOn[l] {
				continue
			}
			if fresh > bestNew || fresh == bestNew && (fastOn[l] < fastOn[best] || fastOn[l] == fastOn[best] && l < best) {
				best, bestNew = l, fresh
			}
		}
		if best == topo.NoLink {
			break
		}
		for _, p := range slowOn[best] {
			explained[p] = true
		}
		r.Suspects = append(r.Suspects, Suspect{Cable: s.g.LinkName(best), Slow: len(slowOn[best]), Fast: fastOn[best]})
	}
	return nil
}
