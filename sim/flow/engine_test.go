package flow

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/sim/des"
	"github.com/ibex-rdma/ibex/sim/fabric"
	"github.com/ibex-rdma/ibex/sim/topo"
)

// TestReuseIdentical: reusing the solution of a repeated step gives the
// same result, to the picosecond and the byte, as solving every step.
func TestReuseIdentical(t *testing.T) {
	g := superpod(t, 1)
	cases := []Config{}
	for _, c := range []struct {
		c algo.Collective
		a algo.Algorithm
		n int
	}{
		{algo.AllReduce, algo.Ring, 64}, {algo.AllGather, algo.Ring, 24}, {algo.AllReduce, algo.RecHalvingDoubling, 32},
		{algo.AllReduce, algo.Tree, 48}, {algo.ReduceScatter, algo.Ring, 40},
	} {
		s, _ := algo.Generate(c.c, c.a, c.n, 0, 2)
		cases = append(cases, Config{Graph: g, Phases: []Phase{{Schedule: s, Bytes: 48 << 20}}})
	}
	for _, inter := range []algo.Algorithm{algo.Ring, algo.Tree} {
		ph, err := Hierarchical(inter, 8, 8, 96<<20, 4)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, Config{Graph: g, Phases: ph, Name: "hier", Collective: algo.AllReduce, Ranks: 64, Bytes: 96 << 20})
	}
	for _, cfg := range cases {
		a, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.NoReuse = true
		b, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %v, %d of %d steps reused, %d solves (%d without reuse)", a.Name, a.Time, a.Reused, a.Steps, a.Solves, b.Solves)
		if a.Time != b.Time || len(a.Ports) != len(b.Ports) {
			t.Fatalf("%s: reuse %v (%d ports), solving every step %v (%d ports)", a.Name, a.Time, len(a.Ports), b.Time, len(b.Ports))
		}
		if b.Reused != 0 {
			t.Errorf("%s: NoReuse reused %d steps", a.Name, b.Reused)
		}
		for i := range a.Ports {
			if a.Ports[i].Port != b.Ports[i].Port || math.Abs(float64(a.Ports[i].Bytes-b.Ports[i].Bytes)) > 1 {
				t.Fatalf("%s: port %d: %+v with reuse, %+v without", a.Name, i, a.Ports[i], b.Ports[i])
			}
		}
	}
}

// TestHierarchical: on one host the hierarchical all-reduce is NVLink
// only; across hosts, each rail's NICs carry 2(N-1)/N of bytes/gpn in the
// ring case, and the ring version's time is alpha-beta's.
func TestHierarchical(t *testing.T) {
	g := superpod(t, 1)
	const hosts, gpn, S = 4, 8, 256 << 20
	ph, err := Hierarchical(algo.Ring, hosts, gpn, S, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(ph) != 3 {
		t.Fatalf("%d phases, want 3", len(ph))
	}
	res, err := Run(Config{Graph: g, Phases: ph, Name: "hier-ring", Collective: algo.AllReduce, Ranks: hosts * gpn, Bytes: S})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := fabric.CheckParams(fabric.Params{})
	var nicPayload float64
	for _, ps := range res.Ports {
		if ps.Tier == topo.LinkHostLeaf && g.Nodes[g.Ports[ps.Port].Node].Kind == topo.KindNIC {
			nicPayload += float64(ps.Bytes)
		}
	}
	// Every NIC sends 2(N-1)/N × S/gpn payload, plus headers.
	want := float64(hosts*gpn) * 2 * float64(hosts-1) / hosts * S / gpn
	if nicPayload < want || nicPayload > want*1.01 {
		t.Errorf("NICs sent %.0f bytes, want %.0f plus headers (< 1%%)", nicPayload, want)
	}
	t.Logf("hierarchical ring all_reduce 4x8, 256 MiB: %v, busbw %.1f GB/s", res.Time, res.BusBW/1e9)
	_ = p
	one, err := Hierarchical(algo.Ring, 1, gpn, S, 1)
	if err != nil || len(one) != 2 {
		t.Fatalf("one host: %d phases, %v; want 2 (no inter-host phase)", len(one), err)
	}
}

// TestOrderIndependent: the max-min solution does not depend on the order
// the flows are given in.
func TestOrderIndependent(t *testing.T) {
	var f, r Flows
	paths := [][]int32{{0, 3, 5}, {1, 3, 6}, {2, 4, 5}, {0, 4, 6}, {1, 5}, {2, 6}, {3}, {0, 1, 2}}
	for _, p := range paths {
		f.Add(p...)
	}
	for i := len(paths) - 1; i >= 0; i-- {
		r.Add(paths[i]...)
	}
	capacity := []float64{10, 7, 13, 5, 9, 8, 11}
	a, b := make([]float64, len(paths)), make([]float64, len(paths))
	var m MaxMin
	m.Solve(capacity, &f, a)
	m.Solve(capacity, &r, b)
	for i := range paths {
		if math.Abs(a[i]-b[len(paths)-1-i]) > 1e-12*a[i] {
			t.Errorf("flow %v: %v in one order, %v in the other", paths[i], a[i], b[len(paths)-1-i])
		}
	}
}

func TestFailureFlow(t *testing.T) {
	g := superpod(t, 2)
	ph := Phase{Bytes: 64 << 20}
	ranks, cut := 512, 3 // every GPU of both SUs; host 3's rail-0 cable fails below
	if raceEnabled {
		// The engine is one goroutine: the race detector has nothing to
		// check, and 512 ranks took 11 s under it. A ring over a host of
		// each SU crosses the spines too; .ci/run runs 512 without it.
		var gpus []int32
		for _, h := range []int32{0, 32} {
			for i := range int32(8) {
				gpus = append(gpus, 8*h+i)
			}
		}
		ph.Groups, ranks, cut = [][]int32{gpus}, len(gpus), 32
	}
	s, _ := algo.Generate(algo.AllReduce, algo.Ring, ranks, 0, 1)
	ph.Schedule = s
	base, err := Run(Config{Graph: g, Phases: []Phase{ph}})
	if err != nil {
		t.Fatal(err)
	}
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
	hit, err := Run(Config{Graph: g, Phases: []Phase{ph},
		Failures: []fabric.Failure{{At: base.Time / 3, Link: l}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ring all_reduce %d GPUs: %v, with %s failing at %v: %v", ranks, base.Time, g.LinkName(l), base.Time/3, hit.Time)
	if hit.Time < base.Time {
		t.Errorf("failure made it faster: %v < %v", hit.Time, base.Time)
	}
	for _, ps := range hit.Ports {
		if g.Ports[ps.Port].Link == l && !ps.Failed {
			t.Errorf("%s carried traffic but is not marked failed", ps.Name)
		}
	}
	// A NIC's only cable fails: its rank cannot be reached.
	nicLink := g.Ports[g.Nodes[g.NIC(cut, 0)].FirstPort].Link
	_, err = Run(Config{Graph: g, Phases: []Phase{ph}, Failures: []fabric.Failure{{At: des.Microsecond, Link: nicLink}}})
	if err == nil || !strings.Contains(err.Error(), "no route") {
		t.Errorf("NIC cut off: %v, want a no-route error", err)
	}
}

func TestFlowConfigErrors(t *testing.T) {
	g := superpod(t, 1)
	s, _ := algo.Generate(algo.AllReduce, algo.Ring, 8, 0, 1)
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Phases: []Phase{{Schedule: s}}}, "no topology"},
		{Config{Graph: g}, "no phases"},
		{Config{Graph: g, Phases: []Phase{{}}}, "no schedule"},
		{Config{Graph: g, Phases: []Phase{{Schedule: s, Groups: [][]int32{{0, 1}}}}}, "2 GPUs given for 8 ranks"},
		{Config{Graph: g, Phases: []Phase{{Schedule: s}}, Failures: []fabric.Failure{{Link: 99999}}}, "failure of link 99999"},
		{Config{Graph: g, Phases: []Phase{{Schedule: s}}, Params: fabric.Params{VLs: 9}}, "VLs 9"},
	} {
		_, err := Run(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error containing %q", c.cfg, err, c.want)
		}
		if err != nil && strings.Contains(c.want, "topology") && !errors.Is(err, ErrConfig) {
			t.Errorf("%v: does not wrap ErrConfig", err)
		}
	}
}

// TestEventOrderIndependent: the same phases with their groups listed in
// the opposite order (so every step's flows are added, and end at equal
// times, in the opposite order) give the same time and the same bytes on
// every port.
func TestEventOrderIndependent(t *testing.T) {
	g := superpod(t, 1)
	for _, inter := range []algo.Algorithm{algo.Ring, algo.Tree} {
		ph, err := Hierarchical(inter, 8, 8, 128<<20, 4)
		if err != nil {
			t.Fatal(err)
		}
		rev := make([]Phase, len(ph))
		for i, p := range ph {
			rev[i] = p
			rev[i].Groups = make([][]int32, len(p.Groups))
			for k := range p.Groups {
				rev[i].Groups[k] = p.Groups[len(p.Groups)-1-k]
			}
		}
		a, err := Run(Config{Graph: g, Phases: ph, Collective: algo.AllReduce, Ranks: 64, Bytes: 128 << 20})
		if err != nil {
			t.Fatal(err)
		}
		b, err := Run(Config{Graph: g, Phases: rev, Collective: algo.AllReduce, Ranks: 64, Bytes: 128 << 20})
		if err != nil {
			t.Fatal(err)
		}
		if a.Time != b.Time || len(a.Ports) != len(b.Ports) {
			t.Fatalf("%v: %v in one order, %v in the other", inter, a.Time, b.Time)
		}
		bytes := map[topo.PortID]int64{}
		for _, p := range a.Ports {
			bytes[p.Port] = p.Bytes
		}
		for _, p := range b.Ports {
			if d := bytes[p.Port] - p.Bytes; d > 1 || d < -1 {
				t.Errorf("%v: %s carries %d bytes in one order, %d in the other", inter, p.Name, bytes[p.Port], p.Bytes)
			}
		}
		t.Logf("hierarchical %v, 64 GPUs: %v either way", inter, a.Time)
	}
}
