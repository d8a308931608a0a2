package perf

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Plot draws size against bandwidth (average and peak) or latency
// (typical and 99%) into a PNG, SVG or PDF file (by its extension).
func Plot(file string, t Test, device string, results []Result) error {
	if len(results) == 0 {
		return fmt.Errorf("perf: plot %s: no results", file)
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("ibex perf %s on %s", t, device)
	p.X.Label.Text = "message size [bytes]"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	series := func(f func(Result) float64) plotter.XYs {
		pts := make(plotter.XYs, 0, len(results))
		for _, r := range results {
			pts = append(pts, plotter.XY{X: float64(r.Bytes), Y: f(r)})
		}
		return pts
	}
	var lines []any
	if t.Latency() {
		p.Y.Label.Text = "latency [usec]"
		lines = []any{"t_typical", series(func(r Result) float64 { return r.TTypical }),
			"99% percentile", series(func(r Result) float64 { return r.P99 })}
	} else {
		p.Y.Label.Text = "bandwidth [" + results[0].Unit + "]"
		lines = []any{"BW average", series(func(r Result) float64 { return r.BWAvg }),
			"BW peak", series(func(r Result) float64 { return r.BWPeak })}
	}
	p.Add(plotter.NewGrid())
	if err := plotutilAdd(p, lines...); err != nil {
		return fmt.Errorf("perf: plot %s: %w", file, err)
	}
	if err := p.Save(8*vg.Inch, 5*vg.Inch, file); err != nil {
		return fmt.Errorf("perf: plot %s: %w", file, err)
	}
	return nil
}

// plotutilAdd adds named line-and-point series (name, XYs, name, XYs...)
// with distinct colours and a legend.
func plotutilAdd(p *plot.Plot, vs ...any) error {
	for i := 0; i+1 < len(vs); i += 2 {
		name, _ := vs[i].(string)
		xys, _ := vs[i+1].(plotter.XYs)
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		c := plotColors[(i/2)%len(plotColors)]
		l.Color, pts.Color = c, c
		p.Add(l, pts)
		p.Legend.Add(name, l, pts)
	}
	return nil
}

var plotColors = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
}
