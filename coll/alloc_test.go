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

// TestStaging: on shm0 with the default options a peer's landing buffer
// and staging are the normal and flagged slots (2 × Credits × Chunk) and
// the LL slots, whatever the message size; an 8 MiB all-reduce, in and
// out of place, adds no working buffer (it runs on the caller's buffers).
func TestStaging(t *testing.T) {
	runRanks(t, 2, Options{Transport: "shm0"}, func(c *Comm) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		const size = 8 << 20
		in, out := make([]byte, size), make([]byte, size)
		for _, o := range [][]byte{out, in} {
			if err := c.AllReduce(ctx, in, o, size/4, reduce.Float32, reduce.Sum); err != nil {
				return err
			}
		}
		limit := 2*c.opt.Credits*c.opt.Chunk + 2*c.ll.area + 4096 // and headers, credit words
		for _, l := range c.links {
			if l == nil {
				continue
			}
			got := l.land.Len() + l.stage.mr.Len()
			if got > limit {
				return fmt.Errorf("link to rank %d: %d bytes of landing and staging, want at most %d", l.peer, got, limit)
			}
			t.Logf("rank %d, link to rank %d: %d bytes of landing and staging (2 x %d credits x %d B chunk = %d)", c.Rank(), l.peer, got, c.opt.Credits, c.opt.Chunk, 2*c.opt.Credits*c.opt.Chunk)
		}
		if c.work != nil {
			return fmt.Errorf("a working buffer of %d bytes for an all-reduce on the caller's buffers", len(c.work.buf))
		}
		return nil
	})
}
