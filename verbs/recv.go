package verbs

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/ibex-rdma/ibex/verbs/internal/wq"
)

// recvBegin returns the rsn of the receive at the head of the queue, or
// false when none is posted (the responder then sends an RNR NAK).
func (qp *QP) recvBegin() (uint64, bool) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.state == QPSErr || qp.state == QPSReset || qp.rq.n == 0 {
		return 0, false
	}
	return qp.rq.peek().rsn, true
}

// recvPlace writes src at off of receive rsn: WCLocLenErr if it does not
// fit, WCLocProtErr if an MR refuses, WCWRFlushErr if the receive is gone
// (flushed meanwhile).
func (qp *QP) recvPlace(rsn uint64, off uint64, src []byte) WCStatus {
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
	if _, ok := wq.PinAll(r.mrs); !ok || !wq.Writable(r.mrs) {
		if ok {
			wq.UnpinAll(r.mrs)
		}
		return WCLocProtErr
	}
	wq.Copy(wq.List(r.sge, r.mrs, off), wq.Flat(src))
	wq.UnpinAll(r.mrs)
	return WCSuccess
}

// recvComplete completes receive rsn. It returns false when the receive CQ
// overflowed; the caller must then move the QP to ERR with Fail (outside
// any lock of its own).
func (qp *QP) recvComplete(rsn uint64, st WCStatus, byteLen uint32, imm uint32, hasImm, write bool, srcQP uint32) bool {
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
	if st != WCSuccess {
		qp.ctr.recvErrs.Add(1)
	}
	ok := qp.recvCQ.push(&wc)
	qp.mu.Unlock()
	qp.respMu.Unlock()
	return ok
}

// flushRQ completes every queued receive request with WR_FLUSH_ERR if the
// QP is in ERR.
func (qp *QP) flushRQ() {
	qp.respMu.Lock()
	qp.mu.Lock()
	if qp.state == QPSErr {
		for qp.rq.n > 0 {
			r := qp.rq.peek()
			wc := WC{WRID: r.id, Status: WCWRFlushErr, Opcode: WCRecv, QPNum: qp.num}
			qp.rq.pop()
			qp.recvCQ.push(&wc)
		}
	}
	qp.mu.Unlock()
	qp.respMu.Unlock()
}

// remoteCheck validates an incoming request's rkey against the PD: the MR
// exists in this PD, grants need, and holds [va, va+n).
func (pd *PD) remoteCheck(rkey uint32, va uint64, n uint64, need Access) error {
	mr := pd.lookupRKey(rkey)
	switch {
	case mr == nil:
		return fmt.Errorf("rkey %#x is not a registered MR of this PD", rkey)
	case mr.reg.Access&need == 0:
		return fmt.Errorf("rkey %#x grants %v, not %v", rkey, mr.reg.Access, need)
	}
	if _, ok := mr.reg.Slice(va, n); !ok {
		return fmt.Errorf("[%#x, +%d) is outside MR rkey %#x [%#x, +%d)", va, n, rkey, mr.reg.Addr, len(mr.reg.Buf))
	}
	return nil
}

// remote resolves and pins [va, va+n) of rkey for need; the caller unpins.
func (pd *PD) remote(rkey uint32, va uint64, n uint64, need Access) (*MR, []byte) {
	mr := pd.lookupRKey(rkey)
	if mr == nil || mr.reg.Access&need == 0 {
		return nil, nil
	}
	b, ok := mr.reg.Slice(va, n)
	if !ok || !mr.reg.Pin() {
		return nil, nil
	}
	return mr, b
}

// remoteWrite copies src to [va, ...) of rkey; false if the access fails.
func (pd *PD) remoteWrite(rkey uint32, va uint64, src []byte) bool {
	mr, b := pd.remote(rkey, va, uint64(len(src)), AccessRemoteWrite)
	if mr == nil {
		return false
	}
	copy(b, src)
	mr.reg.Unpin()
	return true
}

// remoteRead copies [va, ...) of rkey into dst; false if the access fails.
func (pd *PD) remoteRead(rkey uint32, va uint64, dst []byte) bool {
	mr, b := pd.remote(rkey, va, uint64(len(dst)), AccessRemoteRead)
	if mr == nil {
		return false
	}
	copy(dst, b)
	mr.reg.Unpin()
	return true
}

// remoteAtomic executes an atomic on the 8-byte word at va of rkey, atomic
// against the CPU too, and returns the original value.
func (pd *PD) remoteAtomic(rkey uint32, va uint64, op Opcode, compareAdd, swap uint64) (uint64, bool) {
	if va&7 != 0 {
		return 0, false
	}
	mr, b := pd.remote(rkey, va, 8, AccessRemoteAtomic)
	if mr == nil {
		return 0, false
	}
	defer mr.reg.Unpin()
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
