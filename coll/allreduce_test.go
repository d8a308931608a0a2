package coll

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/coll/reduce"
)

// value is rank r's element i: small integers, so sums, products of a few
// ranks, minima and maxima are exact in every type and any order (the
// nccl-tests method).
func value(r, i int) int64 { return int64((r*7+i*3)%11) + 1 }

func put(b []byte, dt reduce.DType, i int, v float64) { reduce.SetValue(b, dt, i, v) }

func get(b []byte, dt reduce.DType, i int) float64 { return reduce.Value(b, dt, i) }

func expect(op reduce.Op, size, i int) float64 {
	acc := float64(value(0, i))
	for r := 1; r < size; r++ {
		v := float64(value(r, i))
		switch op {
		case reduce.Sum:
			acc += v
		case reduce.Prod:
			acc *= v
		case reduce.Min:
			acc = math.Min(acc, v)
		case reduce.Max:
			acc = math.Max(acc, v)
		}
	}
	return acc
}

// TestAllReduce: ring, tree and halving-doubling schedules on the
// executor, 1 to 8 ranks on loop0 and 2 to 4 on shm0 (each rank its own
// context, as separate processes would be), counts 0, 1, not divisible by
// the ranks, and larger than a landing slot; in and out of place.
func TestAllReduce(t *testing.T) {
	type cfg struct {
		tr    string
		sizes []int
	}
	for _, c := range []cfg{{"loop0", []int{1, 2, 3, 5, 8}}, {"shm0", []int{2, 3, 4}}} {
		for _, alg := range []string{"ring", "tree", "rhd"} {
			for _, size := range c.sizes {
				t.Run(fmt.Sprintf("%s/%s/%d", c.tr, alg, size), func(t *testing.T) {
					t.Setenv("IBEX_ALGO", alg)
					runRanks(t, size, Options{Transport: c.tr, Landing: 8 * 4096, Credits: 8}, func(cm *Comm) error {
						for _, dt := range []reduce.DType{reduce.Int32, reduce.Int64, reduce.Float32, reduce.Float64} {
							for _, op := range []reduce.Op{reduce.Sum, reduce.Prod, reduce.Min, reduce.Max} {
								if op == reduce.Prod && size > 5 {
									continue // keep products exact in float32
								}
								for _, count := range []int{0, 1, 13, 3001} {
									send := make([]byte, count*dt.Size())
									for i := range count {
										put(send, dt, i, float64(value(cm.Rank(), i)))
									}
									recv := send // in place
									if count%2 == 1 {
										recv = make([]byte, len(send)) // out of place
									}
									ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
									err := cm.AllReduce(ctx, send, recv, count, dt, op)
									cancel()
									if err != nil {
										return err
									}
									for i := range count {
										if got, want := get(recv, dt, i), expect(op, size, i); got != want {
											return fmt.Errorf("%v %v count %d: element %d = %v, want %v", dt, op, count, i, got, want)
										}
									}
								}
							}
						}
						return nil
					})
				})
			}
		}
	}
}

// TestAllReduceMismatch: ranks that disagree on the count get an error,
// not a hang or a wrong result.
func TestAllReduceMismatch(t *testing.T) {
	runRanks(t, 2, Options{Transport: "loop0", Landing: 8 * 4096, Credits: 8}, func(cm *Comm) error {
		count := 100 + 50*cm.Rank()
		buf := make([]byte, 8*count)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		err := cm.AllReduce(ctx, buf, buf, count, reduce.Int64, reduce.Sum)
		if err == nil {
			return fmt.Errorf("rank %d: mismatched counts gave no error", cm.Rank())
		}
		if !strings.Contains(err.Error(), "expected") && !strings.Contains(err.Error(), "not heard from") && !strings.Contains(err.Error(), "mismatch") {
			return fmt.Errorf("rank %d: unclear error: %v", cm.Rank(), err)
		}
		return nil
	})
}
