package coll

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/coll/reduce"
)

// SendRecvBench, as BenchConfig.Collective, runs nccl-tests'
// sendrecv_perf, every rank sending to rank+1 and receiving from rank-1.
const SendRecvBench = algo.Collective(0)

// BenchConfig is one nccl-tests run: sizes from MinBytes to MaxBytes,
// each Factor times the last (or +Step bytes when Step > 0).
type BenchConfig struct {
	Collective algo.Collective // SendRecvBench for sendrecv
	MinBytes   int64
	MaxBytes   int64
	Factor     int64
	Step       int64
	Iters      int
	Warmup     int
	Check      bool
	DType      reduce.DType
	Op         reduce.Op
	Root       int
}

// BenchRow is one line of the table.
type BenchRow struct {
	Size     int64   `json:"size"`
	Count    int64   `json:"count"`
	Type     string  `json:"type"`
	Redop    string  `json:"redop"`
	Root     int     `json:"root"`
	OOPTime  float64 `json:"time_us_out_of_place"`
	OOPAlgBW float64 `json:"algbw_out_of_place"`
	OOPBusBW float64 `json:"busbw_out_of_place"`
	OOPWrong int64   `json:"wrong_out_of_place"`
	IPTime   float64 `json:"time_us_in_place"`
	IPAlgBW  float64 `json:"algbw_in_place"`
	IPBusBW  float64 `json:"busbw_in_place"`
	IPWrong  int64   `json:"wrong_in_place"`
}

// perRank is the elements per rank of a size-byte test (nccl-tests: size
// is the whole buffer for all_gather, reduce_scatter and alltoall).
func perRank(c algo.Collective, size int64, esize, n int) int64 {
	count := size / int64(esize)
	switch c {
	case algo.AllGather, algo.ReduceScatter, algo.AllToAll:
		return count / int64(n)
	}
	return count
}

// Bench runs the sizes and returns the rows (rank 0 prints them with
// WriteBenchHeader/WriteBenchRow). Every rank must call it with the same
// configuration.
func (c *Comm) Bench(ctx context.Context, cfg BenchConfig, row func(BenchRow)) error {
	es := cfg.DType.Size()
	for size := cfg.MinBytes; size <= cfg.MaxBytes; {
		per := perRank(cfg.Collective, size, es, c.size)
		r := BenchRow{Size: size, Count: size / int64(es), Type: cfg.DType.String(), Redop: cfg.Op.String(), Root: -1}
		if cfg.Collective == algo.Broadcast || cfg.Collective == algo.Reduce {
			r.Root = cfg.Root
		}
		if cfg.Collective == algo.AllGather || cfg.Collective == algo.Broadcast || cfg.Collective == algo.AllToAll || cfg.Collective == SendRecvBench {
			r.Redop = "none"
		}
		for _, inPlace := range []bool{false, true} {
			t, wrong, err := c.benchOne(ctx, cfg, int(per), inPlace)
			if err != nil {
				return fmt.Errorf("coll: %v of %d bytes: %w", cfg.Collective, size, err)
			}
			algbw := 0.0
			if t > 0 {
				algbw = float64(size) / t / 1e3 // bytes per µs → GB/s
			}
			if inPlace {
				r.IPTime, r.IPAlgBW, r.IPBusBW, r.IPWrong = t, algbw, algbw*algo.BusFactor(cfg.Collective, c.size), wrong
			} else {
				r.OOPTime, r.OOPAlgBW, r.OOPBusBW, r.OOPWrong = t, algbw, algbw*algo.BusFactor(cfg.Collective, c.size), wrong
			}
		}
		row(r)
		if cfg.Step > 0 {
			size += cfg.Step
		} else {
			size *= max(cfg.Factor, 2)
		}
	}
	return nil
}

// inputs fills rank r's input with values whose sums are exact in any
// order (small integers), as nccl-tests does with its own pattern.
func benchValue(r, i int) float64 { return float64((r+i)%7) + 1 }

func (c *Comm) benchOne(ctx context.Context, cfg BenchConfig, count int, inPlace bool) (usec float64, wrong int64, err error) {
	es := cfg.DType.Size()
	n, N := count*es, c.size
	inN, outN := n, n
	switch cfg.Collective {
	case algo.ReduceScatter:
		inN = N * n
	case algo.AllGather:
		outN = N * n
	case algo.AllToAll:
		inN, outN = N*n, N*n
	}
	send := make([]byte, max(inN, outN))
	fill := func() {
		for i := range inN / es {
			reduce.SetValue(send, cfg.DType, i, benchValue(c.rank, i))
		}
	}
	fill()
	recv := send
	if !inPlace {
		recv = make([]byte, outN)
	}
	call := func() error {
		switch cfg.Collective {
		case algo.AllReduce:
			return c.AllReduce(ctx, send, recv, count, cfg.DType, cfg.Op)
		case algo.ReduceScatter:
			return c.ReduceScatter(ctx, send, recv, count, cfg.DType, cfg.Op)
		case algo.AllGather:
			return c.AllGather(ctx, send[:inN], recv, count, cfg.DType)
		case algo.Broadcast:
			return c.Broadcast(ctx, send, recv, count, cfg.DType, cfg.Root)
		case algo.Reduce:
			return c.Reduce(ctx, send, recv, count, cfg.DType, cfg.Op, cfg.Root)
		case algo.AllToAll:
			return c.AllToAll(ctx, send[:inN], recv, count, cfg.DType)
		case SendRecvBench:
			if N == 1 {
				copy(recv, send[:n])
				return nil
			}
			return c.SendRecv(ctx, send, (c.rank+1)%N, recv, (c.rank+N-1)%N, count, cfg.DType)
		}
		return fmt.Errorf("collective %v not supported by the benchmark", cfg.Collective)
	}
	for range cfg.Warmup {
		fill()
		if err := call(); err != nil {
			return 0, 0, err
		}
	}
	// Start together: nccl-tests times each rank's loop; a barrier first
	// keeps a late rank from counting as slowness.
	if _, err := c.boot.AllGather(ctx, nil); err != nil {
		return 0, 0, err
	}
	start := time.Now()
	for range cfg.Iters {
		if err := call(); err != nil {
			return 0, 0, err
		}
	}
	usec = float64(time.Since(start).Microseconds()) / float64(max(cfg.Iters, 1))
	if cfg.Check {
		fill()
		if err := call(); err != nil {
			return 0, 0, err
		}
		wrong = c.checkBench(cfg, recv, count)
	}
	return usec, wrong, nil
}

// checkBench counts wrong elements of the output, as nccl-tests' #wrong.
func (c *Comm) checkBench(cfg BenchConfig, out []byte, count int) int64 {
	N, r := c.size, c.rank
	var wrong int64
	red := func(i int) float64 {
		acc := benchValue(0, i)
		for q := 1; q < N; q++ {
			v := benchValue(q, i)
			switch cfg.Op {
			case reduce.Sum, reduce.Avg:
				acc += v
			case reduce.Prod:
				acc *= v
			case reduce.Min:
				acc = math.Min(acc, v)
			case reduce.Max:
				acc = math.Max(acc, v)
			}
		}
		if cfg.Op == reduce.Avg {
			acc /= float64(N)
		}
		return acc
	}
	check := func(i int, want float64) {
		if got := reduce.Value(out, cfg.DType, i); math.Abs(got-want) > 1e-3*math.Max(1, math.Abs(want)) {
			wrong++
		}
	}
	switch cfg.Collective {
	case algo.AllReduce:
		for i := range count {
			check(i, red(i))
		}
	case algo.ReduceScatter:
		for i := range count {
			check(i, red(r*count+i))
		}
	case algo.AllGather:
		for q := range N {
			for i := range count {
				check(q*count+i, benchValue(q, i))
			}
		}
	case algo.Broadcast:
		for i := range count {
			check(i, benchValue(cfg.Root, i))
		}
	case algo.Reduce:
		if r == cfg.Root {
			for i := range count {
				check(i, red(i))
			}
		}
	case algo.AllToAll:
		for q := range N {
			for i := range count {
				check(q*count+i, benchValue(q, r*count+i))
			}
		}
	case SendRecvBench:
		for i := range count {
			check(i, benchValue((r+N-1)%N, i))
		}
	}
	return wrong
}

// WriteBenchHeader prints nccl-tests' header.
func WriteBenchHeader(w io.Writer, cfg BenchConfig, ranks int, transports string) {
	host, _ := os.Hostname()
	fmt.Fprintf(w, "# nThread 1 nGpus 1 minBytes %d maxBytes %d step: %d(%s) warmup iters: %d iters: %d agg iters: 1 validation: %d graph: 0\n",
		cfg.MinBytes, cfg.MaxBytes, stepOf(cfg), stepKind(cfg), cfg.Warmup, cfg.Iters, b2i(cfg.Check))
	fmt.Fprintln(w, "#")
	fmt.Fprintf(w, "# Using devices\n")
	for r := range ranks {
		pid := "-"
		if r == 0 {
			pid = fmt.Sprint(os.Getpid()) // the printing rank's; the others' are not gathered
		}
		fmt.Fprintf(w, "#  Rank %2d Group  0 Pid %6s on %10s device  0 [%s] ibex cpu\n", r, pid, host, transports)
	}
	fmt.Fprintln(w, "#")
	fmt.Fprintln(w, "#                                                              out-of-place                       in-place          ")
	fmt.Fprintln(w, "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong")
	fmt.Fprintln(w, "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ")
}

func stepOf(cfg BenchConfig) int64 {
	if cfg.Step > 0 {
		return cfg.Step
	}
	return cfg.Factor
}

func stepKind(cfg BenchConfig) string {
	if cfg.Step > 0 {
		return "bytes"
	}
	return "factor"
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// WriteBenchRow prints one line in nccl-tests' columns.
func WriteBenchRow(w io.Writer, r BenchRow) {
	fmt.Fprintf(w, "%12d  %12d  %8s  %6s  %6d  %7.2f  %6.2f  %6.2f  %5d  %7.2f  %6.2f  %6.2f  %5d\n",
		r.Size, r.Count, r.Type, r.Redop, r.Root, r.OOPTime, r.OOPAlgBW, r.OOPBusBW, r.OOPWrong, r.IPTime, r.IPAlgBW, r.IPBusBW, r.IPWrong)
}

// WriteBenchFooter prints the wrong-values line and the average busbw.
func WriteBenchFooter(w io.Writer, rows []BenchRow) {
	var wrong int64
	var sum float64
	for _, r := range rows {
		wrong += r.OOPWrong + r.IPWrong
		sum += r.OOPBusBW + r.IPBusBW
	}
	ok := "OK"
	if wrong > 0 {
		ok = "FAILED"
	}
	fmt.Fprintf(w, "# Out of bounds values : %d %s\n", wrong, ok)
	avg := 0.0
	if len(rows) > 0 {
		avg = sum / float64(2*len(rows))
	}
	fmt.Fprintf(w, "# Avg bus bandwidth    : %g \n", math.Round(avg*1e4)/1e4)
	fmt.Fprintln(w, "#")
}
