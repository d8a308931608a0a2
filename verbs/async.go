package verbs

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Issuer is implemented by a QPDriver whose transport completes requests
// asynchronously (a network provider running a protocol engine). verbs
// hands it every request in posting order while the QP is in RTS; the
// transport copies what it needs (SendWQE.CopyTo) and later reports each
// completion, in order, with QP.CompleteSend. Execute is not called.
type Issuer interface {
	Issue(w *SendWQE)
}

// StateNotifier is implemented by a QPDriver that wants to hear about state
// changes: RTR and RTS to start its engine, ERR and RESET to stop it. It is
// called after the change, with no verbs lock held, with the attributes in
// force after it.
type StateNotifier interface {
	StateChanged(from, to QPState, attr QPAttr)
}

// RecvNotifier is implemented by a QPDriver that wants to hear about posted
// receives (to grant its peer credits). RecvPosted is called after a
// PostRecv that added receives, with no verbs lock held; QP.RecvPosted
// gives the count.
type RecvNotifier interface {
	RecvPosted()
}

// issueLocked hands new requests to the Issuer while this goroutine holds
// the send token. Called with qp.mu held; returns with it released.
func (qp *QP) issueLocked() {
	for {
		if qp.state == QPSErr {
			qp.flushSQLocked()
		}
		if qp.state != QPSRTS || qp.sq.issued == qp.sq.n {
			qp.idleLocked()
			return
		}
		w := qp.sq.at(qp.sq.issued)
		qp.sq.issued++
		qp.mu.Unlock()
		// The slot stays ours while we hold the token: only the token
		// holder flushes, and a slot is reused only after completion.
		qp.issuer.Issue(w)
		qp.mu.Lock()
	}
}

// SSN is the request's send sequence number, unique within its QP; it
// names the request in QP.CompleteSend.
func (w *SendWQE) SSN() uint64 { return w.ssn }

// Signaled reports whether success produces a completion.
func (w *SendWQE) Signaled() bool { return w.signaled }

// Flags are the request's send flags.
func (w *SendWQE) Flags() SendFlags { return w.flags }

// CompareAdd and Swap are an atomic's operands.
func (w *SendWQE) CompareAdd() uint64 { return w.cmp }

// Swap is CMP_AND_SWP's swap value.
func (w *SendWQE) Swap() uint64 { return w.swap }

// SendWork is a transport's own copy of a send request, taken at Issue, so
// the transport never reads queue memory that verbs may reuse after a
// flush. Init it once with the QP's limits; CopyTo allocates nothing.
type SendWork struct {
	SSN        uint64
	ID         uint64
	Op         Opcode
	Flags      SendFlags
	Imm        uint32
	RemoteAddr uint64
	RKey       uint32
	CompareAdd uint64
	Swap       uint64
	Length     uint64
	sge        []SGE
	mrs        []*MR
	inline     []byte
	inl        bool
}

// Init sizes the copy for a QP's capabilities.
func (s *SendWork) Init(cp QPCap) {
	s.sge = make([]SGE, 0, cp.MaxSendSGE)
	s.mrs = make([]*MR, 0, cp.MaxSendSGE)
	s.inline = make([]byte, 0, cp.MaxInlineData)
}

// CopyTo copies the request into s.
func (w *SendWQE) CopyTo(s *SendWork) {
	s.SSN, s.ID, s.Op, s.Flags, s.Imm = w.ssn, w.id, w.op, w.flags, w.imm
	s.RemoteAddr, s.RKey, s.CompareAdd, s.Swap, s.Length = w.raddr, w.rkey, w.cmp, w.swap, w.length
	s.sge = append(s.sge[:0], w.sge...)
	s.mrs = append(s.mrs[:0], w.mrs...)
	s.inl = w.flags&SendInline != 0
	s.inline = s.inline[:0]
	if s.inl {
		s.inline = append(s.inline, w.inline[:w.length]...)
	}
}

// Slices appends to dst the local memory of the message bytes [off, off+n)
// and pins the MRs it lies in; Unpin must follow when ok. write asks for
// memory the transport will write (a READ response): it fails, like a
// dead MR, when an MR lacks LOCAL_WRITE (LOC_PROT_ERR). A transport uses
// it to hand the memory to a system call (process_vm_writev) without a
// bounce copy.
func (s *SendWork) Slices(off, n uint64, dst [][]byte, write bool) ([][]byte, bool) {
	if write && !localWritable(s.mrs) {
		return dst, false
	}
	if _, ok := pinAll(s.mrs); !ok {
		return dst, false
	}
	if s.inl {
		return append(dst, s.inline[off:off+n]), true
	}
	c := s.cursorAt(off)
	for n > 0 {
		b := c.peek()
		if len(b) == 0 {
			break
		}
		if uint64(len(b)) > n {
			b = b[:n]
		}
		dst = append(dst, b)
		n -= uint64(len(b))
		c.advance(len(b))
	}
	return dst, true
}

// Unpin ends the access started by a successful Slices.
func (s *SendWork) Unpin() { unpinAll(s.mrs) }

// Release drops the copy's MR references.
func (s *SendWork) Release() {
	clear(s.mrs)
	s.mrs = s.mrs[:0]
}

func (s *SendWork) cursorAt(off uint64) sgCursor {
	if s.inl {
		return sgCursor{flat: s.inline[off:]}
	}
	c := sgCursor{sge: s.sge, mrs: s.mrs}
	for c.i < len(c.sge) && off >= uint64(c.sge[c.i].Length) {
		off -= uint64(c.sge[c.i].Length)
		c.i++
	}
	c.off = uint32(off)
	return c
}

// Gather copies the message bytes [off, off+len(dst)) into dst. It returns
// false when a local MR was deregistered since posting (LOC_PROT_ERR).
func (s *SendWork) Gather(off uint64, dst []byte) bool {
	if _, ok := pinAll(s.mrs); !ok {
		return false
	}
	copySG(sgCursor{flat: dst}, s.cursorAt(off))
	unpinAll(s.mrs)
	return true
}

// Scatter places READ response bytes at off of the local SGE list; false
// when an MR is gone or lacks LOCAL_WRITE (LOC_PROT_ERR).
func (s *SendWork) Scatter(off uint64, src []byte) bool {
	if !localWritable(s.mrs) {
		return false
	}
	if _, ok := pinAll(s.mrs); !ok {
		return false
	}
	copySG(s.cursorAt(off), sgCursor{flat: src})
	unpinAll(s.mrs)
	return true
}

// AtomicResult stores an atomic's original value in the local buffer.
func (s *SendWork) AtomicResult(orig uint64) bool {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], orig)
	return s.Scatter(0, b[:])
}

// CompleteSend reports the completion of the oldest outstanding request,
// named by its ssn; a completion for a request verbs already flushed is
// ignored. An error status moves the QP to ERR and flushes the rest.
func (qp *QP) CompleteSend(ssn uint64, st WCStatus, byteLen uint32, cause error) {
	qp.mu.Lock()
	if qp.sq.n == 0 || qp.sq.at(0).ssn != ssn || qp.sq.issued == 0 {
		qp.mu.Unlock()
		return
	}
	w := qp.sq.at(0)
	wc := WC{WRID: w.id, Status: st, Opcode: wcOpcodeOf(w.op), ByteLen: byteLen, QPNum: qp.num}
	signaled := w.signaled
	id, op := w.id, w.op
	qp.sq.pop()
	qp.sq.issued--
	qp.ctr.sends.Add(1) // before the completion is visible
	var failCause error
	if st != WCSuccess {
		failCause = fmt.Errorf("qp %#x: wr %#x %v completed with %v", qp.num, id, op, st)
		if cause != nil {
			failCause = fmt.Errorf("%w: %w", failCause, cause)
		}
		qp.sendCQ.push(&wc)
	} else if signaled && !qp.sendCQ.push(&wc) {
		failCause = fmt.Errorf("send cq overflowed; completion of wr %#x lost", wc.WRID)
	}
	from := qp.state
	entered := failCause != nil && qp.enterErrLocked(failCause)
	qp.mu.Unlock()
	if entered {
		qp.afterErr(from, failCause, st == WCSuccess)
	}
}

// afterErr finishes a move to ERR that happened outside Modify: the event
// (when no error completion reported it), the transport's notification, and
// both flushes. No lock held.
func (qp *QP) afterErr(from QPState, cause error, postFatal bool) {
	if postFatal {
		qp.ctx.PostEvent(AsyncEvent{Type: EventQPFatal, QP: qp, Cause: cause})
	}
	if qp.notify != nil {
		qp.notify.StateChanged(from, QPSErr, qp.Query())
	}
	qp.flushRQ()
	qp.kick()
}

// RecvBegin returns the rsn of the receive at the head of the queue, or
// false when none is posted (the responder then sends an RNR NAK).
func (qp *QP) RecvBegin() (uint64, bool) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.state == QPSErr || qp.state == QPSReset || qp.rq.n == 0 {
		return 0, false
	}
	return qp.rq.peek().rsn, true
}

// RecvPlace writes src at off of receive rsn: WCLocLenErr if it does not
// fit, WCLocProtErr if an MR refuses, WCWRFlushErr if the receive is gone
// (flushed meanwhile).
func (qp *QP) RecvPlace(rsn uint64, off uint64, src []byte) WCStatus {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	r := qp.rq.peek()
	if r == nil || r.rsn != rsn {
		return WCWRFlushErr
	}
	if off+uint64(len(src)) > r.length {
		return WCLocLenErr
	}
	if len(src) == 0 {
		return WCSuccess
	}
	if _, ok := pinAll(r.mrs); !ok || !localWritable(r.mrs) {
		if ok {
			unpinAll(r.mrs)
		}
		return WCLocProtErr
	}
	c := sgCursor{sge: r.sge, mrs: r.mrs}
	for c.i < len(c.sge) && off >= uint64(c.sge[c.i].Length) {
		off -= uint64(c.sge[c.i].Length)
		c.i++
	}
	c.off = uint32(off)
	copySG(c, sgCursor{flat: src})
	unpinAll(r.mrs)
	return WCSuccess
}

// RecvComplete completes receive rsn. It returns false when the receive CQ
// overflowed; the caller must then move the QP to ERR with Fail (outside
// any lock of its own).
func (qp *QP) RecvComplete(rsn uint64, st WCStatus, byteLen uint32, imm uint32, hasImm, write bool, srcQP uint32) bool {
	qp.respMu.Lock()
	qp.mu.Lock()
	r := qp.rq.peek()
	if r == nil || r.rsn != rsn {
		qp.mu.Unlock()
		qp.respMu.Unlock()
		return true
	}
	wc := WC{WRID: r.id, Status: st, Opcode: WCRecv, ByteLen: byteLen, QPNum: qp.num, SrcQP: srcQP}
	if write {
		wc.Opcode = WCRecvRDMAWithImm
	}
	if hasImm {
		wc.Flags, wc.Imm = WCWithImm, imm
	}
	qp.rq.pop()
	qp.ctr.recvs.Add(1)
	ok := qp.recvCQ.push(&wc)
	qp.mu.Unlock()
	qp.respMu.Unlock()
	return ok
}

// RemoteCheck validates an incoming request's rkey against the PD: the MR
// exists in this PD, grants need, and holds [va, va+n).
func (pd *PD) RemoteCheck(rkey uint32, va uint64, n uint64, need Access) error {
	mr := pd.LookupRKey(rkey)
	switch {
	case mr == nil:
		return fmt.Errorf("rkey %#x is not a registered MR of this PD", rkey)
	case mr.access&need == 0:
		return fmt.Errorf("rkey %#x grants %v, not %v", rkey, mr.access, need)
	}
	if _, ok := mr.Slice(va, n); !ok {
		return fmt.Errorf("[%#x, +%d) is outside MR rkey %#x [%#x, +%d)", va, n, rkey, mr.addr, len(mr.buf))
	}
	return nil
}

// remote resolves and pins [va, va+n) of rkey for need; the caller unpins.
func (pd *PD) remote(rkey uint32, va uint64, n uint64, need Access) (*MR, []byte) {
	mr := pd.LookupRKey(rkey)
	if mr == nil || mr.access&need == 0 {
		return nil, nil
	}
	b, ok := mr.Slice(va, n)
	if !ok || !mr.Pin() {
		return nil, nil
	}
	return mr, b
}

// RemoteWrite copies src to [va, ...) of rkey; false if the access fails.
func (pd *PD) RemoteWrite(rkey uint32, va uint64, src []byte) bool {
	mr, b := pd.remote(rkey, va, uint64(len(src)), AccessRemoteWrite)
	if mr == nil {
		return false
	}
	copy(b, src)
	mr.Unpin()
	return true
}

// RemoteRead copies [va, ...) of rkey into dst; false if the access fails.
func (pd *PD) RemoteRead(rkey uint32, va uint64, dst []byte) bool {
	mr, b := pd.remote(rkey, va, uint64(len(dst)), AccessRemoteRead)
	if mr == nil {
		return false
	}
	copy(dst, b)
	mr.Unpin()
	return true
}

// RemoteAtomic executes an atomic on the 8-byte word at va of rkey, atomic
// against the CPU too, and returns the original value.
func (pd *PD) RemoteAtomic(rkey uint32, va uint64, op Opcode, compareAdd, swap uint64) (uint64, bool) {
	if va&7 != 0 {
		return 0, false
	}
	mr, b := pd.remote(rkey, va, 8, AccessRemoteAtomic)
	if mr == nil {
		return 0, false
	}
	defer mr.Unpin()
	p := (*uint64)(unsafe.Pointer(&b[0]))
	if op == WRAtomicFetchAndAdd {
		return atomic.AddUint64(p, compareAdd) - compareAdd, true
	}
	for {
		old := atomic.LoadUint64(p)
		if old != compareAdd || atomic.CompareAndSwapUint64(p, old, swap) {
			return old, true
		}
	}
}
