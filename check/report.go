package check

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// maxListed is how many items a line of the verdict names before "... and
// N more".
const maxListed = 20

// WriteText prints the report: a header, one row per pair (perftest's
// units: GB/s, microseconds), the medians and the all-reduce as comment
// lines, then the verdict's lines, which start without '#' so that a
// script can grep them: "slow ranks: 3", "slow links: 1<->3 (bw 0.9 GB/s
// vs median 4.1 GB/s)", "drift: ...", "check: passed" or "check: FAILED:
// ...". baseline names the baseline file in the comparison's header.
func (r *Report) WriteText(w io.Writer, baseline string) error {
	ew := &errWriter{w: w}
	f := r.Figures
	c := f.Config
	ew.printf("# ibex check: %d ranks, transport %s, ibex %s\n", f.Ranks, f.Transport, f.Ibex)
	if f.Sim != nil {
		ew.printf("# simulated on %s (%s) by sim/flow", f.Sim.File, f.Topology)
		for _, d := range f.Sim.Degrade {
			ew.printf(", degrade %s", d)
		}
		for _, d := range f.Sim.Flap {
			ew.printf(", flap %s", d)
		}
		ew.printf("\n")
	}
	ew.printf("# bandwidth: %d B x %d each way per pair, best of %d; latency: %d ping-pongs of %d B; all_reduce: %d B float sum x %d\n",
		c.Bytes, c.Iters, c.Repeats, c.LatIters, LatBytes, c.AllReduceBytes, c.AllReduceIters)
	ew.printf("# thresholds: bandwidth %s below the reference, latency %s above\n", percent(r.Thresholds.BW), percent(r.Thresholds.Lat))
	ew.printf("#\n")
	if len(f.Hosts) == f.Ranks {
		for i, h := range f.Hosts {
			ew.printf("#  Rank %3d on %s\n", i, h)
		}
		ew.printf("#\n")
	}
	slow := map[[2]int]SlowLink{}
	for _, s := range r.Slow {
		slow[[2]int{s.A, s.B}] = s
	}
	ew.printf("# %9s  %9s  %8s  %8s  %9s\n", "pair", "transport", "bw a->b", "bw b->a", "latency")
	ew.printf("# %9s  %9s  %8s  %8s  %9s\n", "", "", "(GB/s)", "(GB/s)", "(us)")
	for _, p := range f.Pairs {
		mark := ""
		switch s, ok := slow[[2]int{p.A, p.B}]; {
		case p.Err != "":
			mark = "  broken: " + p.Err
		case ok && s.SlowBW && s.SlowLat:
			mark = "  slow bw, latency"
		case ok && s.SlowBW:
			mark = "  slow bw"
		case ok:
			mark = "  slow latency"
		}
		ew.printf("  %9s  %9s  %8s  %8s  %9s%s\n", p.Name(), p.Transport, num(p.BWAB), num(p.BWBA), num(p.LatUs), mark)
	}
	ew.printf("#\n")
	for _, m := range r.Medians {
		ew.printf("# median %s: bw %s GB/s, latency %s us (%d pairs)\n", m.Transport, num(m.BW), num(m.LatUs), m.Pairs)
	}
	a := f.AllReduce
	ew.printf("# all_reduce %d B: time %s us, algbw %s GB/s, busbw %s GB/s, #wrong %d\n", a.Bytes, num(a.TimeUs), num(a.AlgBW), num(a.BusBW), a.Wrong)
	if a.Err != "" {
		ew.printf("all_reduce broken: %s\n", a.Err)
	}
	ew.printf("#\n")

	if len(r.SlowRanks) > 0 {
		var ranks []string
		for _, s := range r.SlowRanks {
			ranks = append(ranks, strconv.Itoa(s.Rank))
		}
		ew.printf("slow ranks: %s\n", strings.Join(ranks, ", "))
		for _, s := range r.SlowRanks {
			var links []string
			for _, l := range r.Slow {
				if l.A == s.Rank || l.B == s.Rank {
					links = append(links, l.Name()+" "+r.why(l))
				}
			}
			for _, p := range r.Broken {
				if p.A == s.Rank || p.B == s.Rank {
					links = append(links, fmt.Sprintf("%s broken (%s)", p.Name(), p.Err))
				}
			}
			ew.printf("#   rank %d: %d of its %d pairs slow or broken: %s\n", s.Rank, s.Slow, s.Pairs, list(links))
		}
	}
	if len(r.SlowLinks) > 0 {
		var links []string
		for _, l := range r.SlowLinks {
			links = append(links, l.Name()+" "+r.why(l))
		}
		ew.printf("slow links: %s\n", list(links))
	}
	if len(r.BrokenLinks) > 0 {
		var links []string
		for _, p := range r.BrokenLinks {
			links = append(links, fmt.Sprintf("%s (%s)", p.Name(), p.Err))
		}
		ew.printf("broken pairs: %s\n", list(links))
	}
	if len(r.Suspects) > 0 {
		var cables []string
		for _, s := range r.Suspects {
			cables = append(cables, fmt.Sprintf("%s (%d slow pair%s cross it, %d fast)", s.Cable, s.Slow, plural(s.Slow), s.Fast))
		}
		ew.printf("suspect cables: %s\n", list(cables))
	}
	if r.Baseline != nil {
		b := r.Baseline
		ew.printf("baseline: %s (measured %s by ibex %s)\n", baseline, b.Created.Format("2006-01-02 15:04:05Z"), b.Ibex)
		for i, d := range r.Drifts {
			if i == maxListed {
				ew.printf("drift: ... and %d more\n", len(r.Drifts)-maxListed)
				break
			}
			ew.printf("drift: %s %s %s vs baseline %s %s (%+.0f%%)\n", d.What, num(d.Now), d.Unit, num(d.Base), d.Unit, 100*d.Change())
		}
		if len(r.Drifts) == 0 {
			ew.printf("drift: none beyond the thresholds\n")
		}
		for _, n := range r.Notes {
			ew.printf("note: %s\n", n)
		}
	}
	ew.printf("check: %s\n", r.Summary())
	return ew.err
}

// why says what is slow about a link, against its median.
func (r *Report) why(s SlowLink) string {
	var parts []string
	if s.SlowBW {
		p := fmt.Sprintf("bw %s GB/s vs median %s GB/s", num(s.BW()), num(s.Median.BW))
		// Name the direction when only one is slow.
		lim := (1 - r.Thresholds.BW) * s.Median.BW
		switch {
		case s.BWAB >= lim && s.BWBA < lim:
			p += fmt.Sprintf("; %d->%d only", s.B, s.A)
		case s.BWBA >= lim && s.BWAB < lim:
			p += fmt.Sprintf("; %d->%d only", s.A, s.B)
		}
		parts = append(parts, p)
	}
	if s.SlowLat {
		parts = append(parts, fmt.Sprintf("latency %s us vs median %s us", num(s.LatUs), num(s.Median.LatUs)))
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// list joins items, at most maxListed of them.
func list(items []string) string {
	if len(items) > maxListed {
		more := len(items) - maxListed
		items = append(items[:maxListed:maxListed], fmt.Sprintf("... and %d more", more))
	}
	return strings.Join(items, ", ")
}

// num prints a figure with three significant digits at least and no
// exponent for the ranges a fabric gives (0.0012 GB/s to 100000 us).
func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case v >= 0.01:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'g', 2, 64)
}

func percent(f float64) string { return strconv.FormatFloat(100*f, 'f', -1, 64) + "%" }

// errWriter keeps the first write error, so the report writes freely and
// checks once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}
