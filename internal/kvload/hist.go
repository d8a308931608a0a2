package kvload

import (
	"math"
	"math/bits"
	"time"
)

// hist is an HDR-style log-linear histogram of durations in nanoseconds:
// values below 2*subCount fall in buckets of width 1; above, each power of two
// is split into subCount buckets, so a bucket is at most 1/subCount (0.8%)
// wide relative to its values. A fixed array: recording allocates nothing.
type hist struct {
	counts [histBuckets]uint64
	total  uint64
	max    uint64
}

const (
	subBits     = 7
	subCount    = 1 << subBits // 128
	histBuckets = 2*subCount + (63-subBits)*subCount
)

// bucket is v's index: 0..255 for v < 256 (exact); above, shift = the
// number of low bits dropped so that v>>shift is in [128, 256).
func bucket(v uint64) int {
	if v < 2*subCount {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1
	return 2*subCount + (shift-1)*subCount + int(v>>shift) - subCount
}

// upper is the largest value in bucket i (HDR's "highest equivalent value").
func upper(i int) uint64 {
	if i < 2*subCount {
		return uint64(i)
	}
	i -= 2 * subCount
	shift := i/subCount + 1
	sub := uint64(i%subCount + subCount)
	return (sub+1)<<shift - 1
}

// record adds n operations of latency d.
func (h *hist) record(d time.Duration, n uint64) {
	v := uint64(0)
	if d > 0 {
		v = uint64(d)
	}
	h.counts[bucket(v)] += n
	h.total += n
	if v > h.max {
		h.max = v
	}
}

func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.max = max(h.max, o.max)
}

// quantile is the smallest bucket bound that at least q of the values are at
// or below (never above the largest value seen); 0 when empty.
func (h *hist) quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	want := max(uint64(math.Ceil(q*float64(h.total))), 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= want {
			return time.Duration(min(upper(i), h.max))
		}
	}
	return time.Duration(h.max)
}
