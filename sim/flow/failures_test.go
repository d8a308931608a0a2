package flow

import (
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/sim/des"
	"github.com/ibex-rdma/ibex/sim/fabric"
	"github.com/ibex-rdma/ibex/sim/topo"
)

func TestSwitchAndRandomFailures(t *testing.T) {
	g := superpod(t, 2)
	spine := topo.NodeID(len(g.Nodes) - 1)
	fs, err := SwitchFailure(g, spine, 5*des.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	n := &g.Nodes[spine]
	if len(fs) != int(n.NumPorts) {
		t.Errorf("%s: %d failures for %d cabled ports", g.NodeName(spine), len(fs), n.NumPorts)
	}
	if _, err := SwitchFailure(g, g.NIC(0, 0), 0); err == nil {
		t.Error("a NIC failed as a switch")
	}
	a, err := RandomFailures(g, 5, des.Millisecond, 7)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := RandomFailures(g, 5, des.Millisecond, 7)
	c, _ := RandomFailures(g, 5, des.Millisecond, 8)
	seen := map[topo.LinkID]bool{}
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("seed 7 drew %v then %v", a[i], b[i])
		}
		if seen[a[i].Link] || g.Links[a[i].Link].Tier == topo.LinkHostLeaf || a[i].At < 0 || a[i].At >= des.Millisecond {
			t.Errorf("failure %v: repeated, a NIC cable, or outside the window", a[i])
		}
		seen[a[i].Link] = true
		if i > 0 && a[i].At < a[i-1].At {
			t.Errorf("failures not in time order: %v", a)
		}
	}
	if a[0] == c[0] && a[1] == c[1] {
		t.Errorf("seeds 7 and 8 drew the same failures %v", a[:2])
	}
	if _, err := RandomFailures(g, 100000, des.Millisecond, 1); err == nil {
		t.Error("more failures than links: no error")
	}
}

// shift is a one-step schedule in which rank r sends one slot to rank
// r+d (mod n).
func shift(n, d int) *algo.Schedule {
	steps := make([][]algo.Step, n)
	for r := range steps {
		steps[r] = []algo.Step{{
			Sends: []algo.Transfer{{Peer: (r + d) % n, Len: 1}},
			Recvs: []algo.Transfer{{Peer: (r - d + n) % n, Len: 1}},
		}}
	}
	return &algo.Schedule{Ranks: n, Slots: 1, NumSteps: 1, Steps: steps}
}

// TestFailureHits: every GPU of one SU sends to its peer in the other SU,
// which fills every leaf-spine cable; the exchange is repeated, and a
// spine fails during the second. The iteration before is untouched, the
// one it hits and those after are slower, and adaptive routing loses no
// more than D-mod-k.
func TestFailureHits(t *testing.T) {
	g := superpod(t, 2)
	s := shift(512, 256)
	_ = algo.Ring
	run := func(r fabric.Routing, fails []fabric.Failure) *Result {
		res, err := Run(Config{Graph: g, Params: fabric.Params{Routing: r}, Phases: []Phase{{Schedule: s, Bytes: 256 << 20}},
			Iterations: 4, Failures: fails})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	slow := map[fabric.Routing]float64{}
	for _, r := range []fabric.Routing{fabric.RouteDModK, fabric.RouteAdaptive} {
		base := run(r, nil)
		if len(base.Iters) != 4 {
			t.Fatalf("%d iteration ends, want 4", len(base.Iters))
		}
		one := base.Iters[0]
		for i, e := range base.Iters {
			if e != des.Time(i+1)*one {
				t.Errorf("%v: iteration %d ends at %v, want %v (identical iterations)", r, i, e, des.Time(i+1)*one)
			}
		}
		spine := topo.NodeID(len(g.Nodes) - 1)
		fs, _ := SwitchFailure(g, spine, one+one/2)
		h := Compare(base, run(r, fs))
		t.Logf("%v: %v per iteration; spine %s fails in iteration 2: slowdown %.2f%%, iterations %+v", r, one, g.NodeName(spine), 100*h.Slowdown, h.Iters)
		if h.Iters[0].Hit() {
			t.Errorf("%v: iteration 1 (before the failure) hit: %+v", r, h.Iters[0])
		}
		if !h.Iters[1].Hit() || !h.Iters[3].Hit() || h.Slowdown <= 0 {
			t.Errorf("%v: the iterations from the failure on were not slower: %+v", r, h.Iters)
		}
		slow[r] = h.Slowdown
	}
	if slow[fabric.RouteAdaptive] > slow[fabric.RouteDModK]+1e-9 {
		t.Errorf("adaptive routing lost %.2f%%, D-mod-k %.2f%%", 100*slow[fabric.RouteAdaptive], 100*slow[fabric.RouteDModK])
	}
}

// runWithin runs cfg and fails the test if it has not returned within
// limit (the run's goroutine is then left spinning: the test binary
// still reports the failure).
func runWithin(t *testing.T, limit time.Duration, cfg Config) *Result {
	t.Helper()
	type out struct {
		res *Result
		err error
	}
	ch := make(chan out, 1)
	go func() {
		res, err := Run(cfg)
		ch <- out{res, err}
	}()
	select {
	case o := <-ch:
		if o.err != nil {
			t.Fatal(o.err)
		}
		return o.res
	case <-time.After(limit):
		t.Fatalf("run did not end within %v: the clock stopped short of a pending failure", limit)
		return nil
	}
}

// TestFailureRoundingNoHang: solveStep steps its clock t (float seconds)
// to the next failure by At - t - now, and applies a failure once now + t
// truncated to picoseconds reaches At. For some times the two disagree: a
// failure at 61 ps is 6.1e-11 s, and 6.1e-11 * 1e12 = 60.99999999999999
// truncates to 60 ps, so the failure never applied while its time step
// came out 0: Run looped forever. Here such failures land in the first
// step (now 0) and, as reported, in a ring all_reduce with random
// failures on a 2-SU SuperPOD (now > 0). Each run must end (within a
// minute, not hang) with its failures applied: the link marked failed or
// reuse resumed, and no faster than the same run without them.
func TestFailureRoundingNoHang(t *testing.T) {
	g := superpod(t, 1)
	// The first failure times whose float seconds, times 1e12, truncate
	// below them (61, 122, 123, ... ps).
	var ats []des.Time
	for at := des.Time(1); len(ats) < 4; at++ {
		if des.Time(at.Seconds()*float64(des.Second)) < at {
			ats = append(ats, at)
		}
	}
	if ats[0] != 61 {
		t.Fatalf("first failure time that truncates short: %v, want 61ps", ats[0])
	}
	// 16 GPUs on two hosts, each sending to a GPU of another rail on the
	// other host from its own NIC, through a spine: one step of a few
	// microseconds. The failure is of a leaf-spine cable it uses.
	cfg := Config{Graph: g, Phases: []Phase{{Schedule: shift(16, 9), Bytes: 1 << 20}}, LocalNIC: true}
	base := runWithin(t, time.Minute, cfg)
	var l topo.LinkID = topo.NoLink
	for _, ps := range base.Ports {
		if ps.Tier == topo.LinkLeafSpine {
			l = g.Ports[ps.Port].Link
			break
		}
	}
	if l == topo.NoLink {
		t.Fatal("no leaf-spine traffic")
	}
	for _, at := range ats {
		cfg.Failures = []fabric.Failure{{At: at, Link: l}}
		res := runWithin(t, time.Minute, cfg)
		t.Logf("%s fails at %v: %v, without the failure %v", g.LinkName(l), at, res.Time, base.Time)
		if res.Time < base.Time {
			t.Errorf("failure at %v: %v, faster than %v without it", at, res.Time, base.Time)
		}
		if !failed(g, res, l) {
			t.Errorf("failure at %v: %s not marked failed", at, g.LinkName(l))
		}
	}

	// The report: 2 SUs, 5 failures in 50 µs (seed 4), ring all_reduce of
	// 64 MiB over 64 ranks: in the step begun at 31.358180 µs, t reached
	// 1606287.9999999 ps, 1 ps short of the failure at 32.964468 µs.
	g2 := superpod(t, 2)
	fs, err := RandomFailures(g2, 5, 50*des.Microsecond, 4)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := algo.Generate(algo.AllReduce, algo.Ring, 64, 0, 1)
	cfg = Config{Graph: g2, Phases: []Phase{{Schedule: s, Bytes: 64 << 20}}}
	base = runWithin(t, time.Minute, cfg)
	cfg.Failures = fs
	res := runWithin(t, time.Minute, cfg)
	t.Logf("ring all_reduce 64 ranks on 2 SUs: %v, with failures %v: %v", base.Time, fs, res.Time)
	if res.Time < base.Time {
		t.Errorf("failures made it faster: %v < %v", res.Time, base.Time)
	}
	// Steps reuse solutions only once no failure is pending: all applied.
	if res.Reused == 0 {
		t.Errorf("no step reused after the last failure at %v: failures still pending at the end (%d steps)", fs[len(fs)-1].At, res.Steps)
	}
}

// failed says whether res marks link l failed (false if l carried nothing).
func failed(g *topo.Graph, res *Result, l topo.LinkID) bool {
	for _, ps := range res.Ports {
		if g.Ports[ps.Port].Link == l {
			return ps.Failed
		}
	}
	return false
}
