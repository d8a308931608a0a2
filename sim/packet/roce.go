package packet

import (
	"fmt"
	"math"

	"github.com/ibex-rdma/ibex/sim/des"
	"github.com/ibex-rdma/ibex/sim/fabric"
	"github.com/ibex-rdma/ibex/sim/topo"
)

// roce is RoCEv2's link layer: PFC instead of credits, ECN marking at
// switch egress, go-back-N retransmission of lost packets, and DCQCN at
// the sending QPs (dcqcn.go).
//
// PFC. A switch takes a packet into its ingress buffer (port × priority)
// when it has looked at the packet's head, after the port-to-port latency
// (admit), and lets it go when the packet starts on its output (release).
// Above Xoff the ingress port sends PAUSE upstream, at Xon or below
// RESUME; the frame leaves after the packet the port is sending, if any,
// takes its own serialisation, and crosses the cable. A paused priority
// starts no packet; the one on the wire finishes. A packet that does not
// fit is dropped. NICs drain at line rate and never pause.
//
// How much can still arrive once Xoff is crossed, the headroom a port
// needs for no drop: the packet that crossed it (one max frame, taken in
// whole at its head), the packet the port is sending when it wants to
// send PAUSE (one), one PFC frame per priority, the cable there and back,
// the port-to-port latency (the switch sees a packet that late), and the
// packet the upstream port started just before the PAUSE arrived (one):
//
//	3 × max frame + priorities × PFC frame + rate × (2 × cable + switch latency)
//
// 3 × 4194 + 84 + 50 GB/s × (2 × 15 ns + 250 ns) = 26.7 KB on a 3 m
// 400 Gb/s host cable; 35.2 KB on a 20 m leaf-spine one. (IEEE 802.1Qbb's
// usual sum, 2 × cable × rate + 2 max frames + a PFC frame, is the same
// with frames taken in byte by byte and no switch latency.)
//
// Loss (drops, or a link failure's strands): every QP keeps a log of the
// packets the receiver has not taken; the receiver takes packets in PSN
// order, discards a later one (and NAKs the one it expects, once) and
// duplicates; the sender goes back to the NAKed PSN and sends again from
// its log. A loss no later packet reveals waits for the retry timeout.
type roce struct {
	n     *Net
	dcqcn bool

	// Per port × priority unless said otherwise.
	pcap       []int32    // per port: ingress buffer per priority, bytes (Xoff + headroom)
	occ        []int32    // ingress buffer in use, bytes
	maxOcc     int32      // the most occ ever was
	xoff       []bool     // the ingress has sent PAUSE and not RESUME
	paused     []bool     // the sending side is paused by its peer
	pauseSince []des.Time // paused with packets to send since; -1: not
	qbytes     []int64    // bytes queued at the output (ECN's measure)
	nicWork    []int32    // NIC ports: active QPs on the priority

	qps []roceQP  // per QP: go-back-N
	rps []rpState // per QP, with DCQCN: its reaction point

	checkBuf []int64 // invariants' scratch
	dropP    float64 // tests' fault injection: switches drop this share of arriving packets
}

// roceQP is a QP's go-back-N state. The sender: PSNs logBase .. sndNxt-1
// are in log, and it sends PSN rp next (rp < sndNxt: it is going back).
// The receiver: it expects epsn, and has NAKed it (nakd).
type roceQP struct {
	log     sentLog
	logBase int32
	sndNxt  int32
	rp      int32
	epsn    int32
	nakd    bool
	cnpAt   des.Time // the receiver's last CNP for this QP; -1: none
}

// pauseWire is a PFC frame on the wire: the minimum Ethernet frame (64
// bytes with FCS) plus preamble, delimiter and inter-frame gap.
const pauseWire = 64 + 8 + 12

// newRoCE sets up PFC state and each switch port's buffer.
func newRoCE(n *Net) (*roce, error) {
	l := &roce{n: n, dcqcn: n.p.CC == fabric.CCDCQCN}
	np := len(n.ports)
	l.pcap = make([]int32, np)
	l.occ = make([]int32, np*n.nv)
	l.xoff = make([]bool, np*n.nv)
	l.paused = make([]bool, np*n.nv)
	l.pauseSince = make([]des.Time, np*n.nv)
	l.qbytes = make([]int64, np*n.nv)
	l.nicWork = make([]int32, np*n.nv)
	for i := range l.pauseSince {
		l.pauseSince[i] = -1
	}
	pkt := n.g.MTU + n.p.HeaderBytes + n.p.FirstBytes
	for i := range n.ports {
		op := &n.ports[i]
		if !op.cabled || !op.sw {
			continue
		}
		hr := int64(n.p.PFCHeadroom)
		if hr == 0 {
			hr = l.headroom(topo.PortID(i))
		}
		c := int64(n.p.PFCXoff) + hr
		if c < int64(pkt) {
			return nil, fmt.Errorf("packet: %w: PFC buffer of %s, Xoff %d + headroom %d bytes, is less than one %d-byte packet (MTU %d and headers): the port could never take one",
				ErrConfig, n.g.PortName(topo.PortID(i)), n.p.PFCXoff, hr, pkt, n.g.MTU)
		}
		if c > math.MaxInt32 {
			return nil, fmt.Errorf("packet: %w: PFC buffer of %s, %d bytes, over 2 GiB", ErrConfig, n.g.PortName(topo.PortID(i)), c)
		}
		l.pcap[i] = int32(c)
	}
	return l, nil
}

// headroom is what switch port in's ingress needs above Xoff for no drop
// (the sum above), rounded up to 64 bytes and 64 more for the rounding of
// picosecond times.
func (l *roce) headroom(in topo.PortID) int64 {
	n := l.n
	op := &n.ports[in] // its own sending side: the same cable and rate
	frame := int64(n.g.MTU + n.p.HeaderBytes + n.p.FirstBytes)
	flight := 2*op.prop + n.lat
	b := 3*frame + int64(n.nv)*pauseWire + int64(math.Ceil(float64(op.rate)/8*flight.Seconds()))
	return (b+63)/64*64 + 64
}

// initQPs starts every QP's go-back-N state, and with DCQCN its reaction
// point at line rate.
func (l *roce) initQPs() {
	n := l.n
	l.qps = make([]roceQP, len(n.qps))
	for i := range l.qps {
		l.qps[i].cnpAt = -1
	}
	if !l.dcqcn {
		return
	}
	l.rps = make([]rpState, len(n.qps))
	for i := range l.rps {
		line := float64(n.ports[n.qps[i].port].rate)
		l.rps[i] = rpState{rc: line, rt: line, alpha: 1, cut: -1}
	}
}

// sendable: a paused priority starts nothing (the RESUME kicks the port).
func (l *roce) sendable(i int, _ *packet) (int32, des.Time, bool, bool) {
	return 0, 0, false, !l.paused[i]
}

// transmitted: a packet leaving a switch's output queue may be marked
// (ECN), and leaves its ingress buffer. The receiving switch takes it into
// its own when it has looked at its head (admit), a NIC not at all.
func (l *roce) transmitted(p topo.PortID, op *oport, pk *packet, _ int32, _ des.Time) {
	if op.sw {
		l.mark(op, int(p)*l.n.nv+int(pk.vl), pk)
		l.release(pk.in, pk.vl, pk.wire)
	}
}

// admit takes packet id into the buffer of switch ingress port in, or
// drops it if it does not fit; above Xoff the port sends PAUSE.
func (l *roce) admit(id int32, pk *packet, in topo.PortID) bool {
	n := l.n
	j := int(in)*n.nv + int(pk.vl)
	occ := l.occ[j] + pk.wire
	if occ > l.pcap[in] || l.dropP > 0 && n.sim.Rand().Float64() < l.dropP {
		n.ports[in].drops++
		l.lost(id, pk)
		return false
	}
	l.occ[j] = occ
	l.maxOcc = max(l.maxOcc, occ)
	if occ > int32(n.p.PFCXoff) && !l.xoff[j] && !n.ports[in].dead {
		l.xoff[j] = true
		l.pfc(in, pk.vl, true)
	}
	return true
}

// release takes wire bytes of priority vl out of switch ingress port in's
// buffer; at Xon or below the port sends RESUME.
func (l *roce) release(in topo.PortID, vl uint8, wire int32) {
	n := l.n
	j := int(in)*n.nv + int(vl)
	l.occ[j] -= wire
	if l.xoff[j] && l.occ[j] <= int32(n.p.PFCXoff-n.p.PFCHysteresis) {
		l.xoff[j] = false
		l.pfc(in, vl, false)
	}
}

// pfc sends a PAUSE (on) or RESUME for priority vl from port in to its
// peer: after the packet in is sending, it takes the wire for a PFC frame
// and reaches the peer a cable later.
func (l *roce) pfc(in topo.PortID, vl uint8, on bool) {
	n := l.n
	op := &n.ports[in]
	now := n.sim.Now()
	start := max(now, op.busyUntil)
	op.busyUntil = start + op.ser(pauseWire)
	var c int64
	if on {
		c = 1
		op.pauseFrames++
	}
	n.sim.After(op.busyUntil+op.prop-now, evPause, int32(op.peer), int32(vl), c)
}

// onPause applies a PFC frame at the sending side of port p.
func (l *roce) onPause(p topo.PortID, vl int, on bool) {
	n := l.n
	op := &n.ports[p]
	if op.dead {
		return
	}
	i := int(p)*n.nv + vl
	if on {
		l.paused[i] = true
		if l.pauseSince[i] < 0 && l.hasWorkVL(op, i) {
			l.pauseSince[i] = n.sim.Now()
		}
		return
	}
	l.paused[i] = false
	l.endPause(p, i)
	n.kick(p)
}

// hasWorkVL says whether port op × priority i has something to send.
func (l *roce) hasWorkVL(op *oport, i int) bool {
	if op.nic >= 0 {
		return l.nicWork[i] > 0
	}
	return !l.n.q[i].empty()
}

// endPause closes a pause interval of port p × priority i, if one is open.
func (l *roce) endPause(p topo.PortID, i int) {
	if s := l.pauseSince[i]; s >= 0 {
		l.n.ports[p].pauseTime += l.n.sim.Now() - s
		l.pauseSince[i] = -1
	}
}

// activated counts QP q as having packets to send on its NIC port's
// priority.
func (l *roce) activated(q *qp) {
	i := int(q.port)*l.n.nv + int(q.vl)
	l.nicWork[i]++
	if l.paused[i] && l.pauseSince[i] < 0 {
		l.pauseSince[i] = l.n.sim.Now()
	}
}

// linkDown clears the PFC state of port p, whose link failed.
func (l *roce) linkDown(p topo.PortID) {
	for v := range l.n.nv {
		i := int(p)*l.n.nv + v
		l.endPause(p, i)
		l.paused[i], l.xoff[i] = false, false
	}
}

// queued is packet pk joining the queue of an output port, priority index
// i: a paused priority now has something to send.
func (l *roce) queued(i int, pk *packet) {
	l.qbytes[i] += int64(pk.wire)
	if l.paused[i] && l.pauseSince[i] < 0 {
		l.pauseSince[i] = l.n.sim.Now()
	}
}

func (l *roce) unqueued(i int, pk *packet) { l.qbytes[i] -= int64(pk.wire) }

// mark is packet pk leaving the queue of output port op, priority index
// i, to be sent: ECN marks it by the bytes still queued on its priority
// (marking as it leaves gives the sender the queue as it is, not as it
// was when the packet joined it, a queue's sojourn earlier).
func (l *roce) mark(op *oport, i int, pk *packet) {
	n := l.n
	l.qbytes[i] -= int64(pk.wire)
	q := l.qbytes[i]
	if pk.ce || q <= int64(n.p.ECNKmin) {
		return
	}
	mark := q > int64(n.p.ECNKmax)
	if !mark {
		pr := n.p.ECNPmax * float64(q-int64(n.p.ECNKmin)) / float64(n.p.ECNKmax-n.p.ECNKmin)
		mark = n.sim.Rand().Float64() < pr
	}
	if mark {
		pk.ce = true
		op.marks++
	}
}

// strand frees the packet's ingress buffer; go-back-N repairs the loss.
func (l *roce) strand(id int32, pk *packet) {
	l.release(pk.in, pk.vl, pk.wire)
	l.lost(id, pk)
}

// lost counts a packet lost in the fabric (dropped, or stranded by a link
// failure) and starts its QP's retry timer.
func (l *roce) lost(id int32, pk *packet) {
	n := l.n
	n.lose(id, pk)
	n.sim.After(n.p.RetryTimeout, evTimeout, pk.qp, 0, int64(pk.psn))
}

// deliver takes a packet's tail at the receiving NIC. RC takes packets in
// PSN order: the expected one is delivered; a later one shows that one
// was lost (or overtaken, on a route a link failure changed: routes are
// otherwise static per QP), so it is discarded and the receiver NAKs the
// one it expects (once until that arrives); an earlier one is a
// duplicate, discarded. A marked packet makes the NIC
// send the sender a CNP (DCQCN).
func (l *roce) deliver(id int32, pk *packet, in topo.PortID) {
	n := l.n
	qi := pk.qp
	q := &n.qps[qi]
	rq := &l.qps[qi]
	if pk.ce && l.dcqcn {
		now := n.sim.Now()
		if rq.cnpAt < 0 || now-rq.cnpAt >= n.p.DCQCN.CNPInterval {
			rq.cnpAt = now
			n.ports[in].cnps++
			n.sim.After(q.lat, evCNP, qi, 0, 0)
		}
	}
	switch {
	case pk.psn == rq.epsn:
		rq.epsn++
		rq.nakd = false
		for rq.logBase < rq.epsn {
			rq.log.pop()
			rq.logBase++
		}
		rq.rp = max(rq.rp, rq.logBase)
		n.take(id, pk)
		return
	case pk.psn > rq.epsn:
		// The sender's retry timer covers this PSN too: if what follows
		// it is also lost, nothing else will reveal it (the NAK, sent
		// once, may have been answered by a resend this one overtook).
		n.sim.After(n.p.RetryTimeout, evTimeout, qi, 0, int64(pk.psn))
		if !rq.nakd {
			rq.nakd = true
			n.sim.After(q.lat, evNAK, qi, 0, int64(rq.epsn))
		}
	}
	n.lost += int64(pk.payload)
	n.lostPkts++
	n.discards++
	n.free = append(n.free, id)
}

func (l *roce) handle(e des.Event) {
	switch e.Kind() {
	case evPause:
		l.onPause(topo.PortID(e.A), int(e.B), e.C != 0)
	case evCNP:
		l.onCNP(e.A)
	case evNAK:
		l.goBack(e.A, int32(e.C))
	case evTimeout:
		l.onTimeout(e.A, int32(e.C))
	default:
		panic(fmt.Sprintf("packet: RoCE: event kind %d", e.Kind()))
	}
}

// goBack makes QP qi send again from PSN psn (a NAK, or a timeout).
func (l *roce) goBack(qi, psn int32) {
	n := l.n
	q := &n.qps[qi]
	rq := &l.qps[qi]
	psn = max(psn, rq.logBase)
	if psn >= rq.rp {
		return // it has not sent psn since it last went back
	}
	rq.rp = psn
	q.readyAt = max(q.readyAt, n.sim.Now()+n.p.MsgOverhead)
	if !q.active {
		q.active = true
		l.activated(q)
		n.nics[q.nic].active.push(qi)
		n.kick(q.port)
	}
}

// onTimeout is QP qi's retry timer for PSN psn: if the receiver still
// lacks it, the QP goes back to the first PSN the receiver lacks.
func (l *roce) onTimeout(qi, psn int32) {
	if rq := &l.qps[qi]; rq.epsn <= psn {
		l.goBack(qi, rq.epsn)
	}
}

// kickNIC serves the NIC's active QPs a packet each in turn: a paused
// priority's QPs wait, a QP that went back sends from its log first, and
// DCQCN paces QPs below line rate.
func (l *roce) kickNIC(p topo.PortID, op *oport, ns *nicState) {
	n := l.n
	now := n.sim.Now()
	var wake des.Time
	for range ns.active.len() {
		qi := ns.active.pop()
		q := &n.qps[qi]
		rq := &l.qps[qi]
		if rq.rp == rq.sndNxt && q.msgs.empty() {
			// It went back, and the receiver has since taken all it had
			// to send again.
			q.active = false
			l.nicWork[int(p)*n.nv+int(q.vl)]--
			continue
		}
		if q.readyAt > now {
			wake = earliest(wake, q.readyAt)
			ns.active.push(qi)
			continue
		}
		if l.paused[int(p)*n.nv+int(q.vl)] {
			ns.active.push(qi) // the RESUME kicks the port
			continue
		}
		var s sent
		psn := rq.rp
		if rq.rp < rq.sndNxt {
			s = *rq.log.at(int(rq.rp - rq.logBase))
			rq.rp++
			n.resent += int64(s.payload)
			n.resentPkts++
		} else {
			s.chunk = q.msgs.front()
			s.payload = min(int32(n.g.MTU), n.w.chunks[s.chunk].bytes-q.off)
			s.wire = s.payload + int32(n.p.HeaderBytes)
			if q.off == 0 {
				s.wire += int32(n.p.FirstBytes)
			}
			rq.log.push(s)
			rq.sndNxt++
			rq.rp = rq.sndNxt
			n.injected += int64(s.payload)
			n.injectedPkts++
			q.off += s.payload
			if q.off == n.w.chunks[s.chunk].bytes {
				q.msgs.pop()
				q.off = 0
				q.readyAt = now + op.ser(s.wire) + n.p.MsgOverhead
			}
		}
		if l.dcqcn {
			l.pace(qi, q, s.wire, now)
		}
		if q.msgs.empty() && rq.rp == rq.sndNxt {
			q.active = false
			l.nicWork[int(p)*n.nv+int(q.vl)]--
		} else {
			ns.active.push(qi)
		}
		id := n.newPacket()
		pk := &n.pkts[id]
		*pk = packet{chunk: s.chunk, qp: qi, dst: q.dst, in: topo.NoPort, wire: s.wire, payload: s.payload, psn: psn, vl: q.vl}
		n.transmit(p, op, id, pk, 0)
		return
	}
	n.idle(p, op, false, wake)
}

func (l *roce) maxBuffer() int64 { return int64(l.maxOcc) }

// invariants checks, for every switch ingress port and priority: the
// bytes it holds are those of the packets queued in the switch that came
// in by it, never below zero nor above its buffer, and above Xoff only if
// it has sent PAUSE.
func (l *roce) invariants() error {
	n := l.n
	if len(l.checkBuf) != len(l.occ) {
		l.checkBuf = make([]int64, len(l.occ))
	}
	held := l.checkBuf
	clear(held)
	for j := range n.q {
		q := &n.q[j]
		for _, id := range q.b[q.h:] {
			pk := &n.pkts[id]
			held[int(pk.in)*n.nv+int(pk.vl)] += int64(pk.wire)
		}
	}
	for j, occ := range l.occ {
		p := topo.PortID(j / n.nv)
		switch {
		case int64(occ) != held[j]:
			return fmt.Errorf("port %s priority %d: holds %d bytes; the packets it let in and the switch still queues make %d", n.g.PortName(p), j%n.nv, occ, held[j])
		case occ < 0 || occ > l.pcap[p]:
			return fmt.Errorf("port %s priority %d: holds %d bytes of %d", n.g.PortName(p), j%n.nv, occ, l.pcap[p])
		case occ > int32(n.p.PFCXoff) && !l.xoff[j] && !n.ports[p].dead:
			return fmt.Errorf("port %s priority %d: holds %d bytes, over Xoff %d, and has not sent PAUSE", n.g.PortName(p), j%n.nv, occ, n.p.PFCXoff)
		}
	}
	return nil
}

// verify checks that nothing is left queued or held, and no priority
// paused or in Xoff.
func (l *roce) verify() error {
	n := l.n
	for i := range n.ports {
		op := &n.ports[i]
		if !op.cabled {
			continue
		}
		for v := range n.nv {
			j := i*n.nv + v
			switch {
			case !n.q[j].empty():
				return fmt.Errorf("packet: port %s priority %d: %d packets left queued: %w", n.g.PortName(topo.PortID(i)), v, n.q[j].len(), ErrDrop)
			case l.occ[j] != 0:
				return fmt.Errorf("packet: port %s priority %d: %d bytes left in its buffer: %w", n.g.PortName(topo.PortID(i)), v, l.occ[j], ErrDrop)
			case l.xoff[j] || l.paused[j]:
				return fmt.Errorf("packet: port %s priority %d: left in Xoff (%v) or paused (%v) at the end", n.g.PortName(topo.PortID(i)), v, l.xoff[j], l.paused[j])
			}
		}
	}
	return nil
}
