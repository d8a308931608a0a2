package packet

import (
	"fmt"
	"math"

	"github.com/ibex-rdma/ibex/sim/des"
	"github.com/ibex-rdma/ibex/sim/fabric"
	"github.com/ibex-rdma/ibex/sim/topo"
)

// RoCE mode: PFC instead of credits, ECN marking at switch egress,
// go-back-N retransmission of lost packets, and DCQCN at the sending QPs.
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

// pauseWire is a PFC frame on the wire: the minimum Ethernet frame (64
// bytes with FCS) plus preamble, delimiter and inter-frame gap.
const pauseWire = 64 + 8 + 12

// initRoCE sets up PFC state and each switch port's buffer.
func (n *Net) initRoCE() error {
	n.roce = true
	n.dcqcn = n.p.CC == fabric.CCDCQCN
	np := len(n.ports)
	n.pcap = make([]int32, np)
	n.xoff = make([]bool, np*n.nv)
	n.paused = make([]bool, np*n.nv)
	n.pauseSince = make([]des.Time, np*n.nv)
	n.qbytes = make([]int64, np*n.nv)
	n.nicWork = make([]int32, np*n.nv)
	for i := range n.pauseSince {
		n.pauseSince[i] = -1
	}
	pkt := n.g.MTU + n.p.HeaderBytes + n.p.FirstBytes
	for i := range n.ports {
		op := &n.ports[i]
		if !op.cabled || !op.sw {
			continue
		}
		hr := int64(n.p.PFCHeadroom)
		if hr == 0 {
			hr = n.headroom(topo.PortID(i))
		}
		c := int64(n.p.PFCXoff) + hr
		if c < int64(pkt) {
			return fmt.Errorf("packet: %w: PFC buffer of %s, Xoff %d + headroom %d bytes, is less than one %d-byte packet (MTU %d and headers): the port could never take one",
				ErrConfig, n.g.PortName(topo.PortID(i)), n.p.PFCXoff, hr, pkt, n.g.MTU)
		}
		if c > math.MaxInt32 {
			return fmt.Errorf("packet: %w: PFC buffer of %s, %d bytes, over 2 GiB", ErrConfig, n.g.PortName(topo.PortID(i)), c)
		}
		n.pcap[i] = int32(c)
	}
	return nil
}

// headroom is what switch port in's ingress needs above Xoff for no drop
// (the sum above), rounded up to 64 bytes and 64 more for the rounding of
// picosecond times.
func (n *Net) headroom(in topo.PortID) int64 {
	op := &n.ports[in] // its own sending side: the same cable and rate
	frame := int64(n.g.MTU + n.p.HeaderBytes + n.p.FirstBytes)
	flight := 2*op.prop + n.lat
	b := 3*frame + int64(n.nv)*pauseWire + int64(math.Ceil(float64(op.rate)/8*flight.Seconds()))
	return (b+63)/64*64 + 64
}

// admit takes packet id into the buffer of switch ingress port in, or
// drops it if it does not fit; above Xoff the port sends PAUSE.
func (n *Net) admit(id int32, pk *packet, in topo.PortID) bool {
	j := int(in)*n.nv + int(pk.vl)
	occ := n.occ[j] + pk.wire
	if occ > n.pcap[in] || n.dropP > 0 && n.sim.Rand().Float64() < n.dropP {
		n.ports[in].drops++
		n.lose(id, pk)
		return false
	}
	n.occ[j] = occ
	n.maxOcc = max(n.maxOcc, occ)
	if occ > int32(n.p.PFCXoff) && !n.xoff[j] && !n.ports[in].dead {
		n.xoff[j] = true
		n.pfc(in, pk.vl, true)
	}
	return true
}

// release takes wire bytes of priority vl out of switch ingress port in's
// buffer; at Xon or below the port sends RESUME.
func (n *Net) release(in topo.PortID, vl uint8, wire int32) {
	j := int(in)*n.nv + int(vl)
	n.occ[j] -= wire
	if n.xoff[j] && n.occ[j] <= int32(n.p.PFCXoff-n.p.PFCHysteresis) {
		n.xoff[j] = false
		n.pfc(in, vl, false)
	}
}

// pfc sends a PAUSE (on) or RESUME for priority vl from port in to its
// peer: after the packet in is sending, it takes the wire for a PFC frame
// and reaches the peer a cable later.
func (n *Net) pfc(in topo.PortID, vl uint8, on bool) {
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
func (n *Net) onPause(p topo.PortID, vl int, on bool) {
	op := &n.ports[p]
	if op.dead {
		return
	}
	i := int(p)*n.nv + vl
	if on {
		n.paused[i] = true
		if n.pauseSince[i] < 0 && n.hasWorkVL(op, i) {
			n.pauseSince[i] = n.sim.Now()
		}
		return
	}
	n.paused[i] = false
	n.endPause(p, i)
	n.kick(p)
}

// hasWorkVL says whether port op × priority i has something to send.
func (n *Net) hasWorkVL(op *oport, i int) bool {
	if op.nic >= 0 {
		return n.nicWork[i] > 0
	}
	return !n.q[i].empty()
}

// endPause closes a pause interval of port p × priority i, if one is open.
func (n *Net) endPause(p topo.PortID, i int) {
	if s := n.pauseSince[i]; s >= 0 {
		n.ports[p].pauseTime += n.sim.Now() - s
		n.pauseSince[i] = -1
	}
}

// workOn counts QP q as having packets to send on its NIC port's priority.
func (n *Net) workOn(q *qp) {
	i := int(q.port)*n.nv + int(q.vl)
	n.nicWork[i]++
	if n.paused[i] && n.pauseSince[i] < 0 {
		n.pauseSince[i] = n.sim.Now()
	}
}

// linkDown clears the PFC state of port p, whose link failed.
func (n *Net) linkDown(p topo.PortID) {
	for v := range n.nv {
		i := int(p)*n.nv + v
		n.endPause(p, i)
		n.paused[i], n.xoff[i] = false, false
	}
}

// queuedRoCE is packet pk joining the queue of output port out, priority
// index i: a paused priority now has something to send.
func (n *Net) queuedRoCE(i int, pk *packet) {
	n.qbytes[i] += int64(pk.wire)
	if n.paused[i] && n.pauseSince[i] < 0 {
		n.pauseSince[i] = n.sim.Now()
	}
}

// dequeuedRoCE is packet pk leaving the queue of output port op, priority
// index i, to be sent: ECN marks it by the bytes still queued on its
// priority (marking as it leaves gives the sender the queue as it is, not
// as it was when the packet joined it, a queue's sojourn earlier).
func (n *Net) dequeuedRoCE(op *oport, i int, pk *packet) {
	n.qbytes[i] -= int64(pk.wire)
	q := n.qbytes[i]
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

// lose counts a packet lost in the fabric (dropped, or stranded by a link
// failure) and starts its QP's retry timer.
func (n *Net) lose(id int32, pk *packet) {
	n.lost += int64(pk.payload)
	n.lostPkts++
	n.lostWire += int64(pk.wire)
	n.sim.After(n.p.RetryTimeout, evTimeout, pk.qp, 0, int64(pk.psn))
	n.free = append(n.free, id)
}

// deliverRoCE takes a packet's tail at the receiving NIC. RC takes packets
// in PSN order: the expected one is delivered; a later one shows that one
// was lost (or, with adaptive routing, overtaken), so it is discarded and
// the receiver NAKs the one it expects (once until that arrives); an
// earlier one is a duplicate, discarded. A marked packet makes the NIC
// send the sender a CNP (DCQCN).
func (n *Net) deliverRoCE(id int32, pk *packet, in topo.PortID) {
	qi := pk.qp
	q := &n.qps[qi]
	if pk.ce && n.dcqcn {
		now := n.sim.Now()
		if q.cnpAt < 0 || now-q.cnpAt >= n.p.DCQCN.CNPInterval {
			q.cnpAt = now
			n.ports[in].cnps++
			n.sim.After(q.lat, evCNP, qi, 0, 0)
		}
	}
	switch {
	case pk.psn == q.epsn:
		q.epsn++
		q.nakd = false
		for q.logBase < q.epsn {
			q.log.pop()
			q.logBase++
		}
		q.rp = max(q.rp, q.logBase)
		n.delivered += int64(pk.payload)
		n.deliveredPkts++
		chunk, payload := pk.chunk, pk.payload
		n.free = append(n.free, id)
		n.w.packetIn(chunk, payload)
		return
	case pk.psn > q.epsn:
		// The sender's retry timer covers this PSN too: if what follows
		// it is also lost, nothing else will reveal it (the NAK, sent
		// once, may have been answered by a resend this one overtook).
		n.sim.After(n.p.RetryTimeout, evTimeout, qi, 0, int64(pk.psn))
		if !q.nakd {
			q.nakd = true
			n.sim.After(q.lat, evNAK, qi, 0, int64(q.epsn))
		}
	}
	n.lost += int64(pk.payload)
	n.lostPkts++
	n.discards++
	n.free = append(n.free, id)
}

// goBack makes QP qi send again from PSN psn (a NAK, or a timeout).
func (n *Net) goBack(qi, psn int32) {
	q := &n.qps[qi]
	psn = max(psn, q.logBase)
	if psn >= q.rp {
		return // it has not sent psn since it last went back
	}
	q.rp = psn
	q.readyAt = max(q.readyAt, n.sim.Now()+n.p.MsgOverhead)
	if !q.active {
		q.active = true
		n.workOn(q)
		n.nics[q.nic].active.push(qi)
		n.kick(q.port)
	}
}

// onTimeout is QP qi's retry timer for PSN psn: if the receiver still
// lacks it, the QP goes back to the first PSN the receiver lacks.
func (n *Net) onTimeout(qi, psn int32) {
	if q := &n.qps[qi]; q.epsn <= psn {
		n.goBack(qi, q.epsn)
	}
}

// kickNICRoCE is kickNIC with RoCE: a paused priority's QPs wait, a QP
// that went back sends from its log first, and DCQCN paces QPs below line
// rate.
func (n *Net) kickNICRoCE(p topo.PortID, op *oport, ns *nicState) {
	now := n.sim.Now()
	var wake des.Time
	for range ns.active.len() {
		qi := ns.active.pop()
		q := &n.qps[qi]
		if q.rp == q.sndNxt && q.msgs.empty() {
			// It went back, and the receiver has since taken all it had
			// to send again.
			q.active = false
			n.nicWork[int(p)*n.nv+int(q.vl)]--
			continue
		}
		if q.readyAt > now {
			wake = earliest(wake, q.readyAt)
			ns.active.push(qi)
			continue
		}
		if n.paused[int(p)*n.nv+int(q.vl)] {
			ns.active.push(qi) // the RESUME kicks the port
			continue
		}
		var s sent
		psn := q.rp
		if q.rp < q.sndNxt {
			s = *q.log.at(int(q.rp - q.logBase))
			q.rp++
			n.resent += int64(s.payload)
			n.resentPkts++
		} else {
			s.chunk = q.msgs.front()
			s.payload = min(int32(n.g.MTU), n.w.chunks[s.chunk].bytes-q.off)
			s.wire = s.payload + int32(n.p.HeaderBytes)
			if q.off == 0 {
				s.wire += int32(n.p.FirstBytes)
			}
			q.log.push(s)
			q.sndNxt++
			q.rp = q.sndNxt
			n.injected += int64(s.payload)
			n.injectedPkts++
			q.off += s.payload
			if q.off == n.w.chunks[s.chunk].bytes {
				q.msgs.pop()
				q.off = 0
				q.readyAt = now + op.ser(s.wire) + n.p.MsgOverhead
			}
		}
		if n.dcqcn {
			n.pace(qi, q, s.wire, now)
		}
		if q.msgs.empty() && q.rp == q.sndNxt {
			q.active = false
			n.nicWork[int(p)*n.nv+int(q.vl)]--
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

// rpState is a QP's DCQCN reaction point. Its timers are not events: the
// stages a timer would have run since the last cut are applied when the
// QP next sends or gets a CNP (advance), so a QP costs nothing while it
// is at line rate, and nothing per timer tick below it.
type rpState struct {
	rc, rt  float64  // current and target rate, bits/s
	alpha   float64  // α as of the last cut
	cut     des.Time // the last CNP; -1: none yet (α starts at 1)
	t, bc   int32    // rate-increase stages since the cut: by the timer, by the byte counter
	bytes   int64    // sent since the last byte-counter stage
	limited bool     // below line rate: paced
}

// initRPs starts every QP at line rate.
func (n *Net) initRPs() {
	for i := range n.qps {
		n.qps[i].cnpAt = -1
	}
	if !n.dcqcn {
		return
	}
	n.rps = make([]rpState, len(n.qps))
	for i := range n.rps {
		line := float64(n.ports[n.qps[i].port].rate)
		n.rps[i] = rpState{rc: line, rt: line, alpha: 1, cut: -1}
	}
}

// onCNP is a CNP reaching QP qi's sender.
func (n *Net) onCNP(qi int32) {
	n.cut(&n.rps[qi], float64(n.ports[n.qps[qi].port].rate), n.sim.Now())
}

// cut is DCQCN's rate decrease at time now: Rt = Rc, Rc = Rc(1 - α/2),
// α = (1-g)α + g, where α has first decayed by (1-g) for every K since
// the last cut (and is 1 at the first).
func (n *Net) cut(r *rpState, line float64, now des.Time) {
	d := &n.p.DCQCN
	n.advance(r, line, now)
	a := 1.0
	if r.cut >= 0 {
		a = r.alpha * math.Pow(1-d.G, float64((now-r.cut)/d.AlphaTimer))
	}
	r.rt = r.rc
	r.rc = max(r.rc*(1-a/2), d.MinRate)
	r.alpha = (1-d.G)*a + d.G
	r.cut, r.t, r.bc, r.bytes = now, 0, 0, 0
	r.limited = true
}

// advance runs the rate-increase stages QP r's timer has run since its
// last cut.
func (n *Net) advance(r *rpState, line float64, now des.Time) {
	if !r.limited {
		return
	}
	stages := (now - r.cut) / n.p.DCQCN.RateTimer
	for r.limited && des.Time(r.t) < stages {
		r.t++
		n.increase(r, line)
	}
}

// increase is one rate-increase stage: fast recovery (Rc = (Rt+Rc)/2) for
// the first F stages of either counter, hyper increase (Rt += R_HAI) once
// both are past F, additive increase (Rt += R_AI) between. Within R_AI of
// the line rate the QP is back at it and stops pacing.
func (n *Net) increase(r *rpState, line float64) {
	d := &n.p.DCQCN
	f := int32(d.FastStages)
	switch {
	case max(r.t, r.bc) <= f:
	case min(r.t, r.bc) > f:
		r.rt += d.RateHAI
	default:
		r.rt += d.RateAI
	}
	r.rt = min(r.rt, line)
	r.rc = (r.rt + r.rc) / 2
	if r.rc >= line-d.RateAI {
		r.rc, r.rt, r.limited = line, line, false
	}
}

// pace is DCQCN at the sender after QP qi sends wire bytes now: the byte
// counter's stages, and a QP below line rate starts its next packet no
// sooner than wire / Rc after this one.
func (n *Net) pace(qi int32, q *qp, wire int32, now des.Time) {
	r := &n.rps[qi]
	if !r.limited {
		return
	}
	line := float64(n.ports[q.port].rate)
	n.advance(r, line, now)
	r.bytes += int64(wire)
	for r.limited && r.bytes >= n.p.DCQCN.ByteCounter {
		r.bytes -= n.p.DCQCN.ByteCounter
		r.bc++
		n.increase(r, line)
	}
	if r.limited {
		q.readyAt = max(q.readyAt, now+des.Time(float64(wire)*8/r.rc*float64(des.Second)))
	}
}

// invariantsRoCE checks, for every switch ingress port and priority: the
// bytes it holds are those of the packets queued in the switch that came
// in by it, never below zero nor above its buffer, and above Xoff only if
// it has sent PAUSE.
func (n *Net) invariantsRoCE() error {
	if len(n.checkBuf) != len(n.occ) {
		n.checkBuf = make([]int64, len(n.occ))
	}
	held := n.checkBuf
	clear(held)
	for j := range n.q {
		q := &n.q[j]
		for _, id := range q.b[q.h:] {
			pk := &n.pkts[id]
			held[int(pk.in)*n.nv+int(pk.vl)] += int64(pk.wire)
		}
	}
	for j, occ := range n.occ {
		p := topo.PortID(j / n.nv)
		switch {
		case int64(occ) != held[j]:
			return fmt.Errorf("port %s priority %d: holds %d bytes; the packets it let in and the switch still queues make %d", n.g.PortName(p), j%n.nv, occ, held[j])
		case occ < 0 || occ > n.pcap[p]:
			return fmt.Errorf("port %s priority %d: holds %d bytes of %d", n.g.PortName(p), j%n.nv, occ, n.pcap[p])
		case occ > int32(n.p.PFCXoff) && !n.xoff[j] && !n.ports[p].dead:
			return fmt.Errorf("port %s priority %d: holds %d bytes, over Xoff %d, and has not sent PAUSE", n.g.PortName(p), j%n.nv, occ, n.p.PFCXoff)
		}
	}
	return nil
}

// verifyRoCE is Verify's per-port part with RoCE: nothing queued or held,
// and no priority left paused or in Xoff.
func (n *Net) verifyRoCE() error {
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
			case n.occ[j] != 0:
				return fmt.Errorf("packet: port %s priority %d: %d bytes left in its buffer: %w", n.g.PortName(topo.PortID(i)), v, n.occ[j], ErrDrop)
			case n.xoff[j] || n.paused[j]:
				return fmt.Errorf("packet: port %s priority %d: left in Xoff (%v) or paused (%v) at the end", n.g.PortName(topo.PortID(i)), v, n.xoff[j], n.paused[j])
			}
		}
	}
	return nil
}
