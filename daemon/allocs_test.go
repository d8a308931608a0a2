package daemon_test

import (
	"context"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/ibex-rdma/ibex/daemon"
	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/internal/hwq"
	"github.com/ibex-rdma/ibex/internal/ibexdwire"
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

// TestDaemonDataPathAllocs: the daemon's side of the data path (an engine
// taking WQEs from a ring, posting them, moving the completions into the
// CQ ring) allocates nothing. The daemon runs in this process here (the
// other tests run `ibex daemon`), served to a raw client of the protocol
// that writes WRITE WQEs into its ring and reads the CQEs itself, so
// testing.AllocsPerRun counts both.
func TestDaemonDataPathAllocs(t *testing.T) {
	cfg := daemon.DefaultConfig()
	cfg.Socket = filepath.Join(t.TempDir(), "d.sock")
	cfg.Devices = []daemon.DeviceConfig{{Name: "udp0", Address: "127.0.0.52"}}
	d, err := daemon.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
	}()
	r := dialRawAt(t, cfg.Socket)
	q, pd, _ := r.qp(64)
	mr := r.segMR(pd, 8192, 8192, 0x40000, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	r.connectSelf(q)
	w := hwq.SendWQE{Opcode: ib.WRRDMAWrite, RemoteAddr: 0x40000 + 4096, RKey: mr.RKey,
		SGL: []hwq.SGE{{Addr: 0x40000, Length: 256, LKey: mr.LKey}}}
	buf := make([]byte, hwq.CQESize)
	var cqe hwq.CQE
	round := func() {
		w.WRID++
		if _, err := q.sq.Reserve(1); err != nil {
			t.Fatal(err)
		}
		if err := w.Encode(q.sq.Entry(0)); err != nil {
			t.Fatal(err)
		}
		q.sq.Publish()
		ibexdwire.Ring(r.db.Mem)
		for {
			n, err := r.cq.Available()
			if err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				break
			}
			runtime.Gosched() // the daemon's goroutines share this process
		}
		r.cq.CopyOut(0, buf)
		r.cq.Release(1)
		if err := cqe.Decode(buf); err != nil || cqe.WRID != w.WRID || cqe.Status != ib.WCStatus(verbs.WCSuccess) {
			t.Fatalf("completion %+v (%v), want wr_id %d SUCCESS", cqe, err, w.WRID)
		}
	}
	for range 100 {
		round()
	}
	if n := testing.AllocsPerRun(300, round); n != 0 {
		t.Errorf("%.2f allocations per WRITE through the daemon's engine, want 0", n)
	}
}
