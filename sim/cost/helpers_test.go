package cost

import (
	"strings"
	"testing"

	"github.com/ibex-rdma/ibex/sim/topo"
)

// testTable is a small table with round numbers, so that the expected
// bills can be worked out by hand.
const testTable = `
copper_max_m:          {value: 3,   confidence: estimate, source: test}
copper_cable_usd:      {value: 2,   confidence: estimate, source: test}
fibre_cable_usd:       {value: 5,   confidence: estimate, source: test}
fibre_cable_usd_per_m: {value: 0.5, confidence: estimate, source: test}
switches:
  sw4:
    model: four-port
    link_layer: infiniband
    rate_gbps: 400
    ports: 4
    cost_usd: {value: 1000, confidence: estimate, source: test}
    power_w:  {value: 100,  confidence: estimate, source: test}
    optics: [sr2, dr2]
  sw8:
    model: eight-port
    link_layer: infiniband
    rate_gbps: 400
    ports: 8
    cost_usd: {value: 2000, confidence: estimate, source: test}
    power_w:  {value: 150,  confidence: estimate, source: test}
    optics: [dr2, sr2]   # order does not matter: the shortest reach that fits wins
  eth4:
    model: four-port ethernet
    link_layer: ethernet
    rate_gbps: 400
    ports: 4
    cost_usd: {value: 3000, confidence: estimate, source: test}
    power_w:  {value: 300,  confidence: estimate, source: test}
    optics: [sr2]
nics:
  nic400:
    model: nic
    link_layer: infiniband
    rate_gbps: 400
    cost_usd: {value: 10, confidence: estimate, source: test}
    power_w:  {value: 1,  confidence: estimate, source: test}
    optics: [sr1, dr1]
  enic400:
    model: ethernet nic
    link_layer: ethernet
    rate_gbps: 400
    cost_usd: {value: 20, confidence: estimate, source: test}
    power_w:  {value: 2,  confidence: estimate, source: test}
    optics: [sr1]
transceivers:
  sr2: {model: twin sr, ports: {value: 2, confidence: estimate, source: test}, reach_m: {value: 50, confidence: estimate, source: test},
        cost_usd: {value: 7, confidence: estimate, source: test}, power_w: {value: 3, confidence: estimate, source: test}}
  dr2: {model: twin dr, ports: {value: 2, confidence: estimate, source: test}, reach_m: {value: 100, confidence: estimate, source: test},
        cost_usd: {value: 11, confidence: estimate, source: test}, power_w: {value: 4, confidence: estimate, source: test}}
  sr1: {model: nic sr, ports: {value: 1, confidence: estimate, source: test}, reach_m: {value: 50, confidence: estimate, source: test},
        cost_usd: {value: 4, confidence: estimate, source: test}, power_w: {value: 2, confidence: estimate, source: test}}
  dr1: {model: nic dr, ports: {value: 1, confidence: estimate, source: test}, reach_m: {value: 100, confidence: estimate, source: test},
        cost_usd: {value: 6, confidence: estimate, source: test}, power_w: {value: 2.5, confidence: estimate, source: test}}
`

func mustTable(t testing.TB, yml string) *Table {
	t.Helper()
	tab, err := Parse([]byte(yml))
	if err != nil {
		t.Fatalf("parse table: %v", err)
	}
	return tab
}

// graph parses and builds a topology spec.
func graph(t testing.TB, yml string) *topo.Graph {
	t.Helper()
	s, err := topo.Parse([]byte(yml))
	if err != nil {
		t.Fatalf("parse spec:\n%s\n%v", yml, err)
	}
	g, err := s.Build()
	if err != nil {
		t.Fatalf("build spec:\n%s\n%v", yml, err)
	}
	if err := g.Check(); err != nil {
		t.Fatalf("check: %v", err)
	}
	return g
}

func loadGraph(t testing.TB, path string) *topo.Graph {
	t.Helper()
	s, err := topo.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.Build()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func compute(t testing.TB, g *topo.Graph, tab *Table, layer LinkLayer) *Report {
	t.Helper()
	r, err := Compute(g, tab, layer)
	if err != nil {
		t.Fatalf("compute: %v", err)
	}
	return r
}

func wantContains(t *testing.T, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%q does not contain %q", got, w)
		}
	}
}

// tier returns the report's row for a link tier.
func tier(t *testing.T, r *Report, name string) TierLinks {
	t.Helper()
	for _, tl := range r.Links {
		if tl.Tier == name {
			return tl
		}
	}
	t.Fatalf("no link tier %q in %+v", name, r.Links)
	return TierLinks{}
}

func switchTier(t *testing.T, r *Report, name string) TierSwitches {
	t.Helper()
	for _, st := range r.Switches {
		if st.Tier == name {
			return st
		}
	}
	t.Fatalf("no switch tier %q in %+v", name, r.Switches)
	return TierSwitches{}
}

func part(r *Report, kind, name string) Part {
	for _, p := range r.Parts {
		if p.Kind == kind && p.Name == name {
			return p
		}
	}
	return Part{}
}
