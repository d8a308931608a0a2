package shmem

import (
	"errors"
	"flag"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var seedFlag = flag.Uint64("shmem.seed", 0, "seed for the randomized Pool test (0: pick one and print it on failure)")

// testSeed returns the seed to use and arranges for it to be printed if the
// test fails, so a failure replays with -shmem.seed.
func testSeed(t *testing.T) uint64 {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replay with: go test -run '^%s$' ./internal/shmem -shmem.seed=%d", t.Name(), seed)
		}
	})
	return seed
}

// TestPoolModel runs random Alloc/Free sequences against a map of live
// extents and checks, after every step, alignment, bounds, disjointness and
// InUse; and that ErrNoSpace is returned only when the model agrees that no
// gap is large enough (which fails if Free ever misses a coalesce).
func TestPoolModel(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	const align = 4096
	base := uint64(align * (1 + rng.IntN(16)))
	size := uint64(align * (64 + rng.IntN(512)))
	p := NewPool(base, size, align)
	live := map[uint64]uint64{} // off -> rounded length

	// largestGap is what first fit must be able to place, by the model.
	largestGap := func() uint64 {
		offs := make([]uint64, 0, len(live))
		for off := range live {
			offs = append(offs, off)
		}
		slices.Sort(offs)
		var gap uint64
		at := base
		for _, off := range offs {
			gap = max(gap, off-at)
			at = off + live[off]
		}
		return max(gap, base+size-at)
	}

	for step := range 20000 {
		if len(live) == 0 || rng.IntN(100) < 55 {
			// Mostly small requests, some up to a quarter of the pool.
			n := uint64(1 + rng.IntN(3*align))
			if rng.IntN(10) == 0 {
				n = uint64(1 + rng.IntN(int(size/4)))
			}
			want := (n + align - 1) / align * align
			off, err := p.Alloc(n)
			if err != nil {
				if !errors.Is(err, ErrNoSpace) {
					t.Fatalf("step %d: Alloc(%d): %v", step, n, err)
				}
				if gap := largestGap(); gap >= want {
					t.Fatalf("step %d: Alloc(%d) failed but a %d-byte gap is free: %v", step, n, gap, err)
				}
				continue
			}
			if off%align != 0 || off < base || off+want > base+size {
				t.Fatalf("step %d: Alloc(%d) = %#x: misaligned or outside [%#x, %#x)", step, n, off, base, base+size)
			}
			for o, l := range live {
				if off < o+l && o < off+want {
					t.Fatalf("step %d: Alloc(%d) = [%#x, +%d) overlaps live [%#x, +%d)", step, n, off, want, o, l)
				}
			}
			live[off] = want
		} else {
			// Free a random live extent (map order is not random enough to
			// replay, so pick by sorted index).
			offs := make([]uint64, 0, len(live))
			for off := range live {
				offs = append(offs, off)
			}
			slices.Sort(offs)
			off := offs[rng.IntN(len(offs))]
			n, err := p.Free(off)
			if err != nil || n != live[off] {
				t.Fatalf("step %d: Free(%#x) = %d, %v; want %d", step, off, n, err, live[off])
			}
			delete(live, off)
		}
		var inUse uint64
		for _, l := range live {
			inUse += l
		}
		if got := p.InUse(); got != inUse {
			t.Fatalf("step %d: InUse = %d; model says %d", step, got, inUse)
		}
	}

	for off := range live {
		if _, err := p.Free(off); err != nil {
			t.Fatal(err)
		}
	}
	// Everything coalesced back into one extent.
	if off, err := p.Alloc(size); err != nil || off != base {
		t.Fatalf("Alloc(whole pool) after freeing everything = %#x, %v; want %#x", off, err, base)
	}
}

func TestPoolErrors(t *testing.T) {
	p := NewPool(8192, 4*8192, 8192)
	off, err := p.Alloc(3 * 8192)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Alloc(8193)
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Alloc(8193) with 8192 free = %v; want ErrNoSpace", err)
	}
	for _, want := range []string{"no space", "alloc 8193 bytes", "16384 aligned", "8192 of 32768 bytes free"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := p.Alloc(0); err == nil {
		t.Error("Alloc(0) succeeded")
	}
	if _, err := p.Alloc(^uint64(0)); !errors.Is(err, ErrNoSpace) {
		t.Errorf("Alloc(max) = %v; want ErrNoSpace (not an overflowed tiny extent)", err)
	}
	if _, err := p.Free(off + 8192); err == nil {
		t.Error("Free of an offset inside an extent succeeded")
	}
	if n, err := p.Free(off); err != nil || n != 3*8192 {
		t.Fatalf("Free = %d, %v; want %d", n, err, 3*8192)
	}
	if _, err := p.Free(off); err == nil {
		t.Error("double Free succeeded")
	}
	if p.InUse() != 0 {
		t.Errorf("InUse = %d after freeing everything", p.InUse())
	}
}

func TestPoolUnalignedRange(t *testing.T) {
	// [100, 100+3*4096) holds only the aligned pages [4096, 12288).
	p := NewPool(100, 3*4096, 4096)
	off, err := p.Alloc(2 * 4096)
	if err != nil || off != 4096 {
		t.Fatalf("Alloc = %#x, %v; want 0x1000", off, err)
	}
	if _, err := p.Alloc(1); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Alloc beyond the aligned range = %v; want ErrNoSpace", err)
	}
	for _, align := range []uint64{0, 2048, 4096 + 1, 3 * 4096} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewPool with align %d did not panic", align)
				}
			}()
			NewPool(0, 1<<20, align)
		}()
	}
}

// TestPoolConcurrent has goroutines allocate, claim every page of their
// extent in a shared ownership table, and free; a page claimed twice means
// two live extents overlap. Run it under -race.
func TestPoolConcurrent(t *testing.T) {
	const (
		align   = 4096
		pages   = 256
		workers = 8
	)
	p := NewPool(0, pages*align, align)
	var owner [pages]atomic.Int32
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			id := int32(w + 1)
			var mine []extent // live extents of this worker, len in pages
			release := func(e extent) error {
				// Disown before Free: once freed, another worker may get the pages.
				for pg := e.off / align; pg < e.off/align+e.len; pg++ {
					owner[pg].Store(0)
				}
				_, err := p.Free(e.off)
				return err
			}
			for range 2000 {
				if len(mine) < 4 && rng.IntN(2) == 0 {
					n := uint64(1 + rng.IntN(8*align))
					off, err := p.Alloc(n)
					if errors.Is(err, ErrNoSpace) {
						continue
					}
					if err != nil {
						errc <- err
						return
					}
					e := extent{off, (n + align - 1) / align}
					for pg := e.off / align; pg < e.off/align+e.len; pg++ {
						if !owner[pg].CompareAndSwap(0, id) {
							errc <- errors.New("two live extents share a page")
							return
						}
					}
					mine = append(mine, e)
				} else if len(mine) > 0 {
					i := rng.IntN(len(mine))
					e := mine[i]
					mine = slices.Delete(mine, i, i+1)
					if err := release(e); err != nil {
						errc <- err
						return
					}
				}
			}
			for _, e := range mine {
				if err := release(e); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if p.InUse() != 0 {
		t.Fatalf("InUse = %d after every worker freed everything", p.InUse())
	}
	if _, err := p.Alloc(pages * align); err != nil {
		t.Fatalf("Alloc(whole pool) after concurrent use: %v", err)
	}
}
