package main

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ibex-rdma/ibex/coll"
	"github.com/ibex-rdma/ibex/perf"
	"github.com/ibex-rdma/ibex/sim/cost"
	"github.com/ibex-rdma/ibex/sim/plan"
)

// checkPNG fails t unless file is a PNG of w x h pixels.
func checkPNG(t *testing.T, file string, w, h int) {
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

type fakeTransports []string

func (f fakeTransports) Transport(r int) string { return f[r] }

// ibex coll --plot, end to end (2 ranks, 8 B to 1 KiB), then the plot of
// rows with a zero busbw and several types.
func TestPlotColl(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "coll.png")
	if out, errOut, code := runMain(t, "coll", "-b", "8", "-e", "1K", "-n", "2", "-w", "1", "--np", "2", "--plot", file); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	checkPNG(t, file, 768, 480)

	if got, want := collPlotTitle("all_reduce", 3, fakeTransports{"", "shm0", "udp0"}), "ibex coll all_reduce: 3 ranks on shm0,udp0"; got != want {
		t.Errorf("title %q, want %q", got, want)
	}
	var rows []coll.BenchRow
	for _, typ := range []string{"float", "int32"} {
		for s := int64(8); s <= 1<<20; s *= 8 {
			rows = append(rows, coll.BenchRow{Size: s, Type: typ, Redop: "sum", Root: -1, OOPBusBW: float64(s) / 1e5, IPBusBW: 0})
		}
	}
	if err := plotBusBW(file, "ibex coll all_reduce: 2 ranks on shm0", rows); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, file, 768, 480)
}

// ibex sim sweep --plot with several seeds (the min-max band) and sizes,
// and with one size.
func TestPlotSweep(t *testing.T) {
	dir := t.TempDir()
	for _, sizes := range []string{"64K,1M,16M", "1M"} {
		file := filepath.Join(dir, "sweep.png")
		if out, errOut, code := runMain(t, "sim", "sweep", "permutation", "--topos", explicitSmall, "--sizes", sizes,
			"--routing", "ecmp,adaptive", "--seeds", "1-3", "--plot", file); code != 0 {
			t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
		}
		checkPNG(t, file, 768, 480)
	}
	rows := []sweepRow{{Topology: "a.yaml", Ranks: 8, Seed: 1}, {Topology: "b.yaml", Ranks: 16, Seed: 2}}
	if got, want := sweepPlotTitle("all_reduce", "flow", rows), "ibex sim sweep all_reduce: 8/16 ranks, flow engine, 2 seeds"; got != want {
		t.Errorf("title %q, want %q", got, want)
	}
}

func TestPlotPlan(t *testing.T) {
	file := filepath.Join(t.TempDir(), "plan.png")
	var rows []*plan.Row
	for i, name := range []string{"IB NDR rail-optimized", "RoCE 400G 2-tier"} {
		rows = append(rows, &plan.Row{Design: name, LinkLayer: cost.LinkLayer("ethernet"),
			Cost:    &cost.Report{PerGPU: cost.PerGPU{CostUSD: 7000 + 1000*float64(i), PowerW: 80 + 100*float64(i)}},
			Results: []plan.Result{{AllReduce: "ring", TimeUS: 20000}, {AllReduce: "hier tree", TimeUS: 150}}})
	}
	if err := plotPlan(file, 4096, 64<<10, "dmodk", rows); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, file, 1440, 480)
	if got, want := wrapWords("IB NDR rail-optimized", 14), "IB NDR\nrail-optimized"; got != want {
		t.Errorf("wrapWords %q, want %q", got, want)
	}
}

func TestPlotPerf(t *testing.T) {
	file := filepath.Join(t.TempDir(), "perf.png")
	var bw, lat []perf.Result
	for s := 2; s <= 8<<20; s *= 2 {
		bw = append(bw, perf.Result{Bytes: s, Iters: 100, BWAvg: float64(s) / 100, BWPeak: float64(s) / 50, Unit: "MiB/sec"})
		lat = append(lat, perf.Result{Bytes: s, Iters: 100, TTypical: 0.3 + float64(s)/1e4, P99: 30 + float64(s)/1e4})
	}
	tests := map[string][]perf.Result{"write_bw": bw, "write_lat": lat}
	for name, results := range tests {
		test, err := perf.ParseTest(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := perf.Plot(file, test, "shm0", results); err != nil {
			t.Fatal(err)
		}
		checkPNG(t, file, 768, 480)
		if title := perf.PlotTitle(test, "shm0", results); !strings.Contains(title, name+" on shm0") {
			t.Errorf("title %q", title)
		}
	}
}
