package perf

import (
	"fmt"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"

	"github.com/ibex-rdma/ibex/internal/plotstyle"
)

// Plot draws size against bandwidth (average and peak) or latency
// (typical and 99%) into a PNG, SVG or PDF file (by its extension), in
// internal/plotstyle's look: sizes on a log axis labelled 8, 64, 1K ...,
// the value axis log where the values span decades, the legend to the
// right. The title names the test, the device and the connection.
func Plot(file string, t Test, device string, results []Result) error {
	if len(results) == 0 {
		return fmt.Errorf("perf: plot %s: no results", file)
	}
	p := plot.New()
	p.Title.Text = PlotTitle(t, device, results)
	series := func(f func(Result) float64) plotter.XYs {
		pts := make(plotter.XYs, 0, len(results))
		for _, r := range results {
			pts = append(pts, plotter.XY{X: float64(r.Bytes), Y: f(r)})
		}
		return pts
	}
	var names []string
	var lines []plotter.XYs
	ylabel := "bandwidth [" + results[0].Unit + "]"
	if t.Latency() {
		ylabel = "latency [usec]"
		names = []string{"t_typical", "99% percentile"}
		lines = []plotter.XYs{series(func(r Result) float64 { return r.TTypical }), series(func(r Result) float64 { return r.P99 })}
	} else {
		names = []string{"BW average", "BW peak"}
		lines = []plotter.XYs{series(func(r Result) float64 { return r.BWAvg }), series(func(r Result) float64 { return r.BWPeak })}
	}
	var sizes, vals []float64
	for _, l := range lines {
		for _, q := range l {
			sizes, vals = append(sizes, q.X), append(vals, q.Y)
		}
	}
	plotstyle.SizeAxis(&p.X, "message size [bytes]", sizes)
	logY := plotstyle.ValueAxis(&p.Y, ylabel, vals)
	p.Add(plotter.NewGrid())
	for i, l := range lines {
		if logY {
			l = plotstyle.Positive(l)
		}
		if err := plotstyle.Line(p, names[i], l, plotstyle.Palette(i)); err != nil {
			return fmt.Errorf("perf: plot %s: %w", file, err)
		}
	}
	if err := plotstyle.Save(p, plotstyle.Width, plotstyle.Height, file); err != nil {
		return fmt.Errorf("perf: plot %s: %w", file, err)
	}
	return nil
}

// PlotTitle names the test, the device and the connection: "ibex perf
// write_bw on shm0: client and server, RC, 5000 iterations".
func PlotTitle(t Test, device string, results []Result) string {
	s := fmt.Sprintf("ibex perf %s on %s: client and server, RC", t, device)
	if len(results) > 0 && results[0].Iters > 0 {
		s += fmt.Sprintf(", %d iterations", results[0].Iters)
	}
	return s
}
