package coll

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/coll/reduce"
)

// TestRecorderRing: with a ring of 4 records, a rank's flight record
// after 7 calls is the last 4, oldest first, each with its op, size as
// nccl-tests counts it, type, op, algorithm, path, root, peers, steps and
// times; Stats counts every call and reports the last's bandwidth.
func TestRecorderRing(t *testing.T) {
	opt := Options{Transport: "shm0", Health: HealthOptions{Records: 4, StatusAddr: "off"}}
	var mu sync.Mutex
	got := map[int][]Record{}
	stats := map[int][]OpStats{}
	runRanks(t, 3, opt, func(c *Comm) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		buf, out := make([]byte, 3*4096), make([]byte, 3*4096)
		calls := []func() error{
			func() error { return c.AllReduce(ctx, buf, buf, 1024, reduce.Float32, reduce.Sum) },
			func() error { return c.AllReduce(ctx, buf, buf, 1024, reduce.Float32, reduce.Sum) },
			func() error {
				return c.AllReduce(WithAlgorithm(ctx, algo.Ring), buf, buf, 1024, reduce.Float32, reduce.Sum)
			}, // #3
			func() error { return c.Broadcast(ctx, buf, buf, 512, reduce.Int32, 1) }, // #4
			func() error { return c.AllGather(ctx, buf, out, 100, reduce.Float64) },  // #5
			func() error { // point-to-point: rank 0 sends to rank 1
				switch c.Rank() {
				case 0:
					return c.Send(ctx, buf, 10, reduce.Int8, 1)
				case 1:
					return c.Recv(ctx, buf, 10, reduce.Int8, 0)
				}
				return nil
			},
			func() error { return c.Barrier(ctx) }, // #6
		}
		for i, f := range calls {
			if err := f(); err != nil {
				return fmt.Errorf("call %d: %w", i, err)
			}
		}
		mu.Lock()
		got[c.Rank()] = c.FlightRecord()
		stats[c.Rank()] = c.Stats()
		mu.Unlock()
		// The process's Stats has this rank's too.
		for _, cs := range Stats() {
			if cs.ID == c.ID() && cs.Rank == c.Rank() {
				if cs.Size != 3 || fmt.Sprint(cs.Ops) != fmt.Sprint(c.Stats()) {
					return fmt.Errorf("rank %d: coll.Stats has %+v, want %+v", c.Rank(), cs, c.Stats())
				}
				return nil
			}
		}
		return fmt.Errorf("rank %d: coll.Stats lacks communicator %s", c.Rank(), c.ID())
	})
	for r := range 3 {
		recs := got[r]
		var ops []string
		for _, rec := range recs {
			ops = append(ops, fmt.Sprintf("%s#%d", rec.Op, rec.Seq))
			if rec.State != "done" || rec.Start.IsZero() || rec.End.Before(rec.Start) || rec.Step != rec.Steps || rec.Error != "" {
				t.Errorf("rank %d: %+v: want done, a start and an end, at its last step", r, rec)
			}
		}
		want := []string{"broadcast#4", "all_gather#5", "all_reduce#6"}
		if r < 2 {
			want = []string{"broadcast#4", "all_gather#5", []string{"send#1", "recv#1"}[r], "all_reduce#6"}
		} else {
			want = append([]string{"all_reduce#3"}, want...)
		}
		if !slices.Equal(ops, want) {
			t.Fatalf("rank %d: flight record %v, want %v", r, ops, want)
		}
		b := recs[slices.Index(want, "broadcast#4")]
		if b.Bytes != 2048 || b.DType != "int32" || b.Root != 1 || b.Redop != "" || b.Path == "" || b.Algorithm == "" {
			t.Errorf("rank %d: broadcast record %+v: want 2048 B int32 root 1, a path and an algorithm, no redop", r, b)
		}
		if g := recs[slices.Index(want, "all_gather#5")]; g.Bytes != 3*800 || g.DType != "double" {
			t.Errorf("rank %d: all_gather record %+v: want 2400 B (the gathered buffer) of double", r, g)
		}
		if r == 2 {
			if a := recs[0]; a.Algorithm != "ring" || a.Redop != "sum" || a.Bytes != 4096 || !slices.Equal(a.Peers, []int{0, 1}) {
				t.Errorf("rank 2: all_reduce #3 %+v: want ring, sum, 4096 B, peers [0 1]", a)
			}
		}
		if r == 1 {
			if p := recs[2]; !slices.Equal(p.Peers, []int{0}) || p.Bytes != 10 {
				t.Errorf("rank 1: recv record %+v: want 10 B from peer 0", p)
			}
		}
		counts := map[string]uint64{}
		for _, s := range stats[r] {
			counts[s.Op] = s.Count
			if s.Count > 0 && (s.LastExecMicros <= 0 || s.LastBusBWGBs < 0 || s.Failed != 0) {
				t.Errorf("rank %d: stats %+v", r, s)
			}
		}
		wantCounts := map[string]uint64{"all_reduce": 4, "broadcast": 1, "all_gather": 1}
		if r < 2 {
			wantCounts[[]string{"send", "recv"}[r]] = 1
		}
		if fmt.Sprint(counts) != fmt.Sprint(wantCounts) {
			t.Errorf("rank %d: stats counts %v, want %v", r, counts, wantCounts)
		}
	}
}

// TestRecorderAllocs: the recorder's hooks and the heartbeats allocate
// nothing: all-reduces on the LL and flagged paths with a heartbeat every
// millisecond (so dozens land while AllocsPerRun counts), and a quiet
// communicator that only beats; the service heard them.
func TestRecorderAllocs(t *testing.T) {
	opt := Options{Transport: "shm0", Health: HealthOptions{StatusAddr: "off", Heartbeat: time.Millisecond}}
	for _, size := range []int{8, 64 << 10} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			measured := make(chan struct{})
			runRanks(t, 2, opt, func(c *Comm) error {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				buf := make([]byte, size)
				call := func() error { return c.AllReduce(ctx, buf, buf, size/4, reduce.Float32, reduce.Sum) }
				for range 3 {
					if err := call(); err != nil {
						return err
					}
				}
				const runs = 200
				if c.Rank() == 1 {
					for range runs + 1 {
						if err := call(); err != nil {
							return err
						}
					}
					<-measured // not in a call meanwhile: a waiting call's naps allocate
					return c.Barrier(ctx)
				}
				beats := func() uint64 {
					c.health.coll.mu.Lock()
					defer c.health.coll.mu.Unlock()
					return c.health.coll.ranks[1].beats
				}
				before := beats()
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
					close(measured)
					return fmt.Errorf("all-reduce of %d bytes with 1 ms heartbeats: %v allocations per call, want 0", size, a)
				}
				// The heartbeats alone, over 100 ms: not one allocation.
				// Rank 1 may still be finishing its last call: wait for its
				// heartbeats to say it is idle.
				for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
					c.health.coll.mu.Lock()
					idle := c.health.coll.ranks[1].b.rec.state == recDone && c.health.coll.ranks[1].b.calls == 3+runs+1
					c.health.coll.mu.Unlock()
					if idle {
						break
					}
				}
				if a := testing.AllocsPerRun(1, func() { time.Sleep(100 * time.Millisecond) }); a != 0 {
					close(measured)
					return fmt.Errorf("heartbeats every 1 ms: %v allocations in 100 ms, want 0", a)
				}
				close(measured)
				if n := beats() - before; n < 10 {
					return fmt.Errorf("the service heard %d heartbeats from rank 1 while counting, want dozens", n)
				}
				return c.Barrier(ctx)
			})
		})
	}
}

// TestRecorderConcurrentReads: FlightRecord and the heartbeats read the
// ring while the rank writes it (run with -race): every record read is
// whole (its fields from one call) and the ring never holds more than its
// length.
func TestRecorderConcurrentReads(t *testing.T) {
	opt := Options{Transport: "shm0", Health: HealthOptions{StatusAddr: "off", Records: 3, Heartbeat: time.Millisecond}}
	runRanks(t, 2, opt, func(c *Comm) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		done := make(chan struct{})
		var bad error
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				recs := c.FlightRecord()
				if len(recs) > 3 {
					bad = fmt.Errorf("%d records from a ring of 3", len(recs))
					return
				}
				for _, r := range recs {
					// Calls alternate by number: odd ones 64 B all_reduce, even ones 32 B broadcast.
					want := map[bool]string{true: "all_reduce", false: "broadcast"}[r.Seq%2 == 1]
					if r.Op != want || (r.Op == "all_reduce") != (r.Bytes == 64) {
						bad = fmt.Errorf("a torn record: %+v", r)
						return
					}
				}
			}
		}()
		buf := make([]byte, 64)
		for i := range 400 {
			var err error
			if i%2 == 0 {
				err = c.AllReduce(ctx, buf, buf, 16, reduce.Float32, reduce.Sum)
			} else {
				err = c.Broadcast(ctx, buf, buf, 8, reduce.Float32, 0)
			}
			if err != nil {
				close(done)
				wg.Wait()
				return err
			}
		}
		close(done)
		wg.Wait()
		return bad
	})
}
