package rc

import (
	"errors"
	"fmt"

	"github.com/ibex-rdma/ibex/ib"
)

// Kinds of responder errors, wrapped by the cause given to Host.Fatal.
var (
	ErrInvalidRequest  = errors.New("invalid request")
	ErrRemoteAccess    = errors.New("remote access error")
	ErrRemoteOperation = errors.New("remote operational error")
)

// resource remembers an executed READ or atomic for duplicate replay
// (the responder resources of max_dest_rd_atomic).
type resource struct {
	used        bool
	read        bool
	first, last uint32 // PSN range
	va          uint64
	rkey        uint32
	len         uint32
	orig        uint64 // atomic: the original value returned
}

const (
	itemAck = iota
	itemNak
	itemAtomicAck
	itemRead
)

// outItem is a response waiting to be sent. Responses go out in the order
// their requests were executed, so an ACK never overtakes the READ
// response of an earlier request.
type outItem struct {
	kind uint8
	syn  ib.Syndrome
	psn  uint32
	msn  uint32
	orig uint64
	// READ response run
	va       uint64
	rkey     uint32
	len, off uint32
}

// responder is the receive side of a QP.
type responder struct {
	c       *Conn
	epsn    uint32 // expected PSN
	msn     uint32
	nakSent bool // a NAK for epsn went out; no more until back in sequence

	// The message in progress (multi-packet SEND or WRITE).
	inMsg     bool
	msgWrite  bool
	recvTaken bool
	off       uint32
	va        uint64
	rkey      uint32
	total     uint32

	res     []resource
	resNext int

	out     []outItem
	outHead int
	outN    int

	// CNPs (congestion.go): one is due; when the last was.
	cnpPending bool
	cnpValid   bool
	lastCNP    int64
}

func (r *responder) init(c *Conn) {
	r.c = c
	r.epsn = c.cfg.RecvPSN
	r.res = make([]resource, max(c.cfg.MaxDestRdAtomic, 1))
	r.out = make([]outItem, 2*max(c.cfg.MaxDestRdAtomic, 1)+16)
}

func (r *responder) push(it outItem) {
	if it.kind == itemAck && r.outN > 0 {
		if t := &r.out[(r.outHead+r.outN-1)%len(r.out)]; t.kind == itemAck {
			t.psn, t.msn = it.psn, it.msn // coalesce
			return
		}
	}
	if r.outN == len(r.out) {
		r.c.st.Dropped++ // the requester's timeout recovers it
		return
	}
	r.out[(r.outHead+r.outN)%len(r.out)] = it
	r.outN++
}

func (r *responder) nak(syn ib.Syndrome, psn uint32) {
	r.push(outItem{kind: itemNak, syn: syn, psn: psn, msn: r.msn})
}

// classC sends an error NAK and stops the engine once it is out. The cause
// wraps ErrInvalidRequest, ErrRemoteAccess or ErrRemoteOperation.
func (r *responder) classC(syn ib.Syndrome, psn uint32, format string, args ...any) {
	r.nak(syn, psn)
	r.c.st.ErrNaksSent++
	cause := fmt.Errorf("qp %#x: request from qp %#x at psn %#x: %s: %w", r.c.cfg.QPN, r.c.cfg.DestQPN, psn, fmt.Sprintf(format, args...), nakKind(syn))
	r.c.fatal(cause)
}

func (r *responder) receive(now int64, pkt *Packet) {
	p := pkt.PSN
	if pkt.Opcode > ib.RCFetchAdd { // the last request opcode rc knows
		r.c.st.Dropped++
		return
	}
	d := ib.PSNDiff(p, r.epsn)
	if d > 0 {
		r.c.st.OutOfSequence++
		if !r.nakSent {
			r.nakSent = true
			r.c.st.SeqNaksSent++
			r.nak(ib.SynNAKPSNSeq, r.epsn)
		}
		return
	}
	if d < 0 {
		r.c.st.Duplicates++
		r.duplicate(pkt)
		return
	}
	op := pkt.Opcode
	acc := r.c.cfg.Access
	mtu := uint32(r.c.cfg.MTU)
	plen := uint32(len(pkt.Payload))
	switch {
	case op <= ib.RCWriteOnlyImm:
		write := op.Has(ib.MaskWrite)
		first := op.Has(ib.MaskFirst)
		last := op.Has(ib.MaskLast)
		imm := op.Has(ib.MaskImmDt)
		if first == r.inMsg || (r.inMsg && write != r.msgWrite) {
			r.classC(ib.SynNAKInvalidRequest, p, "opcode %#x out of sequence", uint8(op))
			return
		}
		if write && acc&ib.AccessRemoteWrite == 0 {
			r.classC(ib.SynNAKInvalidRequest, p, "RDMA WRITE not permitted by the QP's access flags")
			return
		}
		if (!last && plen != mtu) || plen > mtu {
			r.classC(ib.SynNAKInvalidRequest, p, "payload %d bytes in opcode %#x with path MTU %d", plen, uint8(op), mtu)
			return
		}
		needRecv := (!write && first) || (write && imm)
		if needRecv && !r.recvTaken {
			if !r.c.host.RecvBegin() {
				r.nakSent = true
				r.c.st.RNRNaksSent++
				r.nak(ib.SynRNR(r.c.cfg.MinRNRTimer), p)
				return
			}
			r.recvTaken = true
		}
		if first {
			r.off = 0
			if write {
				r.va, r.rkey, r.total = pkt.VA, pkt.RKey, pkt.DMALen
				if r.total > 0 {
					if st := r.c.host.RemoteCheck(r.rkey, r.va, r.total, ib.AccessRemoteWrite); st != ib.WCSuccess {
						r.recvTaken = false // the receive is flushed with the QP
						r.classC(ib.SynNAKRemoteAccess, p, "RDMA WRITE rkey %#x [%#x, +%d) refused", r.rkey, r.va, r.total)
						return
					}
				}
			}
		}
		if write {
			if r.off+plen > r.total || (last && r.off+plen != r.total) {
				r.recvTaken = false
				r.classC(ib.SynNAKInvalidRequest, p, "RDMA WRITE payload overruns its DMA length %d", r.total)
				return
			}
			if plen > 0 && !r.c.host.RemoteWrite(r.rkey, r.va+uint64(r.off), pkt.Payload) {
				r.recvTaken = false
				r.classC(ib.SynNAKRemoteAccess, p, "RDMA WRITE rkey %#x became invalid mid-message", r.rkey)
				return
			}
		} else if st := placeStatus(r.c.host.RecvPlace(r.off, pkt.Payload)); st != ib.WCSuccess {
			r.endRecv(st)
			if st == ib.WCLocLenErr {
				r.classC(ib.SynNAKInvalidRequest, p, "SEND of more than the receive buffer holds")
			} else {
				r.classC(ib.SynNAKRemoteOp, p, "receive buffer refused the SEND (%v)", st)
			}
			return
		}
		r.off += plen
		r.inMsg, r.msgWrite = !last, write
		if last {
			if r.recvTaken {
				r.recvTaken = false
				r.c.host.RecvComplete(ib.WCSuccess, r.off, pkt.Imm, imm, write)
			}
			r.msn = (r.msn + 1) & ib.PSNMask
		}
		r.epsn = ib.PSNAdd(r.epsn, 1)
		r.nakSent = false
		if pkt.AckReq {
			r.c.st.AcksSent++
			r.push(outItem{kind: itemAck, psn: p, msn: r.msn})
		}
	case op == ib.RCReadRequest:
		if r.inMsg {
			r.classC(ib.SynNAKInvalidRequest, p, "READ request inside a multi-packet message")
			return
		}
		if acc&ib.AccessRemoteRead == 0 || r.c.cfg.MaxDestRdAtomic == 0 {
			r.classC(ib.SynNAKInvalidRequest, p, "RDMA READ not permitted (access flags or max_dest_rd_atomic 0)")
			return
		}
		if pkt.DMALen > 0 {
			if st := r.c.host.RemoteCheck(pkt.RKey, pkt.VA, pkt.DMALen, ib.AccessRemoteRead); st != ib.WCSuccess {
				r.classC(ib.SynNAKRemoteAccess, p, "RDMA READ rkey %#x [%#x, +%d) refused", pkt.RKey, pkt.VA, pkt.DMALen)
				return
			}
		}
		n := max(1, (pkt.DMALen+mtu-1)/mtu)
		r.res[r.resNext] = resource{used: true, read: true, first: p, last: ib.PSNAdd(p, int(n)-1), va: pkt.VA, rkey: pkt.RKey, len: pkt.DMALen}
		r.resNext = (r.resNext + 1) % len(r.res)
		r.epsn = ib.PSNAdd(r.epsn, int(n))
		r.msn = (r.msn + 1) & ib.PSNMask
		r.nakSent = false
		r.push(outItem{kind: itemRead, psn: p, msn: r.msn, va: pkt.VA, rkey: pkt.RKey, len: pkt.DMALen})
	case op == ib.RCCompareSwap || op == ib.RCFetchAdd:
		if r.inMsg {
			r.classC(ib.SynNAKInvalidRequest, p, "atomic inside a multi-packet message")
			return
		}
		if acc&ib.AccessRemoteAtomic == 0 || r.c.cfg.MaxDestRdAtomic == 0 {
			r.classC(ib.SynNAKInvalidRequest, p, "atomic not permitted (access flags or max_dest_rd_atomic 0)")
			return
		}
		if pkt.VA&7 != 0 {
			r.classC(ib.SynNAKInvalidRequest, p, "atomic address %#x not 8-byte aligned", pkt.VA)
			return
		}
		if st := r.c.host.RemoteCheck(pkt.RKey, pkt.VA, 8, ib.AccessRemoteAtomic); st != ib.WCSuccess {
			r.classC(ib.SynNAKRemoteAccess, p, "atomic rkey %#x at %#x refused", pkt.RKey, pkt.VA)
			return
		}
		aop, cmp := atomicOp(op), pkt.SwapAdd
		if aop == ib.WRAtomicCmpAndSwp {
			cmp = pkt.Compare
		}
		orig, ok := r.c.host.RemoteAtomic(pkt.RKey, pkt.VA, aop, cmp, pkt.SwapAdd)
		if !ok {
			r.classC(ib.SynNAKRemoteAccess, p, "atomic rkey %#x became invalid", pkt.RKey)
			return
		}
		r.res[r.resNext] = resource{used: true, first: p, last: p, orig: orig}
		r.resNext = (r.resNext + 1) % len(r.res)
		r.epsn = ib.PSNAdd(r.epsn, 1)
		r.msn = (r.msn + 1) & ib.PSNMask
		r.nakSent = false
		r.push(outItem{kind: itemAtomicAck, psn: p, msn: r.msn, orig: orig})
	default:
		r.c.st.Dropped++
	}
}

// endRecv completes a receive the failing message had taken.
func (r *responder) endRecv(st ib.WCStatus) {
	if r.recvTaken {
		r.recvTaken = false
		r.c.host.RecvComplete(st, 0, 0, false, r.msgWrite)
	}
}

// duplicate answers a request the responder has already executed.
func (r *responder) duplicate(pkt *Packet) {
	p := pkt.PSN
	switch pkt.Opcode {
	case ib.RCReadRequest:
		for i := range r.res {
			s := &r.res[i]
			if !s.used || !s.read || ib.PSNDiff(p, s.first) < 0 || ib.PSNDiff(p, s.last) > 0 || s.rkey != pkt.RKey {
				continue
			}
			if pkt.VA < s.va || pkt.VA+uint64(pkt.DMALen) > s.va+uint64(s.len) {
				continue
			}
			r.push(outItem{kind: itemRead, psn: p, msn: r.msn, va: pkt.VA, rkey: pkt.RKey, len: pkt.DMALen})
			return
		}
		r.c.st.Dropped++
	case ib.RCCompareSwap, ib.RCFetchAdd:
		for i := range r.res {
			if s := &r.res[i]; s.used && !s.read && s.first == p {
				r.push(outItem{kind: itemAtomicAck, psn: p, msn: r.msn, orig: s.orig})
				return
			}
		}
		r.c.st.Dropped++
	default:
		// SEND/WRITE: acknowledge what has been received (C9-105).
		r.c.st.AcksSent++
		r.push(outItem{kind: itemAck, psn: ib.PSNAdd(r.epsn, -1), msn: r.msn})
	}
}

// poll emits the next queued response.
func (r *responder) poll(now int64, pkt *Packet, buf []byte) bool {
	if r.outN == 0 {
		return false
	}
	it := &r.out[r.outHead]
	pkt.PSN, pkt.MSN = it.psn, it.msn
	done := true
	switch it.kind {
	case itemAck:
		pkt.Opcode, pkt.Syndrome = ib.RCAck, ib.SynACK
	case itemNak:
		pkt.Opcode, pkt.Syndrome = ib.RCAck, it.syn
	case itemAtomicAck:
		pkt.Opcode, pkt.Syndrome, pkt.Orig = ib.RCAtomicAck, ib.SynACK, it.orig
	case itemRead:
		mtu := uint32(r.c.cfg.MTU)
		seg := min(mtu, it.len-it.off)
		idx := it.off / mtu
		n := max(1, (it.len+mtu-1)/mtu)
		first, last := idx == 0, idx == n-1
		switch {
		case first && last:
			pkt.Opcode = ib.RCReadResponseOnly
		case first:
			pkt.Opcode = ib.RCReadResponseFirst
		case last:
			pkt.Opcode = ib.RCReadResponseLast
		default:
			pkt.Opcode = ib.RCReadResponseMiddle
		}
		pkt.Syndrome = ib.SynACK
		pkt.PSN = ib.PSNAdd(it.psn, int(idx))
		pkt.Payload = buf[:seg]
		if seg > 0 && !r.c.host.RemoteRead(it.rkey, it.va+uint64(it.off), pkt.Payload) {
			// The MR went away mid-response: NAK instead, and stop.
			*pkt = Packet{Opcode: ib.RCAck, Syndrome: ib.SynNAKRemoteAccess, PSN: pkt.PSN, MSN: it.msn, DestQPN: pkt.DestQPN}
			r.outHead = (r.outHead + 1) % len(r.out)
			r.outN--
			r.c.st.ErrNaksSent++
			r.c.fatal(fmt.Errorf("qp %#x: READ rkey %#x became invalid mid-response: %w", r.c.cfg.QPN, it.rkey, ErrRemoteAccess))
			return true
		}
		it.off += seg
		done = last
	}
	if done {
		r.outHead = (r.outHead + 1) % len(r.out)
		r.outN--
	}
	return true
}
