package route

import (
	"fmt"
	"testing"

	"github.com/ibex-rdma/ibex/sim/topo"
)

var trees = []struct {
	name, yml string
	sources   int // 0: all pairs; else pairs from that many random sources
}{
	{"fattree2-k4", "kind: fattree\nfattree: {k: 4}\n", 0},
	{"fattree2-k8", "kind: fattree\nfattree: {k: 8}\n", 0},
	{"fattree2-k16", "kind: fattree\nfattree: {k: 16}\n", 0},
	{"fattree3-k4", "kind: fattree\nfattree: {tiers: 3, k: 4}\n", 0},
	{"fattree3-k8", "kind: fattree\nfattree: {tiers: 3, k: 8}\n", 0},
	{"fattree3-k16", "kind: fattree\nfattree: {tiers: 3, k: 16}\n", 96},
	{"fattree2-k8-partial", "kind: fattree\nfattree: {k: 8, hosts: 27}\n", 0},
	{"fattree3-k8-partial", "kind: fattree\nfattree: {tiers: 3, k: 8, hosts: 70}\n", 0},
	{"fattree2-k8-3to1", "kind: fattree\nfattree: {k: 8, oversubscription: 3}\n", 0},
	{"fattree3-k16-3to1", "kind: fattree\nfattree: {tiers: 3, k: 16, oversubscription: 3}\n", 96},
	{"fattree2-k10-2to1", "kind: fattree\nfattree: {k: 10, oversubscription: 2}\n", 0},
	{"superpod-1su", "kind: superpod\nsuperpod: {sus: 1}\n", 0},
	{"superpod-4su", "kind: superpod\nsuperpod: {sus: 4}\n", 64},
	{"superpod-16su", "kind: superpod\nsuperpod: {sus: 16}\n", 48},
	{"superpod-small-core", "kind: superpod\nsuperpod: {sus: 6, node_slots: 2, gpus_per_node: 2, switch_ports: 8, reserved_slots: 0}\n", 0},
}

// TestTreesAllPairs routes every pair (or those from a seeded sample of
// sources) with D-mod-k and ECMP and checks each route against an
// independent up/down BFS: loop-free, eligible hops, ending at the
// destination, of minimal length; and that minimal is what the tree
// promises: 2 links under one leaf, 4 through a spine the two leaves
// share, 6 through a core.
func TestTreesAllPairs(t *testing.T) {
	t.Parallel() // one goroutine's routing on its own graph, like TestK64, TestTreesAllPairs, TestRandomFailures, TestFailOneLink: two at a time use both cores
	for _, tc := range trees {
		t.Run(tc.name, func(t *testing.T) {
			g := build(t, tc.yml)
			r := mustNew(t, g)
			rnd := rng(t)
			sources := tc.sources
			if testing.Short() && sources == 0 && g.NumNICs > 64 {
				sources = 16
			}
			if raceEnabled && g.NumNICs > 64 {
				// Routing is one goroutine's lookups: the race detector has
				// nothing to check, and the pairs took 14 s under it. 16
				// sources still reach every tier; .ci/run runs them all
				// without it.
				sources = 16
			}
			lengths := allPairs(t, r, true, sources, rnd)
			t.Logf("%d NICs, path lengths %v", g.NumNICs, lengths)
			for range 2000 {
				s, d := nic(g, rnd.IntN(g.NumNICs)), nic(g, rnd.IntN(g.NumNICs))
				if s == d {
					continue
				}
				want := 6
				switch ls, ld := leafOf(g, s), leafOf(g, d); {
				case ls == ld:
					want = 2
				case shareParent(g, ls, ld):
					want = 4
				}
				if p, err := r.Path(s, d, PolicyDModK, 0, nil); err != nil || len(p) != want {
					t.Fatalf("%s -> %s: %v (%v), want %d links", g.NodeName(s), g.NodeName(d), names(g, p), err, want)
				}
			}
			if g.Tiers == 3 && lengths[6] == 0 || lengths[4] == 0 {
				t.Errorf("lengths %v: the sample missed a tier", lengths)
			}
		})
	}
}

// upPorts returns a switch's cabled ports to the tier above, in port order.
func upPorts(g *topo.Graph, sw topo.NodeID) []topo.PortID {
	n := &g.Nodes[sw]
	var ups []topo.PortID
	for p := n.FirstPort; p < n.FirstPort+topo.PortID(n.NumPorts); p++ {
		if m := g.PeerNode(p); m >= 0 && g.Nodes[m].Kind == topo.KindSwitch && g.Nodes[m].Tier > n.Tier {
			ups = append(ups, p)
		}
	}
	return ups
}

// TestDModKBalance: on a full 2-tier tree each leaf deals the NICs not
// under it evenly over its uplinks, and all-to-all traffic puts the same
// number of routes on every leaf-spine link in each direction.
func TestDModKBalance(t *testing.T) {
	for _, k := range []int{4, 8, 16} {
		t.Run(fmt.Sprint("k", k), func(t *testing.T) {
			g := build(t, fmt.Sprintf("kind: fattree\nfattree: {k: %d}\n", k))
			r := mustNew(t, g)
			for sw := range g.Nodes {
				if g.Nodes[sw].Kind != topo.KindSwitch || g.Nodes[sw].Tier != topo.TierLeaf {
					continue
				}
				count := map[topo.PortID]int{}
				for _, p := range upPorts(g, topo.NodeID(sw)) {
					count[p] = 0
				}
				for d := range g.NumNICs {
					if leafOf(g, nic(g, d)) == topo.NodeID(sw) {
						continue
					}
					p := r.DModK(topo.NodeID(sw), nic(g, d))
					if _, ok := count[p]; !ok {
						t.Fatalf("%s -> %s: DModK chose %s, not an uplink", g.NodeName(topo.NodeID(sw)), g.NodeName(nic(g, d)), g.PortName(p))
					}
					count[p]++
				}
				lo, hi := g.NumNICs, 0
				for _, c := range count {
					lo, hi = min(lo, c), max(hi, c)
				}
				if hi-lo > 1 {
					t.Errorf("%s: destinations per uplink %d..%d: %v", g.NodeName(topo.NodeID(sw)), lo, hi, count)
				}
			}

			// All to all: routes per (link, direction), by the port they leave.
			load := allToAllLoad(t, g, r)
			want := -1
			for l := range g.Links {
				lk := &g.Links[l]
				if lk.Tier != topo.LinkLeafSpine {
					continue
				}
				for _, p := range []topo.PortID{lk.A, lk.B} {
					if want < 0 {
						want = load[p]
					}
					if load[p] != want {
						t.Errorf("%s leaving %s: %d routes, others %d", g.LinkName(topo.LinkID(l)), g.PortName(p), load[p], want)
					}
				}
			}
			// k/2 sources under a leaf, each to the k²/2 - k/2 NICs
			// elsewhere, spread over k/2 uplinks.
			if w := (k / 2) * (k*k/2 - k/2) / (k / 2); want != w {
				t.Errorf("%d routes per leaf-spine link direction, want %d", want, w)
			}
		})
	}
}

// TestDModKShift: D-mod-k on a full fat tree is congestion-free for shift
// permutations (NIC i sends to i+s): no link carries two flows in the same
// direction, for every shift.
func TestDModKShift(t *testing.T) {
	for _, tc := range []struct {
		name, yml string
	}{
		{"fattree2-k4", "kind: fattree\nfattree: {k: 4}\n"},
		{"fattree2-k8", "kind: fattree\nfattree: {k: 8}\n"},
		{"fattree2-k16", "kind: fattree\nfattree: {k: 16}\n"},
		{"fattree3-k4", "kind: fattree\nfattree: {tiers: 3, k: 4}\n"},
		{"fattree3-k8", "kind: fattree\nfattree: {tiers: 3, k: 8}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := build(t, tc.yml)
			r := mustNew(t, g)
			n := g.NumNICs
			used := make([]int, len(g.Ports))
			var buf []topo.PortID
			for s := 1; s < n; s++ {
				clear(used)
				for i := range n {
					src, dst := nic(g, i), nic(g, (i+s)%n)
					path, err := r.Path(src, dst, PolicyDModK, 0, buf[:0])
					if err != nil {
						t.Fatal(err)
					}
					for _, p := range path {
						if used[p]++; used[p] > 1 {
							t.Fatalf("shift %d: %s carries two flows (the second %s -> %s)", s, g.PortName(p), g.NodeName(src), g.NodeName(dst))
						}
					}
					buf = path
				}
			}
		})
	}
}

// TestDModKSuperPODSpread: in a SuperPOD, parallel cables (8 from each
// leaf to each of 1 SU's 4 spines) are ports of one group; D-mod-k spreads
// all-to-all routes evenly over every leaf-spine cable, both directions.
func TestDModKSuperPODSpread(t *testing.T) {
	g := build(t, "kind: superpod\nsuperpod: {sus: 1, reserved_slots: 0}\n")
	r := mustNew(t, g)
	load := allToAllLoad(t, g, r)
	lo, hi := len(g.Ports)*g.NumNICs, 0
	for l := range g.Links {
		if lk := &g.Links[l]; lk.Tier == topo.LinkLeafSpine {
			for _, p := range []topo.PortID{lk.A, lk.B} {
				lo, hi = min(lo, load[p]), max(hi, load[p])
			}
		}
	}
	if lo != hi {
		t.Errorf("routes per leaf-spine cable direction %d..%d, want all equal", lo, hi)
	}
}

// TestECMP: a flow keeps its path; a pair's QPs spread over the spines
// (and cores).
func TestECMP(t *testing.T) {
	for _, tc := range []struct {
		name, yml string
		tops      int // distinct top-tier switches the QPs should reach
	}{
		{"fattree2-k8", "kind: fattree\nfattree: {k: 8}\n", 4},
		{"fattree3-k8", "kind: fattree\nfattree: {tiers: 3, k: 8}\n", 16},
		{"superpod-1su", "kind: superpod\nsuperpod: {sus: 1}\n", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := build(t, tc.yml)
			r := mustNew(t, g)
			src, dst := nic(g, 0), nic(g, g.NumNICs-1)
			const qps = 1024
			top := map[topo.NodeID]int{}
			for qp := range uint32(qps) {
				h := FlowHash(src, dst, qp)
				p1, err := r.Path(src, dst, PolicyECMP, h, nil)
				if err != nil {
					t.Fatal(err)
				}
				p2, _ := r.Path(src, dst, PolicyECMP, h, nil)
				if fmt.Sprint(p1) != fmt.Sprint(p2) {
					t.Fatalf("qp %d: two paths for one flow: %v, %v", qp, names(g, p1), names(g, p2))
				}
				top[g.PeerNode(p1[len(p1)/2-1])]++ // the switch where the path turns
			}
			if len(top) != tc.tops {
				t.Fatalf("%d QPs reached %d top switches, want %d: %v", qps, len(top), tc.tops, top)
			}
			for sw, c := range top {
				if mean := qps / tc.tops; c < mean/2 || c > mean*3/2 {
					t.Errorf("%s: %d of %d QPs, mean %d", g.NodeName(sw), c, qps, mean)
				}
			}
			if FlowHash(src, dst, 1) == FlowHash(dst, src, 1) || FlowHash(src, dst, 1) == FlowHash(src, dst, 2) {
				t.Errorf("FlowHash ignores an input")
			}
		})
	}
}

// TestAdaptive: the least-loaded eligible port wins; ties go to the first
// in Eligible's order.
func TestAdaptive(t *testing.T) {
	g := build(t, "kind: fattree\nfattree: {k: 8}\n")
	r := mustNew(t, g)
	leaf := leafOf(g, nic(g, 0))
	d := nic(g, g.NumNICs-1)
	elig := r.Eligible(leaf, d, nil)
	if len(elig) != 4 {
		t.Fatalf("eligible %v, want the 4 uplinks", names(g, elig))
	}
	load := map[topo.PortID]int64{}
	f := func(p topo.PortID) int64 { return load[p] }
	if p := r.Adaptive(leaf, d, f); p != elig[0] {
		t.Errorf("all idle: %s, want the first, %s", g.PortName(p), g.PortName(elig[0]))
	}
	load[elig[0]], load[elig[1]], load[elig[2]], load[elig[3]] = 5, 3, 7, 3
	if p := r.Adaptive(leaf, d, f); p != elig[1] {
		t.Errorf("loads 5,3,7,3: %s, want %s", g.PortName(p), g.PortName(elig[1]))
	}
	load[elig[3]] = 1
	if p := r.Adaptive(leaf, d, f); p != elig[3] {
		t.Errorf("loads 5,3,7,1: %s, want %s", g.PortName(p), g.PortName(elig[3]))
	}
	// Under the destination's leaf there is one way down.
	dl := leafOf(g, d)
	if p := r.Adaptive(dl, d, f); p != g.Ports[g.Nodes[d].FirstPort].Peer {
		t.Errorf("at %s: %s, want the port to %s", g.NodeName(dl), g.PortName(p), g.NodeName(d))
	}
	if p := r.Adaptive(leaf, nic(g, 0), f); p != g.Ports[g.Nodes[nic(g, 0)].FirstPort].Peer {
		t.Errorf("same leaf: %s", g.PortName(p))
	}
}

// TestNoAllocs: the per-packet calls allocate nothing.
func TestNoAllocs(t *testing.T) {
	g := build(t, "kind: fattree\nfattree: {tiers: 3, k: 8}\n")
	r := mustNew(t, g)
	leaf := leafOf(g, nic(g, 0))
	d := nic(g, g.NumNICs-1)
	buf := make([]topo.PortID, 0, 64)
	load := func(p topo.PortID) int64 { return int64(p % 3) }
	var sink topo.PortID
	n := testing.AllocsPerRun(100, func() {
		sink += r.DModK(leaf, d)
		sink += r.ECMP(leaf, d, 12345)
		sink += r.Adaptive(leaf, d, load)
		sink += topo.PortID(len(r.Eligible(leaf, d, buf)))
		sink += r.DModK(nic(g, 0), d)
	})
	if n != 0 {
		t.Errorf("%v allocations per round", n)
	}
	_ = sink
}

// TestNotRoutable: calls with nodes that are not a switch and a NIC, and
// bad link IDs.
func TestNotRoutable(t *testing.T) {
	g := build(t, "kind: fattree\nfattree: {k: 4}\n")
	r := mustNew(t, g)
	sw := leafOf(g, nic(g, 0))
	for _, c := range []struct{ at, d topo.NodeID }{
		{sw, 0},                                // a host as destination
		{sw, sw},                               // a switch as destination
		{0, nic(g, 1)},                         // from a host
		{nic(g, 1), nic(g, 1)},                 // to itself
		{topo.NodeID(len(g.Nodes)), nic(g, 1)}, // out of range
		{sw, topo.NodeID(len(g.Nodes))},
	} {
		if p := r.DModK(c.at, c.d); p != topo.NoPort {
			t.Errorf("DModK(%d, %d) = %d, want NoPort", c.at, c.d, p)
		}
	}
	if _, err := New(g, topo.LinkID(len(g.Links))); err == nil {
		t.Error("New with a link ID out of range: no error")
	}
	if _, err := r.Path(sw, nic(g, 1), PolicyDModK, 0, nil); err == nil {
		t.Error("Path from a switch: no error")
	}
}

// allToAllLoad routes every ordered NIC pair with D-mod-k and counts the
// routes leaving each port.
func allToAllLoad(t *testing.T, g *topo.Graph, r *Router) []int {
	t.Helper()
	load := make([]int, len(g.Ports))
	var buf []topo.PortID
	for s := range g.NumNICs {
		for d := range g.NumNICs {
			if s == d {
				continue
			}
			path, err := r.Path(nic(g, s), nic(g, d), PolicyDModK, 0, buf[:0])
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range path {
				load[p]++
			}
			buf = path
		}
	}
	return load
}
