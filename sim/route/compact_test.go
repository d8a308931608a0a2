package route

import (
	"testing"

	"github.com/ibex-rdma/ibex/sim/topo"
)

// TestCompactTrees: trees built compact (parallel cables from leaves to
// spines, or from aggregation switches to cores) route every pair along
// a shortest up/down path, under D-mod-k and ECMP, and D-mod-k uses every
// parallel cable.
func TestCompactTrees(t *testing.T) {
	rnd := rng(t)
	for _, yml := range []string{
		"kind: fattree\nfattree: {tiers: 2, k: 16, hosts: 24, gpus_per_host: 2, compact: true}",
		"kind: fattree\nfattree: {tiers: 3, k: 8, hosts: 12, gpus_per_host: 2, compact: true}",
		"kind: fattree\nfattree: {tiers: 3, k: 16, hosts: 80, compact: true}",
	} {
		g := build(t, yml)
		r := mustNew(t, g)
		allPairs(t, r, true, 0, rnd)
		// Every switch-to-switch cable carries some D-mod-k route.
		used := map[topo.LinkID]bool{}
		for s := range g.NumNICs {
			for d := range g.NumNICs {
				if s == d {
					continue
				}
				path, err := r.Path(nic(g, s), nic(g, d), PolicyDModK, 0, nil)
				if err != nil {
					t.Fatalf("%s: %v", yml, err)
				}
				for _, p := range path {
					used[g.Ports[p].Link] = true
				}
			}
		}
		for l := range g.Links {
			if !used[topo.LinkID(l)] {
				t.Errorf("%s: no D-mod-k route uses %s", yml, g.LinkName(topo.LinkID(l)))
			}
		}
	}
}
