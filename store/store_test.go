package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/ibex-rdma/ibex/provider/loopback"
)

// dataset writes files of the given sizes under dir (some in
// subdirectories), seeded, and returns their contents by name.
func dataset(t testing.TB, dir string, sizes []int64, seed uint64) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for i, n := range sizes {
		name := fmt.Sprintf("f%03d.bin", i)
		if i%3 == 1 {
			name = fmt.Sprintf("sub%d/f%03d.bin", i%2, i)
		}
		b := make([]byte, (n+7)&^7)
		r := rand.New(rand.NewPCG(seed, uint64(i)))
		for j := 0; j < len(b); j += 8 {
			binary.LittleEndian.PutUint64(b[j:], r.Uint64())
		}
		b = b[:n]
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		out[name] = b
	}
	return out
}

func startServer(t testing.TB, cfg ServerConfig) *Server {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.120:0"
	}
	if cfg.Device == "" {
		cfg.Device = "loop0"
	}
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func dial(t testing.TB, s *Server, dev string, mode Mode, depth int) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, ClientConfig{Server: s.Addr().String(), Device: dev, Mode: mode, Depth: depth})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// randomBatch picks n ranges of the client's files, seeded, and cuts dst
// for them from mem.
func randomBatch(r *rand.Rand, files []FileInfo, n, maxLen int, mem []byte) ([]Extent, [][]byte) {
	exts := make([]Extent, 0, n)
	dst := make([][]byte, 0, n)
	used := 0
	for len(exts) < n {
		f := r.IntN(len(files))
		size := files[f].Size
		if size == 0 {
			exts = append(exts, Extent{File: f})
			dst = append(dst, mem[used:used])
			continue
		}
		off := r.Int64N(size)
		l := 1 + r.IntN(min(maxLen, int(size-off)))
		if used+l > len(mem) {
			break
		}
		exts = append(exts, Extent{File: f, Off: off, Len: l})
		dst = append(dst, mem[used:used+l])
		used += l
	}
	return exts, dst
}

func checkBatch(t testing.TB, files []FileInfo, want map[string][]byte, exts []Extent, dst [][]byte) {
	t.Helper()
	if err := diffBatch(files, want, exts, dst); err != nil {
		t.Fatal(err)
	}
}

func diffBatch(files []FileInfo, want map[string][]byte, exts []Extent, dst [][]byte) error {
	for i, e := range exts {
		w := want[files[e.File].Name][e.Off : e.Off+int64(e.Len)]
		if !bytes.Equal(dst[i], w) {
			return fmt.Errorf("extent %d (%s offset %d length %d): data differs", i, files[e.File].Name, e.Off, e.Len)
		}
	}
	return nil
}

var testSizes = []int64{0, 1, 4095, 4096, 4097, 65536, 65537, 200_000, 1<<20 + 17, 3<<20 + 5, 777, 123_456}

// TestRoundTrip: many files and ranges, in both modes over loop0, checked
// byte for byte against the files; ranges longer than a chunk are split,
// batches longer than a request are split, the pool (16 buffers) is far
// smaller than what is read.
func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	want := dataset(t, dir, testSizes, 1)
	s := startServer(t, ServerConfig{Dir: dir, PoolBytes: 1 << 20, ChunkBytes: 64 << 10})
	if got := s.Files(); len(got) != len(testSizes) {
		t.Fatalf("server lists %d files, want %d", len(got), len(testSizes))
	}
	for _, mode := range []Mode{ModeRead, ModeWrite} {
		t.Run(mode.String(), func(t *testing.T) {
			c := dial(t, s, "loop0", mode, 4)
			files := c.Files()
			for _, f := range files {
				if int64(len(want[f.Name])) != f.Size {
					t.Fatalf("file %s: size %d, want %d", f.Name, f.Size, len(want[f.Name]))
				}
			}
			mem, err := c.Alloc(8 << 20)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(2, uint64(mode)))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for round := 0; round < 6; round++ {
				clear(mem)
				exts, dst := randomBatch(r, files, 150, 300_000, mem)
				if err := c.ReadBatch(ctx, exts, dst); err != nil {
					t.Fatal(err)
				}
				checkBatch(t, files, want, exts, dst)
			}
			// Whole files, one extent each.
			exts, dst := make([]Extent, 0, len(files)), make([][]byte, 0, len(files))
			used := 0
			for i, f := range files {
				exts = append(exts, Extent{File: i, Len: int(f.Size)})
				dst = append(dst, mem[used:used+int(f.Size)])
				used += int(f.Size)
			}
			if err := c.ReadBatch(ctx, exts, dst); err != nil {
				t.Fatal(err)
			}
			checkBatch(t, files, want, exts, dst)
			if mode == ModeRead {
				// Memory not from Alloc: read through staging.
				plain := make([]byte, 4<<20)
				exts, dst := randomBatch(r, files, 100, 300_000, plain)
				if err := c.ReadBatch(ctx, exts, dst); err != nil {
					t.Fatal(err)
				}
				checkBatch(t, files, want, exts, dst)
			}
			// An idle client holds no buffer: its last releases went
			// out on their own.
			waitPoolFree(t, s)
		})
	}
	waitPoolFull(t, s)
}

// waitPoolFree waits until every pool buffer is free.
func waitPoolFree(t testing.TB, s *Server) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := s.Stats()
		if st.PoolFree == st.PoolBuffers {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool has %d of %d buffers free", st.PoolFree, st.PoolBuffers)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitPoolFull waits until every pool buffer is free and no client is
// connected.
func waitPoolFull(t testing.TB, s *Server) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := s.Stats()
		if st.PoolFree == st.PoolBuffers && st.Clients == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool has %d of %d buffers free, %d clients connected", st.PoolFree, st.PoolBuffers, st.Clients)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
