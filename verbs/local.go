package verbs

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// ExecuteLocal executes send WQE w of requester QP req directly against
// responder QP resp in the same address space, applying the IB responder
// rules: QP state, opcode permission (QP access flags, max_dest_rd_atomic,
// atomic alignment), receive availability (RNR), rkey, PD, MR access and
// bounds, and receive length. Bytes move with one copy from source to
// destination memory. resp == nil means the destination does not exist.
//
// It is the transport of providers whose QPs share memory with their peers
// (loopback); a responder error moves resp to ERR, as a real responder does.
func ExecuteLocal(w *SendWQE, req, resp *QP) Outcome {
	if resp == nil {
		return Outcome{Kind: Lost}
	}
	if i, ok := pinAll(w.mrs); !ok {
		return Outcome{Status: WCLocProtErr, Cause: fmt.Errorf("wr %#x %v: sge[%d]: MR lkey %#x was deregistered after posting", w.id, w.op, i, w.sge[i].LKey)}
	}
	defer unpinAll(w.mrs)
	resp.respMu.Lock()
	out, rf := respond(w, req, resp)
	resp.respMu.Unlock()
	if rf.cause != nil {
		resp.Fail(rf.cause, rf.ev, rf.post)
	}
	return out
}

// respFail is a responder-side error that moves the responder QP to ERR.
type respFail struct {
	cause error
	ev    AsyncEventType
	post  bool
}

func pinAll(mrs []*MR) (int, bool) {
	for i, mr := range mrs {
		if !mr.Pin() {
			unpinAll(mrs[:i])
			return i, false
		}
	}
	return 0, true
}

func unpinAll(mrs []*MR) {
	for _, mr := range mrs {
		mr.Unpin()
	}
}

func respond(w *SendWQE, req, resp *QP) (Outcome, respFail) {
	op := w.op
	needRecv := op == WRSend || op == WRSendWithImm || op == WRRDMAWriteWithImm

	resp.mu.Lock()
	st, dead := resp.state, resp.destroyed
	acc, maxDest, rnrTimer := resp.attr.AccessFlags, resp.attr.MaxDestRdAtomic, resp.attr.MinRNRTimer
	var r *RecvWQE
	if needRecv {
		r = resp.rq.peek()
	}
	resp.mu.Unlock()
	if dead || (st != QPSRTR && st != QPSRTS && st != QPSSQD) {
		return Outcome{Kind: Lost}, respFail{}
	}

	// Invalid request: the responder QP does not permit the operation.
	invReq := func(format string, args ...any) (Outcome, respFail) {
		cause := fmt.Errorf("qp %#x: invalid request from qp %#x: %s", resp.num, req.num, fmt.Sprintf(format, args...))
		return Outcome{Status: WCRemInvReqErr, Cause: cause}, respFail{cause: cause, ev: EventQPReqErr, post: true}
	}
	var need Access
	switch op {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		need = AccessRemoteWrite
	case WRRDMARead:
		need = AccessRemoteRead
	case WRAtomicCmpAndSwp, WRAtomicFetchAndAdd:
		need = AccessRemoteAtomic
	}
	if need != 0 && acc&need == 0 {
		return invReq("%v: the QP's access flags (%v) lack %v", op, acc, need)
	}
	if (op == WRRDMARead || op.IsAtomic()) && maxDest == 0 {
		return invReq("%v: max_dest_rd_atomic is 0", op)
	}
	if op.IsAtomic() && w.raddr&7 != 0 {
		return invReq("%v: remote address %#x is not 8-byte aligned", op, w.raddr)
	}
	if needRecv && r == nil {
		return Outcome{Kind: RNR, RNRTimer: rnrTimer}, respFail{}
	}

	// Remote memory: rkey, PD, access and bounds. Zero-length RDMA does not
	// check the rkey (IBA 9.7.4.1.5).
	var remote []byte
	if need != 0 && w.length > 0 {
		accErr := func(format string, args ...any) (Outcome, respFail) {
			cause := fmt.Errorf("qp %#x: remote access error for %v from qp %#x: %s", resp.num, op, req.num, fmt.Sprintf(format, args...))
			return Outcome{Status: WCRemAccessErr, Cause: cause}, respFail{cause: cause, ev: EventQPAccessErr, post: true}
		}
		mr := resp.pd.LookupRKey(w.rkey)
		if mr == nil {
			return accErr("rkey %#x is not a registered MR of the responder's PD", w.rkey)
		}
		if mr.access&need == 0 {
			return accErr("rkey %#x grants %v, not %v", w.rkey, mr.access, need)
		}
		b, ok := mr.Slice(w.raddr, w.length)
		if !ok {
			return accErr("[%#x, +%d) is outside MR rkey %#x [%#x, +%d)", w.raddr, w.length, w.rkey, mr.addr, len(mr.buf))
		}
		if !mr.Pin() {
			return accErr("rkey %#x was deregistered", w.rkey)
		}
		defer mr.Unpin()
		remote = b
	}

	locProt := func() Outcome {
		return Outcome{Status: WCLocProtErr, Cause: fmt.Errorf("wr %#x %v: a local SGE's MR lacks LOCAL_WRITE", w.id, op)}
	}
	var rf respFail
	switch op {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		if remote != nil {
			copySG(sgCursor{flat: remote}, w.cursor())
		}
	case WRRDMARead:
		if !localWritable(w.mrs) {
			return locProt(), respFail{}
		}
		if remote != nil {
			copySG(w.cursor(), sgCursor{flat: remote})
		}
	case WRAtomicCmpAndSwp, WRAtomicFetchAndAdd:
		if !localWritable(w.mrs) {
			return locProt(), respFail{}
		}
		p := (*uint64)(unsafe.Pointer(&remote[0]))
		var old uint64
		if op == WRAtomicFetchAndAdd {
			old = atomic.AddUint64(p, w.cmp) - w.cmp
		} else {
			for {
				old = atomic.LoadUint64(p)
				if old != w.cmp || atomic.CompareAndSwapUint64(p, old, w.swap) {
					break
				}
			}
		}
		dst, _ := w.mrs[0].Slice(w.sge[0].Addr, 8)
		binary.NativeEndian.PutUint64(dst, old)
	case WRSend, WRSendWithImm:
		status := WCSuccess
		if w.length > r.length {
			status = WCLocLenErr
			cause := fmt.Errorf("qp %#x: %d-byte %v from qp %#x does not fit receive wr %#x of %d bytes", resp.num, w.length, op, req.num, r.id, r.length)
			rf = respFail{cause: cause}
		} else if _, ok := pinAll(r.mrs); !ok || !localWritable(r.mrs) {
			if ok {
				unpinAll(r.mrs)
			}
			status = WCLocProtErr
			rf = respFail{cause: fmt.Errorf("qp %#x: receive wr %#x: an SGE's MR is deregistered or lacks LOCAL_WRITE", resp.num, r.id)}
		} else {
			copySG(sgCursor{sge: r.sge, mrs: r.mrs}, w.cursor())
			unpinAll(r.mrs)
		}
		if status != WCSuccess {
			resp.completeRecv(r, status, w, req)
			reqStatus := WCRemInvReqErr
			if status == WCLocProtErr {
				reqStatus = WCRemOpErr
			}
			return Outcome{Status: reqStatus, Cause: rf.cause}, rf
		}
	}
	if needRecv {
		if !resp.completeRecv(r, WCSuccess, w, req) {
			rf = respFail{cause: fmt.Errorf("qp %#x: recv cq overflowed; completion of wr %#x lost", resp.num, r.id), ev: EventQPFatal, post: true}
		}
	}
	return Outcome{Status: WCSuccess, ByteLen: uint32(w.length)}, rf
}

// completeRecv retires the head receive WQE r with a completion for the
// message w. The caller holds resp.respMu.
func (resp *QP) completeRecv(r *RecvWQE, status WCStatus, w *SendWQE, req *QP) bool {
	wc := WC{WRID: r.id, Status: status, Opcode: WCRecv, ByteLen: uint32(w.length), QPNum: resp.num, SrcQP: req.num}
	if w.op == WRRDMAWriteWithImm {
		wc.Opcode = WCRecvRDMAWithImm
	}
	if w.op.HasImm() {
		wc.Flags, wc.Imm = WCWithImm, w.imm
	}
	resp.mu.Lock()
	resp.rq.pop()
	resp.ctr.recvs.Add(1)
	ok := resp.recvCQ.push(&wc)
	resp.mu.Unlock()
	return ok
}

func localWritable(mrs []*MR) bool {
	for _, mr := range mrs {
		if mr.access&AccessLocalWrite == 0 {
			return false
		}
	}
	return true
}

// sgCursor walks a scatter/gather list, or one flat buffer.
type sgCursor struct {
	flat []byte
	sge  []SGE
	mrs  []*MR
	i    int
	off  uint32
}

func (w *SendWQE) cursor() sgCursor {
	if w.flags&SendInline != 0 {
		return sgCursor{flat: w.inline[:w.length]}
	}
	return sgCursor{sge: w.sge, mrs: w.mrs}
}

// peek returns the next non-empty contiguous chunk.
func (c *sgCursor) peek() []byte {
	if c.sge == nil {
		return c.flat
	}
	for c.i < len(c.sge) {
		s := &c.sge[c.i]
		if c.off < s.Length {
			b, _ := c.mrs[c.i].Slice(s.Addr+uint64(c.off), uint64(s.Length-c.off))
			return b
		}
		c.i++
		c.off = 0
	}
	return nil
}

func (c *sgCursor) advance(n int) {
	if c.sge == nil {
		c.flat = c.flat[n:]
		return
	}
	c.off += uint32(n)
}

// copySG copies from src to dst until either runs out.
func copySG(dst, src sgCursor) int {
	total := 0
	for {
		d, s := dst.peek(), src.peek()
		if len(d) == 0 || len(s) == 0 {
			return total
		}
		n := copy(d, s)
		dst.advance(n)
		src.advance(n)
		total += n
	}
}
