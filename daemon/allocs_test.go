package daemon_test

import (
	"testing"

	"github.com/ibex-rdma/ibex/verbs"
)

// TestDataPathAllocs: posting a WRITE and a receive through the daemon and
// polling their completions allocates nothing in the process (the rings,
// the doorbell and the completion delivery are preallocated).
func TestDataPathAllocs(t *testing.T) {
	startDaemon(t, "127.0.0.49")
	a, b := openEnd(t, 4096), openEnd(t, 4096)
	if err := a.qp.Connect(b.qp.Info(), verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(a.qp.Info(), verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	write := []verbs.SendWR{{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: a.mr.Addr(), Length: 64, LKey: a.mr.LKey()}}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}}
	send := []verbs.SendWR{{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: a.mr.Addr(), Length: 64, LKey: a.mr.LKey()}}}}
	recv := []verbs.RecvWR{{ID: 3, SGL: []verbs.SGE{{Addr: b.mr.Addr() + 1024, Length: 64, LKey: b.mr.LKey()}}}}
	wc := make([]verbs.WC, 4)
	poll := func(cq *verbs.CQ) {
		for {
			n, err := cq.Poll(wc)
			if err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				if wc[0].Status != verbs.WCSuccess {
					t.Fatalf("completion %v", wc[0])
				}
				return
			}
		}
	}
	round := func() {
		if err := a.qp.PostSend(write); err != nil {
			t.Fatal(err)
		}
		poll(a.cq)
		if err := b.qp.PostRecv(recv); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostSend(send); err != nil {
			t.Fatal(err)
		}
		poll(a.cq)
		poll(b.cq)
	}
	for range 100 { // warm up: the completion goroutines, the maps
		round()
	}
	if n := testing.AllocsPerRun(200, round); n != 0 {
		t.Errorf("%.1f allocations per WRITE + SEND/RECV round through the daemon, want 0", n)
	}
}
