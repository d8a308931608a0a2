package coll

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/coll/reduce"
	"github.com/ibex-rdma/ibex/verbs"
)

// ringAllReduceSteps is the textbook ring all-reduce of n int64 values on
// size ranks (test-only; coll/algo generates the real schedules): size
// slots, reduce-scatter in size-1 steps, all-gather in size-1 steps.
func ringAllReduceSteps(rank, size, n int) []execStep {
	if size == 1 {
		return nil
	}
	slot := func(s int) (int, int) {
		s = ((s % size) + size) % size
		lo, hi := s*n/size, (s+1)*n/size
		return lo * 8, (hi - lo) * 8
	}
	next, prev := (rank+1)%size, (rank+size-1)%size
	var steps []execStep
	for k := range 2 * (size - 1) {
		so, sn := slot(rank - k)
		ro, rn := slot(rank - k - 1)
		steps = append(steps, execStep{
			sends: []xfer{{peer: next, off: so, n: sn}},
			recvs: []xfer{{peer: prev, off: ro, n: rn, reduce: k < size-1}},
		})
	}
	return steps
}

// TestExecutorRingAllReduce runs the ring on the normal executor over
// loop0 and shm0, and on the flagged path over shm0, with counts that do not divide evenly and pieces smaller than a
// slot (several credits' worth), several calls in a row.
func TestExecutorRingAllReduce(t *testing.T) {
	seed := *llSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (replay with -coll.seed=%d)", seed, seed)
	paths := []struct {
		tr   string
		mode int
	}{{"loop0", modeNormal}, {"shm0", modeNormal}, {"shm0", modeFL}}
	for _, p := range paths {
		tr := p.tr
		for _, size := range []int{1, 2, 3, 4} {
			t.Run(fmt.Sprintf("%s/%s/%d", tr, []string{"normal", "ll", "flagged"}[p.mode], size), func(t *testing.T) {
				runRanks(t, size, Options{Transport: tr, Landing: 4 * 4096, Credits: 4, Chunk: 4096}, func(c *Comm) error {
					for k, n := range []int{0, 1, 7, 5000, 20011} {
						d := c.devs[tr]
						mr, err := d.pd.AllocMR(max(8*n, 8), verbs.AccessLocalWrite)
						if err != nil {
							return err
						}
						buf := mr.Bytes()[:8*n]
						rng := rand.New(rand.NewPCG(seed, uint64(c.rank)))
						want := make([]uint64, n)
						for i := range n {
							v := rng.Uint64() >> 8
							binary.LittleEndian.PutUint64(buf[8*i:], v)
						}
						// Every rank's input is reproducible from the seed.
						for r := range size {
							rr := rand.New(rand.NewPCG(seed, uint64(r)))
							for i := range n {
								want[i] += rr.Uint64() >> 8
							}
						}
						ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
						err = c.run(ctx, &call{seq: uint32(k) % callSeqMod, steps: ringAllReduceSteps(c.rank, size, n), buf: buf,
							lkeys: map[string]uint32{tr: mr.LKey()}, addrs: map[string]uint64{tr: mr.Addr()}, dt: reduce.Int64, op: reduce.Sum, mode: p.mode})
						cancel()
						if err != nil {
							return fmt.Errorf("count %d: %w", n, err)
						}
						for i := range n {
							if got := binary.LittleEndian.Uint64(buf[8*i:]); got != want[i] {
								return fmt.Errorf("count %d: element %d = %d, want %d (seed %d)", n, i, got, want[i], seed)
							}
						}
						if err := mr.Dereg(); err != nil {
							return err
						}
					}
					return nil
				})
			})
		}
	}
}
