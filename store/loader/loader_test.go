package loader

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/ibex-rdma/ibex/store"
)

// TestOrderGolden pins the order of one (seed, epoch): it must not change
// across runs, machines or Go versions (Shuffle's doc is the contract).
func TestOrderGolden(t *testing.T) {
	perm := make([]uint32, 16)
	Shuffle(perm, 42, 7)
	want := []uint32{10, 2, 5, 9, 1, 13, 6, 3, 4, 0, 15, 14, 12, 8, 7, 11}
	if !slices.Equal(perm, want) {
		t.Fatalf("Shuffle(16, seed 42, epoch 7) = %v, want %v", perm, want)
	}
}

func TestShuffle(t *testing.T) {
	seed := testSeed(t)
	for _, n := range []int{1, 2, 3, 10, 1000, 65537} {
		a, b, c := make([]uint32, n), make([]uint32, n), make([]uint32, n)
		Shuffle(a, seed, 3)
		Shuffle(b, seed, 3)
		Shuffle(c, seed, 4)
		if !slices.Equal(a, b) {
			t.Fatalf("n %d: the same seed and epoch gave two orders", n)
		}
		if n >= 10 && slices.Equal(a, c) {
			t.Fatalf("n %d: epochs 3 and 4 gave the same order", n)
		}
		for _, p := range [][]uint32{a, c} {
			s := slices.Clone(p)
			slices.Sort(s)
			for i, v := range s {
				if v != uint32(i) {
					t.Fatalf("n %d: not a permutation: sorted[%d] = %d", n, i, v)
				}
			}
		}
	}
}

// epochRun is what a consumer saw of one epoch.
type epochRun struct {
	order   []int
	batches int
}

// drain reads one epoch (to io.EOF), checking every batch's bytes against
// data, and returns its order.
func drain(t *testing.T, l *Loader, data [][]byte) epochRun {
	t.Helper()
	var run epochRun
	ss := l.ds.SampleSize()
	for {
		b, err := l.Next(context.Background())
		if errors.Is(err, io.EOF) {
			return run
		}
		if err != nil {
			t.Fatal(err)
		}
		if b.Index != run.batches {
			t.Fatalf("batch index %d, want %d", b.Index, run.batches)
		}
		if len(b.Data) != len(b.Samples) {
			t.Fatalf("batch %d: %d samples, %d data", b.Index, len(b.Samples), len(b.Data))
		}
		for i, s := range b.Samples {
			sh, e := l.ds.Locate(s)
			want := data[l.ds.Shards()[sh].File][e.Off : e.Off+int64(ss)]
			if !bytes.Equal(b.Data[i], want) {
				t.Fatalf("epoch %d batch %d sample %d (shard %d offset %d): bytes differ from the file", b.Epoch, b.Index, s, sh, e.Off)
			}
		}
		run.order = append(run.order, b.Samples...)
		run.batches++
		b.Release()
	}
}

// TestLoaderLocal reads a directory through LocalSource: every sample once
// per epoch, in Shuffle's order, byte for byte the files', the same for the
// same seed and epoch, io.EOF between epochs and at the end.
func TestLoaderLocal(t *testing.T) {
	seed := testSeed(t)
	const ss = 100
	// Shard sizes: tails that are not read, a shard of one sample.
	dir, data := writeShards(t, seed, 1000, 2550, 100, 7*ss+99, 3000)
	src, err := LocalSource(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	n := 10 + 25 + 1 + 7 + 30
	for _, dropLast := range []bool{false, true} {
		t.Run(fmt.Sprint("DropLast=", dropLast), func(t *testing.T) {
			cfg := Config{Seed: seed, Epoch: 5, Epochs: 2, BatchSize: 8, Ahead: 3, DropLast: dropLast}
			l := newTestLoader(t, src, ss, cfg)
			if l.ds.Len() != n {
				t.Fatalf("dataset of %d samples, want %d", l.ds.Len(), n)
			}
			wantBatches := (n + 7) / 8
			if dropLast {
				wantBatches = n / 8
			}
			perm := make([]uint32, n)
			var runs []epochRun
			for e := range 2 {
				run := drain(t, l, data)
				if run.batches != wantBatches {
					t.Fatalf("epoch %d: %d batches, want %d", e, run.batches, wantBatches)
				}
				Shuffle(perm, seed, uint64(5+e))
				want := make([]int, 0, n)
				for _, p := range perm[:min(n, wantBatches*8)] {
					want = append(want, int(p))
				}
				if !slices.Equal(run.order, want) {
					t.Fatalf("epoch %d: order differs from Shuffle(seed %d, epoch %d)", 5+e, seed, 5+e)
				}
				if !dropLast {
					s := slices.Clone(run.order)
					slices.Sort(s)
					for i, v := range s {
						if v != i {
							t.Fatalf("epoch %d: sample %d not exactly once", 5+e, i)
						}
					}
				}
				runs = append(runs, run)
			}
			if slices.Equal(runs[0].order, runs[1].order) {
				t.Fatal("two epochs in the same order")
			}
			for range 2 {
				if _, err := l.Next(context.Background()); !errors.Is(err, io.EOF) {
					t.Fatalf("after the last epoch: %v, want io.EOF", err)
				}
			}
			// Again from the start: the same order.
			l2 := newTestLoader(t, src, ss, cfg)
			if again := drain(t, l2, data); !slices.Equal(again.order, runs[0].order) {
				t.Fatal("a second loader with the same seed and epoch read another order")
			}
		})
	}
}

// TestCoalesce: adjacent samples of a shard in a batch are one extent.
func TestCoalesce(t *testing.T) {
	data := randomData(1, 2, 1000, 1001)
	src := newMemSource(data)
	var maxExts, minExts atomic.Int64
	minExts.Store(1 << 30)
	src.before = func(_ context.Context, exts []store.Extent) error {
		n := int64(len(exts))
		for {
			m := maxExts.Load()
			if n <= m || maxExts.CompareAndSwap(m, n) {
				break
			}
		}
		for {
			m := minExts.Load()
			if n >= m || minExts.CompareAndSwap(m, n) {
				break
			}
		}
		return nil
	}
	// One batch holds the whole dataset (2 shards x 10 samples): 2 extents.
	l := newTestLoader(t, src, 100, Config{BatchSize: 20, Ahead: 1})
	drain(t, l, data)
	if maxExts.Load() != 2 || minExts.Load() != 2 {
		t.Fatalf("a batch of two whole shards was read as %d..%d extents, want 2", minExts.Load(), maxExts.Load())
	}
}

// TestAhead: one Alloc of (Ahead+1) batches, and never more than Ahead+1
// batches read or being read and not yet released, with a slow consumer
// and a slow source.
func TestAhead(t *testing.T) {
	seed := testSeed(t)
	for _, tc := range []struct {
		name           string
		sourceDelay    time.Duration
		consumerDelay  time.Duration
		ahead, readers int
	}{
		{"slow consumer", 0, 300 * time.Microsecond, 3, 2},
		{"slow source", 300 * time.Microsecond, 0, 3, 3},
		{"ahead 1", 100 * time.Microsecond, 100 * time.Microsecond, 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := randomData(seed, 5, 500, 3000)
			src := newMemSource(data)
			var started, released atomic.Int64
			var over atomic.Int64 // the most in use seen
			var lo, hi uintptr
			src.before = func(ctx context.Context, exts []store.Extent) error {
				inUse := started.Add(1) - released.Load()
				for {
					m := over.Load()
					if inUse <= m || over.CompareAndSwap(m, inUse) {
						break
					}
				}
				if tc.sourceDelay > 0 {
					select {
					case <-time.After(tc.sourceDelay):
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				return nil
			}
			const ss, bs = 64, 4
			l := newTestLoader(t, src, ss, Config{Seed: seed, BatchSize: bs, Ahead: tc.ahead, Readers: tc.readers, Epochs: 2})
			if got, want := src.allocBytes.Load(), int64((tc.ahead+1)*bs*ss); src.allocs.Load() != 1 || got != want {
				t.Fatalf("%d Alloc calls of %d bytes in all, want 1 of %d", src.allocs.Load(), got, want)
			}
			lo = uintptr(unsafe.Pointer(unsafe.SliceData(src.mem)))
			hi = lo + uintptr(len(src.mem))
			for eofs := 0; eofs < 2; {
				b, err := l.Next(context.Background())
				if errors.Is(err, io.EOF) {
					eofs++
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				eofs = 0
				for _, d := range b.Data {
					if p := uintptr(unsafe.Pointer(unsafe.SliceData(d))); p < lo || p+uintptr(len(d)) > hi {
						t.Fatal("a batch's data is outside the Alloc'd memory")
					}
				}
				time.Sleep(tc.consumerDelay)
				released.Add(1)
				b.Release()
			}
			if m := over.Load(); m > int64(tc.ahead+1) {
				t.Fatalf("%d batches in use at once, want at most Ahead+1 = %d", m, tc.ahead+1)
			}
			if src.allocs.Load() != 1 {
				t.Fatalf("%d Alloc calls, want 1", src.allocs.Load())
			}
			t.Logf("at most %d of %d buffers in use; %d reads", over.Load(), tc.ahead+1, src.reads.Load())
		})
	}
}

// TestCancelClose: Next's ctx ends its wait and the same batch comes next
// time; Close ends a blocked Next and the readers (goleak, in TestMain).
func TestCancelClose(t *testing.T) {
	data := randomData(2, 2, 1000, 2000)
	src := newMemSource(data)
	gate := make(chan struct{})
	src.before = func(ctx context.Context, _ []store.Extent) error {
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	l := newTestLoader(t, src, 100, Config{BatchSize: 2, Ahead: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := l.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next with a source that never answers: %v, want DeadlineExceeded", err)
	}
	close(gate)
	b, err := l.Next(context.Background())
	if err != nil || b.Index != 0 {
		t.Fatalf("after the gate opened: batch %v, %v; want batch 0", b, err)
	}
	b.Release()

	// Close while Next waits on a source that blocks again.
	src2 := newMemSource(data)
	src2.before = func(ctx context.Context, _ []store.Extent) error { <-ctx.Done(); return ctx.Err() }
	l2 := newTestLoader(t, src2, 100, Config{BatchSize: 2, Ahead: 2})
	errc := make(chan error)
	go func() {
		_, err := l2.Next(context.Background())
		errc <- err
	}()
	time.Sleep(5 * time.Millisecond)
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("Next blocked at Close: %v, want ErrClosed", err)
	}
	if _, err := l2.Next(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after Close: %v, want ErrClosed", err)
	}
	// A batch held across Close may still be released.
	l3 := newTestLoader(t, newMemSource(data), 100, Config{BatchSize: 2, Ahead: 2})
	b3, err := l3.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	l3.Close()
	b3.Release()
	l3.Close() // twice is fine
}

// TestReleaseTwice panics.
func TestReleaseTwice(t *testing.T) {
	l := newTestLoader(t, newMemSource(randomData(3, 1, 1000, 1001)), 100, Config{BatchSize: 2})
	b, err := l.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b.Release()
	defer func() {
		if recover() == nil {
			t.Fatal("a second Release did not panic")
		}
	}()
	b.Release()
}

// TestSourceError: a failed read names the shard and offset, with the
// Source saying which extent (ExtentError) and without (the Loader finds
// it); the error stays.
func TestSourceError(t *testing.T) {
	for _, opaque := range []bool{false, true} {
		t.Run(fmt.Sprint("opaque=", opaque), func(t *testing.T) {
			data := randomData(4, 4, 1000, 1001)
			src := newMemSource(data)
			src.opaque = opaque
			boom := errors.New("remote access error")
			src.fault = func(e store.Extent) error {
				if e.File == 2 && e.Off <= 500 && 500 < e.Off+int64(e.Len) {
					return boom
				}
				return nil
			}
			l := newTestLoader(t, src, 100, Config{BatchSize: 3, Ahead: 2, Seed: 9})
			var err error
			for err == nil {
				var b *Batch
				if b, err = l.Next(context.Background()); err == nil {
					b.Release()
				}
			}
			var re *ReadError
			if !errors.As(err, &re) || !errors.Is(err, boom) {
				t.Fatalf("Next: %v, want a *ReadError wrapping the source's", err)
			}
			if re.Shard != "shard-002.bin" || re.Off > 500 || re.Off+int64(re.Len) <= 500 || re.Extent < 0 {
				t.Fatalf("error names shard %q offset %d len %d (extent %d), want shard-002.bin around offset 500", re.Shard, re.Off, re.Len, re.Extent)
			}
			if !strings.Contains(err.Error(), `"shard-002.bin" offset`) {
				t.Fatalf("message %q does not name the shard and offset", err)
			}
			if _, err2 := l.Next(context.Background()); err2 != err {
				t.Fatalf("Next after the error: %v, want the same error", err2)
			}
			t.Log(err)
		})
	}
	// LocalSource: a file that shrank under the dataset.
	dir, _ := writeShards(t, 5, 1000)
	src, err := LocalSource(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ds, err := NewDataset(src.Files(), DatasetConfig{SampleSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(dir, "shard-000.bin"), 450); err != nil {
		t.Fatal(err)
	}
	l, err := New(Config{Source: src, Dataset: ds, BatchSize: 1, Ahead: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for err == nil {
		var b *Batch
		if b, err = l.Next(context.Background()); err == nil {
			b.Release()
		}
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) || !regexp.MustCompile(`shard "shard-000.bin" offset [4-9]00 len 100`).MatchString(err.Error()) {
		t.Fatalf("read past the end of a truncated file: %v", err)
	}
	t.Log(err)
}

// TestNoAllocs: Next and Release allocate nothing in steady state, epochs
// included (the readers' work counts too: AllocsPerRun counts every
// goroutine's).
func TestNoAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	l := newTestLoader(t, newMemSource(randomData(6, 3, 2000, 3000)), 64, Config{BatchSize: 8, Ahead: 2, Epochs: -1})
	ctx := context.Background()
	step := func() {
		b, err := l.Next(ctx)
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			panic(err)
		}
		b.Release()
	}
	for range 200 {
		step()
	}
	if a := testing.AllocsPerRun(1000, step); a != 0 {
		t.Fatalf("%v allocations per batch, want 0", a)
	}
}

func TestConfigErrors(t *testing.T) {
	src := newMemSource(randomData(7, 2, 1000, 1001))
	ds, err := NewDataset(src.Files(), DatasetConfig{SampleSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewDataset([]store.FileInfo{{Name: "x", Size: 1000}, {Name: "y", Size: 1000}}, DatasetConfig{SampleSize: 100})
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Dataset: ds}, "Config.Source"},
		{Config{Source: src}, "Config.Dataset"},
		{Config{Source: src, Dataset: ds, BatchSize: -1}, "Config.BatchSize -1"},
		{Config{Source: src, Dataset: ds, Ahead: -2}, "Config.Ahead -2"},
		{Config{Source: src, Dataset: ds, Readers: -1}, "Config.Readers -1"},
		{Config{Source: src, Dataset: ds, Ahead: 2, Readers: 4}, "Config.Readers 4"},
		{Config{Source: src, Dataset: ds, BatchSize: 21, DropLast: true}, "Config.DropLast"},
		{Config{Source: src, Dataset: other}, `shard "x"`},
	} {
		l, err := New(tc.cfg)
		if err == nil {
			l.Close()
			t.Fatalf("%+v: no error, want one naming %s", tc.cfg, tc.want)
		}
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("error %q: want ErrConfig naming %s", err, tc.want)
		}
	}
	l, err := New(Config{Source: src, Dataset: ds})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if c := l.Config(); c.BatchSize != DefaultBatchSize || c.Ahead != DefaultAhead || c.Readers != DefaultAhead {
		t.Fatalf("defaults: %+v", c)
	}
	if got, want := src.allocBytes.Load(), int64((DefaultAhead+1)*DefaultBatchSize*100); got != want {
		t.Fatalf("default Alloc of %d bytes, want %d", got, want)
	}
}

func TestDataset(t *testing.T) {
	files := []store.FileInfo{
		{Name: "train/a.bin", Size: 1000},
		{Name: "README", Size: 10},
		{Name: "train/b.bin", Size: 250},
		{Name: "val/c.bin", Size: 400},
	}
	for _, tc := range []struct {
		cfg  DatasetConfig
		want string
	}{
		{DatasetConfig{}, "SampleSize 0"},
		{DatasetConfig{SampleSize: -4}, "SampleSize -4"},
		{DatasetConfig{SampleSize: 100}, `shard "README": 10 bytes, smaller than one sample`},
		{DatasetConfig{SampleSize: 100, Glob: "["}, `Glob "["`},
		{DatasetConfig{SampleSize: 100, Glob: "test/*"}, `Glob "test/*": no file of 4 matches`},
		{DatasetConfig{SampleSize: 300, Glob: "train/*"}, `shard "train/b.bin"`},
	} {
		_, err := NewDataset(files, tc.cfg)
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%+v: error %v, want ErrConfig naming %s", tc.cfg, err, tc.want)
		}
	}
	ds, err := NewDataset(files, DatasetConfig{SampleSize: 100, Glob: "train/*"})
	if err != nil {
		t.Fatal(err)
	}
	if ds.Len() != 12 || len(ds.Shards()) != 2 || ds.Shards()[1].File != 2 || ds.Shards()[1].First != 10 {
		t.Fatalf("dataset %d samples, shards %+v", ds.Len(), ds.Shards())
	}
	for i, want := range map[int]store.Extent{0: {File: 0, Off: 0, Len: 100}, 9: {File: 0, Off: 900, Len: 100}, 10: {File: 2, Off: 0, Len: 100}, 11: {File: 2, Off: 100, Len: 100}} {
		if sh, e := ds.Locate(i); e != want || (i >= 10) != (sh == 1) {
			t.Fatalf("Locate(%d) = %d, %+v, want %+v", i, sh, e, want)
		}
	}
}
