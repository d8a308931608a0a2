package ibexd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/internal/hwq"
	"github.com/ibex-rdma/ibex/internal/ibexdwire"
	"github.com/ibex-rdma/ibex/internal/shmem"
	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/verbs/driver"
)

// While a poller called Progress within pollGrace, a ring's goroutine
// naps pollNap between looks instead of sleeping on the ring.
const (
	pollGrace = int64(2 * time.Millisecond)
	pollNap   = 500 * time.Microsecond
)

// ringSleep bounds one sleep of a completion ring's goroutine; the
// daemon's publish wakes it sooner.
const ringSleep = 10 * time.Millisecond

// cqRing is the completion ring of a daemon CQ, the twin of one verbs.CQ
// of this process, and the goroutine that drains it.
type cqRing struct {
	d      *device
	id     uint32
	cq     *verbs.CQ
	seg    *shmem.Segment
	cons   *hwq.Consumer
	nqp    int // QPs using it (under d.mu)
	mu     sync.Mutex
	buf    []byte
	cqe    hwq.CQE
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	nap    *time.Timer // run's nap while a poller delivers (made once)
}

// cqRingFor returns the daemon twin of cq, creating it on first use by a
// QP (verbs tells providers of QPs, not of CQs).
func (d *device) cqRingFor(cq *verbs.CQ) (*cqRing, error) {
	d.mu.Lock()
	if r := d.cqs[cq]; r != nil {
		r.nqp++
		d.mu.Unlock()
		return r, nil
	}
	d.mu.Unlock()
	resp, fds, err := d.rpc(&ibexdwire.Request{Op: ibexdwire.OpCreateCQ, Depth: cq.Depth()})
	if err != nil {
		return nil, err
	}
	r, err := d.attachCQ(resp.CQ, cq, fds)
	if err != nil {
		_, _, _ = d.rpc(&ibexdwire.Request{Op: ibexdwire.OpDestroyCQ, CQ: resp.CQ})
		return nil, err
	}
	d.mu.Lock()
	if other := d.cqs[cq]; other != nil { // another goroutine won
		other.nqp++
		d.mu.Unlock()
		r.stop()
		_, _, _ = d.rpc(&ibexdwire.Request{Op: ibexdwire.OpDestroyCQ, CQ: resp.CQ})
		return other, nil
	}
	r.nqp = 1
	d.cqs[cq] = r
	d.ringList = append(d.ringList[:len(d.ringList):len(d.ringList)], r)
	d.publishRings()
	d.mu.Unlock()
	go r.run()
	return r, nil
}

func (d *device) attachCQ(id uint32, cq *verbs.CQ, fds []int) (*cqRing, error) {
	if len(fds) != 1 {
		ibexdwire.CloseFDs(fds)
		return nil, fmt.Errorf("ibexd: create cq: %d descriptors in the answer, want 1", len(fds))
	}
	seg, err := shmem.Map(fds[0])
	if err != nil {
		return nil, fmt.Errorf("ibexd: create cq: %w", err)
	}
	ring, err := hwq.Attach(seg.Mem)
	var cons *hwq.Consumer
	if err == nil && ring.EntrySize() != hwq.CQESize {
		err = fmt.Errorf("entry size %d, want %d", ring.EntrySize(), hwq.CQESize)
	}
	if err == nil {
		cons, err = ring.Consumer(hwq.WaitOptions{})
	}
	if err != nil {
		seg.Close()
		return nil, fmt.Errorf("ibexd: create cq: ring: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &cqRing{d: d, id: id, cq: cq, seg: seg, cons: cons, buf: make([]byte, hwq.CQESize), cancel: cancel, done: make(chan struct{}), nap: time.NewTimer(time.Hour)}
	r.nap.Stop()
	r.ctx = ctx
	return r, nil
}

// run waits on the ring (a futex sleep: an application that waits on its
// CQ spends nothing until the daemon writes a completion) and delivers.
func (r *cqRing) run() {
	defer close(r.done)
	for r.ctx.Err() == nil {
		r.mu.Lock()
		n := r.drainLocked()
		idx := r.cons.Released()
		r.mu.Unlock()
		if n < 0 {
			return
		}
		if n == 0 {
			if last := r.d.lastPoll.Load(); last != 0 && nowNs()-last < pollGrace {
				// A poller delivers: nap, without a futex word the
				// daemon would have to wake.
				r.nap.Reset(pollNap)
				select {
				case <-r.nap.C:
				case <-r.d.wakeRings:
				case <-r.ctx.Done():
				}
				r.nap.Stop()
				continue
			}
			r.cons.Ring().SleepUnless(idx, ringSleep)
		}
	}
}

// drain delivers every completion in the ring to the QPs' verbs (which
// put them in the application's CQ). One goroutine at a time: a poller's
// Progress and run do not wait for each other.
func (r *cqRing) drain() {
	if !r.mu.TryLock() {
		return
	}
	defer r.mu.Unlock()
	r.drainLocked()
}

// drainAll delivers what the ring holds, waiting for a drain in progress
// (so that completions the daemon wrote before an event are seen first).
func (r *cqRing) drainAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drainLocked()
}

// drainLocked delivers what the ring holds and returns how many, or -1
// when the ring is broken (the device is then lost).
func (r *cqRing) drainLocked() int {
	n, err := r.cons.Available()
	if err != nil {
		r.d.ringBroken(err)
		return -1
	}
	for i := range n {
		r.cons.CopyOut(i, r.buf)
		if err := r.cqe.Decode(r.buf); err != nil {
			r.cons.Release(i)
			r.d.ringBroken(err)
			return -1
		}
		r.deliver(&r.cqe)
	}
	r.cons.Release(n)
	return n
}

func (r *cqRing) deliver(e *hwq.CQE) {
	q := r.d.qp(e.QPNum)
	if q == nil {
		return // a QP destroyed since
	}
	st := verbs.WCStatus(e.Status)
	if e.Opcode >= uint8(verbs.WCRecv) {
		write := e.Opcode == uint8(verbs.WCRecvRDMAWithImm)
		hasImm := verbs.WCFlags(e.Flags)&verbs.WCWithImm != 0
		if !q.h.RecvComplete(e.WRID, st, e.ByteLen, e.Imm, hasImm, write, e.SrcQP) {
			q.h.Fail(fmt.Errorf("qp %#x: receive CQ overflowed", q.num), verbs.EventQPFatal, true)
		}
		return
	}
	var cause error
	if st != verbs.WCSuccess && st != verbs.WCWRFlushErr {
		// The daemon's QP knows why (retries exhausted, the peer's
		// NAK): one round trip, on the error path only.
		cause = fmt.Errorf("qp %#x: %v (completed by ibexd)", q.num, st)
		if r, _, err := q.d.rpc(&ibexdwire.Request{Op: ibexdwire.OpQPStats, QPN: q.num}); err == nil && r.QPErr != "" {
			cause = fmt.Errorf("ibexd: %s", r.QPErr)
		}
	}
	q.h.CompleteSend(e.WRID, st, e.ByteLen, cause)
}

func (r *cqRing) stop() {
	r.cancel()
	<-r.done
	r.seg.Close()
}

// ringBroken: the daemon wrote something this process cannot read. That
// is a daemon bug; the device stops rather than guess.
func (d *device) ringBroken(err error) {
	d.lost(fmt.Errorf("ibexd (pid %d): completion ring corrupt: %w", d.daemonPID, err))
}

// releaseCQ drops a QP's use of r; the last one destroys the daemon twin.
func (d *device) releaseCQ(r *cqRing) {
	d.mu.Lock()
	r.nqp--
	last := r.nqp == 0
	if last {
		delete(d.cqs, r.cq)
		list := make([]*cqRing, 0, len(d.ringList))
		for _, x := range d.ringList {
			if x != r {
				list = append(list, x)
			}
		}
		d.ringList = list
		d.publishRings()
	}
	d.mu.Unlock()
	if last {
		r.stop()
		_, _, _ = d.rpc(&ibexdwire.Request{Op: ibexdwire.OpDestroyCQ, CQ: r.id})
	}
}

// qpDriver is one QP: an Issuer whose transport is the daemon's QP.
type qpDriver struct {
	d      *device
	h      driver.QP
	num    uint32
	seg    *shmem.Segment
	sendCQ *cqRing
	recvCQ *cqRing

	smu  sync.Mutex // Issue's producer
	sq   *hwq.Producer
	swqe hwq.SendWQE

	rq   *hwq.Producer // IssueRecv's, under the QP's lock
	rwqe hwq.RecvWQE

	// Encryption (package psp), done by the daemon's device: the daemon
	// QP's receive SPI, and the peer's, sent with the move to RTR.
	spi     uint32
	peerSPI atomic.Uint32
}

// RecvSPI is driver.Securer: the daemon QP's receive SPI.
func (q *qpDriver) RecvSPI() uint32 { return q.spi }

// PeerSPI is driver.Securer: kept for the move to RTR (Modified), where
// the daemon's device applies its policy.
func (q *qpDriver) PeerSPI(spi uint32) error {
	q.peerSPI.Store(spi)
	return nil
}

// NewQP creates the daemon's QP (the QP number is the daemon's) and maps
// its rings.
func (d *device) NewQP(h driver.QP) (driver.QPDriver, error) {
	pd, err := d.pdID(h.PD().PD)
	if err != nil {
		return nil, err
	}
	scq, err := d.cqRingFor(h.SendCQ())
	if err != nil {
		return nil, err
	}
	rcq, err := d.cqRingFor(h.RecvCQ())
	if err != nil {
		d.releaseCQ(scq)
		return nil, err
	}
	q := &qpDriver{d: d, h: h, sendCQ: scq, recvCQ: rcq}
	fail := func(err error) (driver.QPDriver, error) {
		d.releaseCQ(scq)
		d.releaseCQ(rcq)
		return nil, err
	}
	cp := h.Cap()
	resp, fds, err := d.rpc(&ibexdwire.Request{Op: ibexdwire.OpCreateQP, PD: pd, SendCQ: scq.id, RecvCQ: rcq.id, Cap: cp})
	if err != nil {
		return fail(err)
	}
	if err := q.attach(resp, fds, cp); err != nil {
		_, _, _ = d.rpc(&ibexdwire.Request{Op: ibexdwire.OpDestroyQP, QPN: resp.QPN})
		return fail(err)
	}
	q.spi = resp.SPI
	d.mu.Lock()
	d.qps[q.num] = q
	d.publishQPs()
	d.mu.Unlock()
	return q, nil
}

func (q *qpDriver) attach(resp *ibexdwire.Response, fds []int, cp verbs.QPCap) error {
	if len(fds) != 1 {
		ibexdwire.CloseFDs(fds)
		return fmt.Errorf("ibexd: create qp: %d descriptors in the answer, want 1", len(fds))
	}
	seg, err := shmem.Map(fds[0])
	if err != nil {
		return fmt.Errorf("ibexd: create qp: %w", err)
	}
	bad := func(err error) error {
		seg.Close()
		return fmt.Errorf("ibexd: create qp %#x: rings: %w", resp.QPN, err)
	}
	if resp.RQOff <= 0 || resp.RQOff >= len(seg.Mem) {
		return bad(fmt.Errorf("receive ring at %d of a %d-byte segment", resp.RQOff, len(seg.Mem)))
	}
	sr, err := hwq.Attach(seg.Mem[:resp.RQOff])
	if err != nil {
		return bad(err)
	}
	rr, err := hwq.Attach(seg.Mem[resp.RQOff:])
	if err != nil {
		return bad(err)
	}
	slim := hwq.Limits{MaxSGE: cp.MaxSendSGE, MaxInline: cp.MaxInlineData}
	rlim := hwq.Limits{MaxSGE: cp.MaxRecvSGE}
	if sr.EntrySize() < hwq.SendWQESize(slim) || sr.Count() < cp.MaxSendWR ||
		rr.EntrySize() < hwq.RecvWQESize(rlim) || rr.Count() < cp.MaxRecvWR {
		return bad(errors.New("rings smaller than the QP's capabilities"))
	}
	if q.sq, err = sr.Producer(); err != nil {
		return bad(err)
	}
	if q.rq, err = rr.Producer(); err != nil {
		return bad(err)
	}
	q.seg, q.num = seg, resp.QPN
	q.swqe.SGL = make([]hwq.SGE, 0, cp.MaxSendSGE)
	q.rwqe.SGL = make([]hwq.SGE, 0, cp.MaxRecvSGE)
	return nil
}

// QPNum is the daemon's QP number.
func (q *qpDriver) QPNum() uint32 { return q.num }

// Issue writes the request into the send ring and rings the doorbell.
// The wr_id in the ring is the ssn: the completion names the request by
// it. Nothing here allocates or makes a syscall while the engine is awake.
func (q *qpDriver) Issue(w *driver.SendWQE) {
	q.smu.Lock()
	s := &q.swqe
	s.WRID, s.Opcode, s.Flags, s.Imm = w.SSN, w.Op, w.Flags&^ib.SendSignaled, w.Imm
	s.RemoteAddr, s.RKey, s.CompareAdd, s.Swap = w.RemoteAddr, w.RKey, w.CompareAdd, w.Swap
	s.SGL, s.Inline = s.SGL[:0], nil
	if w.IsInline() {
		s.Inline = w.Inline[:w.Length]
	} else {
		for _, g := range w.SGE {
			s.SGL = append(s.SGL, hwq.SGE{Addr: g.Addr, Length: g.Length, LKey: g.LKey})
		}
	}
	err := q.push()
	q.smu.Unlock()
	if err != nil {
		q.h.CompleteSend(w.SSN, verbs.WCLocQPOpErr, 0, fmt.Errorf("qp %#x: send ring: %w", q.num, err))
		return
	}
	ibexdwire.Ring(q.d.db.Mem)
}

func (q *qpDriver) push() error {
	if _, err := q.sq.Reserve(1); err != nil {
		return err
	}
	if err := q.swqe.Encode(q.sq.Entry(0)); err != nil {
		q.sq.Trim(0)
		return err
	}
	q.sq.Publish()
	return nil
}

// IssueRecv writes a posted receive into the receive ring; its wr_id is
// the receive's rsn.
func (q *qpDriver) IssueRecv(rsn uint64, sgl []verbs.SGE) error {
	r := &q.rwqe
	r.WRID, r.SGL = rsn, r.SGL[:0]
	for _, g := range sgl {
		r.SGL = append(r.SGL, hwq.SGE{Addr: g.Addr, Length: g.Length, LKey: g.LKey})
	}
	if _, err := q.rq.Reserve(1); err != nil {
		return fmt.Errorf("ibexd: receive ring: %w", err)
	}
	if err := r.Encode(q.rq.Entry(0)); err != nil {
		q.rq.Trim(0)
		return fmt.Errorf("ibexd: receive ring: %w", err)
	}
	q.rq.Publish()
	ibexdwire.Ring(q.d.db.Mem)
	return nil
}

// Modified makes the same change to the daemon's QP first.
func (q *qpDriver) Modified(from, to verbs.QPState, attr *verbs.QPAttr, mask verbs.AttrMask) error {
	req := &ibexdwire.Request{Op: ibexdwire.OpModifyQP, QPN: q.num, Attr: attr, Mask: mask}
	if to == verbs.QPSRTR && from != verbs.QPSRTR {
		req.SPI = q.peerSPI.Load()
	}
	_, _, err := q.d.rpc(req)
	return err
}

// TransportStats are the daemon QP's counters (retries, RNR NAKs,
// packets, ...).
func (q *qpDriver) TransportStats() verbs.QPStats {
	r, _, err := q.d.rpc(&ibexdwire.Request{Op: ibexdwire.OpQPStats, QPN: q.num})
	if err != nil || r.Stats == nil {
		return verbs.QPStats{}
	}
	return *r.Stats
}

// Destroy destroys the daemon's QP and unmaps the rings.
func (q *qpDriver) Destroy() {
	q.d.mu.Lock()
	delete(q.d.qps, q.num)
	q.d.publishQPs()
	q.d.mu.Unlock()
	_, _, _ = q.d.rpc(&ibexdwire.Request{Op: ibexdwire.OpDestroyQP, QPN: q.num})
	q.d.releaseCQ(q.sendCQ)
	q.d.releaseCQ(q.recvCQ)
	q.seg.Close()
}
