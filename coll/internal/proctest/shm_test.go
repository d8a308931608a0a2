package proctest

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/coll"
	"github.com/ibex-rdma/ibex/coll/reduce"
)

// TestProcessesShm runs 2, 3 and 4 rank processes on this host: every
// rank reaches every other over shm0, and runs every collective with
// int32, float32 and float16, counts 0, 1, size+3 and 300000 (several
// 512 KiB pieces), out of place and in place: all_reduce with every op
// (sum, prod, min, max for int32; sum, prod, max for float32; sum for
// float16), reduce_scatter (every op at size+3, else sum), all_gather,
// all_to_all, and reduce (max; sum for float16) and broadcast from every
// root for int32 and one moving root for the others. Then an 8 MiB
// all-reduce, a Send/Recv ring up to 8 MiB (more than a peer's landing
// buffer) and barriers. Every element of every output is checked; the
// bytes after it, and an out-of-place input, must stay untouched.
func TestProcessesShm(t *testing.T) {
	s := seed(t)
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("np%d", n), func(t *testing.T) {
			began := time.Now()
			sp := spec{Case: "collectives", Size: n, ID: newID(t, freeAddr(t)), Seed: s, Limit: 90 * time.Second}
			if n > runtime.NumCPU() {
				// More ranks than cores, and a waiting rank spins: one
				// thread per rank (NCCL's shape, a rank per core) keeps
				// small calls at about a millisecond instead of ten.
				sp.Env = func(int) []string { return []string{"GOMAXPROCS=1"} }
			}
			j := start(t, sp)
			j.wait(100 * time.Second)
			t.Logf("%d ranks in %v", n, time.Since(began).Round(time.Millisecond))
		})
	}
}

// bigCount is "several landing slots": default Options cut pieces at
// 512 KiB, and 300000 int32 are 1.2 MB.
const bigCount = 300000

// collectivesCase is one rank of TestProcessesShm.
func collectivesCase(ctx context.Context, c *coll.Comm, seed uint64) error {
	r, N := c.Rank(), c.Size()
	for q := range N {
		if got := c.Transport(q); q != r && got != "shm0" {
			return fmt.Errorf("rank %d reaches rank %d over %q, want shm0 (same host)", r, q, got)
		}
	}
	x := newCaller(ctx, c, seed)
	counts := []int{0, 1, N + 3, bigCount}
	for di, d := range []struct {
		dt  reduce.DType
		ops []reduce.Op
	}{
		{reduce.Int32, []reduce.Op{reduce.Sum, reduce.Prod, reduce.Min, reduce.Max}},
		{reduce.Float32, []reduce.Op{reduce.Sum, reduce.Prod, reduce.Max}},
		{reduce.Float16, []reduce.Op{reduce.Sum}},
	} {
		for ci, count := range counts {
			for pi, inPlace := range []bool{false, true} {
				x.dt, x.count, x.inPlace = d.dt, count, inPlace
				// Every op for all_reduce; for reduce_scatter at size+3
				// elements (sum at the other counts). Every root for
				// int32; for the other types one, which moves with the
				// count and placement. (Small calls cost milliseconds
				// with more ranks than cores: a waiting rank spins.)
				rsOps, roots := d.ops[:1], []int{(2*ci + pi + di) % N}
				if count == N+3 {
					rsOps = d.ops
				}
				if d.dt == reduce.Int32 {
					roots = roots[:0]
					for root := range N {
						roots = append(roots, root)
					}
				}
				for _, op := range d.ops {
					if err := x.allReduce(op); err != nil {
						return err
					}
				}
				for _, op := range rsOps {
					if err := x.reduceScatter(op); err != nil {
						return err
					}
				}
				for _, root := range roots {
					// Reduce with the type's last op: max, or sum for float16.
					if err := x.reduce(d.ops[len(d.ops)-1], root); err != nil {
						return err
					}
					if err := x.broadcast(root); err != nil {
						return err
					}
				}
				if err := x.allGather(); err != nil {
					return err
				}
				if err := x.allToAll(); err != nil {
					return err
				}
			}
		}
	}
	// An all-reduce of 8 MiB, twice a peer's landing buffer: its steps
	// send a peer megabytes, up to every credit at once.
	x.dt, x.count, x.inPlace = reduce.Float32, 2<<20, false
	if err := x.allReduce(reduce.Sum); err != nil {
		return err
	}
	for _, count := range []int{0, 1, N + 3, bigCount, 2 << 20} {
		if err := x.ring(count); err != nil {
			return err
		}
	}
	for k := range 3 {
		if err := c.Barrier(ctx); err != nil {
			return fmt.Errorf("barrier %d: %w", k, err)
		}
	}
	return nil
}
