package udp_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/provider/udp"
	"github.com/ibex-rdma/ibex/verbs"
)

type end struct {
	ctx *verbs.Context
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
	mr  *verbs.MR
}

// pairOf connects one QP on each of two fresh devices.
func pairOf(tb testing.TB, size, depth int) (a, b *end) { return pairPSP(tb, size, depth, "") }

// pairPSP is pairOf on devices with encryption policy psp ("": none).
func pairPSP(tb testing.TB, size, depth int, psp string) (a, b *end) {
	tb.Helper()
	da, db := newDevices(tb)
	if psp != "" {
		key := filepath.Join(tb.TempDir(), "key")
		if err := os.WriteFile(key, []byte(strings.Repeat("c3", 32)), 0o600); err != nil {
			tb.Fatal(err)
		}
		for _, d := range []string{da, db} {
			if err := udp.SetPSP(d, psp, key); err != nil {
				tb.Fatal(err)
			}
		}
	}
	mk := func(name string) *end {
		e := &end{ctx: open(tb, name)}
		var err error
		must := func(err error) {
			if err != nil {
				tb.Fatal(err)
			}
		}
		e.pd, err = e.ctx.AllocPD()
		must(err)
		e.cq, err = e.ctx.CreateCQ(4 * depth)
		must(err)
		e.mr, err = e.pd.RegMR(make([]byte, size), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
		must(err)
		e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, Cap: verbs.QPCap{MaxSendWR: depth, MaxRecvWR: depth}})
		must(err)
		return e
	}
	a, b = mk(da), mk(db)
	if err := a.qp.Connect(b.qp.Info(), verbs.ConnectOptions{}); err != nil {
		tb.Fatal(err)
	}
	if err := b.qp.Connect(a.qp.Info(), verbs.ConnectOptions{}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		for _, e := range []*end{a, b} {
			for _, err := range []error{e.qp.Destroy(), e.mr.Dereg(), e.cq.Destroy(), e.pd.Dealloc(), e.ctx.Close()} {
				if err != nil {
					tb.Error(err)
				}
			}
		}
	})
	return a, b
}

func waitOne(tb testing.TB, cq *verbs.CQ, wc []verbs.WC) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waitCtx(tb, ctx, cq, wc)
}

// waitCtx is waitOne under a context the caller made once: a benchmark's
// waits then cost no timer and no allocation of their own.
func waitCtx(tb testing.TB, ctx context.Context, cq *verbs.CQ, wc []verbs.WC) {
	n, err := cq.PollWait(ctx, wc[:1])
	if err != nil || n != 1 || wc[0].Status != verbs.WCSuccess {
		tb.Fatalf("completion: %v %v", wc[0], err)
	}
}

// benchContext bounds a whole benchmark.
func benchContext(b *testing.B) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	return ctx
}

// cpuTime is the CPU time (user and system) the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process's CPU time per operation since start:
// both ends and the kernel's work for them; above 1 s/s a run used more
// than one core.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64((cpuTime()-start).Microseconds())/float64(b.N), "cpu-µs/op")
}

// BenchmarkWrite1MiB streams 1 MiB RDMA WRITEs over loopback UDP with up
// to 16 in flight, as ib_write_bw does.
func BenchmarkWrite1MiB(b *testing.B) { benchWrite(b, 1<<20, 16) }

// BenchmarkPSP is the cost of encryption (package psp): 1 MiB WRITEs (16
// in flight) and 8-byte ping-pongs, plain and encrypted side by side in
// one run. bench/psp-overhead.sh measures the same with ibex perf.
func BenchmarkPSP(b *testing.B) {
	for _, mode := range []string{"plain", "psp"} {
		pol := map[string]string{"plain": "", "psp": "required"}[mode]
		b.Run("write1MiB/"+mode, func(b *testing.B) { benchWritePSP(b, 1<<20, 16, pol) })
		b.Run("lat8B/"+mode, func(b *testing.B) { benchLatency(b, pol) })
	}
}

// BenchmarkWrite64KiB is BenchmarkWrite1MiB with 64 KiB WRITEs, 128 in
// flight (ib_write_bw's default tx depth): the case where go-back-N used
// to resend a sixth of the packets on a lossless loopback. It reports the
// requester's retransmissions per WRITE.
func BenchmarkWrite64KiB(b *testing.B) { benchWrite(b, 64<<10, 128) }

func benchWrite(b *testing.B, size, depth int) { benchWritePSP(b, size, depth, "") }

func benchWritePSP(b *testing.B, size, depth int, psp string) {
	x, y := pairPSP(b, size, depth, psp)
	wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: x.mr.Addr(), Length: uint32(size), LKey: x.mr.LKey()}}, RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}}
	wc := make([]verbs.WC, 1)
	ctx := benchContext(b)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	inflight := 0
	for i := 0; i < b.N; i++ {
		if inflight == depth {
			waitCtx(b, ctx, x.cq, wc)
			inflight--
		}
		if err := x.qp.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		inflight++
	}
	for ; inflight > 0; inflight-- {
		waitCtx(b, ctx, x.cq, wc)
	}
	reportCPU(b, cpu)
	b.ReportMetric(float64(x.qp.Stats().Retransmits)/float64(b.N), "resent-pkts/op")
}

// BenchmarkWriteLatency8B ping-pongs 8-byte RDMA WRITE_WITH_IMM between two
// devices; the reported half-rtt is ib_write_lat's figure.
func BenchmarkWriteLatency8B(b *testing.B) { benchLatency(b, "") }

func benchLatency(b *testing.B, psp string) {
	x, y := pairPSP(b, 64, 16, psp)
	ping := []verbs.SendWR{{Opcode: verbs.WRRDMAWriteWithImm, SGL: []verbs.SGE{{Addr: x.mr.Addr(), Length: 8, LKey: x.mr.LKey()}},
		RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}}
	pong := []verbs.SendWR{{Opcode: verbs.WRRDMAWriteWithImm, SGL: []verbs.SGE{{Addr: y.mr.Addr(), Length: 8, LKey: y.mr.LKey()}},
		RemoteAddr: x.mr.Addr(), RKey: x.mr.RKey()}}
	recv := []verbs.RecvWR{{}}
	wc := make([]verbs.WC, 1)
	lat := make([]time.Duration, 0, b.N)
	ctx := benchContext(b)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for i := 0; i < b.N; i++ {
		if err := y.qp.PostRecv(recv); err != nil {
			b.Fatal(err)
		}
		if err := x.qp.PostRecv(recv); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if err := x.qp.PostSend(ping); err != nil {
			b.Fatal(err)
		}
		waitCtx(b, ctx, y.cq, wc)
		if err := y.qp.PostSend(pong); err != nil {
			b.Fatal(err)
		}
		waitCtx(b, ctx, x.cq, wc)
		lat = append(lat, time.Since(t0)/2)
	}
	reportCPU(b, cpu)
	if len(lat) > 0 {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1000, "µs-half-rtt-median")
	}
}
