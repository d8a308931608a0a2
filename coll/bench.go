package coll

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"time"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/coll/reduce"
)

// SendRecvBench, as BenchConfig.Collective, runs nccl-tests'
// sendrecv_perf, every rank sending to rank+1 and receiving from rank-1.
const SendRecvBench = algo.Collective(0)

// BenchConfig is one nccl-tests run: sizes from MinBytes to MaxBytes,
// each Factor times the last (or +Step bytes when Step > 0). The zero
// values of the fields after Root are nccl-tests' defaults.
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

	// AggIters (nccl-tests -m) is the calls per timed iteration; the time
	// is per call. ibex has no group launch, so they run one after another.
	AggIters int
	// Average (-a) is how the ranks' times become the reported one.
	Average BenchAverage
	// Timeout (-T), if not zero, bounds each size's run (warm-up, timed
	// loop and check); a size that takes longer fails the run.
	Timeout time.Duration
	// CPUTime (-C) labels the time columns "cputime", as nccl-tests does
	// when it reports its host timer; ibex's time always is that timer.
	CPUTime bool
}

// BenchAverage says how nccl-tests' -a reduces the ranks' times. The
// zero value is nccl-tests' default, the mean.
type BenchAverage uint8

// The values of -a, in nccl-tests' numbering (0 = rank 0's own time).
const (
	AverageMean  BenchAverage = iota // -a 1
	AverageRank0                     // -a 0
	AverageMin                       // -a 2
	AverageMax                       // -a 3
)

// ParseBenchAverage maps nccl-tests' -a value (0 rank 0, 1 mean, 2 min,
// 3 max) to a BenchAverage.
func ParseBenchAverage(a int) (BenchAverage, error) {
	switch a {
	case 0:
		return AverageRank0, nil
	case 1:
		return AverageMean, nil
	case 2:
		return AverageMin, nil
	case 3:
		return AverageMax, nil
	}
	return 0, fmt.Errorf("coll: -a %d: want 0 (rank 0's time), 1 (the mean), 2 (the minimum) or 3 (the maximum)", a)
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
			sctx, cancel := ctx, context.CancelFunc(func() {})
			if cfg.Timeout > 0 {
				sctx, cancel = context.WithTimeout(ctx, cfg.Timeout)
			}
			t, wrong, err := c.benchOne(sctx, cfg, int(per), inPlace)
			timedOut := cfg.Timeout > 0 && ctx.Err() == nil && errors.Is(sctx.Err(), context.DeadlineExceeded)
			cancel()
			if timedOut {
				return fmt.Errorf("coll: %v of %d bytes: test timeout (-T %v): %w", cfg.Collective, size, cfg.Timeout, err)
			}
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
	agg := max(cfg.AggIters, 1)
	start := time.Now()
	for range cfg.Iters * agg {
		if err := call(); err != nil {
			return 0, 0, err
		}
	}
	usec = float64(time.Since(start).Nanoseconds()) / 1e3 / float64(max(cfg.Iters*agg, 1))
	if cfg.Check {
		fill()
		if err := call(); err != nil {
			return 0, 0, err
		}
		wrong = c.checkBench(cfg, recv, count)
	}
	return c.benchGather(ctx, cfg.Average, usec, wrong)
}

// benchGather gives every rank the time the table reports (the ranks'
// times reduced as -a says) and the wrong elements of all ranks, as
// nccl-tests reduces them across its processes.
func (c *Comm) benchGather(ctx context.Context, avg BenchAverage, usec float64, wrong int64) (float64, int64, error) {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], math.Float64bits(usec))
	binary.LittleEndian.PutUint64(b[8:], uint64(wrong))
	all, err := c.boot.AllGather(ctx, b[:])
	if err != nil {
		return 0, 0, err
	}
	times := make([]float64, len(all))
	var sumWrong int64
	for r, d := range all {
		if len(d) != len(b) {
			return 0, 0, fmt.Errorf("rank %d sent a %d-byte result, want %d", r, len(d), len(b))
		}
		times[r] = math.Float64frombits(binary.LittleEndian.Uint64(d[:8]))
		sumWrong += int64(binary.LittleEndian.Uint64(d[8:]))
	}
	return reduceTimes(avg, times), sumWrong, nil
}

// reduceTimes is -a over the ranks' times (rank order).
func reduceTimes(avg BenchAverage, times []float64) float64 {
	if len(times) == 0 {
		return 0
	}
	t := times[0]
	for _, v := range times[1:] {
		switch avg {
		case AverageMean:
			t += v
		case AverageMin:
			t = math.Min(t, v)
		case AverageMax:
			t = math.Max(t, v)
		}
	}
	if avg == AverageMean {
		t /= float64(len(times))
	}
	return t
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
			if cfg.DType <= reduce.Uint64 {
				acc = math.Trunc(acc) // integers: NCCL's SumPostDiv truncates
			}
		}
		return inType(cfg.DType, acc)
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

// inType is the exact result v as the type holds it: integers wrap (a
// product over many ranks overflows int8), floats round once (the
// kernels reduce half and bfloat16 in float32 and narrow at the end).
// v is exact in float64 while the ranks' values multiply below 2^53.
func inType(dt reduce.DType, v float64) float64 {
	switch dt {
	case reduce.Int8:
		return float64(int8(int64(v)))
	case reduce.Uint8:
		return float64(uint8(int64(v)))
	case reduce.Int32:
		return float64(int32(int64(v)))
	case reduce.Uint32:
		return float64(uint32(int64(v)))
	case reduce.Int64, reduce.Uint64:
		return v
	}
	var b [8]byte
	reduce.SetValue(b[:], dt, 0, v)
	return reduce.Value(b[:], dt, 0)
}

// WriteBenchHeader prints nccl-tests' header.
func WriteBenchHeader(w io.Writer, cfg BenchConfig, ranks int, transports string) {
	host, _ := os.Hostname()
	fmt.Fprintf(w, "# nThread 1 nGpus 1 minBytes %d maxBytes %d step: %d(%s) warmup iters: %d iters: %d agg iters: %d validation: %d graph: 0\n",
		cfg.MinBytes, cfg.MaxBytes, stepOf(cfg), stepKind(cfg), cfg.Warmup, cfg.Iters, max(cfg.AggIters, 1), b2i(cfg.Check))
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
	tl := "time"
	if cfg.CPUTime {
		tl = "cputime"
	}
	fmt.Fprintf(w, "#       size         count      type   redop    root  %7s   algbw   busbw #wrong  %7s   algbw   busbw #wrong\n", tl, tl)
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

// WriteBenchRow prints one line in nccl-tests' columns. A time or
// bandwidth too large for its column loses decimals, then goes to
// exponent form (nccl-tests' getFloatStr), so the columns stay aligned.
func WriteBenchRow(w io.Writer, r BenchRow) {
	fmt.Fprintf(w, "%12d  %12d  %8s  %6s  %6d  %7s  %6s  %6s  %5d  %7s  %6s  %6s  %5d\n",
		r.Size, r.Count, r.Type, r.Redop, r.Root,
		fitFloat(r.OOPTime, 7), fitFloat(r.OOPAlgBW, 6), fitFloat(r.OOPBusBW, 6), r.OOPWrong,
		fitFloat(r.IPTime, 7), fitFloat(r.IPAlgBW, 6), fitFloat(r.IPBusBW, 6), r.IPWrong)
}

// fitFloat formats v in at most width characters: two decimals, else
// one, else none, else in exponent form.
func fitFloat(v float64, width int) string {
	for _, prec := range []int{2, 1, 0} {
		if s := strconv.FormatFloat(v, 'f', prec, 64); len(s) <= width {
			return s
		}
	}
	prec := 0
	if width >= 7 {
		prec = 1
	}
	return strconv.FormatFloat(v, 'e', prec, 64)
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
