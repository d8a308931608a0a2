package verbstest

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/verbs"
)

// rnrConn: min_rnr_timer 1 (10 µs) and the given rnr_retry.
func rnrConn(retry uint8) verbs.ConnectOptions {
	return verbs.ConnectOptions{Set: verbs.AttrRNRRetry | verbs.AttrMinRNRTimer, Attr: verbs.QPAttr{RNRRetry: retry, MinRNRTimer: 1}}
}

func testRNRFinite(t *testing.T, cfg Config) {
	a, b := pair(t, cfg, endOpts{}, endOpts{}, rnrConn(3))
	a.post(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{a.sge(0, 8)}}, writeWR(a, 2, b.mr.Addr(), b.mr.RKey(), 8))
	wcs := a.wait(2)
	expectWC(t, wcs[0], 1, verbs.WCRNRRetryExcErr, 0)
	expectWC(t, wcs[1], 2, verbs.WCWRFlushErr, 0)
	// The first try and 3 retries each drew an RNR NAK (a network provider
	// may see duplicates of one, never fewer).
	if got := a.qp.Stats().RNRNaks; got < 4 {
		t.Fatalf("RNR NAKs seen: %d, want at least 4 (the first try and 3 retries)", got)
	}
	waitState(t, a.qp, verbs.QPSErr)
	if b.qp.State() != verbs.QPSRTS {
		t.Fatalf("RNR moved the responder to %v", b.qp.State())
	}
	// rnr_retry 0: no retry at all.
	a, _ = pair(t, cfg, endOpts{}, endOpts{}, rnrConn(0))
	a.post(verbs.SendWR{ID: 3, Opcode: verbs.WRSendWithImm})
	expectWC(t, a.wait1(), 3, verbs.WCRNRRetryExcErr, 0)
}

// testRNRInfinite: with rnr_retry 7 a SEND waits for as long as it takes
// and completes once the receive is posted; later requests wait behind it.
func testRNRInfinite(t *testing.T, cfg Config) {
	a, b := pair(t, cfg, endOpts{}, endOpts{}, rnrConn(7))
	fill(a.buf[:32], 7)
	a.post(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.sge(0, 32)}},
		verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.Addr() + 100, RKey: b.mr.RKey()})
	// More RNR NAKs than any finite rnr_retry allows, and still waiting.
	deadline := time.Now().Add(waitTimeout)
	for a.qp.Stats().RNRNaks < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d RNR NAKs after %v", a.qp.Stats().RNRNaks, waitTimeout)
		}
		time.Sleep(time.Millisecond)
	}
	expectNoWC(t, a.cq, 0)
	if b.byteAt(100) != 0 {
		t.Fatal("the WRITE behind a waiting SEND executed first")
	}
	b.recv(verbs.RecvWR{ID: 9, SGL: []verbs.SGE{b.sge(0, 64)}})
	wcs := a.wait(2)
	expectWC(t, wcs[0], 1, verbs.WCSuccess, verbs.WCSend)
	expectWC(t, wcs[1], 2, verbs.WCSuccess, verbs.WCRDMAWrite)
	wc := b.wait1()
	if wc.ByteLen != 32 || b.byteAt(0) != a.buf[0] {
		t.Fatalf("receive after RNR wait: %v", wc)
	}
}

// testRetryExceeded: a peer that does not answer (its QP reset) makes the
// requester retry retry_cnt times and fail with RETRY_EXC_ERR.
func testRetryExceeded(t *testing.T, cfg Config) {
	conn := verbs.ConnectOptions{Set: verbs.AttrTimeout | verbs.AttrRetryCnt, Attr: verbs.QPAttr{Timeout: 1, RetryCnt: 2}}
	a, b := pair(t, cfg, endOpts{}, endOpts{}, conn)
	modify(t, b.qp, verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState)
	a.post(writeWR(a, 1, b.mr.Addr(), b.mr.RKey(), 8), writeWR(a, 2, b.mr.Addr(), b.mr.RKey(), 8))
	wcs := a.wait(2)
	expectWC(t, wcs[0], 1, verbs.WCRetryExcErr, 0)
	expectWC(t, wcs[1], 2, verbs.WCWRFlushErr, 0)
	if got := a.qp.Stats().Retries; got != 2 {
		t.Fatalf("retries: %d, want retry_cnt 2", got)
	}
	errContains(t, a.qp.Err(), nil, "RETRY_EXC_ERR", "2 retries")
}

func testCQOverflow(t *testing.T, cfg Config) {
	a, b := pair(t, cfg, endOpts{cqDepth: 4}, endOpts{}, verbs.ConnectOptions{})
	var wrs []verbs.SendWR
	for i := range 6 {
		wrs = append(wrs, verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	}
	a.post(wrs...)
	ev := waitEvent(t, a.ctx, verbs.EventCQErr)
	if ev.CQ == nil || ev.Cause == nil {
		t.Fatalf("CQ_ERR event without the CQ or cause: %v", ev)
	}
	// The QP whose completion was lost reports QP_FATAL.
	if ev := waitEvent(t, a.ctx, verbs.EventQPFatal); ev.QPN != a.qp.Num() || ev.Cause == nil {
		t.Fatalf("QP_FATAL event %v: want qp %#x with a cause", ev, a.qp.Num())
	}
	waitState(t, a.qp, verbs.QPSErr)
	wc := make([]verbs.WC, 16)
	n, err := a.cq.Poll(wc)
	if n != 4 || err != nil {
		t.Fatalf("poll after overflow: %d completions, err %v; want the 4 that fit", n, err)
	}
	for i := range n {
		expectWC(t, wc[i], uint64(i), verbs.WCSuccess, verbs.WCRDMAWrite)
	}
	n, err = a.cq.Poll(wc)
	if n != 0 || !errors.Is(err, verbs.ErrCQOverflow) {
		t.Fatalf("poll of a drained overflowed CQ: %d, %v; want ErrCQOverflow", n, err)
	}
	if err := a.cq.Wait(context.Background()); !errors.Is(err, verbs.ErrCQOverflow) {
		t.Fatalf("wait on an overflowed CQ: %v", err)
	}
}

func testCQWait(t *testing.T, cfg Config) {
	a, b := defaultPair(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := b.cq.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on an empty CQ: %v, want deadline exceeded", err)
	}
	// Several waiters all wake.
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	b.recv(verbs.RecvWR{ID: 1}, verbs.RecvWR{ID: 2}, verbs.RecvWR{ID: 3})
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			errs <- b.cq.Wait(ctx)
		}()
	}
	time.Sleep(5 * time.Millisecond)
	a.post(verbs.SendWR{ID: 1, Opcode: verbs.WRSend})
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	}
	b.wait(1)
}

// testSQD: in SQD new requests wait; SQ_DRAINED is reported; back in RTS
// they run.
func testSQD(t *testing.T, cfg Config) {
	a, b := defaultPair(t, cfg)
	modify(t, a.qp, verbs.QPAttr{State: verbs.QPSSQD, EnSQDAsyncNotify: true}, verbs.AttrState|verbs.AttrEnSQDAsyncNotify)
	ev := waitEvent(t, a.ctx, verbs.EventSQDrained)
	if ev.QPN != a.qp.Num() {
		t.Fatalf("SQ_DRAINED for the wrong QP: %v", ev)
	}
	a.post(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	expectNoWC(t, a.cq, 10*time.Millisecond)
	// SQD→SQD may change path attributes.
	modify(t, a.qp, verbs.QPAttr{Timeout: 10, RetryCnt: 3}, verbs.AttrTimeout|verbs.AttrRetryCnt)
	modify(t, a.qp, verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState)
	expectWC(t, a.wait1(), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
}

func testPortState(t *testing.T, cfg Config) {
	if cfg.SetPortState == nil {
		t.Skip("the provider cannot change its port state (Config.SetPortState is nil)")
	}
	conn := verbs.ConnectOptions{Set: verbs.AttrTimeout | verbs.AttrRetryCnt, Attr: verbs.QPAttr{Timeout: 1, RetryCnt: 1}}
	a, b := pair(t, cfg, endOpts{}, endOpts{}, conn)
	// In remote mode the server's port goes down too.
	remote, _ := b.ctx.(*remoteCtx)
	if remote != nil && !remote.canSetPort {
		t.Skip("the remote server cannot change its port state (Serve's setPortState is nil)")
	}
	setPort := func(s verbs.PortState) {
		if remote != nil {
			if err := remote.setPortState(s); err != nil {
				t.Errorf("set the remote port %v: %v", s, err)
			}
		}
		cfg.SetPortState(s)
	}
	setPort(verbs.PortDown)
	defer setPort(verbs.PortActive)
	ev := waitEvent(t, a.ctx, verbs.EventPortErr)
	if ev.Port != 1 {
		t.Fatalf("PORT_ERR names port %d", ev.Port)
	}
	if p, _ := a.ctx.QueryPort(1); p.State != verbs.PortDown {
		t.Fatalf("port state %v after PORT_ERR", p.State)
	}
	a.post(writeWR(a, 1, b.mr.Addr(), b.mr.RKey(), 8))
	expectWC(t, a.wait1(), 1, verbs.WCRetryExcErr, 0)
	setPort(verbs.PortActive)
	waitEvent(t, a.ctx, verbs.EventPortActive)
	if p, _ := a.ctx.QueryPort(1); p.State != verbs.PortActive {
		t.Fatalf("port state %v after PORT_ACTIVE", p.State)
	}
}

// testThousandQPs connects 1,000 QP pairs at once and moves a SEND and a
// WRITE_WITH_IMM over each.
func testThousandQPs(t *testing.T, cfg Config) {
	if cfg.Short {
		t.Skip(cfg.ShortReason)
	}
	const n = 1000
	ca, cb := openPair(t, cfg)
	a := newEnd(t, localCtx{ca}, endOpts{cqDepth: 4 * n, bufSize: 8 * n})
	b := newEnd(t, cb, endOpts{cqDepth: 4 * n, bufSize: 8 * n})
	small := verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}
	qa := make([]qpHandle, n)
	qb := make([]qpHandle, n)
	for i := range n {
		var err error
		qa[i], err = a.pd.CreateQP(a.cq, small, false)
		must(t, err, "create qp")
		qb[i], err = b.pd.CreateQP(b.cq, small, false)
		must(t, err, "create qp")
		t.Cleanup(func() {
			mustCleanup(t, qa[i].Destroy(), "destroy")
			mustCleanup(t, qb[i].Destroy(), "destroy")
		})
	}
	byQP := map[uint32]int{}
	for i := range n {
		must(t, qa[i].Connect(qb[i].Info(), verbs.ConnectOptions{}), "connect")
		must(t, qb[i].Connect(qa[i].Info(), verbs.ConnectOptions{}), "connect")
		byQP[qb[i].Num()] = i
		must(t, qb[i].PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{b.sge(8*i, 8)}}, {ID: uint64(n + i)}}), "post recv")
	}
	for i := range n {
		binary.LittleEndian.PutUint64(a.buf[8*i:], uint64(i))
		must(t, qa[i].PostSend([]verbs.SendWR{
			{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.sge(8*i, 8)}},
			{ID: uint64(n + i), Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, Imm: uint32(i), SGL: []verbs.SGE{a.sge(8*i, 8)},
				RemoteAddr: b.mr.Addr() + uint64(8*((i+1)%n)), RKey: b.mr.RKey()},
		}), "post send")
	}
	for _, wc := range waitCQ(t, a.cq, 2*n) {
		if wc.Status != verbs.WCSuccess {
			for i := range n {
				if qa[i].Num() == wc.QPNum {
					t.Fatalf("send completion %v: %v; requester %+v; responder %v %+v", wc, qa[i].Err(), qa[i].Stats(), qb[i].State(), qb[i].Stats())
				}
			}
			t.Fatalf("send completion %v", wc)
		}
	}
	got := 0
	for _, wc := range waitCQ(t, b.cq, 2*n) {
		i, ok := byQP[wc.QPNum]
		if !ok || wc.Status != verbs.WCSuccess {
			t.Fatalf("receive completion %v", wc)
		}
		if wc.Opcode == verbs.WCRecvRDMAWithImm && wc.Imm != uint32(i) {
			t.Fatalf("qp %d got imm %d", i, wc.Imm)
		}
		got++
	}
	slots := b.read(0, 8*n)
	for i := range n {
		if v := binary.LittleEndian.Uint64(slots[8*i:]); v != uint64((i+n-1)%n) && v != uint64(i) {
			t.Fatalf("slot %d holds %d", i, v)
		}
	}
}

// testConcurrentPosters: many goroutines post to one QP at once; every
// request completes exactly once and every fetch-add lands.
func testConcurrentPosters(t *testing.T, cfg Config) {
	const goroutines, per = 8, 300
	caps := verbs.QPCap{MaxSendWR: 4096, MaxRecvWR: 4096}
	a, b := pair(t, cfg, endOpts{cap: caps, cqDepth: 8192}, endOpts{cap: caps, cqDepth: 8192}, verbs.ConnectOptions{})
	var rwrs []verbs.RecvWR
	for i := range goroutines * per / 3 {
		rwrs = append(rwrs, verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{b.sge(4096, 64)}})
	}
	b.recv(rwrs...)
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				id := uint64(g*per + i)
				wr := verbs.SendWR{ID: id, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.sge(8*g, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
				switch i % 3 {
				case 0:
					wr.Opcode, wr.CompareAdd = verbs.WRAtomicFetchAndAdd, 1
				case 1:
					wr.Opcode, wr.RemoteAddr = verbs.WRRDMAWrite, b.mr.Addr()+uint64(64+8*g)
				case 2:
					wr.Opcode = verbs.WRSend
				}
				if err := a.qp.PostSend([]verbs.SendWR{wr}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := make([]bool, goroutines*per)
	for _, wc := range waitCQ(t, a.cq, goroutines*per) {
		if wc.Status != verbs.WCSuccess || wc.WRID >= uint64(len(seen)) || seen[wc.WRID] {
			t.Fatalf("completion %v: failed, unknown or duplicate", wc)
		}
		seen[wc.WRID] = true
	}
	if got := b.u64(0); got != goroutines*per/3 {
		t.Fatalf("fetch-adds: memory holds %d, want %d", got, goroutines*per/3)
	}
	waitCQ(t, b.cq, len(rwrs))
}

// testConcurrentQPs: goroutines drive their own QP pairs at once while
// sharing CQs, PDs and MRs.
func testConcurrentQPs(t *testing.T, cfg Config) {
	const goroutines, per = 6, 200
	ca, cb := openPair(t, cfg)
	a := newEnd(t, localCtx{ca}, endOpts{cqDepth: 4096})
	b := newEnd(t, cb, endOpts{cqDepth: 4096})
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	qps := make([][2]qpHandle, goroutines)
	for g := range goroutines {
		qa, err := a.pd.CreateQP(a.cq, verbs.QPCap{MaxSendWR: per, MaxRecvWR: per}, false)
		must(t, err, "create qp")
		qb, err := b.pd.CreateQP(b.cq, verbs.QPCap{MaxSendWR: per, MaxRecvWR: per}, false)
		must(t, err, "create qp")
		qps[g] = [2]qpHandle{qa, qb}
		t.Cleanup(func() {
			mustCleanup(t, qa.Destroy(), "destroy")
			mustCleanup(t, qb.Destroy(), "destroy")
		})
		must(t, qa.Connect(qb.Info(), verbs.ConnectOptions{}), "connect")
		must(t, qb.Connect(qa.Info(), verbs.ConnectOptions{}), "connect")
	}
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			qa, qb := qps[g][0], qps[g][1]
			for i := range per {
				if err := qb.PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{b.sge(1024*g, 1024)}}}); err != nil {
					errs <- err
					return
				}
				wr := verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSendWithImm, Imm: uint32(g), Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.sge(1024*g, 1024)}}
				if err := qa.PostSend([]verbs.SendWR{wr}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	next := make([]uint64, goroutines)
	for _, wc := range waitCQ(t, b.cq, goroutines*per) {
		g := int(wc.Imm)
		if wc.Status != verbs.WCSuccess || g >= goroutines || wc.WRID != next[g] || wc.QPNum != qps[g][1].Num() {
			t.Fatalf("receive completion %v out of order or failed", wc)
		}
		next[g]++
	}
	waitCQ(t, a.cq, goroutines*per)
}
