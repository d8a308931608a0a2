package experiment

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/sim/des"
	"github.com/ibex-rdma/ibex/sim/fabric"
	"github.com/ibex-rdma/ibex/sim/packet"
	"github.com/ibex-rdma/ibex/sim/topo"
)

// small is examples/explicit-small: 4 hosts of 2 GPUs, 2 leaves, 2 spines.
func small(t *testing.T) *topo.Graph {
	t.Helper()
	s, err := topo.Load("../../examples/explicit-small.yaml")
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.Build()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestCheck(t *testing.T) {
	g := small(t)
	for _, c := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Graph = nil }, "Graph: none"},
		{func(c *Config) { c.GPUs = 9 }, "GPUs 9: the topology has 8 GPUs"},
		{func(c *Config) { c.GPUs = -1 }, "GPUs -1"},
		{func(c *Config) { c.GPUs, c.On = 4, []int32{0, 1} }, "GPUs 4 and On"},
		{func(c *Config) { c.On = []int32{0, 1, 1} }, "On: place"},
		{func(c *Config) { c.Channels = 65 }, "Channels 65: want 1 to 64"},
		{func(c *Config) { c.Pipeline = 2000 }, "Pipeline 2000: want 1 to 1024"},
		{func(c *Config) { c.Pattern, c.Collective = packet.Incast, algo.AllReduce }, "give a pattern or a collective"},
		{func(c *Config) { c.Pattern = 9 }, "Pattern 9: not a pattern"},
		{func(c *Config) { c.Collective, c.Algorithm = algo.AllGather, algo.Tree }, "Workload: coll/algo"},
		{func(c *Config) { c.Engine = 7 }, "Engine 7"},
		{func(c *Config) { c.Hier = true }, "Hier: needs EngineFlow"},
		{func(c *Config) { c.Hier, c.Engine, c.GPUs = true, EngineFlow, 3 }, "Hier: all_reduce"},
		{func(c *Config) { c.Trace, c.Engine = "t.json", EngineFlow }, "Trace: needs EnginePacket"},
		{func(c *Config) { c.Trace, c.TraceLimit = "t.json", -1 }, "TraceLimit -1"},
		{func(c *Config) { c.Seeds = 100001 }, "Seeds 100001: want 1 to 100000"},
		{func(c *Config) { c.Iterations = -1 }, "Iterations -1"},
		{func(c *Config) { c.Top = -1 }, "Top -1"},
		{func(c *Config) { c.RandomFailures = -1 }, "RandomFailures -1: want 0 or more"},
		{func(c *Config) { c.RandomFailures = 100 }, "RandomFailures 100: flow: bad flow simulation config: 100 random failures"},
		{func(c *Config) { c.FailWindow = -1 }, "FailWindow"},
		{func(c *Config) { c.Factor = 1 }, "Factor 1: want 2 or more"},
		{func(c *Config) { c.MinBytes, c.MaxBytes = 2, 1 }, "MinBytes 2, MaxBytes 1"},
		{func(c *Config) { c.MinBytes = -1 }, "MinBytes -1"},
		{func(c *Config) { c.Params.VLs = 9 }, "Params: bad simulation config: VLs 9"},
		{func(c *Config) { c.Failures = []fabric.Failure{{Link: 999}} }, "Failures[0]: link 999"},
		{func(c *Config) { c.Failures = []fabric.Failure{{Link: 0, At: -1}} }, "Failures[0]: at"},
		{func(c *Config) { c.SwitchFailures = []SwitchFailure{{Switch: "spine9"}} }, `SwitchFailures[0]: no switch "spine9"`},
	} {
		cfg := Config{Graph: g, MinBytes: 1 << 20}
		c.edit(&cfg)
		_, err := Run(cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrConfig) {
			t.Errorf("%s: error %v, want ErrConfig naming %q", c.want, err, c.want)
		}
	}
}

func TestNewSpread(t *testing.T) {
	for _, c := range []struct {
		times            []float64
		min, median, max float64
	}{
		{[]float64{30, 10, 20}, 10, 20, 30},
		{[]float64{4, 1, 3, 2}, 1, 3, 4}, // the upper of the middle two
		{[]float64{7}, 7, 7, 7},
	} {
		in := slices.Clone(c.times)
		s := NewSpread(1<<20, 5, c.times)
		want := Spread{Bytes: 1 << 20, Seeds: len(c.times), FirstSeed: 5, Min: c.min, Median: c.median, Max: c.max}
		if s != want {
			t.Errorf("NewSpread(%v) = %+v, want %+v", c.times, s, want)
		}
		if !slices.Equal(in, c.times) {
			t.Errorf("NewSpread sorted its argument: %v", c.times)
		}
	}
}

func TestWorkload(t *testing.T) {
	for _, c := range []struct {
		w    Workload
		name string
	}{
		{Workload{}, "ring all_reduce"},
		{Workload{Collective: algo.AllToAll}, "direct all_to_all"},
		{Workload{Collective: algo.Broadcast, Algorithm: algo.Tree, Pipeline: 4}, "tree broadcast"},
		{Workload{Pattern: packet.Permutation}, "permutation"},
	} {
		s, name, err := c.w.Schedule(8, 1)
		if err != nil || name != c.name || s.Ranks != 8 {
			t.Errorf("%+v: %v %q %v, want %q over 8 ranks", c.w, s, name, err, c.name)
		}
	}
	for _, s := range []string{"packet", "flow"} {
		if e, err := ParseEngine(s); err != nil || e.String() != s {
			t.Errorf("ParseEngine(%q) = %v, %v", s, e, err)
		}
	}
	if _, err := ParseEngine("fluid"); !errors.Is(err, ErrConfig) {
		t.Errorf("ParseEngine(fluid): %v", err)
	}
}

// TestRunFailures: a permutation over own NICs with ECMP crosses the
// spines; spine0 failing at 30 µs slows it, by a different amount per
// seed (each seed draws its own permutation and salts the hashes). The
// figures are the flow engine's, deterministic.
func TestRunFailures(t *testing.T) {
	var out bytes.Buffer
	cfg := Config{Graph: small(t), Topology: "small.yaml", Workload: Workload{Pattern: packet.Permutation},
		Engine: EngineFlow, LocalNIC: true, Params: fabric.Params{Routing: fabric.RouteECMP},
		MinBytes: 4 << 20, Seed: 1, Seeds: 3, Iterations: 3, Top: 2,
		SwitchFailures: []SwitchFailure{{Switch: "spine0", At: 30 * des.Microsecond}}, Out: &out}
	res, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Name != "permutation" || res.Ranks != 8 || res.Channels != 2 || !res.Compared || res.Params.Chunk != fabric.Defaults.Chunk {
		t.Errorf("result %q over %d ranks, %d channels, compared %v, chunk %d", res.Name, res.Ranks, res.Channels, res.Compared, res.Params.Chunk)
	}
	type fig struct {
		seed       uint64
		time, base string // µs per iteration, %.1f
		slowed     []int
	}
	want := []fig{{1, "189.6", "129.2", []int{1, 2, 3}}, {2, "224.4", "129.2", []int{1, 2, 3}}, {3, "148.3", "171.4", []int{2, 3}}}
	if len(res.Rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(res.Rows), len(want))
	}
	var times []float64
	for i, r := range res.Rows {
		w := want[i]
		got := fig{r.Seed, fmt.Sprintf("%.1f", r.TimeUS), fmt.Sprintf("%.1f", r.BaseTimeUS), r.Slowed}
		if got.seed != w.seed || got.time != w.time || got.base != w.base || !slices.Equal(got.slowed, w.slowed) || r.ItersHit != len(w.slowed) {
			t.Errorf("row %d: %+v, want %+v", i, got, w)
		}
		if r.Bytes != 4<<20 || r.Engine != "flow" || r.Routing != "ecmp" || len(r.IterUS) != 3 || len(r.Links) != 2 || r.BusBWPerNIC != r.BusBW/2 {
			t.Errorf("row %d: %+v", i, r)
		}
		times = append(times, r.TimeUS)
	}
	if len(res.Spreads) != 1 || res.Spreads[0] != NewSpread(4<<20, 1, times) {
		t.Errorf("spreads %+v, want that of %v", res.Spreads, times)
	}
	// The report as the rows came is WriteText's.
	var text bytes.Buffer
	if err := res.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if out.String() != text.String() {
		t.Errorf("streamed report:\n%s\nWriteText:\n%s", out.String(), text.String())
	}
	for _, s := range []string{
		"# switch spine0 fails at 30.000µs (all its links)",
		"# failures, ecmp routing: 387.6 us without, 568.7 us with (+46.71%); iterations slowed: 1,2,3 of 3",
		"# failures, ecmp routing: 514.2 us without, 444.8 us with (-13.49%); iterations slowed: 2,3 of 3",
		"# 3 seeds from 1: time min 148.3, median 189.6, max 224.4 us (max +51.3% over min)",
		"# hottest links", "# peak memory",
	} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, text.String())
		}
	}
	var js bytes.Buffer
	if err := res.WriteJSON(&js); err != nil || !strings.Contains(js.String(), `"topology": "small.yaml"`) || !strings.Contains(js.String(), `"time_without_failures_us"`) {
		t.Errorf("WriteJSON: %v\n%s", err, js.String())
	}
}

// TestRunPacket: sizes from MinBytes times Factor up to MaxBytes on the
// packet engine, random failures drawn per seed into the rows, progress
// labelled per run, and the trace written by the last run only.
func TestRunPacket(t *testing.T) {
	var labels []string
	trace := filepath.Join(t.TempDir(), "t.json")
	cfg := Config{Graph: small(t), MinBytes: 64 << 10, MaxBytes: 256 << 10, Factor: 4, Seed: 7, RandomFailures: 1,
		Trace: trace, TraceLimit: 10,
		Progress: func(label string) func(packet.Progress) { labels = append(labels, label); return nil }}
	res, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 2 || res.Rows[0].Bytes != 64<<10 || res.Rows[1].Bytes != 256<<10 {
		t.Fatalf("rows %+v", res.Rows)
	}
	for _, r := range res.Rows {
		if r.Seed != 7 || r.Name != "ring all_reduce" || r.Engine != "packet" || len(r.RandomFailures) != 1 || r.BaseTimeUS <= 0 || r.Events == 0 || r.Links != nil {
			t.Errorf("row %+v", r)
		}
	}
	// Each size runs without failures, then with them.
	if want := []string{"ring all_reduce 64K seed 7", "ring all_reduce 64K seed 7", "ring all_reduce 256K seed 7", "ring all_reduce 256K seed 7"}; !slices.Equal(labels, want) {
		t.Errorf("progress labels %q, want %q", labels, want)
	}
	if res.TraceSpans != 10 || res.TraceDropped == 0 {
		t.Errorf("trace: %d spans written, %d dropped; want 10 and more dropped", res.TraceSpans, res.TraceDropped)
	}
	var text bytes.Buffer
	if err := res.WriteText(&text); err != nil || !strings.Contains(text.String(), "# seed 7: link ") || strings.Contains(text.String(), "hottest") {
		t.Errorf("WriteText: %v\n%s", err, text.String())
	}
}

func TestPointHier(t *testing.T) {
	g := small(t)
	s, name, err := Workload{}.Schedule(8, 1)
	if err != nil {
		t.Fatal(err)
	}
	pc := packet.Config{Graph: g, Schedule: s, Name: name, Bytes: 1 << 20}
	if _, _, err := (Point{Config: pc, Hier: true}).Run(); !errors.Is(err, ErrConfig) {
		t.Errorf("Hier on the packet engine: %v", err)
	}
	row, _, err := Point{Config: pc, Engine: EngineFlow, Hier: true}.Run()
	if err != nil || row.Name != "hierarchical ring all_reduce" || row.TimeUS <= 0 {
		t.Errorf("Hier: %+v %v", row, err)
	}
}
