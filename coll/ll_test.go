package coll

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/coll/reduce"
)

var llSeed = flag.Uint64("coll.seed", 0, "replay the seeded tests (TestLLMixed, TestSpans, TestAllReduceFromInput, TestExecutorRingAllReduce) with this seed")

// TestLLMixed: 3 ranks on shm0 make 300 random calls (all-reduce,
// broadcast from a random root, all-gather, reduce-scatter, send/recv
// ring) whose sizes straddle the LL limit, so LL and flagged calls (in
// pieces of 4 KiB) interleave and both paths' slots wrap many times; every
// result is checked exactly. The seed is printed; -coll.seed replays it.
func TestLLMixed(t *testing.T) {
	seed := *llSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (replay with -coll.seed=%d)", seed, seed)
	dt := reduce.Int32
	runRanks(t, 3, Options{Transport: "shm0", Chunk: 4096}, func(c *Comm) error {
		if !c.ll.on || !c.fl.on && runtime.GOARCH == "amd64" {
			return fmt.Errorf("shm0 communicator does not take the LL and flagged paths")
		}
		rng := rand.New(rand.NewPCG(seed, 7)) // the same calls on every rank
		r, N := c.Rank(), c.Size()
		val := func(q, i, k int) float64 { return float64((q*31+i*7+k)%97 - 48) }
		for k := range 300 {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			count := rng.IntN(3*c.ll.max/4 + 2)
			if rng.IntN(4) == 0 {
				count = c.ll.max/4 + rng.IntN(8192)
			}
			what := rng.IntN(5)
			root := rng.IntN(N)
			var err error
			check := func(name string, got []byte, want func(i int) float64, n int) error {
				for i := range n {
					if g := get(got, dt, i); g != want(i) {
						return fmt.Errorf("call %d %s of %d: element %d = %v, want %v (seed %d)", k, name, count, i, g, want(i), seed)
					}
				}
				return nil
			}
			switch what {
			case 0:
				buf := make([]byte, 4*count)
				for i := range count {
					put(buf, dt, i, val(r, i, k))
				}
				if err = c.AllReduce(ctx, buf, buf, count, dt, reduce.Sum); err == nil {
					err = check("all_reduce", buf, func(i int) float64 { return val(0, i, k) + val(1, i, k) + val(2, i, k) }, count)
				}
			case 1:
				buf := make([]byte, 4*count)
				for i := range count {
					put(buf, dt, i, val(r, i, k))
				}
				if err = c.Broadcast(ctx, buf, buf, count, dt, root); err == nil {
					err = check("broadcast", buf, func(i int) float64 { return val(root, i, k) }, count)
				}
			case 2:
				mine := make([]byte, 4*count)
				for i := range count {
					put(mine, dt, i, val(r, i, k))
				}
				all := make([]byte, 4*count*N)
				if err = c.AllGather(ctx, mine, all, count, dt); err == nil {
					err = check("all_gather", all, func(i int) float64 { return val(i/max(count, 1), i%max(count, 1), k) }, count*N)
				}
			case 3:
				in := make([]byte, 4*count*N)
				for i := range count * N {
					put(in, dt, i, val(r, i, k))
				}
				out := make([]byte, 4*count)
				if err = c.ReduceScatter(ctx, in, out, count, dt, reduce.Max); err == nil {
					err = check("reduce_scatter", out, func(i int) float64 {
						j := r*count + i
						return max(val(0, j, k), val(1, j, k), val(2, j, k))
					}, count)
				}
			case 4:
				send := make([]byte, 4*count)
				for i := range count {
					put(send, dt, i, val(r, i, k))
				}
				recv := make([]byte, 4*count)
				from := (r + N - 1) % N
				if err = c.SendRecv(ctx, send, (r+1)%N, recv, from, count, dt); err == nil {
					err = check("sendrecv", recv, func(i int) float64 { return val(from, i, k) }, count)
				}
			}
			cancel()
			if err != nil {
				return err
			}
		}
		return nil
	})
}
