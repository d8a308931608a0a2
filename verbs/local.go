package verbs

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/ibex-rdma/ibex/verbs/internal/wq"
)

// executeLocal executes send WQE w of requester QP req directly against
// responder QP resp in the same address space, applying the IB responder
// rules: QP state, opcode permission (QP access flags, max_dest_rd_atomic,
// atomic alignment), receive availability (RNR), rkey, PD, MR access and
// bounds, and receive length. Bytes move with one copy from source to
// destination memory. resp == nil means the destination does not exist.
//
// It is the transport of providers whose QPs share memory with their peers
// (loopback); a responder error moves resp to ERR, as a real responder does.
func executeLocal(w *wq.SendWQE, req, resp *QP) wq.Outcome {
	if resp == nil {
		return wq.Outcome{Kind: wq.Lost}
	}
	if i, ok := wq.PinAll(w.MRs); !ok {
		return wq.Outcome{Status: WCLocProtErr, Cause: fmt.Errorf("wr %#x %v: sge[%d]: MR lkey %#x was deregistered after posting", w.ID, w.Op, i, w.SGE[i].LKey)}
	}
	defer wq.UnpinAll(w.MRs)
	resp.respMu.Lock()
	out, rf := respond(w, req, resp)
	resp.respMu.Unlock()
	if rf.cause != nil {
		resp.fail(rf.cause, rf.ev, rf.post)
	}
	return out
}

// respFail is a responder-side error that moves the responder QP to ERR.
type respFail struct {
	cause error
	ev    AsyncEventType
	post  bool
}

func respond(w *wq.SendWQE, req, resp *QP) (wq.Outcome, respFail) {
	op := w.Op
	needRecv := op == WRSend || op == WRSendWithImm || op == WRRDMAWriteWithImm

	resp.mu.Lock()
	st, dead := resp.state, resp.destroyed
	acc, maxDest, rnrTimer := resp.attr.AccessFlags, resp.attr.MaxDestRdAtomic, resp.attr.MinRNRTimer
	var r *recvWQE
	if needRecv {
		r = resp.rq.peek()
	}
	resp.mu.Unlock()
	if dead || (st != QPSRTR && st != QPSRTS && st != QPSSQD) {
		return wq.Outcome{Kind: wq.Lost}, respFail{}
	}

	// Invalid request: the responder QP does not permit the operation.
	invReq := func(format string, args ...any) (wq.Outcome, respFail) {
		cause := fmt.Errorf("qp %#x: invalid request from qp %#x: %s", resp.num, req.num, fmt.Sprintf(format, args...))
		return wq.Outcome{Status: WCRemInvReqErr, Cause: cause}, respFail{cause: cause, ev: EventQPReqErr, post: true}
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
	if op.IsAtomic() && w.RemoteAddr&7 != 0 {
		return invReq("%v: remote address %#x is not 8-byte aligned", op, w.RemoteAddr)
	}
	if needRecv && r == nil {
		return wq.Outcome{Kind: wq.RNR, RNRTimer: rnrTimer}, respFail{}
	}

	// Remote memory: rkey, PD, access and bounds. Zero-length RDMA does not
	// check the rkey (IBA 9.7.4.1.5).
	var remote []byte
	if need != 0 && w.Length > 0 {
		accErr := func(format string, args ...any) (wq.Outcome, respFail) {
			cause := fmt.Errorf("qp %#x: remote access error for %v from qp %#x: %s", resp.num, op, req.num, fmt.Sprintf(format, args...))
			return wq.Outcome{Status: WCRemAccessErr, Cause: cause}, respFail{cause: cause, ev: EventQPAccessErr, post: true}
		}
		mr := resp.pd.lookupRKey(w.RKey)
		if mr == nil {
			return accErr("rkey %#x is not a registered MR of the responder's PD", w.RKey)
		}
		if mr.reg.Access&need == 0 {
			return accErr("rkey %#x grants %v, not %v", w.RKey, mr.reg.Access, need)
		}
		b, ok := mr.reg.Slice(w.RemoteAddr, w.Length)
		if !ok {
			return accErr("[%#x, +%d) is outside MR rkey %#x [%#x, +%d)", w.RemoteAddr, w.Length, w.RKey, mr.reg.Addr, len(mr.reg.Buf))
		}
		if !mr.reg.Pin() {
			return accErr("rkey %#x was deregistered", w.RKey)
		}
		defer mr.reg.Unpin()
		remote = b
	}

	locProt := func() wq.Outcome {
		return wq.Outcome{Status: WCLocProtErr, Cause: fmt.Errorf("wr %#x %v: a local SGE's MR lacks LOCAL_WRITE", w.ID, op)}
	}
	var rf respFail
	switch op {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		if remote != nil {
			wq.Copy(wq.Flat(remote), w.Cursor())
		}
	case WRRDMARead:
		if !wq.Writable(w.MRs) {
			return locProt(), respFail{}
		}
		if remote != nil {
			wq.Copy(w.Cursor(), wq.Flat(remote))
		}
	case WRAtomicCmpAndSwp, WRAtomicFetchAndAdd:
		if !wq.Writable(w.MRs) {
			return locProt(), respFail{}
		}
		p := (*uint64)(unsafe.Pointer(&remote[0]))
		var old uint64
		if op == WRAtomicFetchAndAdd {
			old = atomic.AddUint64(p, w.CompareAdd) - w.CompareAdd
		} else {
			for {
				old = atomic.LoadUint64(p)
				if old != w.CompareAdd || atomic.CompareAndSwapUint64(p, old, w.Swap) {
					break
				}
			}
		}
		dst, _ := w.MRs[0].Slice(w.SGE[0].Addr, 8)
		binary.NativeEndian.PutUint64(dst, old)
	case WRSend, WRSendWithImm:
		status := WCSuccess
		if w.Length > r.length {
			status = WCLocLenErr
			cause := fmt.Errorf("qp %#x: %d-byte %v from qp %#x does not fit receive wr %#x of %d bytes", resp.num, w.Length, op, req.num, r.id, r.length)
			rf = respFail{cause: cause}
		} else if _, ok := wq.PinAll(r.mrs); !ok || !wq.Writable(r.mrs) {
			if ok {
				wq.UnpinAll(r.mrs)
			}
			status = WCLocProtErr
			rf = respFail{cause: fmt.Errorf("qp %#x: receive wr %#x: an SGE's MR is deregistered or lacks LOCAL_WRITE", resp.num, r.id)}
		} else {
			wq.Copy(wq.List(r.sge, r.mrs, 0), w.Cursor())
			wq.UnpinAll(r.mrs)
		}
		if status != WCSuccess {
			resp.completeRecv(r, status, w, req)
			reqStatus := WCRemInvReqErr
			if status == WCLocProtErr {
				reqStatus = WCRemOpErr
			}
			return wq.Outcome{Status: reqStatus, Cause: rf.cause}, rf
		}
	}
	if needRecv {
		if !resp.completeRecv(r, WCSuccess, w, req) {
			rf = respFail{cause: fmt.Errorf("qp %#x: recv cq overflowed; completion of wr %#x lost", resp.num, r.id), ev: EventQPFatal, post: true}
		}
	}
	return wq.Outcome{Status: WCSuccess, ByteLen: uint32(w.Length)}, rf
}

// completeRecv retires the head receive WQE r with a completion for the
// message w. The caller holds resp.respMu.
func (resp *QP) completeRecv(r *recvWQE, status WCStatus, w *wq.SendWQE, req *QP) bool {
	wc := WC{WRID: r.id, Status: status, Opcode: WCRecv, ByteLen: uint32(w.Length), QPNum: resp.num, SrcQP: req.num}
	if w.Op == WRRDMAWriteWithImm {
		wc.Opcode = WCRecvRDMAWithImm
	}
	if w.Op.HasImm() {
		wc.Flags, wc.Imm = WCWithImm, w.Imm
	}
	resp.mu.Lock()
	resp.rq.pop()
	resp.ctr.recvs.Add(1)
	if status != WCSuccess {
		resp.ctr.recvErrs.Add(1)
	}
	ok := resp.recvCQ.push(&wc)
	resp.mu.Unlock()
	return ok
}
