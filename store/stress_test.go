package store

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// TestCancelStorm: goroutines of two clients (both modes) on shm0 read with
// deadlines so short that many batches are abandoned mid-flight; every
// batch that succeeds is right, every failure is the deadline, and when
// the clients close the pool is full.
func TestCancelStorm(t *testing.T) {
	dir := t.TempDir()
	want := dataset(t, dir, testSizes, 17)
	s := startServer(t, ServerConfig{Dir: dir, Device: "shm0", PoolBytes: 16 * 65536, ChunkBytes: 65536, MaxHeld: 8})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	var ok, cancelled int64
	var mu sync.Mutex
	var clients []*Client
	for ci := 0; ci < 2; ci++ {
		c := dial(t, s, "shm0", Mode(ci), 4)
		clients = append(clients, c)
		for g := 0; g < 3; g++ {
			wg.Add(1)
			go func(seed uint64) {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, 1))
				mem, err := c.Alloc(512 << 10)
				if err != nil {
					errs <- err
					return
				}
				for i := 0; i < 30; i++ {
					exts, dst := randomBatch(r, c.Files(), 20, 25_000, mem)
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(3000))*time.Microsecond)
					err := c.ReadBatch(ctx, exts, dst)
					cancel()
					mu.Lock()
					if err == nil {
						ok++
					} else {
						cancelled++
					}
					mu.Unlock()
					switch {
					case err == nil:
						if err := diffBatch(c.Files(), want, exts, dst); err != nil {
							errs <- err
							return
						}
					case !errors.Is(err, context.DeadlineExceeded):
						errs <- err
						return
					}
					// An abandoned batch may still land in mem: go on
					// in fresh memory.
					if err != nil {
						if mem, err = c.Alloc(512 << 10); err != nil {
							errs <- err
							return
						}
					}
				}
			}(uint64(ci*10 + g))
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d batches read, %d abandoned", ok, cancelled)
	// The abandoned batches came back: each client reads on, more
	// batches than it has, then closes; every buffer is back.
	for _, c := range clients {
		mem, err := c.Alloc(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(99, 0))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		for i := 0; i < 40; i++ {
			exts, dst := randomBatch(r, c.Files(), 10, 50_000, mem)
			if err := c.ReadBatch(ctx, exts, dst); err != nil {
				t.Fatal(err)
			}
			checkBatch(t, c.Files(), want, exts, dst)
		}
		cancel()
		_ = c.Close()
	}
	waitPoolFull(t, s)
}
