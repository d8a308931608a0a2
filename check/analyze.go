package check

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Report is a run's figures judged: against the run's own medians (slow
// links and ranks) and, with a baseline, against it (drift).
type Report struct {
	Figures    *Figures
	Baseline   *Figures // nil: no comparison
	Thresholds Thresholds

	// Medians are the references of the slow-link test, one per
	// transport (shm0 pairs are not held against udp0 ones).
	Medians []Median
	// Slow is every slow pair; SlowRanks the ranks most of whose pairs
	// are slow; SlowLinks the slow pairs of no slow rank (a slow rank is
	// named instead of each of its links).
	Slow      []SlowLink
	SlowRanks []SlowRank
	SlowLinks []SlowLink
	// Broken are the pairs that could not be measured; BrokenLinks those
	// of no slow rank.
	Broken      []Pair
	BrokenLinks []Pair
	// Drifts are the figures beyond the thresholds in the bad direction
	// against the baseline: less bandwidth, more latency.
	Drifts []Drift
	// Notes are differences from the baseline that are not failures
	// (another host under a rank).
	Notes []string
	// Suspects are, in a simulation, the cables that explain the slow
	// pairs (every slow pair's route crosses one of them).
	Suspects []Suspect
}

// Median is one transport's reference figures: the median bandwidth of
// every direction of its pairs, and the median latency of its pairs. Of
// an even count it is the better of the two middle ones (the higher
// bandwidth, the lower latency): one slow rank of four is on half the
// pairs, and must not drag the reference down to itself. Directions, not
// pairs, make the bandwidth's: a rank slow one way is on a quarter of
// them, and a direction disturbed by something else on a host moves the
// median less than a pair's slower direction would.
type Median struct {
	Transport string
	BW        float64 // GB/s
	LatUs     float64
	Pairs     int
}

// SlowLink is a slow pair and why.
type SlowLink struct {
	Pair
	Median          Median
	SlowBW, SlowLat bool
}

// SlowRank is a rank most of whose pairs are slow.
type SlowRank struct {
	Rank        int
	Slow, Pairs int
}

// Drift is one figure beyond the threshold against the baseline.
type Drift struct {
	What      string // "1->3 bw", "1<->3 latency", "all_reduce busbw"
	Unit      string // "GB/s" or "us"
	Now, Base float64
}

// Change is the relative change, -0.78 for 22% of the baseline.
func (d Drift) Change() float64 {
	if d.Base == 0 {
		return 0
	}
	return d.Now/d.Base - 1
}

// Suspect is a cable (in a simulation, where routes are known) that slow
// pairs cross.
type Suspect struct {
	Cable      string // "leaf0:8 - spine0:0"
	Slow, Fast int    // slow pairs it explains, fast pairs that cross it
}

// Evaluate judges f: slow links and ranks against f's medians, and, when
// base is not nil, drift against it. It refuses (ErrShape) a baseline of
// another shape.
func Evaluate(f, base *Figures, th Thresholds) (*Report, error) {
	th, err := th.WithDefaults()
	if err != nil {
		return nil, err
	}
	if err := f.validate(); err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	r := &Report{Figures: f, Baseline: base, Thresholds: th}
	if base != nil {
		if err := CheckShape(base.Shape, f.Shape); err != nil {
			return nil, err
		}
	}
	r.medians()
	r.slow()
	if base != nil {
		r.drift()
	}
	return r, nil
}

// medians computes each transport's reference over its measured pairs.
func (r *Report) medians() {
	by := map[string][]Pair{}
	for _, p := range r.Figures.Pairs {
		if p.Err != "" {
			r.Broken = append(r.Broken, p)
			continue
		}
		by[p.Transport] = append(by[p.Transport], p)
	}
	for t, ps := range by {
		bw := make([]float64, 0, 2*len(ps))
		lat := make([]float64, 0, len(ps))
		for _, p := range ps {
			bw = append(bw, p.BWAB, p.BWBA)
			lat = append(lat, p.LatUs)
		}
		slices.Sort(bw)
		slices.Sort(lat)
		// The better middle: bw's upper, latency's lower.
		r.Medians = append(r.Medians, Median{Transport: t, BW: bw[len(bw)/2], LatUs: lat[(len(lat)-1)/2], Pairs: len(ps)})
	}
	sort.Slice(r.Medians, func(i, j int) bool { return r.Medians[i].Transport < r.Medians[j].Transport })
}

func (r *Report) median(transport string) Median {
	for _, m := range r.Medians {
		if m.Transport == transport {
			return m
		}
	}
	return Median{}
}

// slow finds the slow pairs, then the ranks most of whose pairs are slow
// or broken.
func (r *Report) slow() {
	n := r.Figures.Ranks
	bad := make([]int, n)
	for _, p := range r.Figures.Pairs {
		if p.Err != "" {
			bad[p.A]++
			bad[p.B]++
			continue
		}
		m := r.median(p.Transport)
		s := SlowLink{Pair: p, Median: m,
			SlowBW:  p.BW() < (1-r.Thresholds.BW)*m.BW,
			SlowLat: p.LatUs > (1+r.Thresholds.Lat)*m.LatUs}
		if s.SlowBW || s.SlowLat {
			r.Slow = append(r.Slow, s)
			bad[p.A]++
			bad[p.B]++
		}
	}
	slowRank := make([]bool, n)
	for rank, k := range bad {
		// Most of its n-1 pairs; with 2 ranks a single pair is no rank's fault.
		if n > 2 && 2*k > n-1 {
			slowRank[rank] = true
			r.SlowRanks = append(r.SlowRanks, SlowRank{Rank: rank, Slow: k, Pairs: n - 1})
		}
	}
	for _, s := range r.Slow {
		if !slowRank[s.A] && !slowRank[s.B] {
			r.SlowLinks = append(r.SlowLinks, s)
		}
	}
	for _, p := range r.Broken {
		if !slowRank[p.A] && !slowRank[p.B] {
			r.BrokenLinks = append(r.BrokenLinks, p)
		}
	}
}

// drift lists the figures beyond the thresholds against the baseline, and
// notes the ranks that moved to another host.
func (r *Report) drift() {
	f, base := r.Figures, r.Baseline
	bwLow := func(now, b float64) bool { return now < (1-r.Thresholds.BW)*b }
	// The all-reduce first: it is what a job sees.
	if f.AllReduce.Err == "" && base.AllReduce.Err == "" && bwLow(f.AllReduce.BusBW, base.AllReduce.BusBW) {
		r.Drifts = append(r.Drifts, Drift{What: "all_reduce busbw", Unit: "GB/s", Now: f.AllReduce.BusBW, Base: base.AllReduce.BusBW})
	}
	for _, p := range f.Pairs {
		bp, ok := base.Pair(p.A, p.B)
		if !ok || bp.Err != "" || p.Err != "" {
			continue // a broken pair is reported as broken
		}
		if bwLow(p.BWAB, bp.BWAB) {
			r.Drifts = append(r.Drifts, Drift{What: fmt.Sprintf("%d->%d bw", p.A, p.B), Unit: "GB/s", Now: p.BWAB, Base: bp.BWAB})
		}
		if bwLow(p.BWBA, bp.BWBA) {
			r.Drifts = append(r.Drifts, Drift{What: fmt.Sprintf("%d->%d bw", p.B, p.A), Unit: "GB/s", Now: p.BWBA, Base: bp.BWBA})
		}
		if p.LatUs > (1+r.Thresholds.Lat)*bp.LatUs {
			r.Drifts = append(r.Drifts, Drift{What: p.Name() + " latency", Unit: "us", Now: p.LatUs, Base: bp.LatUs})
		}
	}
	if len(base.Hosts) == len(f.Hosts) {
		for i := range f.Hosts {
			if f.Hosts[i] != base.Hosts[i] {
				r.Notes = append(r.Notes, fmt.Sprintf("rank %d runs on %s, in the baseline on %s", i, f.Hosts[i], base.Hosts[i]))
			}
		}
	}
}

// Failed says whether the fabric fails the gate: a slow or broken pair, a
// figure drifted beyond the thresholds, a wrong or broken all-reduce.
func (r *Report) Failed() bool {
	a := r.Figures.AllReduce
	return len(r.Slow)+len(r.Broken)+len(r.Drifts) > 0 || a.Wrong > 0 || a.Err != ""
}

// Summary is the verdict in one line: "passed", or what failed.
func (r *Report) Summary() string {
	if !r.Failed() {
		return "passed"
	}
	var why []string
	count := func(n int, what string) {
		switch {
		case n == 1:
			why = append(why, "1 "+what)
		case n > 1:
			why = append(why, fmt.Sprintf("%d %ss", n, what))
		}
	}
	count(len(r.SlowRanks), "slow rank")
	count(len(r.SlowLinks), "slow link")
	count(len(r.BrokenLinks), "broken pair")
	if len(r.Drifts) > 0 {
		why = append(why, fmt.Sprintf("%d figure%s drifted from the baseline", len(r.Drifts), plural(len(r.Drifts))))
	}
	if e := r.Figures.AllReduce.Err; e != "" {
		why = append(why, "all_reduce broken")
	}
	if w := r.Figures.AllReduce.Wrong; w > 0 {
		why = append(why, fmt.Sprintf("all_reduce: %d wrong element%s", w, plural(int(w))))
	}
	return "FAILED: " + strings.Join(why, ", ")
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
