package route

import (
	"math/rand/v2"
	"testing"

	"github.com/ibex-rdma/ibex/sim/topo"
)

const k64 = "kind: fattree\nfattree: {tiers: 3, k: 64}\n"

// TestK64 routes a sample of the largest 3-tier Quantum-2 tree (65,536
// NICs, 5,120 switches) against the oracle.
func TestK64(t *testing.T) {
	t.Parallel() // one goroutine's routing on its own graph, like TestK64, TestTreesAllPairs, TestRandomFailures, TestFailOneLink: two at a time use both cores
	if testing.Short() {
		t.Skip("65,536 NICs")
	}
	g := build(t, k64)
	r := mustNew(t, g)
	t.Logf("%d segments, %d pooled ports", len(r.segs), len(r.pool))
	sources := 2
	if raceEnabled {
		// Routing is one goroutine's lookups: under the race detector one
		// source's 65,535 pairs; .ci/run runs two without it.
		sources = 1
	}
	lengths := allPairs(t, r, true, sources, rng(t))
	t.Logf("path lengths %v", lengths)
}

// hops returns n random (switch on the way, destination) pairs of the
// tree: the lookups a packet engine makes.
func hops(b *testing.B, r *Router, n int) [][2]topo.NodeID {
	g := r.Graph()
	rnd := rand.New(rand.NewPCG(1, 2))
	var out [][2]topo.NodeID
	for len(out) < n {
		s, d := nic(g, rnd.IntN(g.NumNICs)), nic(g, rnd.IntN(g.NumNICs))
		path, err := r.Path(s, d, PolicyECMP, rnd.Uint64(), nil)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range path {
			out = append(out, [2]topo.NodeID{g.Ports[p].Node, d})
		}
	}
	return out[:n]
}

// BenchmarkK64 times the per-hop choices on the 3-tier k=64 tree, at the
// switches and NICs of random routes.
//
//	go test -run '^$' -bench K64 -benchmem ./sim/route
func BenchmarkK64(b *testing.B) {
	g := build(b, k64)
	r := mustNew(b, g)
	hs := hops(b, r, 1<<16)
	b.Run("DModK", func(b *testing.B) {
		b.ReportAllocs()
		var sink topo.PortID
		i := 0
		for b.Loop() {
			h := hs[i&(len(hs)-1)]
			sink += r.DModK(h[0], h[1])
			i++
		}
		_ = sink
	})
	b.Run("ECMP", func(b *testing.B) {
		b.ReportAllocs()
		var sink topo.PortID
		i := 0
		for b.Loop() {
			h := hs[i&(len(hs)-1)]
			sink += r.ECMP(h[0], h[1], uint64(i))
			i++
		}
		_ = sink
	})
	b.Run("Adaptive", func(b *testing.B) {
		b.ReportAllocs()
		queued := make([]int64, len(g.Ports))
		load := func(p topo.PortID) int64 { return queued[p] }
		var sink topo.PortID
		i := 0
		for b.Loop() {
			h := hs[i&(len(hs)-1)]
			p := r.Adaptive(h[0], h[1], load)
			queued[p]++
			sink += p
			i++
		}
		_ = sink
	})
	b.Run("New", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := New(g); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(r.segs)), "segments")
		b.ReportMetric(float64(len(r.pool)), "pooled-ports")
	})
	b.Run("New-1failed", func(b *testing.B) {
		b.ReportAllocs()
		l := linksOf(g, topo.LinkSpineCore)[7]
		for b.Loop() {
			if _, err := New(g, l); err != nil {
				b.Fatal(err)
			}
		}
	})
}
