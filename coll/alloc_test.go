package coll

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/coll/reduce"
)

// TestAllocs: once a call shape has run, all-reduce allocates nothing, on
// every path: LL (8 B), flagged (4 KiB, 64 KiB, and 1 MiB out of place on
// the caller's registered buffers) on shm0, and the normal path on loop0. Both
// ranks' calls are counted: AllocsPerRun counts the whole process.
func TestAllocs(t *testing.T) {
	const runs = 50
	for _, tr := range []string{"shm0", "loop0"} {
		for _, size := range []int{8, 4 << 10, 64 << 10, 1 << 20} {
			t.Run(fmt.Sprintf("%s/%d", tr, size), func(t *testing.T) {
				runRanks(t, 2, Options{Transport: tr}, func(c *Comm) error {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					buf, out := make([]byte, size), make([]byte, size)
					if size < 1<<20 {
						out = buf // in place; 1 MiB is out of place, reading the input where it lies
					}
					call := func() error { return c.AllReduce(ctx, buf, out, size/4, reduce.Float32, reduce.Sum) }
					for range 3 {
						if err := call(); err != nil {
							return err
						}
					}
					if c.Rank() == 1 {
						for range runs + 1 { // AllocsPerRun's warm-up call and its runs
							if err := call(); err != nil {
								return err
							}
						}
						return nil
					}
					var err error
					a := testing.AllocsPerRun(runs, func() {
						if e := call(); e != nil && err == nil {
							err = e
						}
					})
					if err != nil {
						return err
					}
					if a != 0 {
						return fmt.Errorf("%s all-reduce of %d bytes: %v allocations per call, want 0", tr, size, a)
					}
					return nil
				})
			})
		}
	}
}
