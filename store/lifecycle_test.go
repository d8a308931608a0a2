package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestCancelAndWait: a READ request that finds the pool empty (another
// client holds every buffer) waits at the server; the caller's ctx ends
// and ReadBatch returns its error at once; once the holder releases, the
// waiting request is served, the abandoned batch comes back, and the
// client reads on. Closing the server fails the client's next call with
// ErrClosed.
func TestCancelAndWait(t *testing.T) {
	dir := t.TempDir()
	want := dataset(t, dir, []int64{100_000}, 14)
	s := startServer(t, ServerConfig{Dir: dir, PoolBytes: 4 * 4096, ChunkBytes: 4096, MaxHeld: 4})
	r := newRawClient(t, s)
	four := []reqRange{{file: 0, n: 10}, {file: 0, n: 10}, {file: 0, n: 10}, {file: 0, n: 10}}
	resp := r.roundTrip(request1(opRead, 0, nil, four...))
	var bufs []uint32
	for i := range four {
		if e := decodeEntry(resp, i); e.status == rangeOK {
			bufs = append(bufs, e.buf)
		}
	}
	if len(bufs) != 4 || s.Stats().PoolFree != 0 {
		t.Fatalf("holder got %d buffers, pool free %d", len(bufs), s.Stats().PoolFree)
	}
	c := dial(t, s, "loop0", ModeRead, 2)
	mem, err := c.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	exts := []Extent{{File: 0, Off: 5, Len: 9000}}
	dst := [][]byte{mem[:9000]}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	start := time.Now()
	err = c.ReadBatch(ctx, exts, dst)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("ReadBatch with the pool held: %v after %v, want DeadlineExceeded at once", err, time.Since(start))
	}
	resp = r.roundTrip(request1(opRead, 4, bufs))
	if _, st, _, _, _ := decodeResponseHeader(resp); st != msgOK {
		t.Fatalf("release: %v", st)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < 3*4*2; i++ { // more calls than batches and slots: the abandoned one came back
		clear(mem[:9000])
		if err := c.ReadBatch(ctx, exts, dst); err != nil {
			t.Fatal(err)
		}
		checkBatch(t, c.Files(), want, exts, dst)
	}
	waitPoolFree(t, s)
	_ = s.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := c.ReadBatch(ctx, exts, dst)
		if errors.Is(err, ErrClosed) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ReadBatch after the server closed: %v, want ErrClosed", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
