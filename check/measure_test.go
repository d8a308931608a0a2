package check

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ibex-rdma/ibex/coll"
	_ "github.com/ibex-rdma/ibex/provider/shm" // shm0: ranks of one host
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestMeasure runs Measure on 4 ranks of one process (shm0 between them,
// coll's Example's way): rank 0 gets every pair's figures and the
// all-reduce's, the other ranks nil; the figures make a valid baseline.
func TestMeasure(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	id, err := coll.NewUniqueID(addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const size = 4
	cfg := Config{Bytes: 16 << 10, Iters: 2, Repeats: 2, LatIters: 10, AllReduceBytes: 64 << 10, AllReduceIters: 1}
	figs := make([]*Figures, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for rank := range size {
		wg.Go(func() {
			c, err := coll.NewComm(ctx, id, rank, size, coll.Options{})
			if err != nil {
				errs[rank] = err
				return
			}
			figs[rank], errs[rank] = Measure(ctx, c, cfg)
			if err := c.Close(); errs[rank] == nil {
				errs[rank] = err
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		if r > 0 && figs[r] != nil {
			t.Errorf("rank %d got figures", r)
		}
	}
	f := figs[0]
	if f == nil {
		t.Fatal("rank 0 got no figures")
	}
	if err := f.validate(); err != nil {
		t.Fatal(err)
	}
	if f.Ranks != size || f.Transport != "shm0" || len(f.Hosts) != size || f.Config.Bytes != 16<<10 || f.Config.Warmup != 2 {
		t.Errorf("shape %+v, hosts %v", f.Shape, f.Hosts)
	}
	for _, p := range f.Pairs {
		if p.BWAB <= 0 || p.BWBA <= 0 || p.LatUs <= 0 || p.Transport != "shm0" || p.Err != "" {
			t.Errorf("pair %+v", p)
		}
	}
	if a := f.AllReduce; a.Bytes != 64<<10 || a.BusBW <= 0 || a.AlgBW <= 0 || a.TimeUs <= 0 || a.Wrong != 0 {
		t.Errorf("all_reduce %+v", a)
	}
	if _, err := Evaluate(f, f, Thresholds{}); err != nil {
		t.Errorf("against itself: %v", err)
	}
}
