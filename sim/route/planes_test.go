package route

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/ibex-rdma/ibex/sim/topo"
)

var planeTrees = []struct {
	name, yml string // yml takes the planes field, ", planes: P", or ""
	planes    int
	sources   int // 0: all pairs; else pairs from that many random sources
}{
	{"fattree2-k8", "kind: fattree\nfattree: {k: 8%s}\n", 2, 0},
	{"fattree3-k8", "kind: fattree\nfattree: {tiers: 3, k: 8%s}\n", 2, 0},
	{"fattree2-k8-3to1-2gpu-partial", "kind: fattree\nfattree: {k: 8, oversubscription: 3, gpus_per_host: 2, hosts: 11%s}\n", 3, 0},
	{"fattree3-k8-4gpu", "kind: fattree\nfattree: {tiers: 3, k: 8, gpus_per_host: 4%s}\n", 2, 48},
	{"superpod-1su", "kind: superpod\nrate: 200\nsuperpod: {sus: 1%s}\n", 2, 48},
	{"superpod-small-core", "kind: superpod\nsuperpod: {sus: 6, node_slots: 2, gpus_per_node: 2, switch_ports: 8, reserved_slots: 0%s}\n", 2, 0},
}

// TestPlanesAllPairs routes multi-plane graphs: New reports nothing
// unreachable on a healthy graph; every same-plane pair routes as the
// oracle says (minimal, loop-free, eligible hops) and never leaves its
// plane; no pair across planes routes (Reachable false, Path fails with
// ErrUnreachable, no eligible port anywhere); and a D-mod-k route in plane
// p is, hop for hop, the route of the same two GPUs in the single-plane
// graph: D-mod-k keys count within a plane.
func TestPlanesAllPairs(t *testing.T) {
	for _, tc := range planeTrees {
		t.Run(fmt.Sprintf("%s/%dplanes", tc.name, tc.planes), func(t *testing.T) {
			one := build(t, fmt.Sprintf(tc.yml, ""))
			g := build(t, fmt.Sprintf(tc.yml, fmt.Sprintf(", planes: %d", tc.planes)))
			r1 := mustNew(t, one)
			r := mustNew(t, g) // no cross-plane pair reported
			rnd := rng(t)
			sampled := tc.sources
			if raceEnabled && g.NumNICs > 64 {
				// Routing is one goroutine's lookups: the race detector has
				// nothing to check, and fattree3-k8's pairs took 2 s under
				// it. 16 sources here; .ci/run runs them all without it.
				sampled = 16
			}
			lengths := allPairs(t, r, true, sampled, rnd)
			t.Logf("%d NICs, path lengths %v", g.NumNICs, lengths)

			var buf, buf1 []topo.PortID
			var elig [64]topo.PortID
			sources := sampled
			if sources == 0 {
				sources = g.NumNICs
			}
			for k := range sources {
				s := k
				if sampled > 0 {
					s = rnd.IntN(g.NumNICs)
				}
				src := nic(g, s)
				plane := g.Nodes[src].Plane
				for d := range g.NumNICs {
					dst := nic(g, d)
					if s == d {
						continue
					}
					if g.Nodes[dst].Plane != plane {
						_, err := r.Path(src, dst, PolicyDModK, 0, buf[:0])
						if r.Reachable(src, dst) || !errors.Is(err, ErrUnreachable) || r.DModK(src, dst) != topo.NoPort {
							t.Fatalf("%s -> %s across planes: Reachable %v, Path error %v", g.NodeName(src), g.NodeName(dst), r.Reachable(src, dst), err)
						}
						leaf := leafOf(g, src)
						if e := r.Eligible(leaf, dst, elig[:0]); len(e) != 0 {
							t.Fatalf("%s -> %s across planes: eligible at %s: %v", g.NodeName(src), g.NodeName(dst), g.NodeName(leaf), names(g, e))
						}
						continue
					}
					var err error
					buf, err = r.Path(src, dst, PolicyDModK, 0, buf[:0])
					if err != nil {
						t.Fatal(err)
					}
					for _, p := range buf {
						if n := g.PeerNode(p); g.Nodes[n].Plane != plane {
							t.Fatalf("%s -> %s (plane %d) enters %s", g.NodeName(src), g.NodeName(dst), plane, g.NodeName(n))
						}
					}
					s1, d1 := singleNIC(one, g, src), singleNIC(one, g, dst)
					if s1 == d1 { // one GPU's NICs of two planes: not a pair in one
						continue
					}
					buf1, err = r1.Path(s1, d1, PolicyDModK, 0, buf1[:0])
					if err != nil {
						t.Fatal(err)
					}
					for i := range buf {
						if i >= len(buf1) || singlePort(one, g, buf[i]) != buf1[i] {
							t.Fatalf("%s -> %s: D-mod-k route %v; in the single-plane graph %v", g.NodeName(src), g.NodeName(dst), names(g, buf), names(one, buf1))
						}
					}
					if len(buf) != len(buf1) {
						t.Fatalf("%s -> %s: %d hops, %d in one plane", g.NodeName(src), g.NodeName(dst), len(buf), len(buf1))
					}
				}
			}
		})
	}
}

// singleNIC is the NIC of the same host and GPU in the single-plane graph.
func singleNIC(one, g *topo.Graph, id topo.NodeID) topo.NodeID {
	n := &g.Nodes[id]
	return one.NIC(int(n.Host), int(n.Rail))
}

// singlePort maps a port of g to the same port of the single-plane graph
// one: switches of plane p sit in g as the plane's copy of one's, in order.
func singlePort(one, g *topo.Graph, p topo.PortID) topo.PortID {
	m := g.Ports[p].Node
	var id topo.NodeID
	if g.Nodes[m].Kind == topo.KindNIC {
		id = singleNIC(one, g, m)
	} else {
		sw, sw1 := topo.NodeID(g.NumHosts+g.NumNICs), topo.NodeID(one.NumHosts+one.NumNICs)
		perPlane := topo.NodeID(len(one.Nodes)) - sw1
		id = sw1 + (m-sw)%perPlane
	}
	return one.Nodes[id].FirstPort + (p - g.Nodes[m].FirstPort)
}

// TestSameHost routes between the NICs of one host in a ToR fat tree of
// several GPUs per host: they share a leaf, so two links and no spine;
// NICs of hosts on other leaves are 4 links away (6 across pods).
func TestSameHost(t *testing.T) {
	for _, tc := range []struct {
		yml     string
		perLeaf int
	}{
		{"kind: fattree\nfattree: {k: 8, gpus_per_host: 2}\n", 2},
		{"kind: fattree\nfattree: {k: 8, gpus_per_host: 2, planes: 2}\n", 2},
		{"kind: fattree\nfattree: {tiers: 3, k: 8, gpus_per_host: 3, planes: 2}\n", 1},
		{"kind: fattree\nfattree: {k: 64, gpus_per_host: 8}\n", 4},
	} {
		g := build(t, tc.yml)
		r := mustNew(t, g)
		perPod := 4 * tc.perLeaf // k=8: 4 edges a pod
		for h := range g.NumHosts {
			for plane := range g.Planes {
				a := g.PlaneNIC(h, 0, plane)
				for _, o := range []int{h, (h + 1) % g.NumHosts, (h + g.NumHosts/2) % g.NumHosts} {
					for gpu := range g.GPUsPerHost {
						b := g.PlaneNIC(o, gpu, plane)
						if a == b {
							continue
						}
						want := 6
						switch {
						case o/tc.perLeaf == h/tc.perLeaf:
							want = 2
						case g.Tiers == 2 || o/perPod == h/perPod:
							want = 4
						}
						p, err := r.Path(a, b, PolicyDModK, 0, nil)
						if err != nil || len(p) != want {
							t.Fatalf("%s -> %s: %v (%v), want %d links", g.NodeName(a), g.NodeName(b), names(g, p), err, want)
						}
						if want == 2 && g.PeerNode(p[0]) != leafOf(g, a) {
							t.Fatalf("%s -> %s: by %s", g.NodeName(a), g.NodeName(b), names(g, p))
						}
					}
				}
			}
		}
	}
}

// TestPlanesFailures: failures in one plane leave the other alone. Random
// plane-0 switch links fail, one plane-0 NIC cable, and all uplinks of one
// plane-0 leaf: the error counts exactly the same-plane pairs the oracle
// finds cut (cross-plane pairs are not counted), its cut-off NICs are all
// of plane 0, and plane 1 routes every pair by the healthy D-mod-k route.
func TestPlanesFailures(t *testing.T) {
	g := build(t, "kind: fattree\nfattree: {tiers: 3, k: 8, planes: 2}\n")
	healthy := mustNew(t, g)
	rnd := rng(t)
	var failed []topo.LinkID
	for l := range g.Links {
		lk := &g.Links[l]
		if g.Nodes[g.Ports[lk.A].Node].Plane == 0 && lk.Tier != topo.LinkHostLeaf && rnd.Float64() < 0.15 {
			failed = append(failed, topo.LinkID(l))
		}
	}
	failed = append(failed, g.Ports[g.Nodes[g.PlaneNIC(2, 0, 0)].FirstPort].Link)
	cut := leafOf(g, g.PlaneNIC(9, 0, 0))
	failed = append(failed, upLinks(g, cut)...)
	r, err := New(g, failed...)
	var ue *UnreachableError
	if !errors.As(err, &ue) || r == nil {
		t.Fatalf("New: %v, want an *UnreachableError and a router", err)
	}
	t.Logf("%d of %d links failed: %v", len(failed), len(g.Links), err)
	wantContains(t, err.Error(), "of plane 0 (no up/down route out of the leaf)")
	for _, n := range ue.CutOff {
		if g.Nodes[n].Plane != 0 {
			t.Errorf("cut off: %s", g.NodeName(n))
		}
	}
	if !slices.Contains(ue.CutOff, g.PlaneNIC(9, 0, 0)) || !slices.Contains(ue.CutOff, g.PlaneNIC(2, 0, 0)) {
		t.Errorf("cut off %v: want host9's and host2's plane-0 NICs", ue.CutOff)
	}
	var none int64
	var buf, want []topo.PortID
	for s := range g.NumNICs {
		src := nic(g, s)
		dist := oracle(g, r.Dead, src, true)
		for d := range g.NumNICs {
			dst := nic(g, d)
			if s == d || g.Nodes[dst].Plane != g.Nodes[src].Plane {
				continue
			}
			buf = checkPath(t, r, src, dst, PolicyDModK, 0, dist[dst], buf)
			if dist[dst] < 0 {
				none++
			}
			if g.Nodes[src].Plane == 1 {
				want, _ = healthy.Path(src, dst, PolicyDModK, 0, want[:0])
				if !slices.Equal(buf, want) {
					t.Fatalf("plane 1: %s -> %s by %v, healthy %v", g.NodeName(src), g.NodeName(dst), names(g, buf), names(g, want))
				}
			}
		}
	}
	if none != ue.Pairs || none == 0 {
		t.Errorf("error counts %d unreachable pairs, the oracle %d", ue.Pairs, none)
	}
}

// TestPlanesRefused: New refuses a tree whose planes are mixed up.
func TestPlanesRefused(t *testing.T) {
	const spec = "kind: fattree\nfattree: {k: 4, planes: 2}\n"
	for _, c := range []struct {
		name string
		edit func(g *topo.Graph)
		want string
	}{
		// k=4: 8 hosts, 16 NICs, then per plane 4 leaves and 2 spines.
		{"cable across planes", func(g *topo.Graph) { g.Nodes[24+6+4].Plane = 0 }, "joins plane 1 to plane 0; planes are independent fabrics"},
		{"leaves out of plane order", func(g *topo.Graph) { g.Nodes[24].Plane = 1 }, "leaf1.p0: a leaf of plane 0 after leaves of plane 1"},
		{"plane out of range", func(g *topo.Graph) { g.Nodes[len(g.Nodes)-1].Plane = 2 }, "spine1.p2: plane 2 of a graph of 2"},
	} {
		g := build(t, spec)
		c.edit(g)
		_, err := New(g)
		if !errors.Is(err, ErrTopology) {
			t.Errorf("%s: %v, want ErrTopology", c.name, err)
			continue
		}
		wantContains(t, err.Error(), c.want)
	}
}

// BenchmarkNewPlanes times New on the multi-NIC and multi-plane trees:
// twice the planes should cost about twice the single-plane tree.
//
//	go test -run '^$' -bench NewPlanes -benchmem ./sim/route
func BenchmarkNewPlanes(b *testing.B) {
	for _, c := range []struct{ name, yml string }{
		{"fattree3-k64-2planes", "kind: fattree\nfattree: {tiers: 3, k: 64, planes: 2}\n"},
		{"fattree3-k64-8gpu", "kind: fattree\nfattree: {tiers: 3, k: 64, gpus_per_host: 8}\n"},
		{"superpod-64su-2planes", "kind: superpod\nsuperpod: {sus: 64, planes: 2}\n"},
	} {
		g := build(b, c.yml)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := New(g); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
