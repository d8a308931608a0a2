package coll

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/coll/reduce"
)

// TestSpans: mark, coverage and fill against a bitmap, over random spans
// (seed printed; -coll.seed replays, as for every seeded test here).
func TestSpans(t *testing.T) {
	seed := *llSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (replay with -coll.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	for round := range 200 {
		const n = 300
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(rng.IntN(250) + 1)
		}
		cl := &call{buf: make([]byte, n), src: src}
		set := make([]bool, n)
		for range 30 {
			lo := rng.IntN(n)
			hi := lo + rng.IntN(n-lo+1)
			switch rng.IntN(3) {
			case 0:
				full, none := cl.coverage(lo, hi)
				wantFull, wantNone := true, true
				for i := lo; i < hi; i++ {
					wantFull = wantFull && set[i]
					wantNone = wantNone && !set[i]
				}
				if lo < hi && (full != wantFull || none != wantNone) {
					t.Fatalf("round %d: coverage(%d, %d) = %v, %v, want %v, %v (spans %v, seed %d)", round, lo, hi, full, none, wantFull, wantNone, cl.inited, seed)
				}
			case 1:
				cl.mark(lo, hi)
				for i := lo; i < hi; i++ {
					set[i] = true
				}
			case 2:
				cl.fill(lo, hi)
				for i := lo; i < hi; i++ {
					if !set[i] {
						if cl.buf[i] != src[i] {
							t.Fatalf("round %d: fill(%d, %d) left byte %d = %d, want %d (seed %d)", round, lo, hi, i, cl.buf[i], src[i], seed)
						}
						set[i] = true
					}
				}
			}
			for i, s := range cl.inited {
				if s.lo >= s.hi || i > 0 && cl.inited[i-1].hi >= s.lo {
					t.Fatalf("round %d: spans %v not sorted, disjoint and apart (seed %d)", round, cl.inited, seed)
				}
			}
		}
	}
}

// TestAllReduceFromInput: out-of-place all-reduces on shm0 that read the
// caller's input instead of copying it (above directMin, on the LL and
// flagged paths, in pieces of 4 KiB and of the default size) give the
// the exact result and the same bits as in place, for every all-reduce
// algorithm and 2 to 4 ranks, and leave the input alone.
func TestAllReduceFromInput(t *testing.T) {
	seed := *llSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (replay with -coll.seed=%d)", seed, seed)
	for _, size := range []int{2, 3, 4} {
		for _, chunk := range []int{4096, 0} {
			t.Run(fmt.Sprintf("%d/%d", size, chunk), func(t *testing.T) {
				runRanks(t, size, Options{Transport: "shm0", Chunk: chunk}, func(c *Comm) error {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					for _, a := range algo.Supported(algo.AllReduce) {
						for _, tc := range []struct {
							dt    reduce.DType
							op    reduce.Op
							count int
						}{{reduce.Int32, reduce.Sum, 70001}, {reduce.Float32, reduce.Max, 16384}, {reduce.Float64, reduce.Sum, 9000}} {
							rng := rand.New(rand.NewPCG(seed, uint64(c.Rank())))
							n := tc.count * tc.dt.Size()
							in := make([]byte, n)
							for i := range tc.count {
								put(in, tc.dt, i, float64(rng.IntN(2000)-1000)/8)
							}
							keep := bytes.Clone(in)
							out := make([]byte, n)
							actx := WithAlgorithm(ctx, a)
							if err := c.AllReduce(actx, in, out, tc.count, tc.dt, tc.op); err != nil {
								return fmt.Errorf("%v %v %v out of place: %w", a, tc.dt, tc.op, err)
							}
							if !bytes.Equal(in, keep) {
								return fmt.Errorf("%v %v %v: the input changed", a, tc.dt, tc.op)
							}
							ref := bytes.Clone(in)
							if err := c.AllReduce(actx, ref, ref, tc.count, tc.dt, tc.op); err != nil {
								return fmt.Errorf("%v %v %v in place: %w", a, tc.dt, tc.op, err)
							}
							// Every rank's input is reproducible: the exact result
							// (sums of multiples of 1/8 and maxima are exact).
							want := make([]float64, tc.count)
							for q := range c.Size() {
								rq := rand.New(rand.NewPCG(seed, uint64(q)))
								inq := make([]byte, n)
								for i := range tc.count {
									put(inq, tc.dt, i, float64(rq.IntN(2000)-1000)/8)
								}
								for i := range tc.count {
									v := get(inq, tc.dt, i)
									switch {
									case q == 0:
										want[i] = v
									case tc.op == reduce.Sum:
										want[i] += v
									default:
										want[i] = max(want[i], v)
									}
								}
							}
							for i := range tc.count {
								if got := get(out, tc.dt, i); got != want[i] {
									return fmt.Errorf("%v %v %v of %d: element %d = %v, want %v (seed %d)", a, tc.dt, tc.op, tc.count, i, got, want[i], seed)
								}
							}
							if i := firstDiff(out, ref); i >= 0 {
								return fmt.Errorf("%v %v %v of %d: byte %d differs from in place (seed %d)", a, tc.dt, tc.op, tc.count, i, seed)
							}
						}
					}
					return nil
				})
			})
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}
