package loopback_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/verbs"
)

// rig is a connected pair of QPs on loop0 with one MR each, for benchmarks
// and allocation checks.
type rig struct {
	ca, cb   *verbs.Context
	pda, pdb *verbs.PD
	cqa, cqb *verbs.CQ
	qpa, qpb *verbs.QP
	mra, mrb *verbs.MR
	wc       []verbs.WC
}

func newRig(tb testing.TB, size, depth int) *rig {
	tb.Helper()
	r := &rig{ca: open(tb), cb: open(tb), wc: make([]verbs.WC, depth)}
	ok := func(err error) {
		if err != nil {
			tb.Fatal(err)
		}
	}
	var err error
	r.pda, err = r.ca.AllocPD()
	ok(err)
	r.pdb, err = r.cb.AllocPD()
	ok(err)
	r.cqa, err = r.ca.CreateCQ(2 * depth)
	ok(err)
	r.cqb, err = r.cb.CreateCQ(2 * depth)
	ok(err)
	acc := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	r.mra, err = r.pda.RegMR(make([]byte, size), acc)
	ok(err)
	r.mrb, err = r.pdb.RegMR(make([]byte, size), acc)
	ok(err)
	cp := verbs.QPCap{MaxSendWR: depth, MaxRecvWR: depth}
	r.qpa, err = r.pda.CreateQP(verbs.QPInitAttr{SendCQ: r.cqa, RecvCQ: r.cqa, Cap: cp})
	ok(err)
	r.qpb, err = r.pdb.CreateQP(verbs.QPInitAttr{SendCQ: r.cqb, RecvCQ: r.cqb, Cap: cp})
	ok(err)
	ok(r.qpa.Connect(r.qpb.Info(), verbs.ConnectOptions{}))
	ok(r.qpb.Connect(r.qpa.Info(), verbs.ConnectOptions{}))
	tb.Cleanup(func() {
		for _, err := range []error{r.qpa.Destroy(), r.qpb.Destroy(), r.mra.Dereg(), r.mrb.Dereg(),
			r.cqa.Destroy(), r.cqb.Destroy(), r.pda.Dealloc(), r.pdb.Dealloc(), r.ca.Close(), r.cb.Close()} {
			if err != nil {
				tb.Error(err)
			}
		}
	})
	return r
}

// drain polls cq until n completions arrived, failing on an error status.
func drain(tb testing.TB, cq *verbs.CQ, wc []verbs.WC, n int) {
	deadline := time.Time{}
	for n > 0 {
		k, err := cq.Poll(wc)
		if err != nil {
			tb.Fatal(err)
		}
		for i := range k {
			if wc[i].Status != verbs.WCSuccess {
				tb.Fatalf("completion %v", wc[i])
			}
		}
		n -= k
		if k == 0 {
			if deadline.IsZero() {
				deadline = time.Now().Add(10 * time.Second)
			} else if time.Now().After(deadline) {
				tb.Fatalf("%d completions missing", n)
			}
		}
	}
}

// BenchmarkWrite measures RDMA WRITE throughput the way ib_write_bw does:
// batches of 64 requests, only the last one signaled. The "span" cases
// spread each batch over 64 MiB regions, so the copy runs from and to
// memory rather than cache.
func BenchmarkWrite(b *testing.B) {
	for _, c := range []struct{ size, span int }{{8, 8}, {4096, 4096}, {64 << 10, 64 << 10}, {1 << 20, 1 << 20}, {1 << 20, 64 << 20}} {
		name := sizeName(c.size)
		if c.span > c.size {
			name += "-span" + sizeName(c.span)
		}
		b.Run(name, func(b *testing.B) {
			const batch = 64
			r := newRig(b, c.span, batch)
			wrs := make([]verbs.SendWR, batch)
			for i := range wrs {
				off := uint64(i*c.size) % uint64(c.span)
				sge := verbs.SGE{Addr: r.mra.Addr() + off, Length: uint32(c.size), LKey: r.mra.LKey()}
				wrs[i] = verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{sge}, RemoteAddr: r.mrb.Addr() + off, RKey: r.mrb.RKey()}
			}
			wrs[batch-1].Flags = verbs.SendSignaled
			b.SetBytes(int64(c.size))
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; done += batch {
				n := min(batch, b.N-done)
				if err := r.qpa.PostSend(wrs[batch-n:]); err != nil {
					b.Fatal(err)
				}
				drain(b, r.cqa, r.wc, 1)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mops/s")
		})
	}
}

// BenchmarkWriteLatency8B posts one signaled 8-byte WRITE and polls for it,
// one at a time (ib_write_lat's shape for one side).
func BenchmarkWriteLatency8B(b *testing.B) {
	r := newRig(b, 8, 16)
	wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: r.mra.Addr(), Length: 8, LKey: r.mra.LKey()}}, RemoteAddr: r.mrb.Addr(), RKey: r.mrb.RKey()}}
	b.ReportAllocs()
	for b.Loop() {
		if err := r.qpa.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		drain(b, r.cqa, r.wc, 1)
	}
}

// BenchmarkSendRecv8B: one SEND and its receive per operation.
func BenchmarkSendRecv8B(b *testing.B) {
	r := newRig(b, 8, 16)
	recv := []verbs.RecvWR{{SGL: []verbs.SGE{{Addr: r.mrb.Addr(), Length: 8, LKey: r.mrb.LKey()}}}}
	send := []verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{{Addr: r.mra.Addr(), Length: 8, LKey: r.mra.LKey()}}}}
	b.ReportAllocs()
	for b.Loop() {
		if err := r.qpb.PostRecv(recv); err != nil {
			b.Fatal(err)
		}
		if err := r.qpa.PostSend(send); err != nil {
			b.Fatal(err)
		}
		drain(b, r.cqa, r.wc, 1)
		drain(b, r.cqb, r.wc, 1)
	}
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// TestDataPathAllocs checks that posting and polling allocate nothing after
// setup, for every opcode.
func TestDataPathAllocs(t *testing.T) {
	r := newRig(t, 4096, 16)
	la := verbs.SGE{Addr: r.mra.Addr(), Length: 64, LKey: r.mra.LKey()}
	l8 := verbs.SGE{Addr: r.mra.Addr() + 128, Length: 8, LKey: r.mra.LKey()}
	lb := verbs.SGE{Addr: r.mrb.Addr(), Length: 64, LKey: r.mrb.LKey()}
	recv := []verbs.RecvWR{{SGL: []verbs.SGE{lb}}}
	cases := []struct {
		name  string
		wr    verbs.SendWR
		recvs bool
	}{
		{"WRITE", verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{la}}, false},
		{"WRITE_WITH_IMM", verbs.SendWR{Opcode: verbs.WRRDMAWriteWithImm, Imm: 1, SGL: []verbs.SGE{la}}, true},
		{"READ", verbs.SendWR{Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{la}}, false},
		{"SEND", verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{la}}, true},
		{"SEND_WITH_IMM", verbs.SendWR{Opcode: verbs.WRSendWithImm, Imm: 2, SGL: []verbs.SGE{la}}, true},
		{"FETCH_AND_ADD", verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd, CompareAdd: 1, SGL: []verbs.SGE{l8}}, false},
		{"CMP_AND_SWP", verbs.SendWR{Opcode: verbs.WRAtomicCmpAndSwp, SGL: []verbs.SGE{l8}}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.wr.Flags = verbs.SendSignaled
			c.wr.RemoteAddr, c.wr.RKey = r.mrb.Addr()+256, r.mrb.RKey()
			wrs := []verbs.SendWR{c.wr}
			allocs := testing.AllocsPerRun(1000, func() {
				if c.recvs {
					if err := r.qpb.PostRecv(recv); err != nil {
						t.Fatal(err)
					}
				}
				if err := r.qpa.PostSend(wrs); err != nil {
					t.Fatal(err)
				}
				drain(t, r.cqa, r.wc, 1)
				if c.recvs {
					drain(t, r.cqb, r.wc, 1)
				}
			})
			if allocs != 0 {
				t.Fatalf("%s post+poll allocates %.1f times per operation, want 0", c.name, allocs)
			}
		})
	}
}
