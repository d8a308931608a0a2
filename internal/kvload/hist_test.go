package kvload

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestHistBuckets(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(v uint64) {
		i := bucket(v)
		if i < 0 || i >= histBuckets {
			t.Fatalf("bucket(%d) = %d, outside [0, %d)", v, i, histBuckets)
		}
		u := upper(i)
		if u < v {
			t.Fatalf("upper(bucket(%d)) = %d < the value", v, u)
		}
		if i > 0 && upper(i-1) >= v {
			t.Fatalf("upper(bucket(%d)-1) = %d >= the value", v, upper(i-1))
		}
		if float64(u-v) > float64(v)/subCount {
			t.Fatalf("bucket of %d reaches %d: wider than 1/%d", v, u, subCount)
		}
	}
	for v := range uint64(4096) {
		check(v)
	}
	for range 100000 {
		check(rng.Uint64() >> rng.IntN(64))
	}
	check(1<<63 - 1)
}

func TestHistQuantiles(t *testing.T) {
	var h hist
	if h.quantile(0.5) != 0 {
		t.Fatal("empty histogram's median is not 0")
	}
	// 1..1000 µs, one each; 10 at 1 s.
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i)*time.Microsecond, 1)
	}
	h.record(time.Second, 10)
	near := func(name string, got, want time.Duration) {
		t.Helper()
		if got < want || float64(got-want) > float64(want)/subCount {
			t.Errorf("%s = %v, want %v (+1/%d)", name, got, want, subCount)
		}
	}
	near("p50", h.quantile(0.5), 505*time.Microsecond)
	near("p99", h.quantile(0.99), 1000*time.Microsecond) // 999.9 -> the 1000th
	near("p99.5", h.quantile(0.995), time.Second)
	near("p98", h.quantile(0.98), 990*time.Microsecond) // 989.8 -> 990th
	near("max", h.quantile(1), time.Second)
	var m hist
	m.merge(&h)
	m.merge(&h)
	if m.total != 2*h.total || m.quantile(0.5) != h.quantile(0.5) {
		t.Errorf("merge: total %d, p50 %v; want %d, %v", m.total, m.quantile(0.5), 2*h.total, h.quantile(0.5))
	}
}
