package topo

import (
	"fmt"
	"testing"
)

// TestFatTree3TierK64 builds and checks the largest 3-tier tree of
// Quantum-2 switches (fabric-sim.md §4.1: 65,536 hosts, 5,120 switches).
// BenchmarkBuildCheck times it; no timing is asserted here.
func TestFatTree3TierK64(t *testing.T) {
	if testing.Short() {
		t.Skip("65,536 hosts")
	}
	g := build(t, "kind: fattree\nfattree: {tiers: 3, k: 64}\n")
	mustCheck(t, g)
	c := g.Counts()
	if c.Hosts != 65536 || c.Switches.Total != 5120 || c.Links.Total != 3*65536 {
		t.Errorf("hosts %d switches %d links %d", c.Hosts, c.Switches.Total, c.Links.Total)
	}
}

// BenchmarkBuildCheck builds, checks and counts topologies from their
// specs: the cost of `ibex sim topo` minus the YAML.
//
//	go test -run ^$ -bench BuildCheck -benchmem ./sim/topo
func BenchmarkBuildCheck(b *testing.B) {
	for _, c := range []struct{ name, yml string }{
		{"fattree3-k64", "kind: fattree\nfattree: {tiers: 3, k: 64}\n"},
		{"fattree2-k64", "kind: fattree\nfattree: {k: 64}\n"},
		{"superpod-64su", "kind: superpod\nsuperpod: {sus: 64}\n"},
	} {
		s, err := Parse([]byte(c.yml))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var hosts int
			for b.Loop() {
				g, err := s.Build()
				if err != nil {
					b.Fatal(err)
				}
				if err := g.Check(); err != nil {
					b.Fatal(err)
				}
				hosts = g.Counts().Hosts
			}
			b.ReportMetric(float64(hosts), "hosts")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(hosts), "ns/host")
		})
	}
}

// BenchmarkBuild times the expansion alone.
func BenchmarkBuild(b *testing.B) {
	for _, k := range []int{16, 64} {
		s, err := Parse(fmt.Appendf(nil, "kind: fattree\nfattree: {tiers: 3, k: %d}\n", k))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("fattree3-k%d", k), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Build(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
