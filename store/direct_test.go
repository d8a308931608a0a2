package store

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// TestPoolFixed: a dataset four times the pool is served whole, in both
// modes, with O_DIRECT (unaligned ranges read through aligned blocks) and
// through the page cache; the server's registered memory is the same
// before and after, the pool within PoolBytes plus one alignment block.
func TestPoolFixed(t *testing.T) {
	dir := t.TempDir()
	const pool = 16 * 65536
	sizes := []int64{pool + 1, pool - 4095, pool + 8191, pool, 3, 70_000}
	want := dataset(t, dir, sizes, 10)
	var total int64
	for _, n := range sizes {
		total += n
	}
	if total < 4*pool {
		t.Fatalf("dataset of %d bytes, want ≥ %d", total, 4*pool)
	}
	for _, direct := range []bool{false, true} {
		s := startServer(t, ServerConfig{Dir: dir, PoolBytes: pool, ChunkBytes: 65536, Direct: direct})
		before := s.Stats()
		if before.PoolBytes > pool+dioAlign || before.DatasetBytes != total {
			t.Fatalf("direct %v: pool of %d bytes registered for PoolBytes %d; dataset %d", direct, before.PoolBytes, pool, before.DatasetBytes)
		}
		for _, mode := range []Mode{ModeRead, ModeWrite} {
			c := dial(t, s, "loop0", mode, 4)
			files := c.Files()
			mem, err := c.Alloc(int(total))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			// The whole dataset in one batch, in pieces of odd sizes at odd offsets.
			r := rand.New(rand.NewPCG(11, uint64(mode)))
			var exts []Extent
			var dst [][]byte
			used := 0
			for i, f := range files {
				for off := int64(0); off < f.Size; {
					n := min(int64(1+r.IntN(150_000)), f.Size-off)
					exts = append(exts, Extent{File: i, Off: off, Len: int(n)})
					dst = append(dst, mem[used:used+int(n)])
					used += int(n)
					off += n
				}
			}
			if err := c.ReadBatch(ctx, exts, dst); err != nil {
				t.Fatal(err)
			}
			cancel()
			checkBatch(t, files, want, exts, dst)
			_ = c.Close()
		}
		waitPoolFull(t, s)
		after := s.Stats()
		if after.RegisteredBytes != before.RegisteredBytes || after.PoolBytes != before.PoolBytes {
			t.Fatalf("direct %v: registered %d bytes before, %d after serving %d", direct, before.RegisteredBytes, after.RegisteredBytes, after.Bytes)
		}
		if after.Bytes != uint64(2*total) {
			t.Fatalf("direct %v: served %d bytes, want %d", direct, after.Bytes, 2*total)
		}
		_ = s.Close()
	}
}
