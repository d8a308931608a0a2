package store

import (
	"context"
	"errors"
	"strings"
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

// TestMaxClients: a client past MaxClients is refused with the reason; the
// first goes on; when it leaves, the next is let in.
func TestMaxClients(t *testing.T) {
	dir := t.TempDir()
	dataset(t, dir, []int64{1000}, 15)
	s := startServer(t, ServerConfig{Dir: dir, PoolBytes: 1 << 20, ChunkBytes: 64 << 10, MaxClients: 1})
	c := dial(t, s, "loop0", ModeRead, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Dial(ctx, ClientConfig{Server: s.Addr().String(), Device: "loop0"})
	if err == nil || !strings.Contains(err.Error(), "too many clients (1 of 1)") {
		t.Fatalf("second client: %v, want too many clients", err)
	}
	if st := s.Stats(); st.Rejected != 1 || st.Clients != 1 {
		t.Fatalf("stats %+v", st)
	}
	_ = c.Close()
	for deadline := time.Now().Add(10 * time.Second); s.Stats().Clients != 0; {
		if time.Now().After(deadline) {
			t.Fatal("the server kept the closed client")
		}
		time.Sleep(2 * time.Millisecond)
	}
	c2 := dial(t, s, "loop0", ModeWrite, 2)
	if len(c2.Files()) != 1 {
		t.Fatal("no files")
	}
}

// TestConfig: every bad field is named.
func TestConfig(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		cfg  ServerConfig
		want string
	}{
		{ServerConfig{}, "Dir: empty"},
		{ServerConfig{Dir: dir, ChunkBytes: 100}, "ChunkBytes 100"},
		{ServerConfig{Dir: dir, ChunkBytes: 5000, Direct: true}, "ChunkBytes 5000: Direct"},
		{ServerConfig{Dir: dir, PoolBytes: 4096, ChunkBytes: 8192}, "PoolBytes 4096"},
		{ServerConfig{Dir: dir, MaxClients: -1}, "MaxClients -1"},
		{ServerConfig{Dir: dir, MaxDepth: 2000}, "MaxDepth 2000"},
		{ServerConfig{Dir: dir, MaxBatch: 65}, "MaxBatch 65"},
		{ServerConfig{Dir: dir, MaxHeld: 300}, "MaxHeld 300"},
		{ServerConfig{Dir: dir, PoolBytes: 8192, ChunkBytes: 4096, MaxHeld: 3}, "MaxHeld 3: more than the pool's 2"},
		{ServerConfig{Dir: dir + "/nope", Device: "loop0"}, "nope"},
		{ServerConfig{Dir: dir, Device: "nope0"}, "nope0"},
	} {
		s, err := NewServer(tc.cfg)
		if err == nil {
			_ = s.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error with %q", tc.cfg, err, tc.want)
		}
	}
	ctx := context.Background()
	for _, tc := range []struct {
		cfg  ClientConfig
		want string
	}{
		{ClientConfig{}, "Server: empty"},
		{ClientConfig{Server: "x:1", Mode: 7}, "Mode 7"},
		{ClientConfig{Server: "x:1", Depth: -1}, "Depth -1"},
	} {
		if _, err := Dial(ctx, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig with %q", tc.cfg, err, tc.want)
		}
	}
}

// TestIdle: a server with a connected client and nothing to do sleeps
// (its goroutines wait in CQ.Wait, shm0's progress on its futex): this
// process, server and client, uses under a tenth of a core while idle.
func TestIdle(t *testing.T) {
	dir := t.TempDir()
	dataset(t, dir, []int64{100_000}, 16)
	s := startServer(t, ServerConfig{Dir: dir, Device: "shm0", PoolBytes: 1 << 20, ChunkBytes: 64 << 10})
	c := dial(t, s, "shm0", ModeRead, 2)
	mem, err := c.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.ReadBatch(ctx, []Extent{{File: 0, Len: 100_000}}, [][]byte{mem[:100_000]}); err != nil {
		t.Fatal(err)
	}
	waitPoolFree(t, s)
	time.Sleep(50 * time.Millisecond)
	cpu0, t0 := processCPU(), time.Now()
	time.Sleep(500 * time.Millisecond)
	cpu, wall := processCPU()-cpu0, time.Since(t0)
	t.Logf("idle: %v of CPU in %v", time.Duration(cpu), wall)
	if float64(cpu) > 0.1*float64(wall.Nanoseconds()) {
		t.Fatalf("idle: %v of CPU in %v", time.Duration(cpu), wall)
	}
}
