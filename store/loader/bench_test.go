package loader

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/store"
)

// fakeClock is time that moves only when told: the accelerator's compute
// and the fake source's reads each add their duration. The readers run
// concurrently, so which reads fall inside the measured window depends on
// scheduling, but only within bounds the test states.
type fakeClock struct{ t atomic.Int64 }

func (c *fakeClock) now() time.Duration { return time.Duration(c.t.Load()) }

func (c *fakeClock) compute(_ context.Context, d time.Duration, _ bool) (time.Duration, error) {
	c.t.Add(int64(d))
	return d, nil
}

// TestBenchAU: AU = compute / wall, on a fake clock. With reads that take
// no time the accelerator is never idle: AU is exactly 1 and the wall
// time exactly N x compute. With reads of latency L (in this serial
// model, each read's L adds to the wall time), the window of N batches
// holds between N-1-Ahead reads (the ones started before the first batch
// arrived are excluded, at most Ahead) and N+Ahead (reads ahead of the
// last batch), so AU is bounded on both sides whatever the scheduling.
func TestBenchAU(t *testing.T) {
	const (
		n     = 50
		d     = 2 * time.Millisecond
		lat   = 500 * time.Microsecond
		ahead = 3
		bs    = 4
		ss    = 100
	)
	for _, L := range []time.Duration{0, lat} {
		clk := &fakeClock{}
		src := newMemSource(randomData(8, 4, 3000, 5000))
		src.before = func(context.Context, []store.Extent) error {
			clk.t.Add(int64(L))
			return nil
		}
		l := newTestLoader(t, src, ss, Config{BatchSize: bs, Ahead: ahead, Epochs: -1, DropLast: true})
		r, err := bench(context.Background(), l, BenchConfig{Compute: d, Batches: n, Warmup: 2}, clk)
		if err != nil {
			t.Fatal(err)
		}
		if r.Batches != n || r.Samples != n*bs || r.Bytes != n*bs*ss {
			t.Fatalf("L %v: %d batches, %d samples, %d bytes; want %d, %d, %d", L, r.Batches, r.Samples, r.Bytes, n, n*bs, n*bs*ss)
		}
		if want := (n * d).Seconds(); r.ComputeSeconds != want {
			t.Fatalf("L %v: compute %v s, want %v", L, r.ComputeSeconds, want)
		}
		if L == 0 {
			if r.AU != 1 || r.Seconds != (n*d).Seconds() || r.SamplesPerSec != n*bs/(n*d).Seconds() {
				t.Fatalf("reads of no time: AU %v, %v s, %v samples/s; want 1, %v s, %v", r.AU, r.Seconds, r.SamplesPerSec, (n * d).Seconds(), n*bs/(n*d).Seconds())
			}
			continue
		}
		reads := (r.Seconds - r.ComputeSeconds) / L.Seconds()
		if math.Abs(reads-math.Round(reads)) > 1e-6 || reads < n-1-ahead || reads > n+ahead {
			t.Fatalf("wall - compute = %v reads of L, want a whole number in [%d, %d]", reads, n-1-ahead, n+ahead)
		}
		lo := (n * d).Seconds() / (n*d + (n+ahead)*L).Seconds()
		hi := (n * d).Seconds() / (n*d + (n-1-ahead)*L).Seconds()
		if r.AU < lo || r.AU > hi || r.AU != r.ComputeSeconds/r.Seconds {
			t.Fatalf("AU %v, want compute/wall in [%v, %v]", r.AU, lo, hi)
		}
		t.Logf("L %v: AU %.4f (bounds %.4f..%.4f), %.0f reads in the window", L, r.AU, lo, hi, reads)
	}
}

// TestBenchEpochEnd: Batches 0 measures to the epoch's end; Batches past
// the last epoch stop there.
func TestBenchEpochEnd(t *testing.T) {
	clk := &fakeClock{}
	src := newMemSource(randomData(9, 2, 1000, 1001)) // 20 samples
	l := newTestLoader(t, src, 100, Config{BatchSize: 3, Epochs: 2})
	r, err := bench(context.Background(), l, BenchConfig{Compute: time.Millisecond}, clk)
	if err != nil || r.Batches != 7 || r.Samples != 20 {
		t.Fatalf("one epoch: %+v, %v; want 7 batches, 20 samples", r, err)
	}
	r, err = bench(context.Background(), l, BenchConfig{Compute: time.Millisecond, Batches: 100}, clk)
	if err != nil || r.Batches != 7 {
		t.Fatalf("past the last epoch: %+v, %v; want the last epoch's 7 batches", r, err)
	}
	if _, err := bench(context.Background(), l, BenchConfig{Compute: -1}, clk); !errors.Is(err, ErrConfig) {
		t.Fatalf("Compute -1: %v, want ErrConfig", err)
	}
}

// TestBenchReal runs Bench on the real clock, asserting nothing of the
// machine's speed: only what holds at any speed.
func TestBenchReal(t *testing.T) {
	src := newMemSource(randomData(10, 2, 4000, 4001))
	l := newTestLoader(t, src, 100, Config{BatchSize: 4, Ahead: 2, Epochs: -1})
	for _, spin := range []bool{false, true} {
		r, err := Bench(context.Background(), l, BenchConfig{Compute: 200 * time.Microsecond, Batches: 20, Spin: spin})
		if err != nil {
			t.Fatal(err)
		}
		if r.Batches != 20 || r.AU <= 0 || r.AU > 1 || r.ComputeSeconds < 20*200e-6 || r.Seconds < r.ComputeSeconds {
			t.Fatalf("spin %v: %+v", spin, r)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Bench(ctx, l, BenchConfig{Compute: time.Second, Batches: 5}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

// model is a source of R samples/s behind an accelerator taking c per
// batch of B: the pair runs at the slower one's pace, so
// AU(c) = c / max(c, B/R) and samples/s = B / max(c, B/R). AU ≥ 0.9 holds
// for c ≥ 0.9 B/R; the highest rate there is R itself.
func model(rate float64, b int) func(context.Context, time.Duration) (BenchResult, error) {
	return func(_ context.Context, c time.Duration) (BenchResult, error) {
		step := math.Max(c.Seconds(), float64(b)/rate)
		return BenchResult{AU: c.Seconds() / step, SamplesPerSec: float64(b) / step, Batches: 1}, nil
	}
}

func TestSearch(t *testing.T) {
	const b = 32
	for _, rate := range []float64{1e3, 12345, 1e6} {
		edge := time.Duration(0.9 * b / rate * 1e9) // the least compute with AU ≥ 0.9
		for _, start := range []time.Duration{edge / 37, edge, 20 * time.Millisecond, 3 * time.Second} {
			res, err := Search(context.Background(), SearchConfig{Bench: BenchConfig{Compute: start}, MaxPoints: 40, MinCompute: time.Microsecond}, model(rate, b))
			if err != nil {
				t.Fatal(err)
			}
			least := time.Duration(math.MaxInt64) // the least compute that passed
			for _, p := range res.Points {
				if p.Pass {
					least = min(least, p.Compute)
				}
			}
			if !res.Found || float64(least) < float64(edge)*(1-1e-9) || float64(least) > float64(edge)*1.05+1 {
				t.Fatalf("rate %v start %v: least compute passing %v, want in [%v, %v x 1.05] (%d points)", rate, start, least, edge, edge, len(res.Points))
			}
			if b := res.Points[res.Best]; !b.Pass || b.Result.SamplesPerSec != res.MaxSamplesPerSec || b.Compute != res.ComputePerBatch {
				t.Fatalf("rate %v start %v: Points[Best] %+v is not the answer", rate, start, b)
			}
			if math.Abs(res.MaxSamplesPerSec-rate)/rate > 1e-9 {
				t.Fatalf("rate %v start %v: max %v samples/s, want the source's rate", rate, start, res.MaxSamplesPerSec)
			}
			for _, p := range res.Points {
				if d := float64(p.Compute-edge) / float64(edge); p.Pass != (d >= 0) && math.Abs(d) > 1e-9 {
					t.Fatalf("rate %v start %v: point %v: pass %v", rate, start, p.Compute, p.Pass)
				}
			}
		}
	}
	// A source faster than any demand: the search stops at MinCompute.
	res, err := Search(context.Background(), SearchConfig{Bench: BenchConfig{Compute: time.Millisecond}}, model(1e15, b))
	if err != nil || !res.Found || !res.AtMin || res.ComputePerBatch != 10*time.Microsecond {
		t.Fatalf("infinitely fast source: %+v, %v", res, err)
	}
	// One too slow for MaxCompute: not found.
	res, err = Search(context.Background(), SearchConfig{Bench: BenchConfig{Compute: time.Millisecond}, MaxCompute: 10 * time.Millisecond}, model(1, b))
	if err != nil || res.Found {
		t.Fatalf("too slow a source: %+v, %v", res, err)
	}
	if _, err := Search(context.Background(), SearchConfig{}, model(1, b)); !errors.Is(err, ErrConfig) {
		t.Fatalf("no Compute: %v, want ErrConfig", err)
	}
}

// TestSearchLoader runs the search end to end on a Loader (real clock):
// it finds something, in few points; no assertion on the machine's speed.
func TestSearchLoader(t *testing.T) {
	src := newMemSource(randomData(11, 2, 4000, 4001))
	l := newTestLoader(t, src, 100, Config{BatchSize: 4, Ahead: 2, Epochs: -1})
	res, err := SearchLoader(context.Background(), l, SearchConfig{
		Bench:     BenchConfig{Compute: 2 * time.Millisecond, Batches: 10},
		MaxPoints: 6, MinCompute: 100 * time.Microsecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Points) == 0 || len(res.Points) > 6 || res.Points[0].Result.Batches != 10 {
		t.Fatalf("%+v", res)
	}
	t.Logf("found %v: %.0f samples/s at %v per batch, %d points", res.Found, res.MaxSamplesPerSec, res.ComputePerBatch, len(res.Points))
}
