package verbs

import (
	"fmt"
	"time"
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

// SendWQE is a posted send request as the send queue holds it. Providers
// read it through its methods; the SGEs were validated at post time.
type SendWQE struct {
	id       uint64
	op       Opcode
	flags    SendFlags
	imm      uint32
	raddr    uint64
	rkey     uint32
	cmp      uint64
	swap     uint64
	sge      []SGE
	mrs      []*MR
	inline   []byte // storage; the payload is inline[:length] when inlined
	length   uint64
	signaled bool
	ssn      uint64 // send sequence number, unique per QP

	// Requester progress state.
	started   bool
	stalled   bool // waiting forever (timeout 0) for a response
	rnrLeft   uint8
	retryLeft uint8
	notBefore time.Time
}

// ID is the request's wr_id.
func (w *SendWQE) ID() uint64 { return w.id }

// Opcode is the request's opcode.
func (w *SendWQE) Opcode() Opcode { return w.op }

// Length is the message length in bytes (8 for atomics).
func (w *SendWQE) Length() uint64 { return w.length }

// RemoteAddr is the peer address of an RDMA or atomic request.
func (w *SendWQE) RemoteAddr() uint64 { return w.raddr }

// RKey is the peer's rkey of an RDMA or atomic request.
func (w *SendWQE) RKey() uint32 { return w.rkey }

// Imm is the immediate data of a *_WITH_IMM request.
func (w *SendWQE) Imm() uint32 { return w.imm }

type sendQueue struct {
	ring    []SendWQE
	head, n int
	issued  int    // requests from head handed to an Issuer
	nextSSN uint64 // ssn of the next posted request
}

func (q *sendQueue) init(depth, maxSGE, maxInline int) {
	q.ring = make([]SendWQE, depth)
	sges := make([]SGE, depth*maxSGE)
	mrs := make([]*MR, depth*maxSGE)
	inl := make([]byte, depth*maxInline)
	for i := range q.ring {
		q.ring[i].sge = sges[i*maxSGE : i*maxSGE : (i+1)*maxSGE]
		q.ring[i].mrs = mrs[i*maxSGE : i*maxSGE : (i+1)*maxSGE]
		q.ring[i].inline = inl[i*maxInline : (i+1)*maxInline : (i+1)*maxInline]
	}
}

func (q *sendQueue) at(i int) *SendWQE {
	i += q.head
	if i >= len(q.ring) {
		i -= len(q.ring)
	}
	return &q.ring[i]
}

func (q *sendQueue) pop() {
	w := &q.ring[q.head]
	clear(w.mrs)
	q.head++
	if q.head == len(q.ring) {
		q.head = 0
	}
	q.n--
}

func (q *sendQueue) clear() {
	for q.n > 0 {
		q.pop()
	}
	q.issued = 0
}

// RecvWQE is a posted receive request.
type RecvWQE struct {
	id     uint64
	sge    []SGE
	mrs    []*MR
	length uint64
	rsn    uint64 // receive sequence number, unique per QP
}

type recvQueue struct {
	ring    []RecvWQE
	head, n int
	nextRSN uint64
	baseRSN uint64 // nextRSN at the last RESET
}

func (q *recvQueue) init(depth, maxSGE int) {
	q.ring = make([]RecvWQE, depth)
	sges := make([]SGE, depth*maxSGE)
	mrs := make([]*MR, depth*maxSGE)
	for i := range q.ring {
		q.ring[i].sge = sges[i*maxSGE : i*maxSGE : (i+1)*maxSGE]
		q.ring[i].mrs = mrs[i*maxSGE : i*maxSGE : (i+1)*maxSGE]
	}
}

func (q *recvQueue) peek() *RecvWQE {
	if q.n == 0 {
		return nil
	}
	return &q.ring[q.head]
}

func (q *recvQueue) pop() {
	clear(q.ring[q.head].mrs)
	q.head++
	if q.head == len(q.ring) {
		q.head = 0
	}
	q.n--
}

func (q *recvQueue) clear() {
	for q.n > 0 {
		q.pop()
	}
}

// checkSGL resolves and bounds-checks an SGE list against pd, filling
// sge/mrs storage. It returns the total length.
func checkSGL(pd *PD, sgl []SGE, max int, sgeOut *[]SGE, mrsOut *[]*MR) (uint64, error) {
	if len(sgl) > max {
		return 0, errorf(ErrInvalidArgument, "%d SGEs: the QP was created with max_sge %d", len(sgl), max)
	}
	*sgeOut = (*sgeOut)[:0]
	*mrsOut = (*mrsOut)[:0]
	var total uint64
	for i := range sgl {
		s := &sgl[i]
		mr := pd.LookupLKey(s.LKey)
		if mr == nil {
			return 0, errorf(ErrInvalidLKey, "sge[%d]: lkey %#x not registered in this PD", i, s.LKey)
		}
		if _, ok := mr.Slice(s.Addr, uint64(s.Length)); !ok {
			return 0, errorf(ErrInvalidArgument, "sge[%d]: [%#x, +%d) is outside MR lkey %#x [%#x, +%d)",
				i, s.Addr, s.Length, s.LKey, mr.addr, len(mr.buf))
		}
		*sgeOut = append(*sgeOut, *s)
		*mrsOut = append(*mrsOut, mr)
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

func (qp *QP) fillSend(w *SendWQE, wr *SendWR) error {
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
		w.sge, w.mrs = w.sge[:0], w.mrs[:0]
		w.length = uint64(copy(w.inline, wr.Inline))
	} else {
		if len(wr.Inline) != 0 {
			return errorf(ErrInvalidArgument, "Inline payload given without the SendInline flag")
		}
		n, err := checkSGL(qp.pd, wr.SGL, qp.cap.MaxSendSGE, &w.sge, &w.mrs)
		if err != nil {
			return err
		}
		w.length = n
	}
	if op.IsAtomic() && (len(w.sge) != 1 || w.length != 8) {
		return errorf(ErrInvalidArgument, "%v needs exactly one 8-byte SGE, got %d SGEs with %d bytes", op, len(w.sge), w.length)
	}
	if w.length > qp.ctx.attr.MaxMsgSize {
		return errorf(ErrInvalidArgument, "message of %d bytes exceeds max_msg_sz %d", w.length, qp.ctx.attr.MaxMsgSize)
	}
	w.id, w.op, w.flags, w.imm = wr.ID, op, wr.Flags, wr.Imm
	qp.sq.nextSSN++
	w.ssn = qp.sq.nextSSN
	w.raddr, w.rkey, w.cmp, w.swap = wr.RemoteAddr, wr.RKey, wr.CompareAdd, wr.Swap
	w.signaled = qp.sigAll || wr.Flags&SendSignaled != 0
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

// RecvPosted is the number of receives posted since the QP last left RESET
// (consumed or not). A transport that grants its peer credits for
// receives (the shared-memory provider) publishes it.
func (qp *QP) RecvPosted() uint64 {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.rq.nextRSN - qp.rq.baseRSN
}

// kick runs the send queue unless another goroutine already does.
func (qp *QP) kick() {
	qp.mu.Lock()
	if qp.running {
		qp.mu.Unlock()
		return
	}
	qp.running = true
	qp.progressLocked()
}

// progressLocked runs the send queue while this goroutine holds the send
// token (qp.running). It is called with qp.mu held and returns with it
// released. Only the token holder executes WQEs and writes send
// completions, so completions keep posting order and the flush of an ERR
// QP comes after the completion of the request in flight.
func (qp *QP) progressLocked() {
	if qp.issuer != nil {
		qp.issueLocked()
		return
	}
	for {
		if qp.state == QPSErr {
			qp.flushSQLocked()
		}
		if qp.sq.n == 0 || qp.state == QPSReset || qp.state == QPSErr {
			qp.idleLocked()
			return
		}
		w := qp.sq.at(0)
		if qp.state == QPSSQD && !w.started || w.stalled {
			qp.idleLocked()
			return
		}
		if !w.notBefore.IsZero() {
			if d := time.Until(w.notBefore); d > 0 {
				qp.timer.Reset(d)
				qp.running = false
				qp.mu.Unlock()
				return
			}
		}
		if !w.started {
			w.started = true
			w.rnrLeft, w.retryLeft = qp.attr.RNRRetry, qp.attr.RetryCnt
		}
		epoch := qp.epoch
		// A READ or atomic queued before max_rd_atomic was lowered to 0
		// (SQD→SQD) cannot be issued: a local QP operation error.
		rdAtomicOff := (w.op == WRRDMARead || w.op.IsAtomic()) && qp.attr.MaxQPRdAtomic == 0
		qp.mu.Unlock()

		var out Outcome
		if rdAtomicOff {
			out = Outcome{Status: WCLocQPOpErr, Cause: fmt.Errorf("%v queued but max_rd_atomic is now 0", w.op)}
		} else {
			out = qp.drv.Execute(w)
		}

		qp.mu.Lock()
		if qp.epoch != epoch {
			continue
		}
		var failCause error
		switch out.Kind {
		case RNR:
			qp.ctr.rnrNaks.Add(1)
			if qp.attr.RNRRetry != 7 {
				if w.rnrLeft == 0 {
					out = Outcome{Status: WCRNRRetryExcErr, Cause: fmt.Errorf("wr %#x %v: receiver not ready after %d RNR retries", w.id, w.op, qp.attr.RNRRetry)}
					break
				}
				w.rnrLeft--
			}
			w.notBefore = time.Now().Add(RNRDelay(out.RNRTimer))
			continue
		case Lost:
			if w.retryLeft == 0 {
				out = Outcome{Status: WCRetryExcErr, Cause: fmt.Errorf("wr %#x %v: no response from qp %#x after %d retries (timeout %v each)",
					w.id, w.op, qp.attr.DestQPN, qp.attr.RetryCnt, AckTimeout(qp.attr.Timeout))}
				break
			}
			qp.ctr.retries.Add(1)
			w.retryLeft--
			if t := AckTimeout(qp.attr.Timeout); t > 0 {
				w.notBefore = time.Now().Add(t)
			} else {
				w.stalled = true
			}
			continue
		}
		wc := WC{WRID: w.id, Status: out.Status, Opcode: wcOpcodeOf(w.op), ByteLen: out.ByteLen, QPNum: qp.num}
		qp.sq.pop()
		qp.ctr.sends.Add(1)
		if out.Status != WCSuccess {
			failCause = fmt.Errorf("qp %#x: wr %#x %v completed with %v", qp.num, wc.WRID, w.op, out.Status)
			if out.Cause != nil {
				failCause = fmt.Errorf("%w: %w", failCause, out.Cause)
			}
			qp.sendCQ.push(&wc)
		} else if w.signaled && !qp.sendCQ.push(&wc) {
			failCause = fmt.Errorf("send cq overflowed; completion of wr %#x lost", wc.WRID)
		}
		if from := qp.state; failCause != nil && qp.enterErrLocked(failCause) {
			qp.mu.Unlock()
			if out.Status == WCSuccess {
				qp.ctx.PostEvent(AsyncEvent{Type: EventQPFatal, QP: qp, Cause: failCause})
			}
			if qp.notify != nil {
				qp.notify.StateChanged(from, QPSErr, qp.Query())
			}
			qp.flushRQ()
			qp.mu.Lock()
		}
	}
}

// idleLocked gives up the send token and reports SQ_DRAINED if asked.
func (qp *QP) idleLocked() {
	qp.running = false
	drained := qp.state == QPSSQD && qp.drainWant
	if drained {
		qp.drainWant = false
	}
	notify := drained && qp.attr.EnSQDAsyncNotify
	qp.mu.Unlock()
	if notify {
		qp.ctx.PostEvent(AsyncEvent{Type: EventSQDrained, QP: qp})
	}
}

// flushSQLocked completes every queued send request with WR_FLUSH_ERR.
func (qp *QP) flushSQLocked() {
	qp.sq.issued = 0
	for qp.sq.n > 0 {
		w := qp.sq.at(0)
		wc := WC{WRID: w.id, Status: WCWRFlushErr, Opcode: wcOpcodeOf(w.op), QPNum: qp.num}
		qp.sq.pop()
		qp.ctr.sends.Add(1)
		qp.sendCQ.push(&wc)
	}
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

// enterErrLocked moves the QP to ERR; it reports whether the state changed.
func (qp *QP) enterErrLocked(cause error) bool {
	if qp.state == QPSErr || qp.state == QPSReset || qp.destroyed {
		return false
	}
	qp.state = QPSErr
	qp.cause = cause
	return true
}

// Fail moves the QP to ERR for a reason a provider detected (a responder
// error, a dead peer), posts ev unless it is negative, and flushes both
// queues. Call it with no verbs lock held.
func (qp *QP) Fail(cause error, ev AsyncEventType, post bool) {
	qp.mu.Lock()
	from := qp.state
	changed := qp.enterErrLocked(cause)
	qp.mu.Unlock()
	if !changed {
		return
	}
	if post {
		qp.ctx.PostEvent(AsyncEvent{Type: ev, QP: qp, Cause: cause})
	}
	qp.afterErr(from, cause, false)
}
