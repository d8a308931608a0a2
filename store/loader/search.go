package loader

import (
	"context"
	"fmt"
	"math"
	"time"
)

// SearchConfig configures Search.
type SearchConfig struct {
	// Bench is each point's run: Compute is the first point's compute
	// time (required); Batches per point (0: 64); Warmup (0, with
	// SearchLoader: Ahead+1, so that batches read ahead for the previous
	// point do not count for this one).
	Bench BenchConfig
	// AU is the utilisation to keep. 0: 0.90 (MLPerf Storage's for
	// U-Net3D and ResNet-50).
	AU float64
	// Tolerance: the search ends when the bracket [failing, passing]
	// compute times is narrower than a factor 1+Tolerance. 0: 0.05.
	Tolerance float64
	// MinCompute and MaxCompute bound the compute times tried. 0: 10µs and
	// 1000 × Bench.Compute.
	MinCompute, MaxCompute time.Duration
	// MaxPoints bounds the runs. 0: 16.
	MaxPoints int
}

// SearchMethod says how Search works, for reports.
const SearchMethod = "bisection on compute time per batch: start at --compute; halve it while AU >= target " +
	"(double it while AU < target) to bracket the target, then bisect the bracket geometrically " +
	"until it is within the tolerance; each point is a run of Batches batches after a warm-up; " +
	"the answer is the highest samples/s measured at a point with AU >= target"

// Point is one run of a search.
type Point struct {
	Compute time.Duration
	Result  BenchResult
	Pass    bool // Result.AU >= the target
}

// SearchResult is the highest sample rate that kept the accelerator busy.
type SearchResult struct {
	AU     float64 // the target
	Points []Point // every run, in order
	// Found: some point passed. MaxSamplesPerSec is the highest samples/s
	// measured at a passing point, Points[Best], and ComputePerBatch its
	// compute time.
	Found            bool
	Best             int
	MaxSamplesPerSec float64
	ComputePerBatch  time.Duration
	// AtMin: the point at MinCompute passed, so the source may be faster
	// than the search could ask.
	AtMin bool
}

// Search finds the highest sample rate at which the simulated accelerator
// keeps AU ≥ cfg.AU (see SearchMethod): shorter compute per batch demands
// more samples per second, and AU falls once the source cannot keep up.
// run measures one point; SearchLoader's runs Bench on a Loader.
func Search(ctx context.Context, cfg SearchConfig, run func(ctx context.Context, compute time.Duration) (BenchResult, error)) (SearchResult, error) {
	if err := cfg.fill(); err != nil {
		return SearchResult{}, err
	}
	res := SearchResult{AU: cfg.AU}
	measure := func(c time.Duration) (bool, error) {
		r, err := run(ctx, c)
		if err != nil {
			return false, fmt.Errorf("loader: search: compute %v: %w", c, err)
		}
		p := Point{Compute: c, Result: r, Pass: r.AU >= cfg.AU}
		res.Points = append(res.Points, p)
		if p.Pass && (!res.Found || r.SamplesPerSec > res.MaxSamplesPerSec ||
			r.SamplesPerSec == res.MaxSamplesPerSec && c < res.ComputePerBatch) {
			res.Found, res.MaxSamplesPerSec, res.ComputePerBatch = true, r.SamplesPerSec, c
			res.Best = len(res.Points) - 1
		}
		return p.Pass, nil
	}
	// Bracket: lo fails, hi passes.
	var lo, hi time.Duration
	c := cfg.Bench.Compute
	pass, err := measure(c)
	if err != nil {
		return res, err
	}
	if pass {
		hi = c
		for {
			if hi <= cfg.MinCompute {
				res.AtMin = true
				return res, nil
			}
			if len(res.Points) >= cfg.MaxPoints {
				return res, nil
			}
			c = max(hi/2, cfg.MinCompute)
			if pass, err = measure(c); err != nil {
				return res, err
			}
			if !pass {
				lo = c
				break
			}
			hi = c
		}
	} else {
		lo = c
		for {
			if lo >= cfg.MaxCompute || len(res.Points) >= cfg.MaxPoints {
				return res, nil
			}
			c = min(lo*2, cfg.MaxCompute)
			if pass, err = measure(c); err != nil {
				return res, err
			}
			if pass {
				hi = c
				break
			}
			lo = c
		}
	}
	for float64(hi) > float64(lo)*(1+cfg.Tolerance) && len(res.Points) < cfg.MaxPoints {
		c = time.Duration(math.Sqrt(float64(lo) * float64(hi)))
		if c <= lo || c >= hi {
			break
		}
		if pass, err = measure(c); err != nil {
			return res, err
		}
		if pass {
			hi = c
		} else {
			lo = c
		}
	}
	return res, nil
}

func (c *SearchConfig) fill() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("loader: search: %s %v: %w: %s", field, v, ErrConfig, want)
	}
	switch {
	case c.Bench.Compute <= 0:
		return bad("Bench.Compute", c.Bench.Compute, "want > 0: the first point's compute time per batch")
	case c.AU < 0 || c.AU > 1:
		return bad("AU", c.AU, "want in (0, 1] (0: 0.90)")
	case c.Tolerance < 0:
		return bad("Tolerance", c.Tolerance, "want > 0 (0: 0.05)")
	case c.MinCompute < 0 || c.MaxCompute < 0:
		return bad("MinCompute/MaxCompute", fmt.Sprint(c.MinCompute, "/", c.MaxCompute), "want >= 0")
	case c.MaxPoints < 0:
		return bad("MaxPoints", c.MaxPoints, "want > 0 (0: 16)")
	}
	if c.Bench.Batches == 0 {
		c.Bench.Batches = 64
	}
	if c.AU == 0 {
		c.AU = 0.90
	}
	if c.Tolerance == 0 {
		c.Tolerance = 0.05
	}
	if c.MinCompute == 0 {
		c.MinCompute = 10 * time.Microsecond
	}
	if c.MaxCompute == 0 {
		c.MaxCompute = 1000 * c.Bench.Compute
	}
	if c.MaxPoints == 0 {
		c.MaxPoints = 16
	}
	if c.MinCompute > c.MaxCompute {
		return bad("MinCompute", c.MinCompute, fmt.Sprintf("more than MaxCompute %v", c.MaxCompute))
	}
	return nil
}

// SearchLoader is Search with each point a Bench run on l, which goes on
// from where the last one stopped (make l with Epochs < 0 so that it does
// not run out).
func SearchLoader(ctx context.Context, l *Loader, cfg SearchConfig) (SearchResult, error) {
	if cfg.Bench.Warmup == 0 {
		cfg.Bench.Warmup = l.cfg.Ahead + 1
	}
	if err := cfg.fill(); err != nil {
		return SearchResult{}, err
	}
	return Search(ctx, cfg, func(ctx context.Context, c time.Duration) (BenchResult, error) {
		bc := cfg.Bench
		bc.Compute = c
		return Bench(ctx, l, bc)
	})
}
