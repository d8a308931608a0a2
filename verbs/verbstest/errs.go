package verbstest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/verbs"
)

func errorsAs(err error, target any) bool { return errors.As(err, target) }

// expectReqErr checks the requester got status for wr 1, moved to ERR with
// a cause, and flushed the request queued behind it; and that the
// responder moved to ERR too when respErr, with the async event ev.
func expectReqErr(t *testing.T, a, b *end, status verbs.WCStatus, respErr bool, ev verbs.AsyncEventType) {
	t.Helper()
	wcs := a.wait(2)
	expectWC(t, wcs[0], 1, status, 0)
	expectWC(t, wcs[1], 2, verbs.WCWRFlushErr, 0)
	if wcs[0].QPNum != a.qp.Num() {
		t.Fatalf("error completion qp_num %#x, want %#x", wcs[0].QPNum, a.qp.Num())
	}
	waitState(t, a.qp, verbs.QPSErr)
	if a.qp.Err() == nil {
		t.Fatal("requester in ERR without a cause")
	}
	t.Logf("requester cause: %v", a.qp.Err())
	if respErr {
		waitState(t, b.qp, verbs.QPSErr)
		got := waitEvent(t, b.ctx, ev)
		if got.QPN != b.qp.Num() {
			t.Fatalf("event %v names qp %#x, want responder %#x", got, got.QPN, b.qp.Num())
		}
		wcs := b.wait(1)
		expectWC(t, wcs[0], 99, verbs.WCWRFlushErr, 0) // the responder's queued receive is flushed
	} else if b.qp.State() != verbs.QPSRTS {
		t.Fatalf("responder moved to %v on a requester-local error", b.qp.State())
	}
}

// failingPair sets up a pair with a receive queued on b (wr 99) so the
// responder's flush is visible.
func failingPair(t *testing.T, cfg Config, ob endOpts, conn verbs.ConnectOptions) (a, b *end) {
	a, b = pair(t, cfg, endOpts{}, ob, conn)
	b.recv(verbs.RecvWR{ID: 99, SGL: []verbs.SGE{b.sge(0, 64)}})
	return a, b
}

func writeWR(a *end, id uint64, raddr uint64, rkey uint32, n int) verbs.SendWR {
	return verbs.SendWR{ID: id, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, n)}, RemoteAddr: raddr, RKey: rkey}
}

func testBadRKey(t *testing.T, cfg Config) {
	a, b := failingPair(t, cfg, endOpts{}, verbs.ConnectOptions{})
	a.post(writeWR(a, 1, b.mr.Addr(), b.mr.RKey()^0x10101, 8), writeWR(a, 2, b.mr.Addr(), b.mr.RKey(), 8))
	expectReqErr(t, a, b, verbs.WCRemAccessErr, true, verbs.EventQPAccessErr)
}

func testPermission(t *testing.T, cfg Config) {
	a, b := failingPair(t, cfg, endOpts{access: verbs.AccessLocalWrite | verbs.AccessRemoteRead}, verbs.ConnectOptions{})
	b.write(0, pattern(8, 1))
	a.post(writeWR(a, 1, b.mr.Addr(), b.mr.RKey(), 8), writeWR(a, 2, b.mr.Addr(), b.mr.RKey(), 8))
	expectReqErr(t, a, b, verbs.WCRemAccessErr, true, verbs.EventQPAccessErr)
	if b.byteAt(0) != 1 {
		t.Fatal("a WRITE to an MR without REMOTE_WRITE changed its memory")
	}

	// The same for READ and atomics on an MR granting only REMOTE_WRITE.
	for _, op := range []verbs.Opcode{verbs.WRRDMARead, verbs.WRAtomicFetchAndAdd} {
		a, b := failingPair(t, cfg, endOpts{access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite}, verbs.ConnectOptions{})
		a.post(verbs.SendWR{ID: 1, Opcode: op, SGL: []verbs.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), CompareAdd: 1},
			writeWR(a, 2, b.mr.Addr(), b.mr.RKey(), 8))
		expectReqErr(t, a, b, verbs.WCRemAccessErr, true, verbs.EventQPAccessErr)
	}
}

func testBounds(t *testing.T, cfg Config) {
	for _, c := range []struct {
		name string
		off  int64
		n    int
	}{{"past end", 64<<10 - 4, 8}, {"before start", -8, 8}, {"whole region shifted", 1, 64 << 10}} {
		t.Run(c.name, func(t *testing.T) {
			a, b := failingPair(t, cfg, endOpts{}, verbs.ConnectOptions{})
			a.post(writeWR(a, 1, uint64(int64(b.mr.Addr())+c.off), b.mr.RKey(), c.n), writeWR(a, 2, b.mr.Addr(), b.mr.RKey(), 8))
			expectReqErr(t, a, b, verbs.WCRemAccessErr, true, verbs.EventQPAccessErr)
		})
	}
}

// testInvalidRequest: the responder QP's own access flags forbid the
// operation: an invalid request, REM_INV_REQ_ERR.
func testInvalidRequest(t *testing.T, cfg Config) {
	conn := verbs.ConnectOptions{Set: verbs.AttrAccessFlags, Attr: verbs.QPAttr{AccessFlags: verbs.AccessRemoteWrite}}
	a, b := failingPair(t, cfg, endOpts{}, conn)
	a.post(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		writeWR(a, 2, b.mr.Addr(), b.mr.RKey(), 8))
	expectReqErr(t, a, b, verbs.WCRemInvReqErr, true, verbs.EventQPReqErr)

	conn = verbs.ConnectOptions{Set: verbs.AttrMaxDestRdAtomic, Attr: verbs.QPAttr{MaxDestRdAtomic: 0}}
	a, b = failingPair(t, cfg, endOpts{}, conn)
	a.post(verbs.SendWR{ID: 1, Opcode: verbs.WRAtomicFetchAndAdd, SGL: []verbs.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		writeWR(a, 2, b.mr.Addr(), b.mr.RKey(), 8))
	expectReqErr(t, a, b, verbs.WCRemInvReqErr, true, verbs.EventQPReqErr)
}

// testLocalProt: READ into memory registered without LOCAL_WRITE fails
// locally with LOC_PROT_ERR; the responder is unaffected.
func testLocalProt(t *testing.T, cfg Config) {
	a, b := failingPair(t, cfg, endOpts{}, verbs.ConnectOptions{})
	ro := a.regMR(64, verbs.AccessRemoteRead)
	a.post(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{sgeOf(ro, 0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		writeWR(a, 2, b.mr.Addr(), b.mr.RKey(), 8))
	expectReqErr(t, a, b, verbs.WCLocProtErr, false, 0)
}

// testLocalLength: a SEND larger than the receive buffer gives the
// receiver LOC_LEN_ERR and the sender REM_INV_REQ_ERR.
func testLocalLength(t *testing.T, cfg Config) {
	a, b := pair(t, cfg, endOpts{}, endOpts{}, verbs.ConnectOptions{})
	b.recv(verbs.RecvWR{ID: 98, SGL: []verbs.SGE{b.sge(0, 16)}}, verbs.RecvWR{ID: 99, SGL: []verbs.SGE{b.sge(0, 64)}})
	a.post(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{a.sge(0, 17)}}, writeWR(a, 2, b.mr.Addr(), b.mr.RKey(), 8))
	wcs := a.wait(2)
	expectWC(t, wcs[0], 1, verbs.WCRemInvReqErr, 0)
	expectWC(t, wcs[1], 2, verbs.WCWRFlushErr, 0)
	wcs = b.wait(2)
	expectWC(t, wcs[0], 98, verbs.WCLocLenErr, 0)
	expectWC(t, wcs[1], 99, verbs.WCWRFlushErr, 0)
	waitState(t, b.qp, verbs.QPSErr)
}

func testPostErrors(t *testing.T, cfg Config) {
	a, b := defaultPair(t, cfg)
	send := func(wr verbs.SendWR) error { return a.qp.PostSend([]verbs.SendWR{wr}) }
	errContains(t, send(verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{{Addr: a.mr.Addr(), Length: 8, LKey: 0x3f2a}}}),
		verbs.ErrInvalidLKey, "post send", "sge[0]", "lkey 0x3f2a not registered in this PD")
	errContains(t, send(verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{a.sge(64<<10-4, 8)}}),
		verbs.ErrInvalidArgument, "outside MR")
	errContains(t, send(verbs.SendWR{Opcode: 42}), verbs.ErrInvalidArgument, "opcode 42")
	errContains(t, send(verbs.SendWR{Opcode: verbs.WRSend, Flags: 1 << 7}), verbs.ErrInvalidArgument, "send_flags")
	errContains(t, send(verbs.SendWR{Opcode: verbs.WRSend, Inline: []byte("x")}), verbs.ErrInvalidArgument, "SendInline")
	err := b.qp.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{{Addr: b.mr.Addr(), Length: 8, LKey: b.mr.RKey()}}}})
	errContains(t, err, verbs.ErrInvalidLKey, "post recv", "not registered")
	// Nothing was posted by the failures.
	expectNoWC(t, a.cq, 0)
	if a.qp.State() != verbs.QPSRTS {
		t.Fatalf("a post-time error moved the QP to %v", a.qp.State())
	}
	// max_rd_atomic 0 forbids READ and atomics at post time.
	c, d := pair(t, cfg, endOpts{}, endOpts{}, verbs.ConnectOptions{Set: verbs.AttrMaxQPRdAtomic})
	errContains(t, c.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{c.sge(0, 8)}, RemoteAddr: d.mr.Addr(), RKey: d.mr.RKey()}}),
		verbs.ErrInvalidArgument, "max_rd_atomic is 0")
}

// testWrongPD: keys of another PD are refused both locally and remotely.
func testWrongPD(t *testing.T, cfg Config) {
	a, b := failingPair(t, cfg, endOpts{}, verbs.ConnectOptions{})
	pd2, err := a.ctx.AllocPD()
	must(t, err, "alloc pd")
	t.Cleanup(func() { mustCleanup(t, pd2.Dealloc(), "dealloc pd2") })
	other, err := pd2.RegMR(64, allRemote)
	must(t, err, "reg mr in pd2")
	t.Cleanup(func() { mustCleanup(t, other.Dereg(), "dereg") })
	errContains(t, a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, SGL: []verbs.SGE{sgeOf(other, 0, 8)}}}),
		verbs.ErrInvalidLKey, "not registered in this PD")

	// b's context: an MR in a second PD, named by rkey from a's QP.
	pdb, err := b.ctx.AllocPD()
	must(t, err, "alloc pd on b")
	t.Cleanup(func() { mustCleanup(t, pdb.Dealloc(), "dealloc pdb") })
	foreign, err := pdb.RegMR(64, allRemote)
	must(t, err, "reg mr in pdb")
	t.Cleanup(func() { mustCleanup(t, foreign.Dereg(), "dereg") })
	a.post(writeWR(a, 1, foreign.Addr(), foreign.RKey(), 8), writeWR(a, 2, b.mr.Addr(), b.mr.RKey(), 8))
	expectReqErr(t, a, b, verbs.WCRemAccessErr, true, verbs.EventQPAccessErr)
}

// testDeregistered: after Dereg the keys are dead locally and remotely.
func testDeregistered(t *testing.T, cfg Config) {
	a, b := failingPair(t, cfg, endOpts{}, verbs.ConnectOptions{})
	lmr := a.regMR(64, verbs.AccessLocalWrite)
	must(t, lmr.Dereg(), "dereg local")
	errContains(t, a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, SGL: []verbs.SGE{sgeOf(lmr, 0, 8)}}}), verbs.ErrInvalidLKey)
	rmr := b.regMR(64, allRemote)
	rmr.Write(0, pattern(64, 3))
	addr, rkey := rmr.Addr(), rmr.RKey()
	must(t, rmr.Dereg(), "dereg remote")
	a.post(writeWR(a, 1, addr, rkey, 8), writeWR(a, 2, b.mr.Addr(), b.mr.RKey(), 8))
	expectReqErr(t, a, b, verbs.WCRemAccessErr, true, verbs.EventQPAccessErr)
	if rmr.Read(0, 1)[0] != 3 {
		t.Fatal("a WRITE reached deregistered memory")
	}
}

// testUnsignaledError: an unsignaled request that fails still completes.
func testUnsignaledError(t *testing.T, cfg Config) {
	a, b := failingPair(t, cfg, endOpts{}, verbs.ConnectOptions{})
	a.post(writeWR(a, 0, b.mr.Addr(), b.mr.RKey(), 8), writeWR(a, 1, b.mr.Addr(), b.mr.RKey()+1, 8), writeWR(a, 2, b.mr.Addr(), b.mr.RKey(), 8))
	expectReqErr(t, a, b, verbs.WCRemAccessErr, true, verbs.EventQPAccessErr)
}

func testFlushOnErr(t *testing.T, cfg Config) {
	a, b := defaultPair(t, cfg)
	var rwrs []verbs.RecvWR
	for i := range 10 {
		rwrs = append(rwrs, verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{b.sge(0, 8)}})
	}
	b.recv(rwrs...)
	modify(t, b.qp, verbs.QPAttr{State: verbs.QPSErr}, verbs.AttrState)
	for i, wc := range b.wait(10) {
		expectWC(t, wc, uint64(i), verbs.WCWRFlushErr, 0)
		if wc.QPNum != b.qp.Num() {
			t.Fatalf("flush completion %v names the wrong qp", wc)
		}
	}
	// Sends queued behind a stalled request are flushed too: park a in SQD.
	modify(t, a.qp, verbs.QPAttr{State: verbs.QPSSQD}, verbs.AttrState)
	for i := range 5 {
		a.post(writeWR(a, uint64(i), b.mr.Addr(), b.mr.RKey(), 8))
	}
	expectNoWC(t, a.cq, 0)
	modify(t, a.qp, verbs.QPAttr{State: verbs.QPSErr}, verbs.AttrState)
	for i, wc := range a.wait(5) {
		expectWC(t, wc, uint64(i), verbs.WCWRFlushErr, 0)
	}
}

func testPostInErr(t *testing.T, cfg Config) {
	a, b := defaultPair(t, cfg)
	modify(t, a.qp, verbs.QPAttr{State: verbs.QPSErr}, verbs.AttrState)
	a.post(writeWR(a, 5, b.mr.Addr(), b.mr.RKey(), 8))
	a.recv(verbs.RecvWR{ID: 6})
	wcs := a.wait(2)
	ids := map[uint64]bool{wcs[0].WRID: true, wcs[1].WRID: true}
	if !ids[5] || !ids[6] || wcs[0].Status != verbs.WCWRFlushErr || wcs[1].Status != verbs.WCWRFlushErr {
		t.Fatalf("posting in ERR: %v, want both flushed", wcs)
	}
	if b.byteAt(0) != 0 {
		t.Fatal("a request posted in ERR executed")
	}
}

// testResetDiscards: moving to RESET drops queued requests without completions.
func testResetDiscards(t *testing.T, cfg Config) {
	a, b := defaultPair(t, cfg)
	a.recv(verbs.RecvWR{ID: 1}, verbs.RecvWR{ID: 2})
	modify(t, a.qp, verbs.QPAttr{State: verbs.QPSSQD}, verbs.AttrState)
	a.post(writeWR(a, 3, b.mr.Addr(), b.mr.RKey(), 8))
	modify(t, a.qp, verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState)
	expectNoWC(t, a.cq, 0)
	must(t, a.qp.Connect(b.qp.Info(), verbs.ConnectOptions{}), "reconnect after RESET")
	a.post(verbs.SendWR{ID: 4, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	expectWC(t, a.wait1(), 4, verbs.WCSuccess, verbs.WCRDMAWrite)
	expectNoWC(t, a.cq, 0)
}

// testDeregInFlight deregisters an MR while a peer keeps writing to it:
// once Dereg returns, the memory is never touched again.
func testDeregInFlight(t *testing.T, cfg Config) {
	caps := verbs.QPCap{MaxSendWR: 1024}
	a, b := pair(t, cfg, endOpts{cap: caps, cqDepth: 4096}, endOpts{}, verbs.ConnectOptions{})
	fill(a.buf[:4096], 1)
	// The target is b's memory: in remote mode, in the other process.
	mr, err := b.pd.RegMR(4096, allRemote)
	must(t, err, "reg mr")
	stop := make(chan struct{})
	done := make(chan int)
	go func() {
		n := 0
		defer func() { done <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if a.qp.State() != verbs.QPSRTS {
				return
			}
			wr := writeWR(a, uint64(n), mr.Addr(), mr.RKey(), 4096)
			if a.qp.PostSend([]verbs.SendWR{wr}) != nil {
				return
			}
			n++
			if n%512 == 0 {
				// Keep the send queue from filling: wait for a signaled one.
				sig := writeWR(a, 1<<40, mr.Addr(), mr.RKey(), 8)
				sig.Flags = verbs.SendSignaled
				if a.qp.PostSend([]verbs.SendWR{sig}) != nil {
					return
				}
				var wc [1]verbs.WC
				ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
				_, err := a.cq.PollWait(ctx, wc[:])
				cancel()
				if err != nil || wc[0].Status != verbs.WCSuccess {
					return
				}
			}
		}
	}()
	time.Sleep(5 * time.Millisecond)
	must(t, mr.Dereg(), "dereg while writes are in flight")
	mr.Write(0, make([]byte, 4096))
	time.Sleep(10 * time.Millisecond)
	close(stop)
	n := <-done
	if n == 0 {
		t.Fatal("no write was posted before Dereg; the test proved nothing")
	}
	t.Logf("%d writes posted around Dereg", n)
	for i, c := range mr.Read(0, 4096) {
		if c != 0 {
			t.Fatalf("byte %d changed after Dereg returned (%d writes posted)", i, n)
		}
	}
	// The writer's first request after the dereg failed with REM_ACCESS_ERR.
	waitState(t, a.qp, verbs.QPSErr)
	errContains(t, a.qp.Err(), nil, "REM_ACCESS_ERR")
}

// testRemoteOp: a receive whose buffer lacks LOCAL_WRITE: the receiver
// completes it with LOC_PROT_ERR, the sender gets REM_OP_ERR.
func testRemoteOp(t *testing.T, cfg Config) {
	a, b := pair(t, cfg, endOpts{}, endOpts{}, verbs.ConnectOptions{})
	ro := b.regMR(64, verbs.AccessRemoteRead)
	b.recv(verbs.RecvWR{ID: 98, SGL: []verbs.SGE{sgeOf(ro, 0, 64)}}, verbs.RecvWR{ID: 99, SGL: []verbs.SGE{b.sge(0, 64)}})
	a.post(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{a.sge(0, 8)}}, writeWR(a, 2, b.mr.Addr(), b.mr.RKey(), 8))
	wcs := a.wait(2)
	expectWC(t, wcs[0], 1, verbs.WCRemOpErr, 0)
	expectWC(t, wcs[1], 2, verbs.WCWRFlushErr, 0)
	wcs = b.wait(2)
	expectWC(t, wcs[0], 98, verbs.WCLocProtErr, 0)
	expectWC(t, wcs[1], 99, verbs.WCWRFlushErr, 0)
	waitState(t, b.qp, verbs.QPSErr)
	if ro.Read(0, 1)[0] != 0 {
		t.Fatal("a SEND landed in a buffer without LOCAL_WRITE")
	}
}

// testLocalProtAfterPost: an MR deregistered between post and execution
// fails the request with LOC_PROT_ERR, not a stale access.
func testLocalProtAfterPost(t *testing.T, cfg Config) {
	a, b := failingPair(t, cfg, endOpts{}, verbs.ConnectOptions{})
	src := a.regMR(64, verbs.AccessLocalWrite)
	src.Write(0, pattern(64, 5))
	modify(t, a.qp, verbs.QPAttr{State: verbs.QPSSQD}, verbs.AttrState)
	a.post(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{sgeOf(src, 0, 64)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		writeWR(a, 2, b.mr.Addr(), b.mr.RKey(), 8))
	must(t, src.Dereg(), "dereg")
	modify(t, a.qp, verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState)
	expectReqErr(t, a, b, verbs.WCLocProtErr, false, 0)
	if b.byteAt(0) != 0 {
		t.Fatal("a WRITE from a deregistered MR moved data")
	}
}

// testLocalQPOp: a READ queued in SQD when max_rd_atomic is lowered to 0
// cannot be issued: LOC_QP_OP_ERR.
func testLocalQPOp(t *testing.T, cfg Config) {
	a, b := failingPair(t, cfg, endOpts{}, verbs.ConnectOptions{})
	modify(t, a.qp, verbs.QPAttr{State: verbs.QPSSQD}, verbs.AttrState)
	a.post(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		writeWR(a, 2, b.mr.Addr(), b.mr.RKey(), 8))
	modify(t, a.qp, verbs.QPAttr{MaxQPRdAtomic: 0}, verbs.AttrMaxQPRdAtomic)
	modify(t, a.qp, verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState)
	expectReqErr(t, a, b, verbs.WCLocQPOpErr, false, 0)
}
