package main

import (
	"fmt"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"

	"github.com/ibex-rdma/ibex/coll"
	"github.com/ibex-rdma/ibex/internal/plotstyle"
)

// collPlotTitle names the collective, the ranks and the devices they
// reach each other on: "ibex coll all_reduce: 2 ranks on shm0".
func collPlotTitle(name string, ranks int, c interface{ Transport(int) string }) string {
	seen := map[string]bool{}
	var ts []string
	for r := range ranks {
		if t := c.Transport(r); t != "" && !seen[t] {
			seen[t] = true
			ts = append(ts, t)
		}
	}
	sort.Strings(ts)
	s := fmt.Sprintf("ibex coll %s: %d ranks", name, ranks)
	if len(ts) > 0 {
		s += " on " + strings.Join(ts, ",")
	}
	return s
}

// plotBusBW draws busbw against size, out of place and in place (per
// type, operation and root where the run loops over several), in
// internal/plotstyle's look.
func plotBusBW(file, title string, rows []coll.BenchRow) error {
	type key struct {
		typ, op string
		root    int
	}
	var order []key
	byKey := map[key][]coll.BenchRow{}
	var sizes, vals []float64
	for _, r := range rows {
		k := key{r.Type, r.Redop, r.Root}
		if byKey[k] == nil {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], r)
		sizes = append(sizes, float64(r.Size))
		vals = append(vals, r.OOPBusBW, r.IPBusBW)
	}
	p := plot.New()
	p.Title.Text = title
	if len(order) == 1 && len(rows) > 0 {
		p.Title.Text += ", " + rows[0].Type + " " + rows[0].Redop
	}
	plotstyle.SizeAxis(&p.X, "size [bytes]", sizes)
	logY := plotstyle.ValueAxis(&p.Y, "busbw [GB/s]", vals)
	p.Add(plotter.NewGrid())
	i := 0
	for _, k := range order {
		prefix := ""
		if len(order) > 1 {
			prefix = k.typ + " " + k.op + " "
			if k.root >= 0 {
				prefix += fmt.Sprintf("root %d ", k.root)
			}
		}
		for _, s := range []struct {
			label string
			f     func(coll.BenchRow) float64
		}{{"out-of-place", func(r coll.BenchRow) float64 { return r.OOPBusBW }}, {"in-place", func(r coll.BenchRow) float64 { return r.IPBusBW }}} {
			pts := make(plotter.XYs, 0, len(byKey[k]))
			for _, r := range byKey[k] {
				pts = append(pts, plotter.XY{X: float64(r.Size), Y: s.f(r)})
			}
			if logY {
				pts = plotstyle.Positive(pts)
			}
			if err := plotstyle.Line(p, prefix+s.label, pts, plotstyle.Palette(i)); err != nil {
				return fmt.Errorf("coll: plot %s: %w", file, err)
			}
			i++
		}
	}
	if err := plotstyle.Save(p, plotstyle.Width, plotstyle.Height, file); err != nil {
		return fmt.Errorf("coll: plot %s: %w", file, err)
	}
	return nil
}
