package loader

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ibex-rdma/ibex/store"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the tests' datasets and orders (0: from the time); printed by each test")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testSeed is -seed, or one from the clock; logged so that a failure can
// be replayed with -seed.
func testSeed(t *testing.T) uint64 {
	t.Helper()
	s := *seedFlag
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay: go test ./store/loader -run '^%s$' -args -seed %d)", s, t.Name(), s)
	return s
}

// writeShards writes shards of the given sizes (random bytes from seed)
// into a new directory, named shard-000.bin, ..., and returns the
// directory and the contents.
func writeShards(t testing.TB, seed uint64, sizes ...int) (string, [][]byte) {
	t.Helper()
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	var data [][]byte
	for i, n := range sizes {
		b := make([]byte, n)
		for k := range b {
			b[k] = byte(r.Uint32())
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("shard-%03d.bin", i)), b, 0o644); err != nil {
			t.Fatal(err)
		}
		data = append(data, b)
	}
	return dir, data
}

// memSource is a Source of byte slices with hooks: a fault, a latency and
// counters. The zero hooks read at once.
type memSource struct {
	files []store.FileInfo
	data  [][]byte

	// before runs at the start of each ReadBatch (before the fault).
	before func(ctx context.Context, exts []store.Extent) error
	// fault fails the extent it returns an error for.
	fault func(e store.Extent) error
	// opaque: a fault is returned as is, not as an *ExtentError.
	opaque bool

	allocs     atomic.Int64
	allocBytes atomic.Int64
	reads      atomic.Int64

	mu  sync.Mutex
	mem []byte
}

func newMemSource(data [][]byte) *memSource {
	s := &memSource{data: data}
	for i, d := range data {
		s.files = append(s.files, store.FileInfo{Name: fmt.Sprintf("shard-%03d.bin", i), Size: int64(len(d))})
	}
	return s
}

func (s *memSource) Files() []store.FileInfo { return s.files }

func (s *memSource) Alloc(n int) ([]byte, error) {
	s.allocs.Add(1)
	s.allocBytes.Add(int64(n))
	b := make([]byte, n)
	s.mu.Lock()
	s.mem = b
	s.mu.Unlock()
	return b, nil
}

func (s *memSource) ReadBatch(ctx context.Context, exts []store.Extent, dst [][]byte) error {
	s.reads.Add(1)
	if s.before != nil {
		if err := s.before(ctx, exts); err != nil {
			return err
		}
	}
	for i, e := range exts {
		if err := ctx.Err(); err != nil {
			return err
		}
		if len(dst[i]) != e.Len {
			return fmt.Errorf("extent %d: dst of %d bytes for len %d", i, len(dst[i]), e.Len)
		}
		if s.fault != nil {
			if err := s.fault(e); err != nil {
				if s.opaque {
					return err
				}
				return &ExtentError{Index: i, Name: s.files[e.File].Name, Off: e.Off, Len: e.Len, Err: err}
			}
		}
		copy(dst[i], s.data[e.File][e.Off:e.Off+int64(e.Len)])
	}
	return nil
}

// randomData is n shards of random sizes in [lo, hi) bytes.
func randomData(seed uint64, n, lo, hi int) [][]byte {
	r := rand.New(rand.NewPCG(seed, 0xda7a))
	data := make([][]byte, n)
	for i := range data {
		data[i] = make([]byte, lo+r.IntN(hi-lo))
		for k := range data[i] {
			data[i][k] = byte(r.Uint32())
		}
	}
	return data
}

// newTestLoader makes a Loader on src with sample size ss, closed at the
// test's end.
func newTestLoader(t *testing.T, src Source, ss int, cfg Config) *Loader {
	t.Helper()
	ds, err := NewDataset(src.Files(), DatasetConfig{SampleSize: ss})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Source, cfg.Dataset = src, ds
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}
