package coll

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/coll/reduce"
)

// rightEdges is where each whitespace-separated field of line ends.
func rightEdges(line string) []int {
	var ends []int
	for i := range len(line) {
		if line[i] != ' ' && (i+1 == len(line) || line[i+1] == ' ') {
			ends = append(ends, i+1)
		}
	}
	return ends
}

// TestBenchRowAligned: every row of the table, whatever its times and
// bandwidths (2 µs to 10^8 µs, up to 12345 GB/s), ends each column where
// the header's label ends, as nccl-tests' getFloatStr keeps them. With a
// fixed %7.2f a time of 10,000 µs or more took 8 characters and shifted
// every column after it.
func TestBenchRowAligned(t *testing.T) {
	var hdr bytes.Buffer
	WriteBenchHeader(&hdr, BenchConfig{Collective: algo.AllReduce, MinBytes: 8, MaxBytes: 8, Factor: 2, Iters: 1}, 1, "shm0")
	var labels string
	for _, l := range strings.Split(hdr.String(), "\n") {
		if strings.HasPrefix(l, "#       size") {
			labels = l
		}
	}
	want := rightEdges(labels)
	if len(want) != 14 { // "#" is a field of its own here, fused with size below
		t.Fatalf("header %q: %d fields", labels, len(want))
	}
	want = want[1:] // the row has no "#"
	for _, tm := range []float64{2.5, 99.99, 123.456, 9999.99, 10000.4, 12345.678, 999999.9, 1234567.8, 12345678.9, 1.2e8} {
		for _, bw := range []float64{0, 1.5, 999.99, 1234.5, 12345.6} {
			var b bytes.Buffer
			WriteBenchRow(&b, BenchRow{Size: 1 << 30, Count: 1 << 28, Type: "float", Redop: "sum", Root: -1,
				OOPTime: tm, OOPAlgBW: bw, OOPBusBW: bw, IPTime: tm, IPAlgBW: bw, IPBusBW: bw})
			row := strings.TrimSuffix(b.String(), "\n")
			if got := rightEdges(row); !equalInts(got, want) {
				t.Errorf("time %v, bw %v:\n%s\n%s\ncolumns end at %v, want %v", tm, bw, labels, row, got, want)
			}
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestFitFloat: two decimals while they fit, then one, then none, then
// the exponent form, as nccl-tests prints.
func TestFitFloat(t *testing.T) {
	for _, c := range []struct {
		v     float64
		width int
		want  string
	}{
		{12.345, 7, "12.35"}, {9999.994, 7, "9999.99"}, {12345.67, 7, "12345.7"}, {123456.7, 7, "123457"},
		{1234567.4, 7, "1234567"}, {12345678, 7, "1.2e+07"}, {999.99, 6, "999.99"}, {1234.56, 6, "1234.6"},
		{123456.7, 6, "123457"}, {1234567, 6, "1e+06"},
	} {
		if got := fitFloat(c.v, c.width); got != c.want || len(got) > c.width {
			t.Errorf("fitFloat(%v, %d) = %q, want %q", c.v, c.width, got, c.want)
		}
	}
}

// TestBenchHeaderFlags: -m and -C show in the header as nccl-tests shows
// them.
func TestBenchHeaderFlags(t *testing.T) {
	var b bytes.Buffer
	WriteBenchHeader(&b, BenchConfig{Collective: algo.AllReduce, MinBytes: 8, MaxBytes: 64, Factor: 2, Iters: 3, AggIters: 4, CPUTime: true}, 2, "shm0")
	s := b.String()
	if !strings.Contains(s, "agg iters: 4 ") {
		t.Errorf("no agg iters: 4 in\n%s", s)
	}
	if !strings.Contains(s, "    root  cputime   algbw   busbw #wrong  cputime   algbw") {
		t.Errorf("no cputime columns in\n%s", s)
	}
}

// TestReduceTimes: -a's four ways over the ranks' times.
func TestReduceTimes(t *testing.T) {
	times := []float64{4, 1, 7}
	for _, c := range []struct {
		a    int
		want float64
	}{{0, 4}, {1, 4}, {2, 1}, {3, 7}} {
		avg, err := ParseBenchAverage(c.a)
		if err != nil {
			t.Fatal(err)
		}
		if got := reduceTimes(avg, times); got != c.want {
			t.Errorf("-a %d over %v: %v, want %v", c.a, times, got, c.want)
		}
	}
	if got := reduceTimes(AverageMean, []float64{1, 2}); got != 1.5 {
		t.Errorf("mean of 1 and 2: %v", got)
	}
	if _, err := ParseBenchAverage(4); err == nil || !strings.Contains(err.Error(), "-a 4") {
		t.Errorf("-a 4: %v", err)
	}
}

// TestInType: the check's expected value as the type holds it. A product
// over 3 ranks of 7s is 343, which int8 wraps to 87 and bfloat16 rounds
// to 344; an int32 average truncates.
func TestInType(t *testing.T) {
	for _, c := range []struct {
		dt   reduce.DType
		v    float64
		want float64
	}{
		{reduce.Int8, 343, 87}, {reduce.Uint8, 343, 87}, {reduce.Int8, 200, -56}, {reduce.Int32, 343, 343},
		{reduce.BFloat16, 343, 344}, {reduce.Float16, 343, 343}, {reduce.Float32, 0.1, float64(float32(0.1))},
	} {
		if got := inType(c.dt, c.v); got != c.want {
			t.Errorf("inType(%v, %v) = %v, want %v", c.dt, c.v, got, c.want)
		}
	}
}

// benchPair runs Bench with cfg on two ranks of this process (shm0) and
// returns each rank's rows and error.
func benchPair(t *testing.T, cfg BenchConfig) ([2][]BenchRow, [2]error) {
	t.Helper()
	id, err := NewUniqueID(freeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var rows [2][]BenchRow
	var errs [2]error
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := NewComm(ctx, id, r, 2, Options{})
			if err != nil {
				errs[r] = err
				return
			}
			errs[r] = c.Bench(ctx, cfg, func(row BenchRow) { rows[r] = append(rows[r], row) })
			if errs[r] != nil {
				c.Abort()
			}
			_ = c.Close()
		}()
	}
	wg.Wait()
	return rows, errs
}

// TestBenchGathered: the reported time is the ranks' times reduced as
// -a says, so both ranks hold the same rows (each used to report its own
// time); -m runs AggIters calls per timed iteration.
func TestBenchGathered(t *testing.T) {
	for _, avg := range []BenchAverage{AverageMean, AverageMax} {
		rows, errs := benchPair(t, BenchConfig{Collective: algo.AllReduce, MinBytes: 8, MaxBytes: 512, Factor: 8, Iters: 3, Warmup: 1,
			Check: true, DType: reduce.Float32, Op: reduce.Sum, AggIters: 2, Average: avg})
		if errs[0] != nil || errs[1] != nil {
			t.Fatal(errs)
		}
		if len(rows[0]) != 3 || len(rows[1]) != 3 {
			t.Fatalf("rows: %v", rows)
		}
		for i := range rows[0] {
			if rows[0][i] != rows[1][i] {
				t.Errorf("-a %v: size %d: rank 0 has %+v, rank 1 %+v", avg, rows[0][i].Size, rows[0][i], rows[1][i])
			}
		}
	}
}

// TestBenchTimeout: a size that takes longer than Timeout (-T) fails the
// run on every rank, and the rank whose deadline passed first names the
// size and the timeout (the other may hear of the abort before its own
// deadline).
func TestBenchTimeout(t *testing.T) {
	_, errs := benchPair(t, BenchConfig{Collective: algo.AllReduce, MinBytes: 1 << 20, MaxBytes: 1 << 20, Factor: 2, Iters: 1000,
		DType: reduce.Float32, Op: reduce.Sum, Timeout: time.Millisecond})
	named := false
	for r, err := range errs {
		if err == nil {
			t.Errorf("rank %d: no error", r)
			continue
		}
		named = named || strings.Contains(err.Error(), "of 1048576 bytes: test timeout (-T 1ms)")
	}
	if !named {
		t.Errorf("no rank names the timeout: %v", errs)
	}
}
