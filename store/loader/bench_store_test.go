package loader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/store"
)

// sources opens the same directory three ways: LocalSource (the baseline)
// and a store client over loop0 in each mode. The server and clients end
// with the test.
func sources(tb testing.TB, dir string, addr string) []struct {
	name string
	src  Source
} {
	tb.Helper()
	local, err := LocalSource(dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { local.Close() })
	srv, err := store.NewServer(store.ServerConfig{Dir: dir, Listen: addr, Device: "loop0", PoolBytes: 32 << 20})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { srv.Close() })
	out := []struct {
		name string
		src  Source
	}{{"local", local}}
	for _, mode := range []store.Mode{store.ModeRead, store.ModeWrite} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		c, err := store.Dial(ctx, store.ClientConfig{Server: srv.Addr().String(), Device: "loop0", Mode: mode})
		cancel()
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { c.Close() }) // after the loaders' (cleanups run last first)
		out = append(out, struct {
			name string
			src  Source
		}{"store-" + mode.String(), c})
	}
	return out
}

// TestNoAllocsSources: no allocation per batch on the real Sources either.
func TestNoAllocsSources(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	dir, _ := writeShards(t, 12, 64<<10, 100<<10, 80<<10)
	for _, s := range sources(t, dir, "127.0.0.142:0") {
		t.Run(s.name, func(t *testing.T) {
			l := newTestLoader(t, s.src, 4096, Config{BatchSize: 8, Ahead: 2, Epochs: -1})
			step := func() {
				b, err := l.Next(context.Background())
				if errors.Is(err, io.EOF) {
					return
				}
				if err != nil {
					panic(err)
				}
				b.Release()
			}
			for range 100 {
				step()
			}
			if a := testing.AllocsPerRun(200, step); a != 0 {
				t.Fatalf("%v allocations per batch, want 0", a)
			}
		})
	}
}

// BenchmarkLoader: the loader's raw rate (no compute) on each Source, the
// same files, side by side: samples/s and MB/s.
//
//	go test -run '^$' -bench Loader ./store/loader
func BenchmarkLoader(b *testing.B) {
	dir, _ := writeShards(b, 13, 8<<20, 8<<20, 8<<20, 8<<20)
	srcs := sources(b, dir, "127.0.0.143:0")
	for _, ss := range []int{4 << 10, 128 << 10} {
		for _, s := range srcs {
			b.Run(fmt.Sprintf("%s/sample=%dK", s.name, ss>>10), func(b *testing.B) {
				ds, err := NewDataset(s.src.Files(), DatasetConfig{SampleSize: ss})
				if err != nil {
					b.Fatal(err)
				}
				l, err := New(Config{Source: s.src, Dataset: ds, BatchSize: 16, Ahead: 4, Epochs: -1})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				b.SetBytes(int64(16 * ss))
				b.ReportAllocs()
				start := time.Now()
				samples := 0
				for b.Loop() {
					bt, err := l.Next(context.Background())
					if errors.Is(err, io.EOF) {
						continue
					}
					if err != nil {
						b.Fatal(err)
					}
					samples += len(bt.Samples)
					bt.Release()
				}
				b.ReportMetric(float64(samples)/time.Since(start).Seconds(), "samples/s")
			})
		}
	}
}
