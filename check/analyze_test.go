package check

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRounds: every pair exactly once, no rank twice in a round, n-1
// rounds for even n and n for odd n.
func TestRounds(t *testing.T) {
	for n := 0; n <= 17; n++ {
		rounds := Rounds(n)
		want := n - 1 + n%2
		if n < 2 {
			want = 0
		}
		if len(rounds) != want {
			t.Fatalf("n=%d: %d rounds, want %d", n, len(rounds), want)
		}
		seen := map[[2]int]int{}
		for i, r := range rounds {
			busy := map[int]bool{}
			if len(r) != n/2 {
				t.Errorf("n=%d round %d: %d pairs, want %d", n, i, len(r), n/2)
			}
			for _, p := range r {
				if p[0] >= p[1] || p[0] < 0 || p[1] >= n {
					t.Fatalf("n=%d round %d: pair %v", n, i, p)
				}
				if busy[p[0]] || busy[p[1]] {
					t.Fatalf("n=%d round %d: a rank twice: %v", n, i, r)
				}
				busy[p[0]], busy[p[1]] = true, true
				seen[p]++
				if partner(r, p[0]) != p[1] || partner(r, p[1]) != p[0] {
					t.Fatalf("n=%d: partner of %v", n, p)
				}
			}
		}
		if len(seen) != n*(n-1)/2 {
			t.Fatalf("n=%d: %d distinct pairs, want %d", n, len(seen), n*(n-1)/2)
		}
		for p, k := range seen {
			if k != 1 {
				t.Fatalf("n=%d: pair %v %d times", n, p, k)
			}
		}
	}
}

// figures makes n ranks of pairs at bw GB/s both ways and lat us, then
// lets change edit them.
func figures(n int, bw, lat float64, change func(p *Pair)) *Figures {
	cfg, _ := Config{}.WithDefaults()
	f := newFigures(Shape{Ranks: n, Transport: "udp0", Config: cfg})
	for a := range n {
		f.Hosts = append(f.Hosts, "host"+string(rune('a'+a)))
		for b := a + 1; b < n; b++ {
			p := Pair{A: a, B: b, Transport: "udp0", BWAB: bw, BWBA: bw, LatUs: lat}
			if change != nil {
				change(&p)
			}
			f.Pairs = append(f.Pairs, p)
		}
	}
	f.AllReduce = AllReduce{Bytes: cfg.AllReduceBytes, TimeUs: 1000, AlgBW: 2, BusBW: 3}
	return f
}

func evaluate(t *testing.T, f, base *Figures, th Thresholds) (*Report, string) {
	t.Helper()
	r, err := Evaluate(f, base, th)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := r.WriteText(&out, "base.json"); err != nil {
		t.Fatal(err)
	}
	return r, out.String()
}

func wantLine(t *testing.T, out, line string) {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if l == line {
			return
		}
	}
	t.Errorf("no line %q in:\n%s", line, out)
}

// TestSlowLink: one pair of five ranks at a fifth of the others' bandwidth
// in one direction is named, with its direction; no rank is.
func TestSlowLink(t *testing.T) {
	f := figures(5, 4.1, 10, func(p *Pair) {
		if p.A == 1 && p.B == 3 {
			p.BWBA = 0.9
		}
	})
	r, out := evaluate(t, f, nil, Thresholds{})
	if len(r.SlowRanks) != 0 || len(r.SlowLinks) != 1 || !r.Failed() {
		t.Fatalf("slow ranks %v, links %v, failed %v", r.SlowRanks, r.SlowLinks, r.Failed())
	}
	wantLine(t, out, "slow links: 1<->3 (bw 0.90 GB/s vs median 4.10 GB/s; 3->1 only)")
	wantLine(t, out, "check: FAILED: 1 slow link")
	if strings.Contains(out, "slow ranks") {
		t.Errorf("a rank named:\n%s", out)
	}
}

// TestSlowLatency: a pair at 2x the median latency is slow with the
// default thresholds and not with --lat-threshold 1.5.
func TestSlowLatency(t *testing.T) {
	f := figures(4, 4, 10, func(p *Pair) {
		if p.A == 0 && p.B == 2 {
			p.LatUs = 20
		}
	})
	_, out := evaluate(t, f, nil, Thresholds{})
	wantLine(t, out, "slow links: 0<->2 (latency 20.0 us vs median 10.0 us)")
	if r, _ := evaluate(t, f, nil, Thresholds{Lat: 1.5}); r.Failed() {
		t.Errorf("latency threshold 150%%: failed: %s", r.Summary())
	}
}

// TestSlowRank: with four ranks, a slow rank is on half the pairs; the
// reference is still the fast pairs' and the rank is named instead of
// its three links.
func TestSlowRank(t *testing.T) {
	f := figures(4, 4, 10, func(p *Pair) {
		if p.B == 3 {
			p.BWBA = 0.006 // 50 Mbit/s
		}
	})
	r, out := evaluate(t, f, nil, Thresholds{})
	if len(r.SlowRanks) != 1 || r.SlowRanks[0].Rank != 3 || len(r.SlowLinks) != 0 || len(r.Slow) != 3 {
		t.Fatalf("slow ranks %v, links %v, slow %v", r.SlowRanks, r.SlowLinks, r.Slow)
	}
	wantLine(t, out, "slow ranks: 3")
	wantLine(t, out, "check: FAILED: 1 slow rank")
	if !strings.Contains(out, "#   rank 3: 3 of its 3 pairs slow or broken: 0<->3 (bw 0.006 GB/s vs median 4.00 GB/s; 3->0 only)") {
		t.Errorf("rank 3's links not listed:\n%s", out)
	}
	// A rank with one slow pair of three is not slow.
	f = figures(4, 4, 10, func(p *Pair) {
		if p.A == 0 && p.B == 1 {
			p.BWAB = 1
		}
	})
	r, _ = evaluate(t, f, nil, Thresholds{})
	if len(r.SlowRanks) != 0 || len(r.SlowLinks) != 1 {
		t.Fatalf("one slow link: slow ranks %v, links %v", r.SlowRanks, r.SlowLinks)
	}
}

// TestMedianPerTransport: shm0 pairs ten times faster than udp0 pairs
// are not held against each other.
func TestMedianPerTransport(t *testing.T) {
	f := figures(4, 1, 20, func(p *Pair) {
		if p.A < 2 && p.B < 2 || p.A >= 2 {
			p.Transport, p.BWAB, p.BWBA, p.LatUs = "shm0", 10, 10, 2
		}
	})
	f.Transport = "shm0,udp0"
	r, out := evaluate(t, f, nil, Thresholds{})
	if r.Failed() || len(r.Medians) != 2 {
		t.Fatalf("mixed transports: %s, medians %v\n%s", r.Summary(), r.Medians, out)
	}
	wantLine(t, out, "# median shm0: bw 10.0 GB/s, latency 2.00 us (2 pairs)")
	wantLine(t, out, "check: passed")
}

// TestDrift: against a baseline, a direction below 80% of its baseline,
// a latency above 120% and the all-reduce's busbw are listed; smaller
// changes and improvements are not.
func TestDrift(t *testing.T) {
	base := figures(4, 4, 10, nil)
	now := figures(4, 4, 10, func(p *Pair) {
		switch [2]int{p.A, p.B} {
		case [2]int{0, 1}:
			p.BWAB = 3.3 // -17.5%: within
		case [2]int{1, 2}:
			p.BWBA = 3.1 // -22.5%
		case [2]int{0, 3}:
			p.LatUs = 13 // +30%
		case [2]int{2, 3}:
			p.BWAB, p.LatUs = 8, 5 // better
		}
	})
	now.AllReduce.BusBW = 1.5
	r, out := evaluate(t, now, base, Thresholds{})
	var what []string
	for _, d := range r.Drifts {
		what = append(what, d.What)
	}
	if got, want := strings.Join(what, ","), "all_reduce busbw,0<->3 latency,2->1 bw"; got != want {
		t.Fatalf("drifts %s, want %s\n%s", got, want, out)
	}
	wantLine(t, out, "drift: 2->1 bw 3.10 GB/s vs baseline 4.00 GB/s (-22%)")
	wantLine(t, out, "drift: 0<->3 latency 13.0 us vs baseline 10.0 us (+30%)")
	wantLine(t, out, "drift: all_reduce busbw 1.50 GB/s vs baseline 3.00 GB/s (-50%)")
	if !r.Failed() || !strings.Contains(r.Summary(), "3 figures drifted from the baseline") {
		t.Errorf("summary %q", r.Summary())
	}
	// A looser threshold lets them all pass.
	if r, _ := evaluate(t, now, base, Thresholds{BW: 0.6, Lat: 0.5}); r.Failed() {
		t.Errorf("threshold 60%%: %s", r.Summary())
	}
	// The same run against itself: nothing.
	if r, out := evaluate(t, base, base, Thresholds{}); r.Failed() {
		t.Errorf("a run against itself failed:\n%s", out)
	} else {
		wantLine(t, out, "drift: none beyond the thresholds")
	}
	// Another host under a rank is a note, not a failure.
	moved := figures(4, 4, 10, nil)
	moved.Hosts[2] = "other"
	if r, out := evaluate(t, moved, base, Thresholds{}); r.Failed() || len(r.Notes) != 1 {
		t.Errorf("moved rank: failed %v, notes %v", r.Failed(), r.Notes)
	} else {
		wantLine(t, out, "note: rank 2 runs on other, in the baseline on hostc")
	}
}

// TestShapeRefused: a baseline of other ranks, transport, topology or
// sizes is refused, naming each difference.
func TestShapeRefused(t *testing.T) {
	base := figures(4, 4, 10, nil)
	for _, c := range []struct {
		name string
		now  *Figures
		want string
	}{
		{"ranks", figures(5, 4, 10, nil), "ranks 4, this run 5"},
		{"transport", func() *Figures { f := figures(4, 4, 10, nil); f.Transport = "shm0"; return f }(), "transport udp0, this run shm0"},
		{"size", func() *Figures { f := figures(4, 4, 10, nil); f.Config.Bytes = 4096; return f }(), "--size 1048576, this run 4096"},
		{"topology", func() *Figures { f := figures(4, 4, 10, nil); f.Topology = "fattree"; return f }(), `topology "", this run "fattree"`},
	} {
		_, err := Evaluate(c.now, base, Thresholds{})
		if !errors.Is(err, ErrShape) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrShape naming %q", c.name, err, c.want)
		}
	}
}

// TestThresholdsChecked: the thresholds' bounds.
func TestThresholdsChecked(t *testing.T) {
	for _, th := range []Thresholds{{BW: 1}, {BW: -0.1}, {BW: 0.2, Lat: -1}} {
		if _, err := th.WithDefaults(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", th, err)
		}
	}
	th, err := Thresholds{BW: 0.3}.WithDefaults()
	if err != nil || th.Lat != 0.3 {
		t.Errorf("latency threshold defaults to the bandwidth one: %+v %v", th, err)
	}
	for _, c := range []Config{{Bytes: -1}, {Iters: -2}, {AllReduceBytes: 6}, {LatIters: -1}} {
		if _, err := c.WithDefaults(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", c, err)
		}
	}
}

// TestBaselineFile: Save and Load round-trip; files of another format or
// a later version, with unknown fields, or with a wrong pair list are
// refused.
func TestBaselineFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "base.json")
	f := figures(3, 4, 10, nil)
	if err := f.Save(path); err != nil {
		t.Fatal(err)
	}
	g, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if g.Ranks != 3 || len(g.Pairs) != 3 || g.Pairs[2] != f.Pairs[2] || g.AllReduce != f.AllReduce || g.Config != f.Config || !g.Created.Equal(f.Created) {
		t.Fatalf("round trip: %+v", g)
	}
	b, _ := os.ReadFile(path)
	for _, c := range []struct{ from, to, want string }{
		{`"format": "ibex-check"`, `"format": "other"`, `format "other"`},
		{`"version": 1`, `"version": 2`, "version 2"},
		{`"ranks": 3`, `"ranks": 4`, "3 pairs for 4 ranks"},
		{`"lat_us": 10`, `"lat_us": 10, "extra": 1`, "unknown field"},
		{`"b": 2`, `"b": 1`, "pairs[1] is 0<->1"},
	} {
		bad := strings.Replace(string(b), c.from, c.to, 1)
		if bad == string(b) {
			t.Fatalf("%q not in the file:\n%s", c.from, b)
		}
		_, err := Parse([]byte(bad))
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s -> %s: %v, want ErrFormat naming %q", c.from, c.to, err, c.want)
		}
	}
	if _, err := Load(filepath.Join(dir, "none.json")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// TestBrokenPair: a pair that could not be measured fails the check and
// counts against its ranks.
func TestBrokenPair(t *testing.T) {
	f := figures(4, 4, 10, func(p *Pair) {
		if p.A == 1 && p.B == 2 {
			p.BWAB, p.BWBA, p.LatUs, p.Err = 0, 0, 0, "1->2 bw: retry count exceeded"
		}
	})
	r, out := evaluate(t, f, nil, Thresholds{})
	if len(r.Broken) != 1 || !r.Failed() || len(r.Slow) != 0 {
		t.Fatalf("broken %v slow %v", r.Broken, r.Slow)
	}
	wantLine(t, out, "broken pairs: 1<->2 (1->2 bw: retry count exceeded)")
}
