package store

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// TestConcurrentClients: four clients (both modes), each with three
// goroutines' batches in flight, share a pool of 8 buffers, so requests
// wait for buffers others hold; every byte is right and every buffer comes
// back.
func TestConcurrentClients(t *testing.T) {
	dir := t.TempDir()
	want := dataset(t, dir, testSizes, 3)
	s := startServer(t, ServerConfig{Dir: dir, PoolBytes: 8 * 32 << 10, ChunkBytes: 32 << 10, MaxHeld: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for ci := 0; ci < 4; ci++ {
		c := dial(t, s, "loop0", Mode(ci%2), 4)
		for g := 0; g < 3; g++ {
			mem, err := c.Alloc(1 << 20)
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func(seed uint64) {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, 0))
				files := c.Files()
				for round := 0; round < 5; round++ {
					exts, dst := randomBatch(r, files, 40, 100_000, mem)
					if err := c.ReadBatch(ctx, exts, dst); err != nil {
						errs <- err
						return
					}
					if err := diffBatch(files, want, exts, dst); err != nil {
						errs <- err
						return
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
	st := s.Stats()
	if st.Requests == 0 || st.Bytes == 0 || st.ClientsTotal != 4 {
		t.Fatalf("stats %+v", st)
	}
}
