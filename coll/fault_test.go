package coll

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/coll/reduce"
)

// TestMismatch: ranks that make different calls get an error wrapping
// ErrMismatch, or ErrAborted when a peer found the mismatch first; never a
// deadline, a hang or a success with wrong data. A mismatch no receive can
// see (two ranks that both think they are the root) is reported by the
// next call or by Close.
//
// Each case runs on loop0 (the normal path), and on shm0 with calls of
// 800 bytes (the LL path) and of 200 KB (the flagged path); "path" has
// one rank's call on each of the two.
func TestMismatch(t *testing.T) {
	for _, run := range []struct {
		tr string
		n  int
	}{{"loop0", 1000}, {"shm0", 200}, {"shm0", 50000}} {
		testMismatch(t, run.tr, run.n)
	}
}

func testMismatch(t *testing.T, tr string, n int) {
	type callFn func(ctx context.Context, c *Comm, buf []byte) error
	allReduce := func(count int, dt reduce.DType, op reduce.Op) callFn {
		return func(ctx context.Context, c *Comm, buf []byte) error {
			return c.AllReduce(ctx, buf, buf, count, dt, op)
		}
	}
	bcast := func(root int) callFn {
		return func(ctx context.Context, c *Comm, buf []byte) error {
			return c.Broadcast(ctx, buf, buf, n, reduce.Float32, root)
		}
	}
	withAlgo := func(a algo.Algorithm, f callFn) callFn {
		return func(ctx context.Context, c *Comm, buf []byte) error { return f(WithAlgorithm(ctx, a), c, buf) }
	}
	sum := allReduce(n, reduce.Float32, reduce.Sum)
	for _, tc := range []struct {
		name  string
		size  int
		calls func(rank int) []callFn
		want  string // in the error of some rank (one of |-separated texts)
	}{
		{"collective", 2, func(r int) []callFn {
			if r == 0 {
				return []callFn{sum}
			}
			return []callFn{bcast(0)}
		}, "it called"},
		{"count", 3, func(r int) []callFn { return []callFn{allReduce(n+r/2, reduce.Float32, reduce.Sum)} }, "count differs"},
		{"dtype", 2, func(r int) []callFn {
			return []callFn{allReduce(n, []reduce.DType{reduce.Float32, reduce.Int32}[r], reduce.Sum)}
		}, "all_reduce of int32 sum"},
		{"op", 4, func(r int) []callFn {
			return []callFn{allReduce(n, reduce.Float32, []reduce.Op{reduce.Sum, reduce.Max}[r%2])}
		}, "float max"},
		{"algorithm", 2, func(r int) []callFn { return []callFn{withAlgo([]algo.Algorithm{algo.Ring, algo.RecDoubling}[r], sum)} }, "(rd)"},
		{"root", 3, func(r int) []callFn { return []callFn{bcast(r % 2)} }, ""},
		{"both roots", 2, func(r int) []callFn { return []callFn{bcast(r)} }, "data no call received|expects no more from it"},
		{"order", 2, func(r int) []callFn {
			if r == 0 {
				return []callFn{sum, bcast(0)}
			}
			return []callFn{bcast(0), sum}
		}, ""},
		{"path", 2, func(r int) []callFn { return []callFn{allReduce([]int{100, 50000}[r], reduce.Float32, reduce.Sum)} }, ""},
	} {
		{
			t.Run(fmt.Sprintf("%s/%s/%d", tc.name, tr, n), func(t *testing.T) {
				var mu sync.Mutex
				var msgs []string
				runRanksRaw(t, tc.size, Options{Transport: tr, Landing: 8 * 4096, Credits: 8}, func(c *Comm) error {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					buf := make([]byte, 4*50001)
					var err error
					for _, f := range tc.calls(c.Rank()) {
						if err = f(ctx, c, buf); err != nil {
							break
						}
					}
					cerr := c.Close()
					if err == nil {
						err = cerr
					}
					switch {
					case err == nil:
						return fmt.Errorf("rank %d: no error", c.Rank())
					case errors.Is(err, context.DeadlineExceeded):
						return fmt.Errorf("rank %d: ran into the deadline: %v", c.Rank(), err)
					case !errors.Is(err, ErrMismatch) && !errors.Is(err, ErrAborted):
						return fmt.Errorf("rank %d: error is neither a mismatch nor an abort: %v", c.Rank(), err)
					}
					mu.Lock()
					msgs = append(msgs, err.Error())
					mu.Unlock()
					return nil
				})
				all := strings.Join(msgs, "\n")
				found := false
				for _, w := range strings.Split(tc.want, "|") {
					found = found || strings.Contains(all, w)
				}
				if !strings.Contains(all, "mismatched calls") || !found {
					t.Fatalf("no rank reported the mismatch (%q):\n%s", tc.want, all)
				}
				t.Logf("\n%s", all)
			})
		}
	}
}

// runRanksRaw is runRanks where fn closes the communicator itself.
func runRanksRaw(t *testing.T, size int, opt Options, fn func(c *Comm) error) {
	t.Helper()
	id, err := NewUniqueID(freeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, size)
	for r := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := NewComm(ctx, id, r, size, opt)
			if err != nil {
				errs[r] = err
				return
			}
			errs[r] = fn(c)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// TestAbort: Abort unblocks a call waiting for a rank that never comes;
// the peer's own call then fails with ErrAborted (the abort notice), not
// at its deadline; later calls fail at once; Close does not wait.
func TestAbort(t *testing.T) {
	for _, tr := range []string{"loop0", "shm0"} {
		t.Run(tr, func(t *testing.T) {
			aborted := make(chan struct{})
			runRanksRaw(t, 3, Options{Transport: tr}, func(c *Comm) error {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				buf := make([]byte, 4<<10)
				var err error
				switch c.Rank() {
				case 0:
					time.AfterFunc(50*time.Millisecond, c.Abort)
					err = c.AllReduce(ctx, buf, buf, 1<<10, reduce.Float32, reduce.Sum)
					close(aborted)
				case 1:
					<-aborted
					err = c.AllReduce(ctx, buf, buf, 1<<10, reduce.Float32, reduce.Sum)
				case 2:
					// Joins late, after the abort: its peers' notices are waiting.
					<-aborted
					time.Sleep(20 * time.Millisecond)
					err = c.AllReduce(ctx, buf, buf, 1<<10, reduce.Float32, reduce.Sum)
				}
				if !errors.Is(err, ErrAborted) || errors.Is(err, context.DeadlineExceeded) {
					return fmt.Errorf("rank %d: all_reduce: %v, want ErrAborted", c.Rank(), err)
				}
				if err := c.Barrier(ctx); !errors.Is(err, ErrAborted) {
					return fmt.Errorf("rank %d: barrier after the abort: %v", c.Rank(), err)
				}
				_ = c.Close()
				return nil
			})
		})
	}
}

// TestSplit: 6 ranks split by parity with reversed keys; each half runs
// an all-reduce of its own, a NoColor rank gets nil, the parent still
// works after, and each closes on its own.
func TestSplit(t *testing.T) {
	runRanks(t, 6, Options{Transport: "loop0"}, func(c *Comm) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		r := c.Rank()
		color := r % 2
		if r == 5 {
			color = NoColor
		}
		sub, err := c.Split(ctx, color, -r)
		if err != nil {
			return err
		}
		if r == 5 {
			if sub != nil {
				return fmt.Errorf("NoColor rank got a communicator")
			}
		} else {
			members := map[int][]int{0: {4, 2, 0}, 1: {3, 1}}[color]
			want := -1
			for i, m := range members {
				if m == r {
					want = i
				}
			}
			if sub.Size() != len(members) || sub.Rank() != want {
				return fmt.Errorf("rank %d: sub rank %d of %d, want %d of %d", r, sub.Rank(), sub.Size(), want, len(members))
			}
			buf := make([]byte, 8)
			put(buf, reduce.Int64, 0, float64(r))
			if err := sub.AllReduce(ctx, buf, buf, 1, reduce.Int64, reduce.Sum); err != nil {
				return err
			}
			wantSum := 0
			for _, m := range members {
				wantSum += m
			}
			if got := get(buf, reduce.Int64, 0); got != float64(wantSum) {
				return fmt.Errorf("rank %d: sum over color %d = %v, want %d", r, color, got, wantSum)
			}
			if err := sub.Close(); err != nil {
				return err
			}
		}
		buf := make([]byte, 8)
		put(buf, reduce.Int64, 0, 1)
		if err := c.AllReduce(ctx, buf, buf, 1, reduce.Int64, reduce.Sum); err != nil {
			return err
		}
		if got := get(buf, reduce.Int64, 0); got != 6 {
			return fmt.Errorf("parent all_reduce after split: %v", got)
		}
		return nil
	})
}
