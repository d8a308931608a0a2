package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// BenchConfig configures Bench. Every zero field takes the default named
// beside it.
type BenchConfig struct {
	Server string // the server's host:port (required)
	Device string // the verbs device (default: the first)
	Mode   Mode
	// Conns is the number of clients (QPs), each with its own connection
	// (default 1).
	Conns int
	// Depth is the ReadBatch calls in flight per client (default 4).
	Depth int
	// Size is the bytes of one range (default 1 MiB); offsets are random
	// multiples of it.
	Size int
	// Batch is the ranges per ReadBatch (default 16).
	Batch int
	// Duration is how long to read (default 10 s).
	Duration time.Duration
	// Seed seeds the offsets (0 is a seed like any other).
	Seed uint64
}

// BenchResult is what Bench measured.
type BenchResult struct {
	Mode             string  `json:"mode"`
	Conns            int     `json:"conns"`
	Depth            int     `json:"depth"`
	Size             int     `json:"size"`
	Batch            int     `json:"batch"`
	Bytes            int64   `json:"bytes"`
	Reads            int64   `json:"reads"`
	Seconds          float64 `json:"seconds"`
	GBps             float64 `json:"gbps"` // 10^9 bytes per second
	ReadsPerSec      float64 `json:"reads_per_sec"`
	ClientCPUSeconds float64 `json:"client_cpu_seconds"`
	ClientCPUPerGB   float64 `json:"client_cpu_s_per_gb"` // this process's user+sys seconds per 10^9 bytes
}

// Bench reads a server's files for cfg.Duration with cfg.Conns clients,
// each keeping cfg.Depth batches in flight: ranges of cfg.Size bytes at
// random multiples of it, the files taken round-robin.
func Bench(ctx context.Context, cfg BenchConfig) (BenchResult, error) {
	var res BenchResult
	if cfg.Conns == 0 {
		cfg.Conns = 1
	}
	if cfg.Depth == 0 {
		cfg.Depth = 4
	}
	if cfg.Size == 0 {
		cfg.Size = 1 << 20
	}
	if cfg.Batch == 0 {
		cfg.Batch = 16
	}
	if cfg.Duration == 0 {
		cfg.Duration = 10 * time.Second
	}
	switch {
	case cfg.Conns < 0 || cfg.Conns > 1024:
		return res, configErr("Conns %d: want 1 to 1024", cfg.Conns)
	case cfg.Depth < 0 || cfg.Depth > 256:
		return res, configErr("Depth %d: want 1 to 256", cfg.Depth)
	case cfg.Size < 0 || cfg.Size > 1<<30:
		return res, configErr("Size %d: want 1 byte to 1 GiB", cfg.Size)
	case cfg.Batch < 0 || cfg.Batch > 4096:
		return res, configErr("Batch %d: want 1 to 4096", cfg.Batch)
	case cfg.Duration < 0:
		return res, configErr("Duration %v: negative", cfg.Duration)
	}
	if int64(cfg.Size)*int64(cfg.Batch)*int64(cfg.Depth) > 4<<30 {
		return res, configErr("Size × Batch × Depth = %d bytes per client: more than 4 GiB", int64(cfg.Size)*int64(cfg.Batch)*int64(cfg.Depth))
	}
	res = BenchResult{Mode: cfg.Mode.String(), Conns: cfg.Conns, Depth: cfg.Depth, Size: cfg.Size, Batch: cfg.Batch}
	clients := make([]*Client, 0, cfg.Conns)
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	for i := 0; i < cfg.Conns; i++ {
		c, err := Dial(ctx, ClientConfig{Server: cfg.Server, Device: cfg.Device, Mode: cfg.Mode, Depth: min(1024, 2*cfg.Depth)})
		if err != nil {
			return res, err
		}
		clients = append(clients, c)
	}
	files := clients[0].Files()
	var nonEmpty []int
	for i, f := range files {
		if f.Size > 0 {
			nonEmpty = append(nonEmpty, i)
		}
	}
	if len(nonEmpty) == 0 {
		return res, fmt.Errorf("store: bench: the server has no data (%d files, all empty)", len(files))
	}
	type worker struct {
		c    *Client
		exts []Extent
		dst  [][]byte
		mem  []byte
		r    *rand.Rand
		next int
	}
	var workers []*worker
	for ci, c := range clients {
		mem, err := c.Alloc(cfg.Depth * cfg.Batch * cfg.Size)
		if err != nil {
			return res, err
		}
		for d := 0; d < cfg.Depth; d++ {
			w := &worker{c: c, exts: make([]Extent, cfg.Batch), dst: make([][]byte, cfg.Batch),
				mem: mem[d*cfg.Batch*cfg.Size : (d+1)*cfg.Batch*cfg.Size],
				r:   rand.New(rand.NewPCG(cfg.Seed, uint64(ci*cfg.Depth+d))), next: ci*cfg.Depth + d}
			workers = append(workers, w)
		}
	}
	var bytes, reads atomic.Int64
	var firstErr error
	var errOnce sync.Once
	rctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	cpu0 := processCPU()
	start := time.Now()
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rctx.Err() == nil {
				var n int64
				for i := range w.exts {
					f := nonEmpty[w.next%len(nonEmpty)]
					w.next++
					size := files[f].Size
					slots := (size + int64(cfg.Size) - 1) / int64(cfg.Size)
					off := w.r.Int64N(slots) * int64(cfg.Size)
					l := int(min(int64(cfg.Size), size-off))
					w.exts[i] = Extent{File: f, Off: off, Len: l}
					w.dst[i] = w.mem[i*cfg.Size : i*cfg.Size+l]
					n += int64(l)
				}
				if err := w.c.ReadBatch(rctx, w.exts, w.dst); err != nil {
					if rctx.Err() == nil {
						errOnce.Do(func() { firstErr = err; cancel() })
					}
					return
				}
				bytes.Add(n)
				reads.Add(int64(len(w.exts)))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	cpu := float64(processCPU()-cpu0) / 1e9
	if firstErr != nil {
		return res, firstErr
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	res.Bytes, res.Reads, res.Seconds = bytes.Load(), reads.Load(), elapsed
	if elapsed > 0 {
		res.GBps = float64(res.Bytes) / elapsed / 1e9
		res.ReadsPerSec = float64(res.Reads) / elapsed
	}
	res.ClientCPUSeconds = cpu
	if res.Bytes > 0 {
		res.ClientCPUPerGB = cpu / (float64(res.Bytes) / 1e9)
	}
	return res, nil
}

// processCPU is this process's user+sys time so far, in ns.
func processCPU() int64 {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
