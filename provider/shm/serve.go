package shm

import (
	"encoding/binary"
	"fmt"

	"github.com/ibex-rdma/ibex/verbs"
)

// serve runs in the progress goroutine when this QP's ready bit was set:
// the requester looks at acks and ring space, the responder consumes the
// peer's ring.
func (q *qpDriver) serve() {
	l := q.link.Load()
	if l == nil || l.peer == nil || !l.peer.pin() {
		return
	}
	defer l.peer.unpin()
	q.mu.Lock()
	q.pumpLocked()
	q.mu.Unlock()
	if l.ph != nil && portUp() {
		q.rmu.Lock()
		q.consume(l)
		q.rmu.Unlock()
	}
}

// consume processes the messages in the peer's ring. Everything read from
// it is the peer's to write and is checked before use.
func (q *qpDriver) consume(l *link) {
	ph, own := l.ph, l.own
	if ph.u64(hGen).Load() != l.pgen {
		return
	}
	head, tail := ph.u64(hHead).Load(), own.u64(hTail).Load()
	if head == tail {
		return
	}
	if head-tail > ringSlots {
		q.protocol(l, fmt.Sprintf("ring head %d is %d slots past our tail %d", head, head-tail, tail))
		return
	}
	shmClock.Load()
	acked := q.acked
	for ; tail != head; tail++ {
		s := slotAt(ph, tail)
		op, flags := s[sOp], s[sFlags]
		n := uint64(binary.LittleEndian.Uint32(s[sLen:]))
		seq := binary.LittleEndian.Uint64(s[sSeq:])
		total := binary.LittleEndian.Uint64(s[sTotal:])
		imm := binary.LittleEndian.Uint32(s[sImm:])
		if n > slotPayload {
			q.protocol(l, fmt.Sprintf("slot of %d bytes", n))
			break
		}
		if ph.u64(hGen).Load() != l.pgen {
			return // the peer retired its half under us: drop what we read
		}
		switch st := q.qp.State(); st {
		case verbs.QPSRTR, verbs.QPSRTS, verbs.QPSSQD:
		default:
			continue // ERR flushes, RESET discards: nothing is served
		}
		if op != msgReqErr && seq != q.acked+1 && !(op == msgSend && flags&flagFirst == 0 && seq == q.acked+1) {
			q.protocol(l, fmt.Sprintf("message %d after %d", seq, q.acked))
			break
		}
		switch op {
		case msgSend:
			q.recvFragment(l, flags, seq, total, imm, s[slotHdr:slotHdr+n])
		case msgWriteImm:
			rsn, ok := q.qp.RecvBegin()
			if !ok {
				q.protocol(l, "WRITE_WITH_IMM without a receive credit")
				break
			}
			if !q.qp.RecvComplete(rsn, verbs.WCSuccess, uint32(total), imm, true, true, l.peerQPN) {
				q.cqOverflow()
			}
			q.acked = seq
		case msgAtomic:
			q.atomic(l, s, seq)
		case msgReqErr:
			ev := verbs.EventQPAccessErr
			if imm == stInvReq {
				ev = verbs.EventQPReqErr
			}
			q.qp.Fail(fmt.Errorf("qp %#x: %s (found by the requester, qp %#x)", q.qp.Num(), printable(s[slotHdr:slotHdr+n]), l.peerQPN), ev, true)
		default:
			q.protocol(l, fmt.Sprintf("unknown message kind %d", op))
		}
	}
	own.u64(hTail).Store(tail)
	if q.acked != acked {
		own.u64(hAcked).Store(q.acked)
	}
	shmClock.Add(1)
	notify(l.peer.m, ph.u32(hSlot).Load())
}

func printable(b []byte) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c >= 0x20 && c < 0x7f {
			out = append(out, c)
		}
	}
	return string(out)
}

// recvFragment places one fragment of a SEND into the head receive.
func (q *qpDriver) recvFragment(l *link, flags uint8, seq, total uint64, imm uint32, payload []byte) {
	if flags&flagFirst != 0 {
		rsn, ok := q.qp.RecvBegin()
		if !ok {
			q.protocol(l, "SEND without a receive credit")
			return
		}
		q.rsn, q.inMsg, q.msgOff, q.msgStatus = rsn, true, 0, verbs.WCSuccess
	}
	if !q.inMsg {
		q.protocol(l, "SEND fragment without a first one")
		return
	}
	if q.msgStatus == verbs.WCSuccess {
		q.msgStatus = q.qp.RecvPlace(q.rsn, q.msgOff, payload)
	}
	q.msgOff += uint64(len(payload))
	if flags&flagLast == 0 {
		return
	}
	q.inMsg = false
	st := q.msgStatus
	if q.msgOff != total {
		q.protocol(l, fmt.Sprintf("SEND of %d bytes announced %d", q.msgOff, total))
		return
	}
	ok := q.qp.RecvComplete(q.rsn, st, uint32(total), imm, flags&flagImm != 0, false, l.peerQPN)
	switch st {
	case verbs.WCSuccess:
		if !ok {
			q.cqOverflow()
		}
	case verbs.WCLocLenErr:
		q.reply(l, seq, stInvReq)
		q.qp.Fail(fmt.Errorf("qp %#x: %d-byte SEND from qp %#x does not fit the receive", q.qp.Num(), total, l.peerQPN), 0, false)
		return
	default:
		q.reply(l, seq, stRemOp)
		q.qp.Fail(fmt.Errorf("qp %#x: receive for a SEND from qp %#x: an SGE's MR is deregistered or lacks LOCAL_WRITE", q.qp.Num(), l.peerQPN), 0, false)
		return
	}
	q.acked = seq
}

// reply reports an error for message seq to the requester.
func (q *qpDriver) reply(l *link, seq uint64, st uint32) {
	l.own.u32(hErrStatus).Store(st)
	l.own.u64(hErrSeq).Store(seq)
	q.acked = seq
	l.own.u64(hAcked).Store(seq)
}

// atomic executes an atomic on our ordinary memory for the peer.
func (q *qpDriver) atomic(l *link, s mem, seq uint64) {
	op := verbs.Opcode(binary.LittleEndian.Uint32(s[sImm:]))
	raddr := binary.LittleEndian.Uint64(s[sRAddr:])
	rkey := binary.LittleEndian.Uint32(s[sRKey:])
	cmp, swap := binary.LittleEndian.Uint64(s[sCmp:]), binary.LittleEndian.Uint64(s[sSwap:])
	if op != verbs.WRAtomicCmpAndSwp && op != verbs.WRAtomicFetchAndAdd {
		q.protocol(l, fmt.Sprintf("atomic opcode %d", op))
		return
	}
	orig, ok := q.qp.PD().RemoteAtomic(rkey, raddr, op, cmp, swap)
	if !ok {
		q.reply(l, seq, stAccess)
		q.qp.Fail(fmt.Errorf("qp %#x: remote access error for %v from qp %#x: rkey %#x at %#x", q.qp.Num(), op, l.peerQPN, rkey, raddr), verbs.EventQPAccessErr, true)
		return
	}
	l.own.u64(hResults + 8*(seq%resultSlots)).Store(orig)
	q.acked = seq
}

func (q *qpDriver) cqOverflow() {
	q.qp.Fail(fmt.Errorf("qp %#x: recv cq overflowed; a receive completion was lost", q.qp.Num()), verbs.EventQPFatal, true)
}

// protocol fails the QP when the peer broke the ring protocol (a bug, or
// memory corruption in the peer): nothing it wrote is trusted further.
func (q *qpDriver) protocol(l *link, what string) {
	q.qp.Fail(fmt.Errorf("qp %#x: shm protocol error from peer qp %#x (pid %d): %s", q.qp.Num(), l.peerQPN, l.peer.pid, what), verbs.EventQPFatal, true)
}
