package shm

import (
	"context"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/verbs"
)

// BenchmarkPostWrite8 measures the initiator's cost of one 8-byte WRITE
// (post, checks, copy into the peer's pool, completion), both ends in this
// process, every 64th signaled and polled: the data path's own cost
// without the peer's scheduling.
func BenchmarkPostWrite8(b *testing.B) {
	cp := verbs.QPCap{MaxSendWR: 1024, MaxRecvWR: 16}
	a, err := newEnd(1<<20, true, cp)
	if err != nil {
		b.Fatal(err)
	}
	t, err := newEnd(1<<20, true, cp)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := a.close(); err != nil {
			b.Error(err)
		}
		if err := t.close(); err != nil {
			b.Error(err)
		}
	}()
	if err := a.qp.Connect(t.info(), verbs.ConnectOptions{}); err != nil {
		b.Fatal(err)
	}
	if err := t.qp.Connect(a.info(), verbs.ConnectOptions{}); err != nil {
		b.Fatal(err)
	}
	wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{{Addr: a.mr.Addr(), Length: 8, LKey: a.mr.LKey()}},
		RemoteAddr: t.mr.Addr(), RKey: t.mr.RKey()}}
	var wc [4]verbs.WC
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		wr[0].Flags = 0
		if i%64 == 0 {
			wr[0].Flags = verbs.SendSignaled
		}
		if err := a.qp.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		if i%64 == 0 {
			if n, err := a.cq.PollWait(ctx, wc[:1]); err != nil || n != 1 || wc[0].Status != verbs.WCSuccess {
				b.Fatal(n, err, wc[0])
			}
		}
	}
}
