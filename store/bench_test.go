package store

import (
	"context"
	"testing"
	"time"

	_ "github.com/ibex-rdma/ibex/provider/shm"
)

// TestAllocs: the client's data path (ReadBatch, with the server on the
// same loopback device answering) allocates nothing after setup.
func TestAllocs(t *testing.T) {
	dir := t.TempDir()
	dataset(t, dir, []int64{4 << 20}, 4)
	s := startServer(t, ServerConfig{Dir: dir, PoolBytes: 4 << 20, ChunkBytes: 256 << 10})
	for _, mode := range []Mode{ModeRead, ModeWrite} {
		t.Run(mode.String(), func(t *testing.T) {
			c := dial(t, s, "loop0", mode, 4)
			mem, err := c.Alloc(1 << 20)
			if err != nil {
				t.Fatal(err)
			}
			exts := []Extent{{0, 0, 300 << 10}, {0, 1 << 20, 100}, {0, 2 << 20, 600 << 10}}
			dst := [][]byte{mem[:300<<10], mem[300<<10 : 300<<10+100], mem[400<<10 : 1000<<10]}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := c.ReadBatch(ctx, exts, dst); err != nil {
				t.Fatal(err)
			}
			n := testing.AllocsPerRun(50, func() {
				if err := c.ReadBatch(ctx, exts, dst); err != nil {
					t.Fatal(err)
				}
			})
			if n != 0 {
				t.Fatalf("ReadBatch allocates %.1f times per call, want 0", n)
			}
		})
	}
}

// BenchmarkReadBatch: one client, 4 batches of 16 ranges of 1 MiB in
// flight, both modes, over loop0 and shm0 (client and server in one process,
// two shm nodes), from the page cache.
func BenchmarkReadBatch(b *testing.B) {
	dir := b.TempDir()
	const size = 1 << 20
	dataset(b, dir, []int64{64 << 20}, 5)
	for _, dev := range []string{"loop0", "shm0"} {
		s := startServer(b, ServerConfig{Dir: dir, Device: dev, PoolBytes: 64 << 20, ChunkBytes: size, MaxHeld: 64})
		for _, mode := range []Mode{ModeRead, ModeWrite} {
			b.Run(dev+"/"+mode.String(), func(b *testing.B) {
				const depth, batch = 4, 16
				c := dial(b, s, dev, mode, depth*2)
				mem, err := c.Alloc(depth * batch * size)
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				b.SetBytes(batch * size)
				cpu0 := processCPU()
				b.ResetTimer()
				work := make(chan int)
				done := make(chan error, depth)
				for g := 0; g < depth; g++ {
					go func(g int) {
						exts := make([]Extent, batch)
						dst := make([][]byte, batch)
						for i := range exts {
							dst[i] = mem[(g*batch+i)*size : (g*batch+i+1)*size]
						}
						for k := range work {
							for i := range exts {
								exts[i] = Extent{File: 0, Off: int64((k*batch+i)%64) * size, Len: size}
							}
							if err := c.ReadBatch(ctx, exts, dst); err != nil {
								done <- err
								return
							}
						}
						done <- nil
					}(g)
				}
				for i := 0; i < b.N; i++ {
					work <- i
				}
				close(work)
				for g := 0; g < depth; g++ {
					if err := <-done; err != nil {
						b.Fatal(err)
					}
				}
				// CPU (server and client: one process) per GB, a figure
				// a loaded host's wall clock does not blur.
				b.ReportMetric(float64(processCPU()-cpu0)/1e9/(float64(b.N)*batch*size/1e9), "cpu-s/GB")
			})
		}
	}
}

// BenchmarkLatency: one ReadBatch of one 4 KiB range at a time: the round
// trip (request, pread, READ or WRITE, response) on loop0 and shm0.
func BenchmarkLatency(b *testing.B) {
	dir := b.TempDir()
	dataset(b, dir, []int64{1 << 20}, 6)
	for _, dev := range []string{"loop0", "shm0"} {
		s := startServer(b, ServerConfig{Dir: dir, Device: dev, PoolBytes: 1 << 20, ChunkBytes: 64 << 10})
		for _, mode := range []Mode{ModeRead, ModeWrite} {
			b.Run(dev+"/"+mode.String(), func(b *testing.B) {
				c := dial(b, s, dev, mode, 2)
				mem, err := c.Alloc(4096)
				if err != nil {
					b.Fatal(err)
				}
				exts := []Extent{{File: 0, Off: 8192, Len: 4096}}
				dst := [][]byte{mem}
				ctx := context.Background()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := c.ReadBatch(ctx, exts, dst); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
