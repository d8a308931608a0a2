package check

import (
	"errors"
	"fmt"
)

// ErrConfig is wrapped by the errors about a Config or Thresholds.
var ErrConfig = errors.New("check: bad config")

// Config is what a run measures. Zero fields take the defaults their
// comments give. Every rank of a run must use the same Config; a baseline
// is compared only with a run of the same Config (Shape).
type Config struct {
	// Bytes is one message of the bandwidth test; 0: 1 MiB.
	Bytes int64 `json:"bytes"`
	// Iters is the messages of one direction's bandwidth test, sent back
	// to back and acknowledged once at the end; 0: 8.
	Iters int `json:"iters"`
	// Repeats is how many times each direction's bandwidth test runs;
	// the best counts, as perftest's peak: a run that something else on
	// the host disturbed does not make a link slow, and a link that
	// cannot go faster stays slow; 0: 3.
	Repeats int `json:"repeats"`
	// Warmup is the untimed exchanges of Bytes each way before a pair's
	// timed tests; 0: 2 (negative: none).
	Warmup int `json:"warmup"`
	// LatIters is the timed ping-pongs of 8 bytes of the latency test (a
	// tenth more run first, untimed); the latency is half the median
	// round trip; 0: 100.
	LatIters int `json:"lat_iters"`
	// AllReduceBytes is the all-reduce's size (float32 sum); 0: 4 MiB.
	AllReduceBytes int64 `json:"allreduce_bytes"`
	// AllReduceIters is its timed iterations (after 2 untimed); 0: 5.
	AllReduceIters int `json:"allreduce_iters"`
}

// LatBytes is the latency test's message.
const LatBytes = 8

// WithDefaults fills the zero fields and checks the rest, naming the bad
// field.
func (c Config) WithDefaults() (Config, error) {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Bytes == 0 {
		c.Bytes = 1 << 20
	}
	if c.AllReduceBytes == 0 {
		c.AllReduceBytes = 4 << 20
	}
	def(&c.Iters, 8)
	def(&c.Repeats, 3)
	def(&c.Warmup, 2)
	def(&c.LatIters, 100)
	def(&c.AllReduceIters, 5)
	c.Warmup = max(c.Warmup, 0)
	switch {
	case c.Bytes < 1 || c.Bytes > 1<<30:
		return c, fmt.Errorf("%w: Bytes %d: want 1 byte to 1 GiB", ErrConfig, c.Bytes)
	case c.Iters < 1:
		return c, fmt.Errorf("%w: Iters %d: want at least 1", ErrConfig, c.Iters)
	case c.Repeats < 1:
		return c, fmt.Errorf("%w: Repeats %d: want at least 1", ErrConfig, c.Repeats)
	case c.LatIters < 1:
		return c, fmt.Errorf("%w: LatIters %d: want at least 1", ErrConfig, c.LatIters)
	case c.AllReduceBytes < 4 || c.AllReduceBytes > 1<<30 || c.AllReduceBytes%4 != 0:
		return c, fmt.Errorf("%w: AllReduceBytes %d: want a multiple of 4 (float32) from 4 bytes to 1 GiB", ErrConfig, c.AllReduceBytes)
	case c.AllReduceIters < 1:
		return c, fmt.Errorf("%w: AllReduceIters %d: want at least 1", ErrConfig, c.AllReduceIters)
	}
	return c, nil
}

// Thresholds say how far a figure may be from its reference before it
// counts: a bandwidth below (1-BW) times the reference, a latency above
// (1+Lat) times it. The reference is the run's median over the pairs of
// the same transport (slow links) or the baseline's figure (drift).
type Thresholds struct {
	BW  float64 // 0: 0.2 (20%); below 1
	Lat float64 // 0: BW
}

// WithDefaults fills the zero fields and checks them.
func (t Thresholds) WithDefaults() (Thresholds, error) {
	if t.BW == 0 {
		t.BW = 0.2
	}
	if t.Lat == 0 {
		t.Lat = t.BW
	}
	switch {
	case !(t.BW > 0 && t.BW < 1):
		return t, fmt.Errorf("%w: bandwidth threshold %g: want a fraction above 0 and below 1 (0.2 = 20%%)", ErrConfig, t.BW)
	case !(t.Lat > 0):
		return t, fmt.Errorf("%w: latency threshold %g: want a fraction above 0 (0.2 = 20%%; 1 = twice the reference)", ErrConfig, t.Lat)
	}
	return t, nil
}
