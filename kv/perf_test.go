package kv_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/kv"
)

// TestGetAllocs: a GET allocates nothing once the client is set up: from
// the location cache, through the buckets, a missing key, and a
// pipelined batch.
func TestGetAllocs(t *testing.T) {
	srv := startServer(t, kv.ServerConfig{Device: "loop0"})
	ctx := testCtx(t)
	for _, cache := range []int{0, -1} {
		c := dial(t, kv.ClientConfig{Server: srv.Addr(), Device: "loop0", Cache: cache})
		keys := make([][]byte, 64)
		for i := range keys {
			keys[i] = []byte(fmt.Sprintf("alloc-%d", i))
			if err := c.Put(ctx, keys[i], make([]byte, 100)); err != nil {
				t.Fatal(err)
			}
		}
		dst := make([]byte, 128)
		i := 0
		if a := testing.AllocsPerRun(1000, func() {
			if _, found, err := c.Get(ctx, keys[i%len(keys)], dst); err != nil || !found {
				t.Fatal(found, err)
			}
			i++
		}); a != 0 {
			t.Errorf("cache %d: Get allocates %v times", cache, a)
		}
		missing := []byte("missing")
		if a := testing.AllocsPerRun(1000, func() {
			if _, found, err := c.Get(ctx, missing, dst); err != nil || found {
				t.Fatal(found, err)
			}
		}); a != 0 {
			t.Errorf("cache %d: a missing key's Get allocates %v times", cache, a)
		}
		ops := make([]kv.Op, 32)
		for j := range ops {
			ops[j] = kv.Op{Kind: kv.OpGet, Key: keys[j], Value: make([]byte, 128)}
		}
		if a := testing.AllocsPerRun(200, func() {
			if err := c.Do(ctx, ops); err != nil || !ops[5].Found {
				t.Fatal(err)
			}
		}); a != 0 {
			t.Errorf("cache %d: a batch of 32 GETs allocates %v times", cache, a)
		}
	}
}

// TestServerSeesNoGets: through 16000 GETs (from the buckets, the cache
// off) the server's request counter moves only by the STATS that reads
// it: no GET reaches the server's CPU. (BenchmarkGet and ibex kv bench
// report the server process's CPU time per million GETs.)
func TestServerSeesNoGets(t *testing.T) {
	srv := startServer(t, kv.ServerConfig{Device: "loop0"})
	ctx := testCtx(t)
	c := dial(t, kv.ClientConfig{Server: srv.Addr(), Device: "loop0", Cache: -1})
	if err := c.Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	before, err := c.ServerStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ops := make([]kv.Op, 32)
	for i := range ops {
		ops[i] = kv.Op{Kind: kv.OpGet, Key: []byte("k"), Value: make([]byte, 8)}
	}
	for i := 0; i < 500; i++ {
		if err := c.Do(ctx, ops); err != nil || !ops[31].Found {
			t.Fatal(err)
		}
	}
	after, err := c.ServerStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Requests != before.Requests+1 {
		t.Fatalf("the server saw %d requests during 16000 GETs", after.Requests-before.Requests-1)
	}
}

// BenchmarkGet: pipelined GETs (batches of 32) of 100 B and 4 KiB values
// over loop0 (in process) and shm0 (the server in another process).
func BenchmarkGet(b *testing.B) {
	for _, dev := range []string{"loop0", "shm0"} {
		for _, size := range []int{100, 4096} {
			b.Run(fmt.Sprintf("%s/%dB", dev, size), func(b *testing.B) {
				addr := benchServer(b, dev)
				c := dial(b, kv.ClientConfig{Server: addr, Device: dev})
				ctx := context.Background()
				const nkeys = 1000
				keys := make([][]byte, nkeys)
				for i := range keys {
					keys[i] = []byte(fmt.Sprintf("bench-%d-%d", size, i))
					if err := c.Put(ctx, keys[i], make([]byte, size)); err != nil {
						b.Fatal(err)
					}
				}
				ops := make([]kv.Op, 32)
				for j := range ops {
					ops[j] = kv.Op{Kind: kv.OpGet, Value: make([]byte, size)}
				}
				st0, _ := c.ServerStats(ctx)
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				start := time.Now()
				k := 0
				for n := 0; n < b.N; n += len(ops) {
					for j := range ops {
						ops[j].Key = keys[k%nkeys]
						k++
					}
					if err := c.Do(ctx, ops); err != nil {
						b.Fatal(err)
					}
				}
				el := time.Since(start)
				b.StopTimer()
				b.ReportMetric(float64(b.N)/el.Seconds(), "gets/s")
				if st1, err := c.ServerStats(ctx); err == nil && dev != "loop0" {
					cpu := (st1.CPUUser + st1.CPUSys - st0.CPUUser - st0.CPUSys).Seconds()
					b.ReportMetric(cpu/float64(b.N)*1e6, "server-cpu-s/Mgets")
				}
			})
		}
	}
}

// benchServer is a server for a benchmark: in process on loop0, a child
// process on others.
func benchServer(b *testing.B, dev string) string {
	if dev == "loop0" {
		return startServer(b, kv.ServerConfig{Device: dev}).Addr()
	}
	return startProc(b, "server", "IBEX_KV_DEVICE="+dev).line(b, "addr ")
}

const putBatch = 16

// BenchmarkPut: pipelined PUTs of 100 B (batches of 16, the server's
// credits) over loop0 and shm0 (the server in another process).
func BenchmarkPut(b *testing.B) {
	for _, dev := range []string{"loop0", "shm0"} {
		b.Run(dev, func(b *testing.B) {
			addr := benchServer(b, dev)
			c := dial(b, kv.ClientConfig{Server: addr, Device: dev})
			ctx := context.Background()
			ops := make([]kv.Op, putBatch)
			for j := range ops {
				ops[j] = kv.Op{Kind: kv.OpPut, Key: []byte(fmt.Sprintf("put-%d", j)), Value: make([]byte, 100)}
			}
			b.SetBytes(100)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for n := 0; n < b.N; n += len(ops) {
				if err := c.Do(ctx, ops); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "puts/s")
		})
	}
}
