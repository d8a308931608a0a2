package plotstyle

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
)

func TestUseLog(t *testing.T) {
	for _, c := range []struct {
		vals []float64
		want bool
	}{
		{nil, false},
		{[]float64{5}, false},
		{[]float64{1, 2, 30}, false},      // exactly LogRatio: linear
		{[]float64{1, 2, 31}, true},       // past it: log
		{[]float64{0, 0.5, 10}, false},    // 0 does not count: 20x
		{[]float64{0, 0.001, 14}, true},   // coll's busbw at 8 B and 1 MiB
		{[]float64{7634, 12332}, false},   // plan's cost per GPU
		{[]float64{-3, 2, 1000}, true},    // -3 does not count: 500x
		{[]float64{13, 49.6, 0.16}, true}, // plan's 64K all-reduce times
	} {
		if got := UseLog(c.vals); got != c.want {
			t.Errorf("UseLog(%v) = %v, want %v", c.vals, got, c.want)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for v, want := range map[float64]string{
		1: "1", 8: "8", 64: "64", 512: "512", 1024: "1K", 1536: "1.5K", 65536: "64K",
		1 << 20: "1M", 16 << 20: "16M", 256 << 20: "256M", 1 << 30: "1G", 1 << 40: "1T",
	} {
		if got := FormatBytes(v); got != want {
			t.Errorf("FormatBytes(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestFormatNumber(t *testing.T) {
	for v, want := range map[float64]string{
		0: "0", 0.0001: "0.0001", 0.001: "0.001", 0.1: "0.1", 0.30000000000000004: "0.3", 2.5: "2.5",
		100: "100", 1000: "1000", 5000: "5000", 10000: "10K", 12000: "12K", 100000: "100K",
		1e6: "1M", 2.5e9: "2.5G", 3e12: "3T",
	} {
		if got := FormatNumber(v); got != want {
			t.Errorf("FormatNumber(%v) = %q, want %q", v, got, want)
		}
	}
}

func labels(ticks []plot.Tick) []string {
	var out []string
	for _, t := range ticks {
		if t.Label != "" {
			out = append(out, t.Label)
		}
	}
	return out
}

func TestSizeTicks(t *testing.T) {
	for _, c := range []struct {
		min, max float64
		want     string
	}{
		{8, 1024, "8 16 32 64 128 256 512 1K"},
		{8, 1 << 20, "16 64 256 1K 4K 16K 64K 256K 1M"},
		{2, 8 << 20, "8 64 512 4K 32K 256K 2M"},
		{1 << 20, 1 << 30, "1M 4M 16M 64M 256M 1G"},
		{8 << 20, 32 << 20, "8M 16M 32M"},
	} {
		got := strings.Join(labels(SizeTicks{}.Ticks(c.min, c.max)), " ")
		if got != c.want {
			t.Errorf("SizeTicks(%v, %v) = %q, want %q", c.min, c.max, got, c.want)
		}
	}
}

func TestLogTicks(t *testing.T) {
	for _, c := range []struct {
		min, max float64
		want     string
	}{
		{0.0001, 10, "0.0001 0.001 0.01 0.1 1 10"},
		{3, 100000, "10 100 1000 10K 100K"},
		{2, 437, "2 5 10 20 50 100 200"},
		{0.5, 30, "0.5 1 2 5 10 20"},
		{0.1, 30, "0.1 1 10"},
	} {
		got := strings.Join(labels(LogTicks{}.Ticks(c.min, c.max)), " ")
		if got != c.want {
			t.Errorf("LogTicks(%v, %v) = %q, want %q", c.min, c.max, got, c.want)
		}
	}
}

func TestLinearTicksOneNotation(t *testing.T) {
	got := strings.Join(labels(LinearTicks{}.Ticks(0, 13000)), " ")
	if strings.Contains(got, "e+") {
		t.Errorf("LinearTicks(0, 13000) = %q: an exponent", got)
	}
}

func TestSizeStep(t *testing.T) {
	for n, want := range map[int]int{1: 1, 10: 1, 11: 2, 20: 2, 21: 3, 30: 3, 31: 5, 50: 5, 51: 10} {
		if got := SizeStep(n); got != want {
			t.Errorf("SizeStep(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestSpread(t *testing.T) {
	s := Spread{Vals: []float64{3, 1, 2, 10}}
	if s.Min() != 1 || s.Max() != 10 || s.Median() != 2.5 {
		t.Errorf("min %v max %v median %v, want 1 10 2.5", s.Min(), s.Max(), s.Median())
	}
}

// CheckPNG fails t unless file is a PNG of w x h pixels.
func CheckPNG(t testing.TB, file string, w, h int) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if b := img.Bounds(); b.Dx() != w || b.Dy() != h {
		t.Errorf("%s: %dx%d, want %dx%d", file, b.Dx(), b.Dy(), w, h)
	}
}

func TestSave(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"short", strings.Repeat("a long legend entry ", 3)} {
		p := plot.New()
		SizeAxis(&p.X, "size [bytes]", []float64{8, 1 << 20})
		logY := ValueAxis(&p.Y, "busbw [GB/s]", []float64{0.001, 10})
		if !logY {
			t.Fatal("0.001 to 10: linear")
		}
		pts := []Spread{{X: 8, Vals: []float64{0.001, 0.002}}, {X: 1 << 20, Vals: []float64{8, 10}}}
		if err := SpreadBand(p, pts, Palette(0), logY); err != nil {
			t.Fatal(err)
		}
		if err := SpreadLine(p, name, pts, Palette(0), logY, Dodge(0, 2)); err != nil {
			t.Fatal(err)
		}
		if err := Line(p, "line", plotter.XYs{{X: 8, Y: 1}, {X: 64, Y: 2}}, Palette(1)); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(dir, "p.png")
		if err := Save(p, Width, Height, file); err != nil {
			t.Fatal(err)
		}
		CheckPNG(t, file, 768, 480)
	}
}
