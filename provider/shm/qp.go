package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ibex-rdma/ibex/internal/shmem"
	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/verbs/driver"
)

// link is a QP's connection: its half, the peer and, once the peer
// announced it, the peer's half. Immutable; replaced whole.
type link struct {
	peer    *peer
	err     error // why peer is nil
	own     mem
	ownOff  uint64
	gen     uint64
	peerQPN uint32
	ph      mem // the peer's half, nil until announced
	pgen    uint64
	retired bool // the peer retired a half of this link (it was reset)
}

// Request phases.
const (
	phNew     = iota
	phStarted // a SEND partly in the ring
	phSent    // in the ring, waiting for the responder's ack
	phDone
)

type entry struct {
	ssn       uint64
	op        verbs.Opcode
	phase     uint8
	fallible  bool // the responder can still fail it: later one-sided requests wait
	atomicMsg bool
	seq       uint64 // message number in our ring
	sent      uint64 // SEND bytes in the ring so far
	status    verbs.WCStatus
	byteLen   uint32
	cause     error
}

// qpDriver is one QP's transport. The requester (mu) runs in the posting
// goroutine, the progress goroutine (acks, ring space) and the retry
// timer; the responder runs only in the progress goroutine. StateChanged
// never takes mu: verbs calls it from CompleteSend when an error moves the
// QP to ERR, and the requester calls CompleteSend holding mu.
type qpDriver struct {
	n    *node
	qp   driver.QP
	slot int

	link    atomic.Pointer[link]
	attr    atomic.Pointer[verbs.QPAttr]
	stopped atomic.Bool // ERR or RESET: issue nothing more

	mu          sync.Mutex
	works       []driver.SendWork
	ents        []entry
	head, next  uint64 // [head,next) started, [next,tail) waiting
	tail        uint64
	seq         uint64 // messages written to our ring
	consumed    uint64 // receives our messages consumed (credits used)
	fallibleOut int
	atomicsOut  int
	armed       bool
	armedSSN    uint64
	armedLost   bool // armed because the peer did not answer at all
	fired       bool // the timer fired for firedSSN
	firedSSN    uint64
	retries     int
	rnrs        int
	timer       *time.Timer
	iov         [][]byte
	rkCache     [4]rkCacheEntry
	rkNext      uint32

	// Responder state: the progress goroutine, and attach.
	rmu       sync.Mutex
	rsn       uint64
	inMsg     bool
	msgOff    uint64
	msgStatus verbs.WCStatus
	acked     uint64
}

func newQPDriver(n *node, qp driver.QP, slot int) *qpDriver {
	cp := qp.Cap()
	q := &qpDriver{n: n, qp: qp, slot: slot, works: make([]driver.SendWork, cp.MaxSendWR), ents: make([]entry, cp.MaxSendWR),
		iov: make([][]byte, 0, cp.MaxSendSGE+1)}
	for i := range q.works {
		q.works[i].Init(cp.MaxSendSGE, cp.MaxInlineData)
	}
	q.timer = time.AfterFunc(time.Hour, q.onTimer)
	q.timer.Stop()
	return q
}

func (q *qpDriver) Issue(w *driver.SendWQE) {
	q.mu.Lock()
	i := q.tail % uint64(len(q.ents))
	w.CopyTo(&q.works[i])
	q.ents[i] = entry{ssn: w.SSN, op: w.Op}
	q.tail++
	q.pumpLocked()
	q.mu.Unlock()
}

func (q *qpDriver) RecvPosted() {
	l := q.link.Load()
	if l == nil {
		return
	}
	publishMax(l.own.u64(hRecvPost), q.qp.RecvPosted())
}

func publishMax(w *atomic.Uint64, v uint64) {
	for {
		old := w.Load()
		if v <= old || w.CompareAndSwap(old, v) {
			return
		}
	}
}

func (q *qpDriver) StateChanged(from, to verbs.QPState, a verbs.QPAttr) {
	q.attr.Store(&a)
	switch to {
	case verbs.QPSRTR:
		if from == verbs.QPSInit {
			q.attach(a)
		}
	case verbs.QPSErr:
		q.stopped.Store(true)
	case verbs.QPSReset:
		q.stopped.Store(true)
		q.mu.Lock()
		q.detachLocked()
		q.mu.Unlock()
		return
	}
	if l := q.link.Load(); l != nil {
		l.own.u32(hState).Store(uint32(to))
	}
	if to == verbs.QPSRTS || to == verbs.QPSSQD {
		q.kick()
	}
}

func (q *qpDriver) Destroy() {
	q.stopped.Store(true)
	q.mu.Lock()
	q.detachLocked()
	q.timer.Stop()
	q.mu.Unlock()
	q.n.freeSlot(q.slot)
}

// kick has the progress goroutine serve this QP.
func (q *qpDriver) kick() { notify(q.n.m, uint32(q.slot)) }

// attach allocates our half at RTR, publishes it and announces it to the
// peer.
func (q *qpDriver) attach(a verbs.QPAttr) {
	n := q.n
	q.mu.Lock()
	defer q.mu.Unlock()
	q.detachLocked()
	q.stopped.Store(false)
	off, err := n.allocHalf()
	if err != nil {
		q.link.Store(&link{err: fmt.Errorf("shm: qp %#x: %w", q.qp.Num(), err)})
		return
	}
	own := n.m[off : off+halfSize]
	gen := halfGen.Add(1)
	own.u32(hOwnerQPN).Store(q.qp.Num())
	own.u32(hPeerQPN).Store(a.DestQPN)
	own.u32(hSlot).Store(uint32(q.slot))
	own.u32(hPD).Store(q.qp.PD().ID())
	own.u32(hState).Store(uint32(verbs.QPSRTR))
	own.u32(hAccess).Store(uint32(a.AccessFlags))
	own.u32(hMaxDest).Store(uint32(a.MaxDestRdAtomic))
	own.u32(hMinRNR).Store(uint32(a.MinRNRTimer))
	own.u32(hSlots).Store(ringSlots)
	own.u32(hSlotSize).Store(slotSize)
	own.u64(hGen).Store(gen)
	p, perr := n.peerFor(a.AH.DGID)
	l := &link{peer: p, err: perr, own: own, ownOff: off, gen: gen, peerQPN: a.DestQPN}
	n.mu.Lock()
	if p != nil {
		if pc, ok := n.pending[pendKey{gid: p.gid, peerQPN: a.DestQPN, qpn: q.qp.Num()}]; ok {
			delete(n.pending, pendKey{gid: p.gid, peerQPN: a.DestQPN, qpn: q.qp.Num()})
			if p.pin() {
				l.ph, l.pgen = p.m[pc.off:pc.off+halfSize], pc.gen
				p.unpin()
			}
		}
	}
	q.link.Store(l)
	n.mu.Unlock()
	q.RecvPosted()
	q.consumed, q.seq = 0, 0
	q.rmu.Lock()
	q.acked, q.inMsg = 0, false
	q.rmu.Unlock()
	if p != nil {
		_ = p.send(record(msgQPConn, q.qp.Num(), a.DestQPN, off, gen))
	}
}

// attachPeer installs the half the peer announced, if this QP is linked
// to that peer QP, and returns the new link; fresh says it replaced an
// earlier half of the peer (which then needs ours again). Called with
// n.mu held.
func (q *qpDriver) attachPeer(p *peer, owner uint32, off, gen uint64) (*link, bool) {
	for {
		l := q.link.Load()
		if l == nil || l.peer != p || l.peerQPN != owner || l.own == nil {
			return nil, false
		}
		if l.pgen == gen {
			return l, false
		}
		nl := *l
		nl.ph, nl.pgen = p.m[off:off+halfSize], gen
		if q.link.CompareAndSwap(l, &nl) {
			q.kick()
			return &nl, l.pgen != 0 || l.retired
		}
	}
}

// detachPeer forgets the peer's half when the peer retires it.
func (q *qpDriver) detachPeer(p *peer, gen uint64) {
	for {
		l := q.link.Load()
		if l == nil || l.peer != p || l.pgen != gen {
			return
		}
		q.waitAccess(0)
		nl := *l
		nl.ph, nl.pgen, nl.retired = nil, 0, true
		if q.link.CompareAndSwap(l, &nl) {
			q.kick()
			return
		}
	}
}

// detachLocked retires our half and tells the peer. Called at RESET,
// destroy and before a new RTR.
func (q *qpDriver) detachLocked() {
	q.clearLocked()
	l := q.link.Swap(nil)
	if l == nil || l.own == nil {
		return
	}
	l.own.u32(hState).Store(uint32(verbs.QPSReset))
	l.own.u64(hGen).Store(0)
	if l.peer != nil && l.peer.pin() {
		// The peer may be accessing our memory through this link: let it
		// finish before the link (and DeregMR's view of it) goes.
		if l.ph != nil {
			waitWord(l.ph.u64(hAccessing), func(v uint64) bool { return v == 0 })
		}
		l.peer.unpin()
		_ = l.peer.send(record(msgQPGone, q.qp.Num(), l.peerQPN, l.ownOff, l.gen))
	}
	q.n.retireHalf(l.ownOff)
}

// clearLocked drops every request: verbs has flushed or discarded them.
func (q *qpDriver) clearLocked() {
	for ; q.head != q.tail; q.head++ {
		q.works[q.head%uint64(len(q.works))].Release()
	}
	q.next = q.tail
	q.fallibleOut, q.atomicsOut, q.retries, q.rnrs = 0, 0, 0, 0
	q.armed = false
	q.timer.Stop()
}

// waitAccess waits until the peer is not touching our memory entry tag
// (tag 0: not touching anything) through this QP.
func (q *qpDriver) waitAccess(tag uint64) {
	l := q.link.Load()
	if l == nil || l.ph == nil || l.peer == nil || !l.peer.pin() {
		return
	}
	defer l.peer.unpin()
	w := l.ph.u64(hAccessing)
	if tag == 0 {
		waitWord(w, func(v uint64) bool { return v == 0 })
	} else {
		waitWord(w, func(v uint64) bool { return v != tag })
	}
}

func waitWord(w *atomic.Uint64, ok func(uint64) bool) {
	start := time.Now()
	for i := 0; !ok(w.Load()); i++ {
		if time.Since(start) > drainWait {
			return // a stopped or dying peer; its death handling takes over
		}
		if i < 1000 {
			continue
		}
		time.Sleep(10 * time.Microsecond)
	}
}

// peerDied moves the QP to ERR: its peer process is gone.
func (q *qpDriver) peerDied(cause error) {
	q.stopped.Store(true)
	q.qp.Fail(fmt.Errorf("qp %#x: %w", q.qp.Num(), cause), verbs.EventQPFatal, true)
}

func (q *qpDriver) onTimer() {
	q.mu.Lock()
	q.armed = false
	q.fired, q.firedSSN = true, q.armedSSN
	q.pumpLocked()
	q.mu.Unlock()
}

func (q *qpDriver) arm(d time.Duration, ssn uint64) {
	if !q.armed {
		q.armed, q.armedSSN, q.armedLost = true, ssn, false
		q.timer.Reset(d)
	}
}

// peerUsable reports whether the peer's QP answers requests.
func peerUsable(l *link) bool {
	if l.ph == nil || l.ph.u64(hGen).Load() != l.pgen {
		return false
	}
	switch verbs.QPState(l.ph.u32(hState).Load()) {
	case verbs.QPSRTR, verbs.QPSRTS, verbs.QPSSQD:
		return true
	}
	return false
}

// pumpLocked retires what the responder acknowledged and starts waiting
// requests, in order.
func (q *qpDriver) pumpLocked() {
	if q.stopped.Load() || q.head == q.tail {
		return
	}
	l := q.link.Load()
	if l == nil || l.peer == nil || !l.peer.pin() {
		q.lostLocked(l)
		return
	}
	defer l.peer.unpin()
	if q.armed && q.armedLost && q.head == q.next && portUp() && peerUsable(l) {
		// The peer has just become reachable (its half arrived): do not
		// wait out a timeout meant for a peer that was not there.
		q.armed = false
		q.timer.Stop()
	}
	wrote := false
	for !q.stopped.Load() {
		q.reapLocked(l)
		if q.stopped.Load() || q.next == q.tail || q.armed {
			break
		}
		progressed, w := q.startLocked(l)
		wrote = wrote || w
		if !progressed {
			break
		}
	}
	if wrote && l.ph != nil {
		shmClock.Add(1)
		notify(l.peer.m, l.ph.u32(hSlot).Load())
	}
	// A request in the peer's hands that is not acknowledged within the
	// timeout counts as a lost try (a stopped or unresponsive peer).
	if !q.stopped.Load() && q.head != q.next && !q.armed {
		if e := &q.ents[q.head%uint64(len(q.ents))]; e.phase == phSent || e.phase == phStarted {
			q.ackWaitLocked(l, e)
		}
	}
}

// ackWaitLocked times the head request's ack. Each timeout without it is
// a retry, counted against retry_cnt (the ring does not lose messages, so
// a retry is only more waiting; it fails a request the peer never
// serves: a stopped process, a port down).
func (q *qpDriver) ackWaitLocked(l *link, e *entry) {
	a := q.attr.Load()
	to := verbs.AckTimeout(a.Timeout)
	fired := q.fired && q.firedSSN == e.ssn
	q.fired = false
	if to == 0 {
		q.arm(10*time.Millisecond, e.ssn)
		return
	}
	if fired {
		if q.retries >= int(a.RetryCnt) {
			if e.fallible {
				q.fallibleOut--
			}
			if e.atomicMsg {
				q.atomicsOut--
			}
			e.phase, e.status = phDone, verbs.WCRetryExcErr
			e.cause = fmt.Errorf("shm: peer qp %#x did not serve message %d: no response after %d retries", l.peerQPN, e.seq, q.retries)
			q.reapLocked(l)
			return
		}
		q.retries++
		q.qp.AddStats(verbs.QPStats{Retries: 1})
	}
	q.arm(to, e.ssn)
}

func (q *qpDriver) reapLocked(l *link) {
	shmClock.Load()
	var acked, errSeq uint64
	var errSt uint32
	if l.ph != nil && l.ph.u64(hGen).Load() == l.pgen {
		acked = l.ph.u64(hAcked).Load()
		errSeq = l.ph.u64(hErrSeq).Load()
		errSt = l.ph.u32(hErrStatus).Load()
	}
	n := uint64(len(q.ents))
	for q.head != q.next {
		i := q.head % n
		e := &q.ents[i]
		if e.phase == phSent {
			if e.seq > acked || acked > q.seq {
				break
			}
			q.finishSentLocked(l, e, i, e.seq == errSeq, errSt)
		}
		if e.phase != phDone {
			break
		}
		q.works[i].Release()
		q.head++
		if e.status == verbs.WCSuccess {
			q.retries, q.rnrs = 0, 0
		}
		if q.armed && q.armedSSN == e.ssn {
			q.armed = false
			q.timer.Stop()
		}
		q.qp.CompleteSend(e.ssn, e.status, e.byteLen, e.cause)
		if e.status != verbs.WCSuccess {
			q.stopped.Store(true)
			return
		}
	}
}

func (q *qpDriver) finishSentLocked(l *link, e *entry, i uint64, failed bool, errSt uint32) {
	w := &q.works[i]
	if e.fallible {
		q.fallibleOut--
	}
	if e.atomicMsg {
		q.atomicsOut--
	}
	e.phase = phDone
	if failed {
		e.status, e.cause = remoteStatus(errSt), fmt.Errorf("shm: the responder (qp %#x) failed message %d", l.peerQPN, e.seq)
		return
	}
	switch e.op {
	case verbs.WRSend, verbs.WRSendWithImm:
		e.byteLen = uint32(w.Length)
	case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
		orig := l.ph.u64(hResults + 8*(e.seq%resultSlots)).Load()
		e.byteLen = 8
		if !w.AtomicResult(orig) {
			e.status, e.cause = verbs.WCLocProtErr, errors.New("shm: the atomic's local buffer is deregistered or lacks LOCAL_WRITE")
		}
	}
}

func remoteStatus(st uint32) verbs.WCStatus {
	switch st {
	case stInvReq:
		return verbs.WCRemInvReqErr
	case stAccess:
		return verbs.WCRemAccessErr
	default:
		return verbs.WCRemOpErr
	}
}

// lostLocked: the peer does not answer (not connected, not ready, gone,
// or our port is down). Wait a timeout and try again, retry_cnt times.
func (q *qpDriver) lostLocked(l *link) {
	if q.armed || q.next == q.tail {
		return
	}
	e := &q.ents[q.next%uint64(len(q.ents))]
	a := q.attr.Load()
	to := verbs.AckTimeout(a.Timeout)
	if q.head != q.next || to == 0 {
		q.arm(max(to, time.Millisecond), e.ssn)
		return
	}
	if q.retries >= int(a.RetryCnt) {
		why := "no link"
		switch {
		case !portUp():
			why = "the port is down"
		case l == nil:
		case l.peer == nil:
			why = l.err.Error()
		case l.ph == nil:
			why = fmt.Sprintf("peer qp %#x has not connected to this QP", l.peerQPN)
		default:
			why = fmt.Sprintf("peer qp %#x is not ready to receive", l.peerQPN)
		}
		e.phase, e.status = phDone, verbs.WCRetryExcErr
		e.cause = fmt.Errorf("shm: no response after %d retries: %s", q.retries, why)
		q.next++
		q.reapNoLinkLocked() // head == next: nothing else to retire
		return
	}
	q.retries++
	q.qp.AddStats(verbs.QPStats{Retries: 1})
	q.arm(to, e.ssn)
	q.armedLost = true
}

func (q *qpDriver) reapNoLinkLocked() {
	for q.head != q.next {
		i := q.head % uint64(len(q.ents))
		e := &q.ents[i]
		if e.phase != phDone {
			return
		}
		q.works[i].Release()
		q.head++
		q.qp.CompleteSend(e.ssn, e.status, e.byteLen, e.cause)
		if e.status != verbs.WCSuccess {
			q.stopped.Store(true)
			return
		}
	}
}

// rnrLocked: no receive credit. Wait the responder's RNR timer, rnr_retry
// times (7: forever).
func (q *qpDriver) rnrLocked(l *link, e *entry) {
	if q.head != q.next {
		return // acks of earlier requests will come and pump again
	}
	a := q.attr.Load()
	q.qp.AddStats(verbs.QPStats{RNRNaks: 1})
	if a.RNRRetry != 7 && q.rnrs >= int(a.RNRRetry) {
		e.phase, e.status = phDone, verbs.WCRNRRetryExcErr
		e.cause = fmt.Errorf("shm: peer qp %#x had no receive posted after %d RNR retries", l.peerQPN, q.rnrs)
		q.next++
		return
	}
	q.rnrs++
	q.arm(verbs.RNRDelay(uint8(l.ph.u32(hMinRNR).Load())), e.ssn)
}

func (q *qpDriver) credits(l *link) uint64 {
	posted := l.ph.u64(hRecvPost).Load()
	if posted < q.consumed {
		return 0
	}
	return posted - q.consumed
}

// ringFree is the number of free slots in our ring.
func (q *qpDriver) ringFree(l *link) uint64 {
	head, tail := l.own.u64(hHead).Load(), l.ph.u64(hTail).Load()
	if head-tail > ringSlots {
		return 0
	}
	return ringSlots - (head - tail)
}

// slot returns ring slot k of our half.
func slotAt(h mem, k uint64) mem {
	off := hRing + (k%ringSlots)*slotSize
	return h[off : off+slotSize]
}

// startLocked starts the request at next. It reports whether it made
// progress and whether it wrote to the ring.
func (q *qpDriver) startLocked(l *link) (progressed, wrote bool) {
	n := uint64(len(q.ents))
	i := q.next % n
	e, w := &q.ents[i], &q.works[i]
	if !portUp() || !peerUsable(l) {
		q.lostLocked(l)
		return false, false
	}
	done := func(st verbs.WCStatus, byteLen uint32, cause error) (bool, bool) {
		e.phase, e.status, e.byteLen, e.cause = phDone, st, byteLen, cause
		q.next++
		return true, wrote
	}
	switch e.op {
	case verbs.WRSend, verbs.WRSendWithImm:
		if e.phase == phNew {
			if q.credits(l) == 0 {
				q.rnrLocked(l, e)
				return e.phase == phDone, false
			}
			e.fallible = true
		}
		for e.phase != phSent {
			if q.ringFree(l) == 0 {
				return false, wrote
			}
			head := l.own.u64(hHead).Load()
			s := slotAt(l.own, head)
			first := e.phase == phNew
			chunk := min(w.Length-e.sent, slotPayload)
			if !w.Gather(e.sent, s[slotHdr:slotHdr+chunk]) {
				if first {
					return done(verbs.WCLocProtErr, 0, errors.New("shm: a local SGE's MR was deregistered"))
				}
				e.fallible = false
				q.fallibleOut--
				return done(verbs.WCLocProtErr, 0, errors.New("shm: a local SGE's MR was deregistered mid-message"))
			}
			var flags uint8
			if first {
				q.seq++
				q.consumed++
				q.fallibleOut++
				e.seq, e.phase, flags = q.seq, phStarted, flagFirst
			}
			e.sent += chunk
			if e.sent == w.Length {
				flags |= flagLast
				e.phase = phSent
			}
			if e.op == verbs.WRSendWithImm {
				flags |= flagImm
			}
			writeSlot(s, msgSend, flags, uint32(chunk), e.seq, w.Length, w.Imm)
			l.own.u64(hHead).Store(head + 1)
			wrote = true
		}
		q.next++
		return true, wrote

	case verbs.WRRDMAWriteWithImm:
		if q.fallibleOut > 0 {
			return false, false
		}
		if q.credits(l) == 0 {
			q.rnrLocked(l, e)
			return e.phase == phDone, false
		}
		if q.ringFree(l) == 0 {
			return false, false
		}
		if st, cause := q.oneSided(l, e, w); st != verbs.WCSuccess {
			return done(st, 0, cause)
		}
		q.seq++
		q.consumed++
		e.seq, e.phase = q.seq, phSent
		head := l.own.u64(hHead).Load()
		writeSlot(slotAt(l.own, head), msgWriteImm, flagFirst|flagLast|flagImm, 0, e.seq, w.Length, w.Imm)
		l.own.u64(hHead).Store(head + 1)
		q.next++
		return true, true

	case verbs.WRRDMAWrite, verbs.WRRDMARead, verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
		isRdAtomic := e.op != verbs.WRRDMAWrite
		if isRdAtomic && q.attr.Load().MaxQPRdAtomic == 0 {
			if q.head != q.next {
				return false, false
			}
			return done(verbs.WCLocQPOpErr, 0, fmt.Errorf("shm: %v with max_rd_atomic 0", e.op))
		}
		if e.op == verbs.WRAtomicCmpAndSwp || e.op == verbs.WRAtomicFetchAndAdd {
			st, cause, queued := q.atomicViaTarget(l, e, w)
			switch {
			case queued:
				q.next++
				return true, true
			case cause == errWait:
				return false, false
			case st != verbs.WCSuccess || cause != nil:
				return done(st, 0, cause)
			}
			if q.fallibleOut > 0 || q.atomicsOut > 0 {
				return false, false
			}
		} else if q.fallibleOut > 0 {
			return false, false
		}
		st, cause := q.oneSided(l, e, w)
		if st != verbs.WCSuccess {
			return done(st, 0, cause)
		}
		var bl uint32
		if e.op != verbs.WRRDMAWrite {
			bl = uint32(w.Length)
		}
		return done(verbs.WCSuccess, bl, nil)
	}
	return done(verbs.WCLocQPOpErr, 0, fmt.Errorf("shm: opcode %v not supported", e.op))
}

func writeSlot(s mem, op, flags uint8, n uint32, seq, total uint64, imm uint32) {
	s[sOp], s[sFlags] = op, flags
	binary.LittleEndian.PutUint32(s[sLen:], n)
	binary.LittleEndian.PutUint64(s[sSeq:], seq)
	binary.LittleEndian.PutUint64(s[sTotal:], total)
	binary.LittleEndian.PutUint32(s[sImm:], imm)
}

// respChecks applies the responder QP's own rules (published in its
// half) to a one-sided request; a failure is the responder's invalid
// request.
func respChecks(l *link, op verbs.Opcode, raddr uint64) (verbs.Access, string) {
	acc := verbs.Access(l.ph.u32(hAccess).Load())
	var need verbs.Access
	switch op {
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		need = verbs.AccessRemoteWrite
	case verbs.WRRDMARead:
		need = verbs.AccessRemoteRead
	default:
		need = verbs.AccessRemoteAtomic
	}
	if acc&need == 0 {
		return need, fmt.Sprintf("%v: the QP's access flags (%v) lack %v", op, acc, need)
	}
	if op != verbs.WRRDMAWrite && op != verbs.WRRDMAWriteWithImm && l.ph.u32(hMaxDest).Load() == 0 {
		return need, fmt.Sprintf("%v: max_dest_rd_atomic is 0", op)
	}
	if (op == verbs.WRAtomicCmpAndSwp || op == verbs.WRAtomicFetchAndAdd) && raddr&7 != 0 {
		return need, fmt.Sprintf("%v: remote address %#x is not 8-byte aligned", op, raddr)
	}
	return need, ""
}

// respFail fails a request for a responder-side reason and tells the
// responder, whose QP then moves to ERR as if it had found the error.
func (q *qpDriver) respFail(l *link, st uint32, why string) (verbs.WCStatus, error) {
	cause := fmt.Errorf("shm: qp %#x: %s", l.peerQPN, why)
	head := l.own.u64(hHead).Load()
	for i := 0; q.ringFree(l) == 0 && i < 10000; i++ {
		time.Sleep(time.Microsecond)
	}
	if q.ringFree(l) > 0 {
		s := slotAt(l.own, head)
		msg := why
		if len(msg) > slotPayload {
			msg = msg[:slotPayload]
		}
		k := copy(s[slotHdr:], msg)
		writeSlot(s, msgReqErr, flagFirst|flagLast, uint32(k), 0, 0, st)
		l.own.u64(hHead).Store(head + 1)
		shmClock.Add(1)
		notify(l.peer.m, l.ph.u32(hSlot).Load())
	}
	return remoteStatus(st), cause
}

// oneSided moves the bytes of a WRITE, READ or atomic (or a
// WRITE_WITH_IMM's data) between our memory and the peer's, with no code
// running in the peer.
func (q *qpDriver) oneSided(l *link, e *entry, w *driver.SendWork) (verbs.WCStatus, error) {
	need, why := respChecks(l, e.op, w.RemoteAddr)
	if why != "" {
		return q.respFail(l, stInvReq, "invalid request: "+why)
	}
	atomicOp := e.op == verbs.WRAtomicCmpAndSwp || e.op == verbs.WRAtomicFetchAndAdd
	n := w.Length
	if atomicOp {
		n = 8
	} else if n == 0 {
		return verbs.WCSuccess, nil // zero-length RDMA checks no rkey (IBA 9.7.4.1.5)
	}
	p := l.peer
	r, why := q.lookup(l, w.RKey, w.RemoteAddr, n, need)
	if why != "" {
		return q.respFail(l, stAccess, fmt.Sprintf("remote access error for %v: %s", e.op, why))
	}
	if atomicOp || e.op == verbs.WRRDMARead {
		if _, ok := w.Slices(0, min(n, w.Length), q.iov[:0], true); !ok {
			return verbs.WCLocProtErr, fmt.Errorf("shm: wr %#x %v: a local SGE's MR lacks LOCAL_WRITE or is deregistered", w.ID, e.op)
		}
		w.Unpin()
	}
	acc := l.own.u64(hAccessing)
	acc.Store(accessTag(r.idx, r.state>>1))
	defer acc.Store(0)
	if !p.live(&r) {
		return q.respFail(l, stAccess, fmt.Sprintf("remote access error for %v: rkey %#x was deregistered", e.op, w.RKey))
	}
	locProt := func() (verbs.WCStatus, error) {
		return verbs.WCLocProtErr, fmt.Errorf("shm: wr %#x %v: a local SGE's MR lacks LOCAL_WRITE or is deregistered", w.ID, e.op)
	}
	if r.kind == kindPool {
		start := r.pool + (w.RemoteAddr - r.va)
		if r.pool < poolStart || start+n > uint64(len(p.m)) || start+n < start {
			return verbs.WCRemAccessErr, fmt.Errorf("shm: peer pid %d: key table entry for rkey %#x points outside its pool", p.pid, w.RKey)
		}
		target := p.m[start : start+n]
		switch e.op {
		case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
			if !w.Gather(0, target) {
				return locProt()
			}
		case verbs.WRRDMARead:
			if !w.Scatter(0, target) {
				return locProt()
			}
		default:
			ptr := (*uint64)(unsafe.Pointer(&target[0]))
			var old uint64
			if e.op == verbs.WRAtomicFetchAndAdd {
				old = atomic.AddUint64(ptr, w.CompareAdd) - w.CompareAdd
			} else {
				for {
					old = atomic.LoadUint64(ptr)
					if old != w.CompareAdd || atomic.CompareAndSwapUint64(ptr, old, w.Swap) {
						break
					}
				}
			}
			if !w.AtomicResult(old) {
				return locProt()
			}
		}
		return verbs.WCSuccess, nil
	}
	// Ordinary memory of the peer process.
	write := e.op == verbs.WRRDMAWrite || e.op == verbs.WRRDMAWriteWithImm
	iov, ok := w.Slices(0, n, q.iov[:0], !write)
	if !ok {
		return locProt()
	}
	var err error
	at := r.pool + (w.RemoteAddr - r.va) // the process address (checked against the MR's bounds)
	if write {
		err = shmem.WriteTo(p.pid, at, iov)
	} else {
		err = shmem.ReadFrom(p.pid, at, iov)
	}
	clear(iov)
	w.Unpin()
	if err != nil {
		return verbs.WCRemAccessErr, fmt.Errorf("shm: %w", err)
	}
	return verbs.WCSuccess, nil
}

// atomicViaTarget sends an atomic on ordinary (non-pool) memory to the
// responder, which executes it with sync/atomic on its own memory: no
// other process can do that atomically. It reports queued when it did.
// For pool memory it returns (Success, nil, false): run it one-sided.
func (q *qpDriver) atomicViaTarget(l *link, e *entry, w *driver.SendWork) (verbs.WCStatus, error, bool) {
	need, why := respChecks(l, e.op, w.RemoteAddr)
	if why != "" {
		st, cause := q.respFail(l, stInvReq, "invalid request: "+why)
		return st, cause, false
	}
	r, why := q.lookup(l, w.RKey, w.RemoteAddr, 8, need)
	if why != "" {
		st, cause := q.respFail(l, stAccess, fmt.Sprintf("remote access error for %v: %s", e.op, why))
		return st, cause, false
	}
	if r.kind == kindPool {
		return verbs.WCSuccess, nil, false
	}
	if q.atomicsOut >= resultSlots || q.ringFree(l) == 0 {
		return verbs.WCSuccess, errWait, false
	}
	if _, ok := w.Slices(0, 8, q.iov[:0], true); !ok {
		return verbs.WCLocProtErr, fmt.Errorf("shm: wr %#x %v: the local buffer lacks LOCAL_WRITE or is deregistered", w.ID, e.op), false
	}
	w.Unpin()
	q.seq++
	q.atomicsOut++
	q.fallibleOut++
	e.seq, e.phase, e.fallible, e.atomicMsg = q.seq, phSent, true, true
	head := l.own.u64(hHead).Load()
	s := slotAt(l.own, head)
	writeSlot(s, msgAtomic, flagFirst|flagLast, 0, e.seq, 8, uint32(e.op))
	binary.LittleEndian.PutUint64(s[sRAddr:], w.RemoteAddr)
	binary.LittleEndian.PutUint32(s[sRKey:], w.RKey)
	binary.LittleEndian.PutUint64(s[sCmp:], w.CompareAdd)
	binary.LittleEndian.PutUint64(s[sSwap:], w.Swap)
	l.own.u64(hHead).Store(head + 1)
	return verbs.WCSuccess, nil, true
}

// shmClock carries happens-before through shared memory for the race
// detector, which does not see atomics on memory outside the Go heap:
// publishing a ring message or an ack adds to it, reading one loads it.
// Between processes it orders nothing; within one (two contexts, the
// tests) it states what the shared-memory atomics already guarantee.
var shmClock atomic.Uint64

// lookup is peer.lookup behind a small per-QP cache of key table
// indexes (no lock: the requester holds q.mu); every hit is validated
// against the entry itself.
func (q *qpDriver) lookup(l *link, rkey uint32, va, n uint64, need verbs.Access) (remoteMR, string) {
	pd := l.ph.u32(hPD).Load()
	for i := range q.rkCache {
		c := &q.rkCache[i]
		// A live entry never changes: an unchanged state word means the
		// cached copy is still the entry.
		if c.rkey == rkey && c.peer == l.peer && l.peer.live(&c.r) {
			return c.r.check(rkey, pd, va, n, need)
		}
	}
	r, why := l.peer.lookup(rkey, pd, va, n, need)
	if r.state != 0 {
		q.rkCache[q.rkNext%uint32(len(q.rkCache))] = rkCacheEntry{peer: l.peer, rkey: rkey, r: r}
		q.rkNext++
	}
	return r, why
}

type rkCacheEntry struct {
	peer *peer
	rkey uint32
	r    remoteMR
}

// errWait says: not now, try again when acks or ring space arrive.
var errWait = errors.New("wait")
