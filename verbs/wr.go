package verbs

import (
	"time"

	"github.com/ibex-rdma/ibex/verbs/internal/wq"
)

// SGE is a scatter/gather element (ibv_sge): Length bytes at virtual
// address Addr inside the MR named by LKey.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is a send work request (ibv_send_wr).
type SendWR struct {
	ID     uint64
	Opcode Opcode
	Flags  SendFlags
	// SGL is the local data: the payload of SEND and WRITE, the destination
	// of READ, the 8-byte result buffer of an atomic.
	SGL []SGE
	// Inline is the payload when Flags has SendInline (up to the QP's
	// MaxInlineData); SGL must then be empty.
	Inline []byte
	Imm    uint32 // SEND_WITH_IMM, RDMA_WRITE_WITH_IMM
	// RemoteAddr and RKey name the peer's memory for RDMA and atomics.
	RemoteAddr uint64
	RKey       uint32
	// CompareAdd is the compare value of CMP_AND_SWP or the addend of
	// FETCH_AND_ADD; Swap is the swap value of CMP_AND_SWP.
	CompareAdd uint64
	Swap       uint64
}

// RecvWR is a receive work request (ibv_recv_wr).
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// checkSGL resolves and bounds-checks an SGE list against pd, filling
// sge/mrs storage. It returns the total length.
func checkSGL(pd *PD, sgl []SGE, max int, sgeOut *[]wq.SGE, mrsOut *[]*wq.Region) (uint64, error) {
	if len(sgl) > max {
		return 0, errorf(ErrInvalidArgument, "%d SGEs: the QP was created with max_sge %d", len(sgl), max)
	}
	*sgeOut = (*sgeOut)[:0]
	*mrsOut = (*mrsOut)[:0]
	var total uint64
	for i := range sgl {
		s := &sgl[i]
		mr := pd.lookupLKey(s.LKey)
		if mr == nil {
			return 0, errorf(ErrInvalidLKey, "sge[%d]: lkey %#x not registered in this PD", i, s.LKey)
		}
		if _, ok := mr.reg.Slice(s.Addr, uint64(s.Length)); !ok {
			return 0, errorf(ErrInvalidArgument, "sge[%d]: [%#x, +%d) is outside MR lkey %#x [%#x, +%d)",
				i, s.Addr, s.Length, s.LKey, mr.reg.Addr, len(mr.reg.Buf))
		}
		*sgeOut = append(*sgeOut, wq.SGE(*s))
		*mrsOut = append(*mrsOut, &mr.reg)
		total += uint64(s.Length)
	}
	return total, nil
}

// PostSend posts send work requests in order (ibv_post_send). Requests are
// accepted in RTS and SQD (queued until RTS) and in ERR (completed with
// WR_FLUSH_ERR). On a bad request it returns a *PostError naming it; the
// requests before it were posted.
func (qp *QP) PostSend(wrs []SendWR) error {
	qp.mu.Lock()
	if qp.destroyed {
		qp.mu.Unlock()
		return &PostError{Op: "post send", QPN: qp.num, Err: errorf(ErrClosed, "qp destroyed")}
	}
	if st := qp.state; st != QPSRTS && st != QPSSQD && st != QPSErr {
		qp.mu.Unlock()
		return &PostError{Op: "post send", QPN: qp.num, Err: errorf(ErrInvalidState, "qp is in %v; sends need RTS", st)}
	}
	var err error
	posted := 0
	for i := range wrs {
		if qp.sq.n == len(qp.sq.ring) {
			err = &PostError{Op: "post send", QPN: qp.num, Index: i, Err: errorf(ErrQueueFull, "send queue full (max_send_wr %d)", len(qp.sq.ring))}
			break
		}
		w := qp.sq.at(qp.sq.n)
		if e := qp.fillSend(w, &wrs[i]); e != nil {
			err = &PostError{Op: "post send", QPN: qp.num, Index: i, Err: e}
			break
		}
		qp.sq.n++
		posted++
	}
	if posted > 0 && !qp.running {
		qp.running = true
		qp.progressLocked()
	} else {
		qp.mu.Unlock()
	}
	return err
}

func (qp *QP) fillSend(w *sendSlot, wr *SendWR) error {
	if !wr.Opcode.Valid() {
		return errorf(ErrInvalidArgument, "opcode %d unknown", uint8(wr.Opcode))
	}
	if wr.Flags&^(SendFence|SendSignaled|SendSolicited|SendInline) != 0 {
		return errorf(ErrInvalidArgument, "send_flags %#x unknown", uint8(wr.Flags))
	}
	op := wr.Opcode
	if (op == WRRDMARead || op.IsAtomic()) && qp.attr.MaxQPRdAtomic == 0 {
		return errorf(ErrInvalidArgument, "%v: max_rd_atomic is 0, so the QP may not issue READ or atomics", op)
	}
	if wr.Flags&SendInline != 0 {
		switch {
		case op == WRRDMARead || op.IsAtomic():
			return errorf(ErrInvalidArgument, "%v cannot be inline", op)
		case len(wr.SGL) != 0:
			return errorf(ErrInvalidArgument, "inline request has %d SGEs: inline payload goes in SendWR.Inline", len(wr.SGL))
		case len(wr.Inline) > qp.cap.MaxInlineData:
			return errorf(ErrInvalidArgument, "inline payload %d bytes exceeds max_inline_data %d", len(wr.Inline), qp.cap.MaxInlineData)
		}
		w.SGE, w.MRs = w.SGE[:0], w.MRs[:0]
		w.Length = uint64(copy(w.Inline, wr.Inline))
	} else {
		if len(wr.Inline) != 0 {
			return errorf(ErrInvalidArgument, "Inline payload given without the SendInline flag")
		}
		n, err := checkSGL(qp.pd, wr.SGL, qp.cap.MaxSendSGE, &w.SGE, &w.MRs)
		if err != nil {
			return err
		}
		w.Length = n
	}
	if op.IsAtomic() && (len(w.SGE) != 1 || w.Length != 8) {
		return errorf(ErrInvalidArgument, "%v needs exactly one 8-byte SGE, got %d SGEs with %d bytes", op, len(w.SGE), w.Length)
	}
	if w.Length > qp.ctx.attr.MaxMsgSize {
		return errorf(ErrInvalidArgument, "message of %d bytes exceeds max_msg_sz %d", w.Length, qp.ctx.attr.MaxMsgSize)
	}
	w.ID, w.Op, w.Flags, w.Imm = wr.ID, op, wr.Flags, wr.Imm
	qp.sq.nextSSN++
	w.SSN = qp.sq.nextSSN
	w.RemoteAddr, w.RKey, w.CompareAdd, w.Swap = wr.RemoteAddr, wr.RKey, wr.CompareAdd, wr.Swap
	w.Signaled = qp.sigAll || wr.Flags&SendSignaled != 0
	w.started, w.stalled, w.notBefore = false, false, time.Time{}
	return nil
}

// PostRecv posts receive work requests (ibv_post_recv). Receives are
// accepted in every state but RESET; in ERR they complete with
// WR_FLUSH_ERR.
func (qp *QP) PostRecv(wrs []RecvWR) error {
	qp.mu.Lock()
	if qp.destroyed {
		qp.mu.Unlock()
		return &PostError{Op: "post recv", QPN: qp.num, Err: errorf(ErrClosed, "qp destroyed")}
	}
	if qp.state == QPSReset {
		qp.mu.Unlock()
		return &PostError{Op: "post recv", QPN: qp.num, Err: errorf(ErrInvalidState, "qp is in RESET; receives need INIT or later")}
	}
	var err error
	for i := range wrs {
		q := &qp.rq
		if q.n == len(q.ring) {
			err = &PostError{Op: "post recv", QPN: qp.num, Index: i, Err: errorf(ErrQueueFull, "receive queue full (max_recv_wr %d)", len(q.ring))}
			break
		}
		j := q.head + q.n
		if j >= len(q.ring) {
			j -= len(q.ring)
		}
		r := &q.ring[j]
		n, e := checkSGL(qp.pd, wrs[i].SGL, qp.cap.MaxRecvSGE, &r.sge, &r.mrs)
		if e != nil {
			err = &PostError{Op: "post recv", QPN: qp.num, Index: i, Err: e}
			break
		}
		if qp.recvIssue != nil {
			if e := qp.recvIssue.IssueRecv(q.nextRSN+1, wrs[i].SGL); e != nil {
				err = &PostError{Op: "post recv", QPN: qp.num, Index: i, Err: e}
				break
			}
		}
		r.id, r.length = wrs[i].ID, n
		q.nextRSN++
		r.rsn = q.nextRSN
		q.n++
	}
	inErr := qp.state == QPSErr
	qp.mu.Unlock()
	if inErr {
		qp.flushRQ()
	} else if qp.recvNote != nil {
		qp.recvNote.RecvPosted()
	}
	return err
}

// recvPosted is the number of receives posted since the QP last left RESET
// (consumed or not). A transport that grants its peer credits for
// receives (the shared-memory provider) publishes it.
func (qp *QP) recvPosted() uint64 {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.rq.nextRSN - qp.rq.baseRSN
}
