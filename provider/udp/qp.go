package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/psp"
	"github.com/ibex-rdma/ibex/rc"
	"github.com/ibex-rdma/ibex/rc/rcwire"
	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/verbs/driver"
	"github.com/ibex-rdma/ibex/wire"
)

// qpDriver is one QP's transport: the verbs side (Issue, StateChanged) runs
// in application goroutines and only posts commands; everything else runs
// in the device loop, which owns the engine.
type qpDriver struct {
	dev   *device
	qp    driver.QP
	works []driver.SendWork // the copy of request ssn is works[ssn%len]
	// halted is set by StateChanged to RESET or ERR before the command is
	// queued, and cleared by the loop when it builds the next engine: the
	// loop takes no packet for the QP from the moment Modify returns, even
	// in a pass that has not seen the command yet. stateSeq numbers the
	// state commands as StateChanged queues them, haltSeq is the number of
	// the latest RESET or ERR: an RTR the loop applies clears halted only
	// if no RESET or ERR was asked for after it (a loop that had already
	// taken INIT, RTR, RTS off the queue when Modify to RESET returned
	// would otherwise let packets in until it applied the RESET).
	halted   atomic.Bool
	stateSeq atomic.Uint64
	haltSeq  atomic.Uint64
	// Encryption (psp.go): the SPI this QP receives under (0: none), the
	// peer's (set before RTR), and a rotation asked for (RotatePSP).
	recvSPI uint32
	peerSPI atomic.Uint32
	rotate  atomic.Bool
	resume  *PSPState // RestorePSP's, for the next RTR
	rxFlow  psp.Flow  // loop-owned: the receive flow of the SAs in use
	txBase  uint32    // loop-owned: the peer SPI they were set up for

	// Loop-owned.
	eng       *rc.Conn
	dropAfter bool // stop the engine once its last output (a NAK) is out
	destQPN   uint32
	peer      netip.AddrPort
	peerUDP   *net.UDPAddr
	pkey      uint16 // the P_Key of the QP's pkey_index: sent in every BTH, matched on receive
	sport     uint16 // the UDP source port, if the conn honours one (message.SrcPort); else 0
	sendICRC  wire.ICRCPrefix
	rsn       uint64   // the receive the engine is filling
	seen      rc.Stats // engine counters already added to the QP's
	ready     bool     // on the device's ready list
	tx        *psp.Sender
	rx        *psp.Receiver // non-nil: the QP is encrypted, plaintext is dropped
}

// Issue copies the request and hands it to the loop.
func (q *qpDriver) Issue(w *driver.SendWQE) {
	w.CopyTo(&q.works[w.SSN%uint64(len(q.works))])
	q.dev.post(cmd{kind: cmdIssue, q: q, ssn: w.SSN})
}

// StateChanged hands the change to the loop; it never blocks, because the
// loop itself causes some (an error completion moves the QP to ERR).
func (q *qpDriver) StateChanged(from, to verbs.QPState, attr verbs.QPAttr) {
	seq := q.stateSeq.Add(1)
	if to == verbs.QPSReset || to == verbs.QPSErr {
		q.haltSeq.Store(seq)
		q.halted.Store(true)
	}
	q.dev.post(cmd{kind: cmdState, q: q, ssn: seq, from: from, to: to, attr: attr})
}

func (q *qpDriver) Destroy() {
	q.dev.pspQPs.CompareAndDelete(q.qp.Num(), q)
	q.dev.post(cmd{kind: cmdDelQP, q: q})
}

// window sizes the send window from the socket's receive buffer, so a
// window of datagrams fits in the peer's buffer (both ends use the same
// settings): drops stay the exception. The cap of 512 PSNs was measured:
// 1 MiB WRITEs on loopback go from ~1.2 GB/s at 128 to ~1.75 GB/s at 512,
// and the lossy network-namespace test is no worse; at 1024 its READs
// suffer from go-back-N.
func (q *qpDriver) window(mtu int) int {
	w := q.dev.rcvBuf() / (mtu + 256) / 2
	return max(8, min(w, 512))
}

// state runs in the loop.
func (q *qpDriver) state(d *device, seq uint64, from, to verbs.QPState, a verbs.QPAttr) {
	q.pkey = d.pkeyAt(a.PKeyIndex)
	switch to {
	case verbs.QPSRTR:
		if from != verbs.QPSInit {
			return
		}
		q.destQPN = a.DestQPN
		ip := netip.AddrFrom16(a.AH.DGID).Unmap()
		q.peer = netip.AddrPortFrom(ip, d.addr.Port())
		q.peerUDP = net.UDPAddrFromAddrPort(q.peer)
		// rxe's source port for an RC QP set up by modify_qp: ECMP
		// fabrics hash on it, so every QP gets its own. A socket can send
		// only from the port it is bound to.
		src := d.addr
		q.sport = 0
		if d.conn.SourcePorts() {
			q.sport = wire.SourcePort(wire.FlowLabel(q.qp.Num(), a.DestQPN))
			src = netip.AddrPortFrom(d.addr.Addr(), q.sport)
		}
		pre, err := wire.NewICRCPrefix(&wire.Encap{Src: src, Dst: q.peer, DF: true, TTL: 64})
		if err != nil {
			q.qp.Fail(fmt.Errorf("udp: qp %#x: peer %v: %w", q.qp.Num(), q.peer, err), verbs.EventQPFatal, true)
			return
		}
		q.sendICRC = pre
		mtu := a.PathMTU.Bytes()
		eng, err := rc.New(rc.Config{
			QPN: q.qp.Num(), DestQPN: a.DestQPN, RecvPSN: a.RQPSN, MTU: mtu,
			MinRNRTimer: a.MinRNRTimer, MaxDestRdAtomic: int(a.MaxDestRdAtomic),
			Access: a.AccessFlags & (ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessRemoteAtomic),
			Window: q.window(mtu), MaxSendWR: len(q.works), MinRTO: 2e6, Pacer: d.pacer,
		}, q)
		if err != nil {
			q.qp.Fail(fmt.Errorf("udp: qp %#x: %w", q.qp.Num(), err), verbs.EventQPFatal, true)
			return
		}
		if err := q.setupPSP(d, a); err != nil {
			q.qp.Fail(fmt.Errorf("udp: qp %#x: %w", q.qp.Num(), err), verbs.EventQPFatal, true)
			return
		}
		q.eng, q.dropAfter, q.seen = eng, false, rc.Stats{}
		if q.haltSeq.Load() < seq {
			q.halted.Store(false)
		}
	case verbs.QPSRTS:
		if q.eng == nil {
			return
		}
		if from == verbs.QPSRTR {
			if err := q.eng.StartSend(a.SQPSN, a.Timeout, a.RetryCnt, a.RNRRetry, int(a.MaxQPRdAtomic)); err != nil {
				q.qp.Fail(fmt.Errorf("udp: qp %#x: %w", q.qp.Num(), err), verbs.EventQPFatal, true)
			}
		}
	case verbs.QPSSQD:
		if q.eng != nil {
			q.eng.SetMaxRdAtomic(int(a.MaxQPRdAtomic))
		}
	case verbs.QPSErr, verbs.QPSReset:
		q.dropAfter = true
	}
	if to == verbs.QPSRTS && from == verbs.QPSSQD && q.eng != nil {
		q.eng.SetMaxRdAtomic(int(a.MaxQPRdAtomic))
	}
}

// syncStats copies the engine's requester counters into the QP's.
func (q *qpDriver) syncStats() {
	if q.eng == nil {
		return
	}
	st, o := q.eng.Stats(), &q.seen
	if st == *o {
		return
	}
	q.qp.AddStats(verbs.QPStats{RNRNaks: st.RNRNaksRecv - o.RNRNaksRecv, Retries: st.Retries - o.Retries,
		PktsSent: st.PktsSent - o.PktsSent, PktsRecv: st.PktsRecv - o.PktsRecv, Retransmits: st.Retransmits - o.Retransmits,
		SeqNaksSent: st.SeqNaksSent - o.SeqNaksSent, SeqNaksRecv: st.SeqNaksRecv - o.SeqNaksRecv,
		RNRNaksSent: st.RNRNaksSent - o.RNRNaksSent, ErrNaksSent: st.ErrNaksSent - o.ErrNaksSent,
		ErrNaksRecv: st.ErrNaksRecv - o.ErrNaksRecv, Duplicates: st.Duplicates - o.Duplicates,
		OutOfSequence: st.OutOfSequence - o.OutOfSequence, CNPsSent: st.CNPsSent - o.CNPsSent, CNPsRecv: st.CNPsRecv - o.CNPsRecv,
		ECNMarked: st.ECNMarked - o.ECNMarked, WindowCuts: st.WindowCuts - o.WindowCuts, Paced: st.Paced - o.Paced,
		OutOfWindow: st.OutOfWindow - o.OutOfWindow})
	q.seen = st
}

// afterEngine drops a stopped engine once its output has been sent.
func (q *qpDriver) afterEngine() {
	if q.dropAfter && q.eng != nil {
		// The copies in q.works are not released here: after a RESET an
		// application goroutine may already be issuing into them. Each is
		// overwritten by its slot's next request.
		q.eng = nil
		q.dropAfter = false
	}
}

func (q *qpDriver) issue(ssn uint64) {
	if q.eng == nil || q.eng.Dead() || q.dropAfter {
		return // the QP left RTS; verbs flushes the request
	}
	s := &q.works[ssn%uint64(len(q.works))]
	req := rc.Request{ID: ssn, Op: s.Op, Len: uint32(s.Length), RemoteAddr: s.RemoteAddr, RKey: s.RKey,
		Imm: s.Imm, CompareAdd: s.CompareAdd, Swap: s.Swap, Fence: s.Flags&verbs.SendFence != 0, Solicited: s.Flags&verbs.SendSolicited != 0}
	if err := q.eng.Post(req); err != nil {
		q.qp.CompleteSend(ssn, verbs.WCLocQPOpErr, 0, fmt.Errorf("udp: %w", err))
	}
}

// encode turns an engine packet into a RoCEv2 datagram in buf.
func (q *qpDriver) encode(p *rc.Packet, wp *wire.Packet, buf []byte) ([]byte, error) {
	rcwire.ToWire(p, q.destQPN, wp)
	wp.BTH.PKey = q.pkey
	return wire.AppendIB(buf, wp, &q.sendICRC)
}

// The rc.Host methods below run in the device loop.

func (q *qpDriver) work(id uint64) *driver.SendWork { return &q.works[id%uint64(len(q.works))] }

func (q *qpDriver) Payload(id uint64, off uint32, dst []byte) bool {
	return q.work(id).Gather(uint64(off), dst)
}

func (q *qpDriver) ReadResponse(id uint64, off uint32, src []byte) bool {
	return q.work(id).Scatter(uint64(off), src)
}

func (q *qpDriver) AtomicResult(id uint64, orig uint64) bool { return q.work(id).AtomicResult(orig) }

func (q *qpDriver) SendComplete(id uint64, st ib.WCStatus, n uint32, cause error) {
	q.syncStats() // the counters are current when the completion is seen
	if st != ib.WCSuccess {
		q.dropAfter = true // the engine stopped; verbs moves the QP to ERR
	}
	// Release the copy before completing: once verbs retires the request,
	// an application goroutine may Issue into the same slot.
	q.work(id).Release()
	q.qp.CompleteSend(id, st, n, cause)
}

func (q *qpDriver) Fatal(cause error) {
	q.syncStats()
	q.dropAfter = true
	ev := verbs.EventQPFatal
	switch {
	case errors.Is(cause, rc.ErrRemoteAccess):
		ev = verbs.EventQPAccessErr
	case errors.Is(cause, rc.ErrInvalidRequest):
		ev = verbs.EventQPReqErr
	}
	q.qp.Fail(cause, ev, true)
}

func (q *qpDriver) RecvBegin() bool {
	rsn, ok := q.qp.RecvBegin()
	q.rsn = rsn
	return ok
}

func (q *qpDriver) RecvPlace(off uint32, src []byte) ib.WCStatus {
	return q.qp.RecvPlace(q.rsn, uint64(off), src)
}

func (q *qpDriver) RecvComplete(st ib.WCStatus, n uint32, imm uint32, hasImm, write bool) {
	if !q.qp.RecvComplete(q.rsn, st, n, imm, hasImm, write, q.destQPN) {
		q.qp.Fail(fmt.Errorf("qp %#x: recv cq overflowed; a receive completion was lost", q.qp.Num()), verbs.EventQPFatal, true)
	}
}

func (q *qpDriver) RemoteCheck(rkey uint32, va uint64, n uint32, need ib.Access) ib.WCStatus {
	if q.qp.PD().RemoteCheck(rkey, va, uint64(n), need) != nil {
		return ib.WCRemAccessErr
	}
	return ib.WCSuccess
}

func (q *qpDriver) RemoteWrite(rkey uint32, va uint64, src []byte) bool {
	return q.qp.PD().RemoteWrite(rkey, va, src)
}

func (q *qpDriver) RemoteRead(rkey uint32, va uint64, dst []byte) bool {
	return q.qp.PD().RemoteRead(rkey, va, dst)
}

func (q *qpDriver) RemoteAtomic(rkey uint32, va uint64, op ib.WROpcode, cmp, swap uint64) (uint64, bool) {
	return q.qp.PD().RemoteAtomic(rkey, va, op, cmp, swap)
}
