package shm

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/verbs"
)

// The benchmarks run the two ends in two processes, like perftest: this
// process and a child (child_test.go). Compare them with ucx_perftest
// (UCX_TLS=posix,self) using bench/shm-vs-ucx.sh.

// BenchmarkWriteLat is ib_write_lat's ping-pong: each side writes 8 bytes
// into the other's memory and spins on its own memory for the answer. One
// op is a round trip; lat-us is half of it, the number perftest prints.
func BenchmarkWriteLat(b *testing.B) {
	for _, mem := range []struct {
		name  string
		goMem bool
	}{{"pool", false}, {"gomem", true}} {
		b.Run(mem.name, func(b *testing.B) {
			e, err := newEnd(1<<20, !mem.goMem, verbs.QPCap{MaxSendWR: 1024, MaxRecvWR: 16})
			if err != nil {
				b.Fatal(err)
			}
			c := startChild(b, "lat", mem.goMem)
			c.connect(b, e)
			defer func() {
				_ = c.in.Close()
				_ = c.cmd.Wait()
				if err := e.close(); err != nil {
					b.Error(err)
				}
			}()
			in, out := e.word(0), e.word(64)
			wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{{Addr: e.mr.Addr() + 64, Length: 8, LKey: e.mr.LKey()}},
				RemoteAddr: c.info.Addr, RKey: c.info.RKey}}
			var wc [16]verbs.WC
			rtt := make([]time.Duration, max(1, min(b.N/rttGroup, 1<<20)))
			b.ResetTimer()
			t0 := time.Now()
			for i := uint64(1); i <= uint64(b.N); i++ {
				out.Store(i)
				wr[0].Flags = 0
				if i%64 == 0 {
					wr[0].Flags = verbs.SendSignaled
				}
				if err := e.qp.PostSend(wr); err != nil {
					b.Fatal(err)
				}
				if i%64 == 0 {
					if _, err := e.cq.Poll(wc[:]); err != nil {
						b.Fatal(err)
					}
				}
				for in.Load() != i {
				}
				if i%rttGroup == 0 {
					t1 := time.Now()
					rtt[(i/rttGroup-1)%uint64(len(rtt))] = t1.Sub(t0) / rttGroup
					t0 = t1
				}
			}
			b.StopTimer()
			slices.Sort(rtt)
			b.ReportMetric(float64(rtt[len(rtt)/2].Nanoseconds())/2/1e3, "p50-lat-us")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2/1e3, "mean-lat-us")
		})
	}
}

// rttGroup round trips make one latency sample: reading the clock costs
// 54 ns on this kvm-clock VM, too much to pay per round trip (perftest
// and UCX read the cycle counter). p50-lat-us is the median sample.
const rttGroup = 8

// BenchmarkWriteBW is ib_write_bw: 1 MiB WRITEs into the child's memory,
// up to 64 outstanding, every 16th signaled.
func BenchmarkWriteBW(b *testing.B) {
	const size = 1 << 20
	for _, mem := range []struct {
		name  string
		goMem bool
	}{{"pool", false}, {"gomem", true}} {
		b.Run(mem.name, func(b *testing.B) {
			e, err := newEnd(size, true, verbs.QPCap{MaxSendWR: 128, MaxRecvWR: 16})
			if err != nil {
				b.Fatal(err)
			}
			c := startChild(b, "idle", mem.goMem)
			c.connect(b, e)
			defer func() {
				_ = c.in.Close()
				_ = c.cmd.Wait()
				if err := e.close(); err != nil {
					b.Error(err)
				}
			}()
			wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{{Addr: e.mr.Addr(), Length: size, LKey: e.mr.LKey()}},
				RemoteAddr: c.info.Addr, RKey: c.info.RKey}}
			var wc [16]verbs.WC
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			b.SetBytes(size)
			b.ResetTimer()
			// Every 16th WRITE and the last are signaled; at most 64 are
			// outstanding. Completions come in order, so the last one
			// means every WRITE is done.
			signaled, completed := 0, 0
			wait := func() {
				n, err := e.cq.PollWait(ctx, wc[:])
				if err != nil {
					b.Fatal(err)
				}
				for _, w := range wc[:n] {
					if w.Status != verbs.WCSuccess {
						b.Fatal(w)
					}
				}
				completed += n
			}
			for i := 1; i <= b.N; i++ {
				for i-1-16*completed >= 64 && completed < signaled {
					wait()
				}
				wr[0].Flags = 0
				if i%16 == 0 || i == b.N {
					wr[0].Flags = verbs.SendSignaled
					signaled++
				}
				if err := e.qp.PostSend(wr); err != nil {
					b.Fatal(err)
				}
			}
			for completed < signaled {
				wait()
			}
		})
	}
}
