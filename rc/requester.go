package rc

import (
	"errors"
	"fmt"

	"github.com/ibex-rdma/ibex/ib"
)

// ErrQueueFull is returned by Post when MaxSendWR requests are outstanding.
var ErrQueueFull = errors.New("rc: request queue full")

// sreq is a request in the requester's queue.
type sreq struct {
	Request
	firstPSN uint32
	npkts    uint32 // PSNs the message spans: packets, or READ response packets
	started  bool   // PSNs assigned
	done     bool   // READ/atomic: the final response arrived
	recvd    uint32 // READ: response bytes received in order
	sentAt   int64  // when the message's last packet first went out
	resent   bool   // some packet went out twice (no RTT sample: Karn)
}

// requester is the send side and completer of a QP.
type requester struct {
	c    *Conn
	ring []sreq
	head int
	n    int // requests queued, from head
	next int // index (from head) of the request being transmitted
	off  uint32

	psn      uint32 // next PSN to transmit
	sentEnd  uint32 // one past the highest PSN ever transmitted
	una      uint32 // oldest unacknowledged PSN
	sinceAck int    // packets since the last AckReq

	rto, srtt, rttvar int64
	maxRTO            int64 // from the timeout attribute; 0 = no timer
	deadlineAt        int64
	budgetAt          int64 // start of the current QP-timeout period without progress
	rnrUntil          int64
	retryLeft         uint8
	rnrLeft           uint8
	retrying          bool
	retryPSN          uint32

	// The congestion window (congestion.go).
	cwnd, ssthresh int
	credit         int   // PSNs acknowledged toward the next additive step
	cutValid       bool  // lastCut is set
	lastCut        int64 // when the window was last cut
	paceAt         int64 // the next retransmission's Pacer slot; 0: none yet
}

func (r *requester) init(c *Conn) {
	r.c = c
	r.ring = make([]sreq, c.cfg.MaxSendWR)
	r.psn, r.sentEnd, r.una = c.cfg.SendPSN, c.cfg.SendPSN, c.cfg.SendPSN
	r.retryLeft, r.rnrLeft = c.cfg.RetryCnt, c.cfg.RNRRetry
	r.cwnd, r.ssthresh = c.cfg.Window, c.cfg.Window
	r.maxRTO = ib.AckTimeout(c.cfg.Timeout).Nanoseconds() // 0: no timer
	r.rto = min(r.maxRTO, max(c.cfg.MinRTO, 50e6))
	if r.maxRTO > 0 && c.cfg.MinRTO > r.maxRTO {
		r.rto = r.maxRTO
	}
}

func (r *requester) at(i int) *sreq {
	i += r.head
	if i >= len(r.ring) {
		i -= len(r.ring)
	}
	return &r.ring[i]
}

// Post queues a request for transmission.
func (c *Conn) Post(req Request) error {
	r := &c.req
	if c.dead {
		return fmt.Errorf("rc: qp %#x: engine stopped after an error", c.cfg.QPN)
	}
	if r.n == len(r.ring) {
		return ErrQueueFull
	}
	if !req.Op.Valid() {
		return fmt.Errorf("rc: opcode %d unknown", req.Op)
	}
	if req.Op.IsAtomic() && req.Len != 8 {
		return fmt.Errorf("rc: %v length %d, want 8", req.Op, req.Len)
	}
	if req.Len > 1<<31 {
		return fmt.Errorf("rc: message length %d exceeds 2^31", req.Len)
	}
	w := r.at(r.n)
	*w = sreq{Request: req}
	r.n++
	return nil
}

func (r *requester) mtu() uint32 { return uint32(r.c.cfg.MTU) }

func (r *requester) pkts(n uint32) uint32 {
	if n == 0 {
		return 1
	}
	return (n + r.mtu() - 1) / r.mtu()
}

// window returns how many more PSNs may be put in flight: the congestion
// window (at most Config.Window) less those sent since the oldest
// unacknowledged.
func (r *requester) window() int {
	return min(r.c.cfg.Window, r.cwnd) - int(ib.PSNDiff(r.psn, r.una))
}

func (r *requester) poll(now int64, pkt *Packet, buf []byte) bool {
	if r.rnrUntil != 0 {
		if now < r.rnrUntil {
			return false
		}
		r.rnrUntil = 0
		// The RNR wait disarmed the retransmit timer; if a full window
		// keeps this poll from sending, PSNs are still unacknowledged
		// (a READ response lost before the RNR NAK), and only the
		// timer recovers them (seed 9638 of TestStateSimulation).
		if r.maxRTO > 0 && r.deadlineAt == 0 && ib.PSNDiff(r.sentEnd, r.una) > 0 {
			r.deadlineAt = now + r.rto
		}
	}
	if r.next >= r.n {
		return false
	}
	w := r.at(r.next)
	if !w.started {
		if w.Fence && r.next > 0 {
			return false
		}
		if w.Op.IsRdAtomic() {
			if r.c.cfg.MaxRdAtomic == 0 {
				if r.next == 0 { // complete in order: only once it is the oldest
					r.fail(w, ib.WCLocQPOpErr, fmt.Errorf("%v with max_rd_atomic 0", w.Op))
				}
				return false
			}
		}
	}
	if w.Op.IsRdAtomic() && r.rdAtomicOutstanding() >= r.c.cfg.MaxRdAtomic {
		return false
	}
	if r.window() <= 0 {
		return false
	}
	if p := r.c.cfg.Pacer; p != nil {
		if ib.PSNDiff(r.psn, r.sentEnd) < 0 {
			// A retransmission: the device's pacer says when.
			if r.paceAt == 0 {
				if at := p.reserve(now); at > now {
					r.paceAt = at // our slot: Deadline returns it
					r.c.st.Paced++
					return false
				}
			} else if now < r.paceAt {
				return false
			}
		}
		r.paceAt = 0
	}
	mtu := r.mtu()
	if !w.started {
		w.started = true
		w.firstPSN = r.psn
		w.npkts = r.pkts(w.Len)
		r.off = 0
	}
	pkt.PSN = r.psn
	pkt.SE = w.Solicited
	lastPkt := false
	switch w.Op {
	case ib.WRSend, ib.WRSendWithImm, ib.WRRDMAWrite, ib.WRRDMAWriteWithImm:
		seg := min(mtu, w.Len-r.off)
		first, last := r.off == 0, r.off+seg == w.Len
		pkt.Opcode = dataOpcode(w.Op, first, last)
		if first && (w.Op == ib.WRRDMAWrite || w.Op == ib.WRRDMAWriteWithImm) {
			pkt.VA, pkt.RKey, pkt.DMALen = w.RemoteAddr, w.RKey, w.Len
		}
		if last && w.Op.HasImm() {
			pkt.Imm = w.Imm
		}
		pkt.Payload = buf[:seg]
		if seg > 0 && !r.c.host.Payload(w.ID, r.off, pkt.Payload) {
			if r.next == 0 { // error completions keep posting order
				r.fail(w, ib.WCLocProtErr, fmt.Errorf("%v: local memory gone since posting", w.Op))
			}
			return false
		}
		r.off += seg
		r.psn = ib.PSNAdd(r.psn, 1)
		// The last packet the window lets out asks too: a small window
		// must get the ACK that reopens it.
		pkt.AckReq = last || r.sinceAck >= r.c.cfg.Window/4 || r.window() <= 0
		lastPkt = last
	case ib.WRRDMARead:
		// Requests follow a fixed grid of chunks, so a re-request after a
		// loss falls inside one original request (the responder replays
		// from its resource for that request).
		cb := r.chunkBytes()
		chunk := min(w.Len-r.off, (r.off/cb+1)*cb-r.off)
		n := r.pkts(chunk)
		if int(n) > r.window() && r.psn != r.una {
			return false
		}
		pkt.Opcode = ib.RCReadRequest
		pkt.VA, pkt.RKey, pkt.DMALen = w.RemoteAddr+uint64(r.off), w.RKey, chunk
		pkt.AckReq = true
		r.off += chunk
		r.psn = ib.PSNAdd(r.psn, int(n))
		lastPkt = r.off >= w.Len
	default: // atomics
		pkt.Opcode = atomicOpcode(w.Op)
		pkt.SwapAdd = w.CompareAdd
		if w.Op == ib.WRAtomicCmpAndSwp {
			pkt.Compare, pkt.SwapAdd = w.CompareAdd, w.Swap
		}
		pkt.VA, pkt.RKey = w.RemoteAddr, w.RKey
		pkt.AckReq = true
		r.psn = ib.PSNAdd(r.psn, 1)
		lastPkt = true
	}
	if pkt.AckReq {
		r.sinceAck = 0
	} else {
		r.sinceAck++
	}
	if ib.PSNDiff(r.psn, r.sentEnd) > 0 {
		r.sentEnd = r.psn
		if lastPkt && !w.resent {
			w.sentAt = now
		}
	} else {
		r.c.st.Retransmits++
	}
	if lastPkt {
		r.next++
		r.off = 0
	}
	if r.deadlineAt == 0 && r.maxRTO > 0 {
		r.deadlineAt = now + r.rto
		r.budgetAt = now
	}
	return true
}

// receive handles ACKs, NAKs and responses.
func (r *requester) receive(now int64, pkt *Packet) {
	p := pkt.PSN
	// A response must name a PSN that was sent and is not older than the
	// oldest unacknowledged one minus one (a duplicate ACK, which acts on
	// nothing). Anything else is stale or forged: counted and ignored, it
	// completes, fails and retries nothing (rxe_comp.c's check_psn drops
	// responses outside the outstanding range too).
	if ib.PSNDiff(p, r.sentEnd) >= 0 || ib.PSNDiff(p, r.una) < -1 {
		r.c.st.OutOfWindow++
		return
	}
	switch pkt.Opcode {
	case ib.RCAck:
		switch s := pkt.Syndrome; {
		case s&synReserved != 0:
			r.c.st.Dropped++
		case !s.IsACK() && ib.PSNDiff(p, r.una) < 0:
			// A NAK names the PSN that failed or is expected next, which is
			// never one already acknowledged: a NAK at una-1 is stale or
			// forged, and an error NAK there would fail the oldest request
			// (possibly one not even sent yet).
			r.c.st.OutOfWindow++
		case s.IsACK():
			r.c.st.AcksRecv++
			r.ackUpTo(now, p)
		case s.IsRNR():
			r.c.st.RNRNaksRecv++
			r.ackUpTo(now, ib.PSNAdd(p, -1))
			r.rnr(now, p, s.Value())
		case s.IsNAK():
			r.ackUpTo(now, ib.PSNAdd(p, -1))
			if r.c.dead {
				return
			}
			if s == ib.SynNAKPSNSeq {
				r.c.st.SeqNaksRecv++
				r.goBack(now, p, false)
				return
			}
			r.c.st.ErrNaksRecv++
			st, what := nakStatus(s)
			if r.n > 0 {
				w := r.at(0)
				r.fail(w, st, fmt.Errorf("%v to qp %#x: responder NAK at psn %#x: %s", w.Op, r.c.cfg.DestQPN, p, what))
			}
		default:
			r.c.st.Dropped++
		}
	case ib.RCReadResponseFirst, ib.RCReadResponseMiddle, ib.RCReadResponseLast, ib.RCReadResponseOnly:
		r.readResponse(now, pkt)
	case ib.RCAtomicAck:
		w := r.firstRdAtomic()
		if w == nil || !w.Op.IsAtomic() || w.firstPSN != p {
			r.c.st.Dropped++
			return
		}
		if !r.c.host.AtomicResult(w.ID, pkt.Orig) {
			r.ackUpTo(now, ib.PSNAdd(p, -1))
			r.fail(w, ib.WCLocProtErr, fmt.Errorf("%v result: local memory refused the write", w.Op))
			return
		}
		w.done = true
		r.ackUpTo(now, p)
	default:
		r.c.st.Dropped++
	}
}

// chunkBytes is the largest READ request the requester issues.
func (r *requester) chunkBytes() uint32 { return uint32(r.c.cfg.Window) * r.mtu() }

// rdAtomicOutstanding counts the READ requests and atomics the responder
// must still hold resources for: every one issued since the oldest that is
// not yet answered (the responder recycles its max_dest_rd_atomic resources
// oldest first, so a later answered request does not free an older slot).
// max_rd_atomic bounds it.
func (r *requester) rdAtomicOutstanding() int {
	out := 0
	cb := r.chunkBytes()
	counting := false
	for i := 0; i <= r.next && i < r.n; i++ {
		w := r.at(i)
		if !w.started || !w.Op.IsRdAtomic() {
			continue
		}
		issued := uint32(1)
		if w.Op == ib.WRRDMARead {
			n := w.Len
			if i == r.next {
				n = r.off
			}
			issued = max((n+cb-1)/cb, 1)
			if i == r.next && r.off == 0 {
				issued = 0
			}
		} else if i == r.next {
			issued = 0
		}
		if !counting {
			if w.done {
				continue
			}
			counting = true
			if w.Op == ib.WRRDMARead {
				issued -= min(issued, w.recvd/cb)
			}
		}
		out += int(issued)
	}
	return out
}

// firstRdAtomic returns the oldest started READ or atomic not yet answered.
func (r *requester) firstRdAtomic() *sreq {
	for i := 0; i < r.n; i++ {
		w := r.at(i)
		if !w.started {
			return nil
		}
		if w.Op.IsRdAtomic() && !w.done {
			return w
		}
	}
	return nil
}

// neededPSN is the next response PSN a READ or atomic waits for.
func (r *requester) neededPSN(w *sreq) uint32 {
	if w.Op == ib.WRRDMARead {
		return ib.PSNAdd(w.firstPSN, int(w.recvd/r.mtu()))
	}
	return w.firstPSN
}

func (r *requester) readResponse(now int64, pkt *Packet) {
	w := r.firstRdAtomic()
	if w == nil || w.Op != ib.WRRDMARead {
		r.c.st.Dropped++
		return
	}
	want := r.neededPSN(w)
	if pkt.PSN != want {
		if ib.PSNDiff(pkt.PSN, want) > 0 {
			r.goBack(now, want, false) // a response was lost
		}
		r.c.st.Dropped++
		return
	}
	seg := min(r.mtu(), w.Len-w.recvd)
	last := w.recvd+seg == w.Len
	if uint32(len(pkt.Payload)) != seg || (last && pkt.Opcode != ib.RCReadResponseLast && pkt.Opcode != ib.RCReadResponseOnly) {
		r.c.st.Dropped++
		return
	}
	if seg > 0 && !r.c.host.ReadResponse(w.ID, w.recvd, pkt.Payload) {
		r.ackUpTo(now, ib.PSNAdd(pkt.PSN, -1))
		r.fail(w, ib.WCLocProtErr, fmt.Errorf("RDMA_READ response: local memory refused the data"))
		return
	}
	w.recvd += seg
	if last {
		w.done = true
	}
	r.ackUpTo(now, pkt.PSN)
}

// ackUpTo retires every request acknowledged by PSN p (inclusive).
func (r *requester) ackUpTo(now int64, p uint32) {
	if ib.PSNDiff(p, r.una) < 0 {
		return // duplicate or stale
	}
	old := r.una
	r.retireUpTo(now, p)
	if d := ib.PSNDiff(r.una, old); d > 0 {
		r.growWindow(int(d))
	}
}

func (r *requester) retireUpTo(now int64, p uint32) {
	progress := false
	for r.n > 0 && !r.c.dead {
		w := r.at(0)
		if !w.started {
			break
		}
		if w.Op.IsRdAtomic() {
			if !w.done {
				if need := r.neededPSN(w); ib.PSNDiff(p, need) >= 0 {
					// Acknowledged past a READ/atomic whose response is
					// missing: the response was lost.
					r.retire(now, progress)
					r.goBack(now, need, false)
					return
				}
				break
			}
		} else if ib.PSNDiff(ib.PSNAdd(w.firstPSN, int(w.npkts)-1), p) > 0 {
			break // not wholly acknowledged
		}
		r.complete(now, w)
		progress = true
	}
	if ib.PSNDiff(ib.PSNAdd(p, 1), r.una) > 0 {
		r.una = ib.PSNAdd(p, 1)
		progress = true
	}
	r.retire(now, progress)
}

// retire resets the retry state after forward progress.
func (r *requester) retire(now int64, progress bool) {
	if !progress {
		return
	}
	r.retryLeft, r.rnrLeft = r.c.cfg.RetryCnt, r.c.cfg.RNRRetry
	r.retrying = false
	r.budgetAt = now
	if r.srtt != 0 {
		// Progress ends the timeouts' backoff (as Linux TCP does when new
		// data is acknowledged): under steady loss nearly every message
		// has a retransmitted packet, so Karn's rule leaves no sample to
		// bring a doubled RTO down, and it would stay at the QP timeout
		// (a whole second per tail loss; seen at 1% loss both ways).
		r.rto = max(r.srtt+4*r.rttvar, r.c.cfg.MinRTO)
		if r.maxRTO > 0 {
			r.rto = min(r.rto, r.maxRTO)
		}
	}
	if ib.PSNDiff(r.sentEnd, r.una) > 0 && r.maxRTO > 0 {
		r.deadlineAt = now + r.rto
	} else {
		r.deadlineAt = 0
	}
}

func (r *requester) complete(now int64, w *sreq) {
	if !w.resent && w.sentAt != 0 {
		r.sample(now - w.sentAt)
	}
	if end := ib.PSNAdd(w.firstPSN, int(w.npkts)); ib.PSNDiff(end, r.una) > 0 {
		r.una = end
	}
	id, n := w.ID, w.Len
	r.pop()
	r.c.host.SendComplete(id, ib.WCSuccess, n, nil)
}

func (r *requester) pop() {
	old := r.ring[r.head]
	r.ring[r.head] = sreq{}
	r.head++
	if r.head == len(r.ring) {
		r.head = 0
	}
	r.n--
	if r.next > 0 {
		r.next--
		return
	}
	// The transmit point was inside the retired request (it was being
	// retransmitted when a late acknowledgement covered it): move it on.
	r.off = 0
	r.psn = ib.PSNAdd(old.firstPSN, int(old.npkts))
	if r.n > 0 && r.at(0).started {
		w := r.at(0)
		r.psn = w.firstPSN
		if w.Op == ib.WRRDMARead {
			r.off, r.psn = w.recvd, r.neededPSN(w)
		}
	}
}

// sample folds a round-trip measurement into the RTO (RFC 6298), bounded
// below by MinRTO and above by the QP's timeout attribute.
func (r *requester) sample(rtt int64) {
	if rtt <= 0 {
		rtt = 1
	}
	if r.srtt == 0 {
		r.srtt, r.rttvar = rtt, rtt/2
	} else {
		d := r.srtt - rtt
		if d < 0 {
			d = -d
		}
		r.rttvar = (3*r.rttvar + d) / 4
		r.srtt = (7*r.srtt + rtt) / 8
	}
	r.rto = max(r.srtt+4*r.rttvar, r.c.cfg.MinRTO)
	if r.maxRTO > 0 {
		r.rto = min(r.rto, r.maxRTO)
	}
}

// goBack starts a go-back-N retry from PSN p. A sequence NAK for a retry
// already under way is ignored. Only timeouts count against retry_cnt: a
// sequence NAK or an out-of-order response proves the responder is alive
// and reachable, and on a reordering network counting them would exhaust
// the budget of a healthy connection (rxe counts both).
func (r *requester) goBack(now int64, p uint32, timeout bool) {
	if r.n == 0 {
		return
	}
	if r.retrying && p == r.retryPSN && !timeout {
		return
	}
	if !timeout {
		r.retrying, r.retryPSN = true, p
		r.cutWindow(now)
		r.rewind(p)
		return
	}
	if r.retryLeft == 0 {
		w := r.at(0)
		r.fail(w, ib.WCRetryExcErr, fmt.Errorf("%v to qp %#x: no acknowledgement for psn %#x after %d retries (rto %dµs)",
			w.Op, r.c.cfg.DestQPN, p, r.c.cfg.RetryCnt, r.rto/1000))
		return
	}
	r.retryLeft--
	r.c.st.Retries++
	r.retrying, r.retryPSN = true, p
	r.rewind(p)
	if r.maxRTO > 0 {
		r.deadlineAt = now + r.rto
	}
}

// rewind moves the transmit point back to PSN p.
func (r *requester) rewind(p uint32) {
	for i := 0; i < r.n; i++ {
		w := r.at(i)
		if !w.started {
			break
		}
		end := ib.PSNAdd(w.firstPSN, int(w.npkts))
		if ib.PSNDiff(p, w.firstPSN) < 0 || ib.PSNDiff(p, end) >= 0 {
			continue
		}
		r.next = i
		switch {
		case w.Op == ib.WRRDMARead:
			r.off = w.recvd
			r.psn = r.neededPSN(w)
		case w.Op.IsAtomic():
			r.off = 0
			r.psn = w.firstPSN
		default:
			r.off = uint32(ib.PSNDiff(p, w.firstPSN)) * r.mtu()
			r.psn = p
		}
		for j := i; j < r.n && r.at(j).started; j++ {
			r.at(j).resent = true
		}
		r.sinceAck = 0
		return
	}
}

func (r *requester) rnr(now int64, p uint32, code uint8) {
	if r.c.dead || r.n == 0 {
		return
	}
	if r.rnrUntil != 0 && p == r.retryPSN {
		return // a duplicate RNR NAK for the wait under way
	}
	if ib.PSNDiff(p, r.una) < 0 {
		// A stale copy for a request already acknowledged (the ACK range
		// check lets una-1 through): nothing to rewind to, and honouring it
		// would stop the retransmit timer with no request to restart it.
		return
	}
	if r.c.cfg.RNRRetry != 7 {
		if r.rnrLeft == 0 {
			w := r.at(0)
			r.fail(w, ib.WCRNRRetryExcErr, fmt.Errorf("%v to qp %#x: receiver not ready after %d RNR retries", w.Op, r.c.cfg.DestQPN, r.c.cfg.RNRRetry))
			return
		}
		r.rnrLeft--
	}
	r.retrying, r.retryPSN = true, p
	r.rewind(p)
	r.rnrUntil = now + ib.RNRTimeout(code).Nanoseconds()
	r.deadlineAt = 0 // the retransmit timer restarts when sending resumes
}

// fail completes w, the oldest outstanding request, with an error status
// and its cause, and stops the engine: the error completion is the engine's
// last act (Host.Fatal does not follow).
func (r *requester) fail(w *sreq, st ib.WCStatus, cause error) {
	id := w.ID
	r.pop()
	r.c.dead = true
	r.c.host.SendComplete(id, st, 0, fmt.Errorf("qp %#x: %v: %w", r.c.cfg.QPN, st, cause))
}

func (r *requester) deadline() int64 {
	d := r.deadlineAt
	if r.rnrUntil != 0 && (d == 0 || r.rnrUntil < d) {
		d = r.rnrUntil
	}
	if r.paceAt != 0 && (d == 0 || r.paceAt < d) && ib.PSNDiff(r.psn, r.sentEnd) < 0 {
		d = r.paceAt // a retransmission waits for its pacer slot
	}
	return d
}

func (r *requester) tick(now int64) {
	if r.deadlineAt == 0 || now < r.deadlineAt {
		return
	}
	if ib.PSNDiff(r.sentEnd, r.una) <= 0 {
		r.deadlineAt = 0
		return
	}
	r.c.st.Timeouts++
	r.rto = min(2*r.rto, r.maxRTO)
	r.collapseWindow(now)
	r.paceAt = 0 // a new retransmission: a new slot
	if now-r.budgetAt >= r.maxRTO {
		// A whole QP timeout (4.096 µs × 2^timeout) passed without progress:
		// that is what retry_cnt counts, as on InfiniBand.
		r.budgetAt = now
		r.goBack(now, r.una, true)
		return
	}
	// The RTT-based timer fired sooner: retransmit at once, free of charge,
	// so a loss costs a round trip or two rather than the QP timeout.
	r.retrying, r.retryPSN = true, r.una
	r.rewind(r.una)
	r.deadlineAt = now + r.rto
}
