package loader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// BenchConfig is MLPerf Storage's simulated accelerator: after receiving
// each batch it computes (sleeps, or spins) for Compute, then releases the
// batch and asks for the next.
type BenchConfig struct {
	// Compute is the accelerator's time per batch. 0: none (the loader's
	// own rate; AU is then 0). It is slept, but for its last 1.5 ms,
	// which are spun (Go's timers wake up to a millisecond late): a
	// compute time under 1.5 ms takes a core, as Spin does.
	Compute time.Duration
	// Spin busy-waits all of Compute: exact to the microsecond, at the
	// cost of a core.
	Spin bool
	// Batches is the number of batches measured, going on into the
	// Loader's next epochs if it has them. 0: up to the end of the
	// current epoch.
	Batches int
	// Warmup is a number of batches consumed (with compute) before the
	// measured ones. 0: none.
	Warmup int
}

// BenchResult is one run of the simulated accelerator. Like MLPerf
// Storage, the clock starts when the first measured batch has arrived (its
// I/O is excluded) and stops when the last one's compute ends:
//
//	AU = ComputeSeconds / Seconds
//
// where ComputeSeconds is the compute time as measured (a sleep can
// overrun Compute; the overrun is the accelerator's time, not the
// loader's).
type BenchResult struct {
	ComputePerBatch float64 `json:"compute_per_batch"` // Compute in seconds
	Batches         int     `json:"batches"`
	Samples         int64   `json:"samples"`
	Bytes           int64   `json:"bytes"`
	Seconds         float64 `json:"seconds"`         // wall time measured
	ComputeSeconds  float64 `json:"compute_seconds"` // time in compute
	SamplesPerSec   float64 `json:"samples_per_sec"`
	AU              float64 `json:"au"` // accelerator utilisation, 0..1
}

// Bench runs the simulated accelerator on l's batches (see BenchConfig and
// BenchResult). It stops early, with what it measured, at the Loader's
// last epoch's end.
func Bench(ctx context.Context, l *Loader, cfg BenchConfig) (BenchResult, error) {
	return bench(ctx, l, cfg, newRealClock())
}

// clock is Bench's time: the real one, or a test's fake.
type clock interface {
	now() time.Duration // since some fixed instant
	// compute simulates d of the accelerator's work and returns the time
	// it took.
	compute(ctx context.Context, d time.Duration, spin bool) (time.Duration, error)
}

func bench(ctx context.Context, l *Loader, cfg BenchConfig, clk clock) (BenchResult, error) {
	res := BenchResult{ComputePerBatch: cfg.Compute.Seconds()}
	switch {
	case cfg.Compute < 0:
		return res, fmt.Errorf("loader: bench: Compute %v: %w: want >= 0", cfg.Compute, ErrConfig)
	case cfg.Batches < 0:
		return res, fmt.Errorf("loader: bench: Batches %d: %w: want >= 0 (0: to the epoch's end)", cfg.Batches, ErrConfig)
	case cfg.Warmup < 0:
		return res, fmt.Errorf("loader: bench: Warmup %d: %w: want >= 0", cfg.Warmup, ErrConfig)
	}
	ss := int64(l.ds.SampleSize())
	var start, computed time.Duration
	i, eofs := 0, 0
	for cfg.Batches == 0 || i < cfg.Warmup+cfg.Batches {
		b, err := l.Next(ctx)
		if errors.Is(err, io.EOF) {
			eofs++
			if cfg.Batches == 0 || eofs == 2 {
				break
			}
			continue
		}
		if err != nil {
			return res, err
		}
		eofs = 0
		if i == cfg.Warmup {
			start = clk.now()
		}
		var spent time.Duration
		if cfg.Compute > 0 {
			if spent, err = clk.compute(ctx, cfg.Compute, cfg.Spin); err != nil {
				b.Release()
				return res, err
			}
		}
		if i >= cfg.Warmup {
			computed += spent
			res.Batches++
			res.Samples += int64(len(b.Samples))
		}
		b.Release()
		i++
	}
	if res.Batches == 0 {
		return res, nil
	}
	wall := clk.now() - start
	res.Bytes = res.Samples * ss
	res.Seconds = wall.Seconds()
	res.ComputeSeconds = computed.Seconds()
	if wall > 0 {
		res.SamplesPerSec = float64(res.Samples) / wall.Seconds()
		res.AU = computed.Seconds() / wall.Seconds()
	}
	return res, nil
}

// realClock is the monotonic clock; its sleeps reuse one timer.
type realClock struct {
	base  time.Time
	timer *time.Timer
}

func newRealClock() *realClock {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &realClock{base: time.Now(), timer: t}
}

func (c *realClock) now() time.Duration { return time.Since(c.base) }

// sleepSlack is how much of a compute time is spun rather than slept: the
// Go runtime's timers wake up to about 1 ms late on Linux (a 200µs sleep
// takes 1.07 ms), which would make every compute time under a millisecond
// one millisecond.
const sleepSlack = 1500 * time.Microsecond

func (c *realClock) compute(ctx context.Context, d time.Duration, spin bool) (time.Duration, error) {
	t0 := c.now()
	if !spin && d > sleepSlack {
		c.timer.Reset(d - sleepSlack)
		select {
		case <-c.timer.C:
		case <-ctx.Done():
			c.timer.Stop()
			return c.now() - t0, ctx.Err()
		}
	}
	for n := 0; c.now()-t0 < d; n++ {
		if n%256 == 0 && ctx.Err() != nil {
			return c.now() - t0, ctx.Err()
		}
	}
	return c.now() - t0, nil
}
