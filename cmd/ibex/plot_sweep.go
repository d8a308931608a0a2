package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"

	"github.com/ibex-rdma/ibex/internal/plotstyle"
)

// sweepPlotTitle names what ran, the ranks, the engine and the seeds:
// "ibex sim sweep all_reduce: 128 ranks, flow engine, 20 seeds".
func sweepPlotTitle(what, engine string, rows []sweepRow) string {
	ranks := map[int]bool{}
	seeds := map[uint64]bool{}
	for _, r := range rows {
		ranks[r.Ranks] = true
		seeds[r.Seed] = true
	}
	var rs []string
	for n := range ranks {
		rs = append(rs, strconv.Itoa(n))
	}
	sort.Slice(rs, func(a, b int) bool { x, _ := strconv.Atoi(rs[a]); y, _ := strconv.Atoi(rs[b]); return x < y })
	s := fmt.Sprintf("ibex sim sweep %s: %s ranks, %s engine", what, strings.Join(rs, "/"), engine)
	if len(seeds) == 1 {
		for seed := range seeds {
			s += fmt.Sprintf(", seed %d", seed)
		}
	} else {
		s += fmt.Sprintf(", %d seeds", len(seeds))
	}
	return s
}

// plotSweep draws busbw against size, one line per topology, algorithm
// and routing, at the median over seeds, with the min-max over seeds as
// a band and error bars where there are several.
func plotSweep(file, what, engine string, rows []sweepRow) error {
	type key struct{ topo, algo, routing string }
	series := map[key]map[int64][]float64{}
	var order []key
	var sizes, vals []float64
	seeds := map[uint64]bool{}
	for _, r := range rows {
		if r.Bytes <= 0 {
			continue
		}
		k := key{shortName(r.Topology), r.Algo, r.Routing}
		if series[k] == nil {
			series[k] = map[int64][]float64{}
			order = append(order, k)
		}
		series[k][r.Bytes] = append(series[k][r.Bytes], r.BusBW)
		sizes, vals = append(sizes, float64(r.Bytes)), append(vals, r.BusBW)
		seeds[r.Seed] = true
	}
	p := plot.New()
	p.Title.Text = sweepPlotTitle(what, engine, rows)
	plotstyle.SizeAxis(&p.X, "size [bytes]", sizes)
	ylabel := "busbw [GB/s]"
	if len(seeds) > 1 {
		ylabel = fmt.Sprintf("busbw [GB/s], median and min-max of %d seeds", len(seeds))
	}
	logY := plotstyle.ValueAxis(&p.Y, ylabel, vals)
	p.Add(plotter.NewGrid())
	spreads := make([][]plotstyle.Spread, len(order))
	for i, k := range order {
		for size, bw := range series[k] {
			spreads[i] = append(spreads[i], plotstyle.Spread{X: float64(size), Vals: bw})
		}
		sort.Slice(spreads[i], func(a, b int) bool { return spreads[i][a].X < spreads[i][b].X })
		if err := plotstyle.SpreadBand(p, spreads[i], plotstyle.Palette(i), logY); err != nil {
			return fmt.Errorf("sim sweep: plot: %w", err)
		}
	}
	for i, k := range order {
		label := k.topo
		if k.algo != "" {
			label += " " + k.algo
		}
		dodge := 1.0
		if len(seeds) > 1 {
			dodge = plotstyle.Dodge(i, len(order))
		}
		if err := plotstyle.SpreadLine(p, label+" "+k.routing, spreads[i], plotstyle.Palette(i), logY, dodge); err != nil {
			return fmt.Errorf("sim sweep: plot: %w", err)
		}
	}
	if err := plotstyle.Save(p, plotstyle.Width, plotstyle.Height, file); err != nil {
		return fmt.Errorf("sim sweep: plot %s: %w", file, err)
	}
	return nil
}
