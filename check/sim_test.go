package check

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/ibex-rdma/ibex/sim/topo"
)

// k8 is a two-tier fat tree of 8-port NDR switches: 4 hosts and 4
// uplinks per leaf, 16 hosts on 4 leaves. (cmd/ibex's test runs
// examples/fattree-3tier-k16.yaml; this one is small enough for many
// simulations under the race detector.)
func k8(t *testing.T) *topo.Graph {
	t.Helper()
	s, err := topo.Parse([]byte("name: k8\nkind: fattree\nfattree: {tiers: 2, k: 8, hosts: 16}\n"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.Build()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// simCheck simulates 16 ranks on g with the faults, evaluates against
// base and locates the slow pairs.
func simCheck(t *testing.T, g *topo.Graph, base *Figures, degrade, flap []string) (*Figures, *Report, string) {
	t.Helper()
	sc := SimConfig{Graph: g, File: "k8", Ranks: 16}
	for _, d := range degrade {
		x, err := ParseDegrade(g, d)
		if err != nil {
			t.Fatal(err)
		}
		sc.Degrade = append(sc.Degrade, x)
	}
	for _, f := range flap {
		x, err := ParseFlap(g, f)
		if err != nil {
			t.Fatal(err)
		}
		sc.Flap = append(sc.Flap, x)
	}
	f, sim, err := Simulate(Config{Bytes: 256 << 10, LatIters: 20}, sc)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Evaluate(f, base, Thresholds{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.Locate(r); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := r.WriteText(&out, "clean"); err != nil {
		t.Fatal(err)
	}
	return f, r, out.String()
}

// TestSimClean: an intact fabric passes, pairs held against pairs as
// near as they are (under one leaf: 2 cables; across a spine: 4).
func TestSimClean(t *testing.T) {
	f, r, out := simCheck(t, k8(t), nil, nil, nil)
	if r.Failed() {
		t.Fatalf("intact fabric failed:\n%s", out)
	}
	if len(r.Medians) != 2 || r.Medians[0].Transport != "sim-2hop" || r.Medians[1].Transport != "sim-4hop" {
		t.Fatalf("medians %+v", r.Medians)
	}
	// NDR is 400 Gb/s, 50 GB/s; 256 KiB messages one at a time get 75-85%.
	for _, m := range r.Medians {
		if m.BW < 35 || m.BW > 50 || m.LatUs < 1 || m.LatUs > 5 {
			t.Errorf("median %+v on NDR", m)
		}
	}
	if r.Medians[1].LatUs <= r.Medians[0].LatUs {
		t.Errorf("4 cables no slower than 2: %+v", r.Medians)
	}
	if f.AllReduce.BusBW < 30 || f.AllReduce.BusBW > 50 {
		t.Errorf("all_reduce busbw %v GB/s", f.AllReduce.BusBW)
	}
}

// TestSimDegradedHostCable: host 5's cable at a tenth of its rate makes
// rank 5 slow (every pair of it), its cable the one suspect, and every
// one of its figures a drift against the intact baseline.
func TestSimDegradedHostCable(t *testing.T) {
	g := k8(t)
	base, _, _ := simCheck(t, g, nil, nil, nil)
	_, r, out := simCheck(t, g, base, []string{"host5.nic0=0.1"}, nil)
	wantLine(t, out, "slow ranks: 5")
	if len(r.SlowLinks) != 0 || len(r.Slow) != 15 {
		t.Errorf("slow links %d (want none beyond rank 5's), slow pairs %d (want 15)", len(r.SlowLinks), len(r.Slow))
	}
	if len(r.Suspects) != 1 || r.Suspects[0].Cable != "host5.nic0 - leaf1:1" || r.Suspects[0].Fast != 0 {
		t.Errorf("suspects %+v, want host5.nic0 - leaf1:1 alone", r.Suspects)
	}
	wantLine(t, out, "suspect cables: host5.nic0 - leaf1:1 (15 slow pairs cross it, 0 fast)")
	// Both directions of every pair of rank 5, and the all-reduce.
	if len(r.Drifts) != 31 || r.Drifts[0].What != "all_reduce busbw" {
		t.Errorf("%d drifts, want 31 (15 pairs both ways, all_reduce)\n%s", len(r.Drifts), out)
	}
	if !r.Failed() {
		t.Error("passed")
	}
}

// TestSimDegradedUplink: leaf0's first uplink at a tenth of its rate.
// D-mod-k sends over it leaf0's traffic to hosts 4, 8 and 12 and the
// other leaves' traffic to host 0, so rank 0 looks slow; the routes name
// the cable itself, which every slow pair crosses and no fast one does.
func TestSimDegradedUplink(t *testing.T) {
	g := k8(t)
	l, err := ParseLink(g, "leaf0:4")
	if err != nil {
		t.Fatal(err)
	}
	cable := g.LinkName(l)
	if !strings.HasPrefix(cable, "leaf0:4 - spine0:") {
		t.Fatalf("cable %q", cable)
	}
	_, r, out := simCheck(t, g, nil, []string{"leaf0:4=0.1"}, nil)
	if len(r.Suspects) != 1 || r.Suspects[0].Cable != cable || r.Suspects[0].Fast != 0 || r.Suspects[0].Slow != len(r.Slow) {
		t.Fatalf("suspects %+v, want %s alone\n%s", r.Suspects, cable, out)
	}
	if len(r.Slow) != 21 {
		t.Errorf("%d slow pairs, want 21 (0-3 to 4, 8, 12; 4-15 to 0)\n%s", len(r.Slow), out)
	}
	for _, s := range r.Slow {
		to048 := s.B == 4 || s.B == 8 || s.B == 12
		if !(s.A == 0 || s.A < 4 && to048) {
			t.Errorf("slow pair %s does not cross %s", s.Name(), cable)
		}
	}
	wantLine(t, out, "slow ranks: 0")
	// The same cable by its name, as the report prints it.
	if l2, err := ParseLink(g, cable); err != nil || l2 != l {
		t.Errorf("ParseLink(%q) = %d, %v; want %d", cable, l2, err, l)
	}
}

// TestSimFlap: host 2's cable down for half of every millisecond. A
// message sent into it, or under way when it goes, waits a retry timeout
// (4.3 s): rank 2's pairs are slow or broken (retries exhausted), the
// all-reduce too, and its cable is named.
func TestSimFlap(t *testing.T) {
	g := k8(t)
	_, r, out := simCheck(t, g, nil, nil, []string{"host2.nic0=1ms"})
	wantLine(t, out, "slow ranks: 2")
	if len(r.Suspects) != 1 || !strings.HasPrefix(r.Suspects[0].Cable, "host2.nic0 - ") {
		t.Errorf("suspects %+v\n%s", r.Suspects, out)
	}
	for _, s := range r.Slow {
		if s.A != 2 && s.B != 2 {
			t.Errorf("slow pair %s is not rank 2's", s.Name())
		}
	}
	for _, p := range r.Broken {
		if p.A != 2 && p.B != 2 {
			t.Errorf("broken pair %s is not rank 2's", p.Name())
		}
	}
	if len(r.Slow)+len(r.Broken) < 8 {
		t.Errorf("%d of rank 2's 15 pairs slow or broken\n%s", len(r.Slow)+len(r.Broken), out)
	}
	// A flap slower than the whole check never goes down in it.
	_, r, out = simCheck(t, g, nil, nil, []string{"host2.nic0=1000s"})
	if r.Failed() {
		t.Errorf("a cable down after 500 s failed a check of less than that:\n%s", out)
	}
}

// TestSimConfigErrors: bad fault specs and rank counts name what is wrong.
func TestSimConfigErrors(t *testing.T) {
	g := k8(t)
	for _, c := range []struct{ spec, want string }{
		{"leaf0:8", "want LINK=FACTOR"},
		{"leaf0:8=2", "at most 1"},
		{"leaf0:99=0.5", `no port or cable "leaf0:99"`},
		{"999999=0.5", "links 0 to"},
	} {
		if _, err := ParseDegrade(g, c.spec); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("degrade %q: %v, want %q", c.spec, err, c.want)
		}
	}
	if _, err := ParseFlap(g, "host1.nic0=0s"); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "want LINK=PERIOD") {
		t.Errorf("flap of period 0: %v", err)
	}
	if _, _, err := Simulate(Config{}, SimConfig{Graph: g, Ranks: 17}); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "has 16 hosts") {
		t.Errorf("17 ranks: %v", err)
	}
}
