package flow

import (
	"testing"

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
