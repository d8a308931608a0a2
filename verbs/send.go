package verbs

import (
	"fmt"
	"time"

	"github.com/ibex-rdma/ibex/verbs/internal/wq"
)

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
		rdAtomicOff := (w.Op == WRRDMARead || w.Op.IsAtomic()) && qp.attr.MaxQPRdAtomic == 0
		qp.mu.Unlock()

		var out wq.Outcome
		if rdAtomicOff {
			out = wq.Outcome{Status: WCLocQPOpErr, Cause: fmt.Errorf("%v queued but max_rd_atomic is now 0", w.Op)}
		} else {
			out = qp.exec.Execute(&w.SendWQE)
		}

		qp.mu.Lock()
		if qp.epoch != epoch {
			continue
		}
		var failCause error
		switch out.Kind {
		case wq.RNR:
			qp.ctr.rnrNaks.Add(1)
			if qp.attr.RNRRetry != 7 {
				if w.rnrLeft == 0 {
					out = wq.Outcome{Status: WCRNRRetryExcErr, Cause: fmt.Errorf("wr %#x %v: receiver not ready after %d RNR retries", w.ID, w.Op, qp.attr.RNRRetry)}
					break
				}
				w.rnrLeft--
			}
			w.notBefore = time.Now().Add(RNRDelay(out.RNRTimer))
			continue
		case wq.Lost:
			if w.retryLeft == 0 {
				out = wq.Outcome{Status: WCRetryExcErr, Cause: fmt.Errorf("wr %#x %v: no response from qp %#x after %d retries (timeout %v each)",
					w.ID, w.Op, qp.attr.DestQPN, qp.attr.RetryCnt, AckTimeout(qp.attr.Timeout))}
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
		wc := WC{WRID: w.ID, Status: out.Status, Opcode: wcOpcodeOf(w.Op), ByteLen: out.ByteLen, QPNum: qp.num}
		qp.sq.pop()
		qp.countSend(w.Op)
		if out.Status != WCSuccess {
			qp.countSendErr(out.Status)
			failCause = fmt.Errorf("qp %#x: wr %#x %v completed with %v", qp.num, wc.WRID, w.Op, out.Status)
			if out.Cause != nil {
				failCause = fmt.Errorf("%w: %w", failCause, out.Cause)
			}
			qp.sendCQ.push(&wc)
		} else if w.Signaled && !qp.sendCQ.push(&wc) {
			failCause = fmt.Errorf("send cq overflowed; completion of wr %#x lost", wc.WRID)
		}
		if from := qp.state; failCause != nil && qp.enterErrLocked(failCause) {
			qp.mu.Unlock()
			if out.Status == WCSuccess {
				qp.ctx.postEvent(AsyncEvent{Type: EventQPFatal, QP: qp, Cause: failCause})
			}
			if qp.notify != nil {
				qp.notify.StateChanged(from, QPSErr, qp.Query())
			}
			qp.flushRQ()
			qp.mu.Lock()
		}
	}
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
		qp.issuer.Issue(&w.SendWQE)
		qp.mu.Lock()
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
		qp.ctx.postEvent(AsyncEvent{Type: EventSQDrained, QP: qp})
	}
}

// flushSQLocked completes every queued send request with WR_FLUSH_ERR.
func (qp *QP) flushSQLocked() {
	qp.sq.issued = 0
	for qp.sq.n > 0 {
		w := qp.sq.at(0)
		wc := WC{WRID: w.ID, Status: WCWRFlushErr, Opcode: wcOpcodeOf(w.Op), QPNum: qp.num}
		qp.sq.pop()
		qp.ctr.sends.Add(1)
		qp.sendCQ.push(&wc)
	}
}

// countSend counts a send completion (not a flush) in Stats' Sends, and
// in SendOps for a SEND: one atomic add either way.
func (qp *QP) countSend(op Opcode) {
	if op == WRSend || op == WRSendWithImm {
		qp.ctr.sendOps.Add(1)
	} else {
		qp.ctr.sends.Add(1)
	}
}

// countSendErr counts an error completion's status where it has a counter
// of its own. Only the error path calls it.
func (qp *QP) countSendErr(st WCStatus) {
	switch st {
	case WCRetryExcErr:
		qp.ctr.retryExceeded.Add(1)
	case WCRNRRetryExcErr:
		qp.ctr.rnrRetryExceeded.Add(1)
	}
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

// completeSend reports the completion of the oldest outstanding request,
// named by its ssn; a completion for a request verbs already flushed is
// ignored. An error status moves the QP to ERR and flushes the rest.
func (qp *QP) completeSend(ssn uint64, st WCStatus, byteLen uint32, cause error) {
	qp.mu.Lock()
	if qp.sq.n == 0 || qp.sq.at(0).SSN != ssn || qp.sq.issued == 0 {
		qp.mu.Unlock()
		return
	}
	w := qp.sq.at(0)
	wc := WC{WRID: w.ID, Status: st, Opcode: wcOpcodeOf(w.Op), ByteLen: byteLen, QPNum: qp.num}
	signaled := w.Signaled
	id, op := w.ID, w.Op
	qp.sq.pop()
	qp.sq.issued--
	qp.countSend(op) // before the completion is visible
	var failCause error
	if st != WCSuccess {
		qp.countSendErr(st)
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
		qp.ctx.postEvent(AsyncEvent{Type: EventQPFatal, QP: qp, Cause: cause})
	}
	if qp.notify != nil {
		qp.notify.StateChanged(from, QPSErr, qp.Query())
	}
	qp.flushRQ()
	qp.kick()
}

// fail moves the QP to ERR for a reason a provider detected (a responder
// error, a dead peer), posts ev unless it is negative, and flushes both
// queues. Call it with no verbs lock held.
func (qp *QP) fail(cause error, ev AsyncEventType, post bool) {
	qp.mu.Lock()
	from := qp.state
	changed := qp.enterErrLocked(cause)
	qp.mu.Unlock()
	if !changed {
		return
	}
	if post {
		qp.ctx.postEvent(AsyncEvent{Type: ev, QP: qp, Cause: cause})
	}
	qp.afterErr(from, cause, false)
}
