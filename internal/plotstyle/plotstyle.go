// Package plotstyle is the one look of every `--plot` of the ibex command
// (perf, coll, sim sweep, sim plan), on gonum.org/v1/plot: the legend
// outside the data area (to the right of it), a log axis where the values
// span decades (UseLog), one notation for every tick label (FormatBytes
// for message sizes: 8, 64, 1K, 64K, 1M; FormatNumber for values: 0.01,
// 2.5, 400, 10K), a palette, and the spread over seeds as a min-max band
// with error bars.
package plotstyle

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// LogRatio is the spread, largest over smallest positive value, above
// which UseLog chooses a log axis: past it a linear axis flattens the
// small values onto the floor.
const LogRatio = 30

// Width and Height are the size of a single plot: 8 x 5 inches, 768 x 480
// pixels in PNG (96 dpi, vgimg's default).
const (
	Width  = 8 * vg.Inch
	Height = 5 * vg.Inch
)

// UseLog reports whether values should go on a log axis: the largest
// positive value is more than LogRatio times the smallest. Non-positive
// values, which a log axis cannot show, do not count; with fewer than two
// positive values it is false.
func UseLog(vals []float64) bool {
	lo, hi, ok := PositiveRange(vals)
	return ok && lo < hi && hi/lo > LogRatio
}

// PositiveRange returns the smallest and largest positive finite value.
func PositiveRange(vals []float64) (lo, hi float64, ok bool) {
	lo, hi = math.Inf(1), 0
	for _, v := range vals {
		if v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) {
			lo, hi, ok = math.Min(lo, v), math.Max(hi, v), true
		}
	}
	return lo, hi, ok
}

// FormatBytes labels a byte size in powers of 1024, as ibex's flags take
// them: 8, 512, 1K, 64K, 1M, 16M, 1G (1.5K where not a whole multiple).
func FormatBytes(v float64) string {
	suffixes := []string{"", "K", "M", "G", "T", "P"}
	i := 0
	for math.Abs(v) >= 1024 && i < len(suffixes)-1 {
		v /= 1024
		i++
	}
	return trim(v) + suffixes[i]
}

// FormatNumber labels a value in one notation: plain decimals below
// 10,000 (0.001, 0.25, 2, 400, 5000) and 1000-based suffixes above (10K,
// 250K, 1M, 2.5G), never exponents.
func FormatNumber(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e12:
		return trim(v/1e12) + "T"
	case a >= 1e9:
		return trim(v/1e9) + "G"
	case a >= 1e6:
		return trim(v/1e6) + "M"
	case a >= 1e4:
		return trim(v/1e3) + "K"
	}
	return trim(v)
}

// trim prints v with at most 4 significant digits and no trailing zeros
// or exponent.
func trim(v float64) string {
	if v == 0 {
		return "0"
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 4, 64), 64)
	return strconv.FormatFloat(r, 'f', -1, 64)
}

// SizeTicks marks a log axis of byte sizes at powers of two, labelling
// every Step-th (chosen so that at most 10 are labelled: 8, 64, 512, 4K
// ...) with FormatBytes.
type SizeTicks struct{}

// Ticks implements plot.Ticker.
func (SizeTicks) Ticks(min, max float64) []plot.Tick {
	if min <= 0 || max < min {
		return nil
	}
	lo, hi := int(math.Floor(math.Log2(min)+1e-9)), int(math.Ceil(math.Log2(max)-1e-9))
	step := SizeStep(hi - lo + 1)
	var ticks []plot.Tick
	for e := lo; e <= hi; e++ {
		v := math.Ldexp(1, e)
		if v < min*(1-1e-9) || v > max*(1+1e-9) {
			continue
		}
		t := plot.Tick{Value: v}
		if e%step == 0 {
			t.Label = FormatBytes(v)
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// SizeStep is the exponent step between labelled powers of two when n
// of them are on the axis: 1, 2, 3, 5 or 10, at most 10 labels.
func SizeStep(n int) int {
	for _, s := range []int{1, 2, 3, 5, 10} {
		if (n+s-1)/s <= 10 {
			return s
		}
	}
	return 10
}

// LogTicks marks a log value axis at decades, labelled with FormatNumber,
// with unlabelled minor ticks between them; where two decades or fewer
// are on the axis 2 and 5 are labelled too.
type LogTicks struct{}

// Ticks implements plot.Ticker.
func (LogTicks) Ticks(min, max float64) []plot.Tick {
	if min <= 0 || max < min {
		return nil
	}
	lo, hi := int(math.Floor(math.Log10(min))), int(math.Ceil(math.Log10(max)))
	decades := 0
	for e := lo; e <= hi; e++ {
		if d := math.Pow10(e); d >= min*(1-1e-9) && d <= max*(1+1e-9) {
			decades++
		}
	}
	few := decades <= 2
	var ticks []plot.Tick
	for e := lo; e <= hi; e++ {
		d := math.Pow10(e)
		for i := 1; i < 10; i++ {
			v := d * float64(i)
			if v < min*(1-1e-9) || v > max*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: v}
			if i == 1 || few && (i == 2 || i == 5) {
				t.Label = FormatNumber(v)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// LinearTicks are gonum's default ticks labelled with FormatNumber.
type LinearTicks struct{}

// Ticks implements plot.Ticker.
func (LinearTicks) Ticks(min, max float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = FormatNumber(ticks[i].Value)
		}
	}
	return ticks
}

// SizeAxis makes a a log axis of byte sizes spanning sizes (widened to
// a factor of two either side when there is only one size).
func SizeAxis(a *plot.Axis, label string, sizes []float64) {
	a.Label.Text = label
	a.Scale = plot.LogScale{}
	a.Tick.Marker = SizeTicks{}
	lo, hi, ok := PositiveRange(sizes)
	if !ok {
		lo, hi = 1, 2
	}
	if lo == hi {
		lo, hi = lo/2, hi*2
	}
	a.Min, a.Max = lo, hi
}

// ValueAxis makes a value axis for vals: log (with LogTicks, spanning the
// positive values out to whole decades where that is near) when UseLog,
// else linear from 0 (with LinearTicks). It returns whether it is log;
// on a log axis the caller must leave out non-positive values (Positive).
func ValueAxis(a *plot.Axis, label string, vals []float64) bool {
	a.Label.Text = label
	if UseLog(vals) {
		lo, hi, _ := PositiveRange(vals)
		a.Scale = plot.LogScale{}
		a.Tick.Marker = LogTicks{}
		a.Min, a.Max = lo/1.25, hi*1.25
		// Out to the decade if it is within a factor 2, so that the ends
		// are labelled.
		if d := math.Pow10(int(math.Floor(math.Log10(lo)))); lo/d < 2 {
			a.Min = d
		}
		if d := math.Pow10(int(math.Ceil(math.Log10(hi)))); d/hi < 2 {
			a.Max = d
		}
		return true
	}
	a.Scale = plot.LinearScale{}
	a.Tick.Marker = LinearTicks{}
	a.Min = 0
	if _, hi, ok := PositiveRange(vals); ok {
		a.Max = hi * 1.05
	} else {
		a.Max = 1
	}
	return false
}

// Positive returns the points of xys with a positive Y (a log axis cannot
// show the others).
func Positive(xys plotter.XYs) plotter.XYs {
	out := make(plotter.XYs, 0, len(xys))
	for _, p := range xys {
		if p.Y > 0 {
			out = append(out, p)
		}
	}
	return out
}

// Palette is the colour of series i (tableau 10).
func Palette(i int) color.Color {
	p := []color.RGBA{
		{0x1f, 0x77, 0xb4, 0xff}, {0xd6, 0x27, 0x28, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xff, 0x7f, 0x0e, 0xff},
		{0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff}, {0x7f, 0x7f, 0x7f, 0xff},
		{0xbc, 0xbd, 0x22, 0xff}, {0x17, 0xbe, 0xcf, 0xff},
	}
	return p[i%len(p)]
}

// Line adds a line with points in colour c, named in the legend.
func Line(p *plot.Plot, name string, xys plotter.XYs, c color.Color) error {
	if len(xys) == 0 {
		return nil
	}
	l, sc, err := plotter.NewLinePoints(xys)
	if err != nil {
		return err
	}
	l.Color, sc.Color = c, c
	l.Width = vg.Points(1.5)
	p.Add(l, sc)
	p.Legend.Add(name, l, sc)
	return nil
}

// Spread is the values of one point over seeds (or repetitions).
type Spread struct {
	X    float64
	Vals []float64
}

// Median, Min and Max of the spread's values (0 without any).
func (s Spread) Median() float64 { return quantile(s.Vals, 0.5) }

// Min is the smallest value.
func (s Spread) Min() float64 { return quantile(s.Vals, 0) }

// Max is the largest value.
func (s Spread) Max() float64 { return quantile(s.Vals, 1) }

func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if q >= 1 {
		return s[len(s)-1]
	}
	if q <= 0 {
		return s[0]
	}
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

type errXYs struct {
	plotter.XYs
	lo, hi []float64
}

func (e errXYs) YError(i int) (float64, float64) { return e.lo[i], e.hi[i] }

// SpreadBand adds the min-max range of pts, where a point has more than
// one value and there are two or more points, as a translucent band in
// colour c. Add every series' band before the lines (SpreadLine), so that
// no band covers a line.
func SpreadBand(p *plot.Plot, pts []Spread, c color.Color, logY bool) error {
	var lo, hi plotter.XYs
	spread := false
	for _, s := range pts {
		if logY && s.Min() <= 0 {
			continue
		}
		lo = append(lo, plotter.XY{X: s.X, Y: s.Min()})
		hi = append(hi, plotter.XY{X: s.X, Y: s.Max()})
		spread = spread || len(s.Vals) > 1
	}
	if !spread || len(lo) < 2 {
		return nil
	}
	ring := append(plotter.XYs{}, lo...)
	for i := len(hi) - 1; i >= 0; i-- {
		ring = append(ring, hi[i])
	}
	poly, err := plotter.NewPolygon(ring)
	if err != nil {
		return err
	}
	r, g, b, _ := c.RGBA()
	poly.Color = color.NRGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), 0x38}
	poly.LineStyle.Width = 0
	p.Add(poly)
	return nil
}

// SpreadLine adds the medians of pts as a line with points in colour c,
// named in the legend, and, where a point has more than one value, their
// min-max range as error bars. Each X is multiplied by dodge (1: none),
// so that the error bars of series at the same sizes stand apart. On a
// log axis (logY) non-positive values are left out.
func SpreadLine(p *plot.Plot, name string, pts []Spread, c color.Color, logY bool, dodge float64) error {
	var med plotter.XYs
	var elo, ehi []float64
	spread := false
	for _, s := range pts {
		m, a, b := s.Median(), s.Min(), s.Max()
		if logY && a <= 0 {
			continue
		}
		med = append(med, plotter.XY{X: s.X * dodge, Y: m})
		elo, ehi = append(elo, m-a), append(ehi, b-m)
		spread = spread || len(s.Vals) > 1
	}
	if len(med) == 0 {
		return nil
	}
	if spread {
		eb, err := plotter.NewYErrorBars(errXYs{med, elo, ehi})
		if err != nil {
			return err
		}
		eb.Color = c
		p.Add(eb)
	}
	return Line(p, name, med, c)
}

// Dodge is the factor SpreadLine's dodge for series i of n on a log size
// axis: 2^(0.05(i-(n-1)/2)), a few pixels apart, centred on 1.
func Dodge(i, n int) float64 {
	return math.Exp2(0.05 * (float64(i) - float64(n-1)/2))
}

// Save writes p, w x h, to file (format by its extension: png, svg, pdf,
// eps, jpg, tif) with its legend outside the data area, to the right.
func Save(p *plot.Plot, w, h vg.Length, file string) error {
	format := strings.ToLower(strings.TrimPrefix(filepath.Ext(file), "."))
	c, err := draw.NewFormattedCanvas(w, h, format)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	DrawLegendRight(p, draw.New(c))
	return writeFile(file, c)
}

// LegendMaxFrac is the widest a legend may be, as a fraction of the
// canvas, to stand to the right of the data; a wider one goes below.
const LegendMaxFrac = 0.25

// DrawLegendRight draws p into dc, its data area narrowed so that the
// legend (if any) stands to the right of it, top-aligned with it, or,
// when wider than LegendMaxFrac of dc, below it.
func DrawLegendRight(p *plot.Plot, dc draw.Canvas) {
	leg := p.Legend
	p.Legend = plot.NewLegend()
	defer func() { p.Legend = leg }()
	if _, log := p.Y.Scale.(plot.LogScale); log && p.Y.Label.Text != "" {
		// gonum (v0.17) pads a vertical axis for its label as if centred
		// at the linear midpoint of the range, which on a log axis is near
		// the top: it squeezes the data area. Draw the label here instead.
		lbl := p.Y.Label
		p.Y.Label.Text = ""
		defer func() { p.Y.Label = lbl }()
		sty := lbl.TextStyle
		sty.Rotation += math.Pi / 2
		h := lbl.TextStyle.Height(lbl.Text)
		descent := lbl.TextStyle.FontExtents().Descent
		dc.FillText(sty, vg.Point{X: dc.Min.X + h - descent, Y: dc.Center().Y}, lbl.Text)
		dc = draw.Crop(dc, h+lbl.Padding, 0, 0, 0)
	}
	r := leg.Rectangle(dc)
	wl := r.Max.X - r.Min.X
	if wl <= 0 {
		p.Draw(dc)
		return
	}
	pad := vg.Points(12)
	if wl > (dc.Max.X-dc.Min.X)*LegendMaxFrac {
		// Too wide for the side: below the plot, one entry a line.
		hl := r.Max.Y - r.Min.Y
		p.Draw(draw.Crop(dc, 0, 0, hl+pad, 0))
		legC := draw.Crop(dc, pad, 0, 0, 0)
		legC.Max.Y = legC.Min.Y + hl + pad/2
		leg.Top, leg.Left = true, true
		leg.Draw(legC)
		return
	}
	p.Draw(draw.Crop(dc, 0, -(wl + 2*pad), 0, 0))
	legC := draw.Crop(dc, dc.Max.X-dc.Min.X-wl-pad, 0, 0, 0)
	top := p.Title.TextStyle.Rectangle(p.Title.Text).Size().Y + p.Title.Padding
	if p.Title.Text == "" {
		top = 0
	}
	legC.Max.Y -= top
	leg.Top, leg.Left = true, true
	leg.Draw(legC)
}

func writeFile(file string, w io.WriterTo) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := w.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Bars is a bar chart whose bars stand on the bottom of the data area
// rather than on 0, so that it works on a log axis as well as a linear
// one from 0 (gonum's BarChart draws from 0, which a log axis cannot
// place). Bar i is at X = i (plot.NominalX's positions) plus Offset.
type Bars struct {
	Values []float64
	Width  vg.Length
	Offset vg.Length
	Color  color.Color
}

// Plot implements plot.Plotter.
func (b *Bars) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, trY := plt.Transforms(&c)
	c.SetColor(b.Color)
	for i, v := range b.Values {
		if v <= plt.Y.Min {
			continue
		}
		x := trX(float64(i)) + b.Offset
		top := trY(math.Min(v, plt.Y.Max))
		r := vg.Rectangle{Min: vg.Point{X: x - b.Width/2, Y: c.Min.Y}, Max: vg.Point{X: x + b.Width/2, Y: top}}
		c.Fill(r.Path())
	}
}

// DataRange implements plot.DataRanger: the bars' X positions; Y is left
// to the axis (ValueAxis).
func (b *Bars) DataRange() (xmin, xmax, ymin, ymax float64) {
	return -0.5, float64(len(b.Values)) - 0.5, math.Inf(1), math.Inf(-1)
}

// Thumbnail implements plot.Thumbnailer for the legend.
func (b *Bars) Thumbnail(c *draw.Canvas) {
	c.SetColor(b.Color)
	c.Fill(c.Rectangle.Path())
}
