package main

import (
	"fmt"
	"os"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/ibex-rdma/ibex/internal/plotstyle"
	"github.com/ibex-rdma/ibex/internal/units"
	"github.com/ibex-rdma/ibex/sim/plan"
)

// planPlotTitle names the GPUs, the all-reduce and the engine.
func planPlotTitle(gpus int, size int64, routing string) string {
	return fmt.Sprintf("ibex sim plan: %d GPUs, %s all-reduce (flow engine, %s routing)", gpus, units.FormatBytes(size), routing)
}

// Plan plot's size: three panels side by side, 1440 x 480 pixels.
const (
	planPlotWidth  = 15 * vg.Inch
	planPlotHeight = 5 * vg.Inch
)

// plotPlan draws three panels of bars, one bar (or group) per design
// (named with its link layer): network cost per GPU, network power per
// GPU, and the all-reduce's time by each algorithm, the last panel's
// legend to its right; a panel's axis is log where its values span
// decades.
func plotPlan(file string, gpus int, size int64, routing string, rows []*plan.Row) error {
	names := make([]string, len(rows))
	for i, r := range rows {
		names[i] = fmt.Sprintf("%s\n(%s)", wrapWords(r.Design, 14), r.LinkLayer)
	}
	panel := func(title, ylabel string, series []string, value func(r *plan.Row, k int) float64) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		var all []float64
		for k := range series {
			for _, r := range rows {
				all = append(all, value(r, k))
			}
		}
		plotstyle.ValueAxis(&p.Y, ylabel, all)
		ymin, ymax := p.Y.Min, p.Y.Max
		p.Add(plotter.NewGrid())
		w := vg.Points(60 / float64(len(series)))
		for k, name := range series {
			b := &plotstyle.Bars{Width: w, Color: plotstyle.Palette(k)}
			for _, r := range rows {
				b.Values = append(b.Values, value(r, k))
			}
			b.Offset = w * vg.Length(float64(k)-float64(len(series)-1)/2)
			p.Add(b)
			if len(series) > 1 {
				p.Legend.Add(name, b)
			}
		}
		// Bars' data ranges reach 0: back to the axis' own.
		p.Y.Min, p.Y.Max = ymin, ymax
		p.NominalX(names...)
		return p, nil
	}
	costP, err := panel("network cost per GPU", "USD", []string{"cost"}, func(r *plan.Row, _ int) float64 { return r.Cost.PerGPU.CostUSD })
	if err != nil {
		return fmt.Errorf("sim plan: plot: %w", err)
	}
	powerP, err := panel("network power per GPU", "W", []string{"power"}, func(r *plan.Row, _ int) float64 { return r.Cost.PerGPU.PowerW })
	if err != nil {
		return fmt.Errorf("sim plan: plot: %w", err)
	}
	var algos []string
	if len(rows) > 0 {
		for _, a := range rows[0].Results {
			algos = append(algos, a.AllReduce)
		}
	}
	timeP, err := panel(fmt.Sprintf("%s all-reduce time", units.FormatBytes(size)), "ms", algos,
		func(r *plan.Row, k int) float64 { return r.Results[k].TimeUS / 1e3 })
	if err != nil {
		return fmt.Errorf("sim plan: plot: %w", err)
	}
	img := vgimg.New(planPlotWidth, planPlotHeight)
	dc := draw.New(img)
	title := plot.New().Title
	title.Text = planPlotTitle(gpus, size, routing)
	title.TextStyle.Font.Size = vg.Points(14)
	th := title.TextStyle.Rectangle(title.Text).Size().Y + vg.Points(6)
	dc.FillText(title.TextStyle, vg.Point{X: dc.Center().X, Y: dc.Max.Y - vg.Points(2)}, title.Text)
	body := draw.Crop(dc, 0, 0, 0, -th)
	tiles := draw.Tiles{Rows: 1, Cols: 3, PadX: vg.Points(20), PadY: vg.Points(10), PadTop: vg.Points(10), PadBottom: vg.Points(10), PadLeft: vg.Points(10), PadRight: vg.Points(10)}
	// The algorithms' legend to the right of all three panels, so that
	// they keep one width.
	leg := timeP.Legend
	timeP.Legend = plot.NewLegend()
	if lw := leg.Rectangle(body).Size().X; lw > 0 {
		legC := draw.Crop(body, body.Size().X-lw-vg.Points(10), 0, 0, -vg.Points(30))
		leg.Top, leg.Left = true, true
		leg.Draw(legC)
		body = draw.Crop(body, 0, -(lw + vg.Points(20)), 0, 0)
	}
	canvases := plot.Align([][]*plot.Plot{{costP, powerP, timeP}}, tiles, body)
	plotstyle.DrawLegendRight(costP, canvases[0][0])
	plotstyle.DrawLegendRight(powerP, canvases[0][1])
	plotstyle.DrawLegendRight(timeP, canvases[0][2])
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("sim plan: plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("sim plan: plot %s: %w", file, err)
	}
	return f.Close()
}

// wrapWords breaks s at spaces into lines of at most n characters (a
// longer word stands alone).
func wrapWords(s string, n int) string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		switch {
		case line == "":
			line = w
		case len(line)+1+len(w) <= n:
			line += " " + w
		default:
			lines = append(lines, line)
			line = w
		}
	}
	return strings.Join(append(lines, line), "\n")
}
