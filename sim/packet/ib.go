package packet

import (
	"fmt"

	"github.com/ibex-rdma/ibex/sim/des"
	"github.com/ibex-rdma/ibex/sim/topo"
)

// ib is InfiniBand's link layer: credit-based flow control per VL (IBA
// §7.9). Each port's sending side keeps, per VL, its credits in hand and a
// time-ordered queue of credits on their way back; the receiving side
// counts its buffer in use. A port sends only with credit for the whole
// packet, and takes credit in lazily when it looks for it, so a port that
// has enough costs no event per credit. A packet holds its credit from
// the moment it starts on the wire until it leaves the next input buffer
// (a switch's, as it is sent on; a NIC's, at its tail: NICs drain at line
// rate), and the credit then crosses that input's cable back.
//
// Nothing is ever dropped. The one loss is a packet a link failure
// strands (Net.strand): its QP sends it again after the retry timeout, as
// its own RDMA WRITE.
type ib struct {
	n      *Net
	cap    int32     // buffer per input port per VL, credits
	cred   []int32   // per port × VL: credits in hand at the sending side
	ret    []credits // per port × VL: credits on their way back
	occ    []int32   // per port × VL: receive buffer in use at the receiving side, credits
	maxOcc int32
	retx   [][]retx // per QP: lost packets to send again, before new ones
}

type retx struct{ chunk, payload int32 }

// newIB gives every cabled port a full buffer's credit, and refuses a
// buffer that cannot hold a packet.
func newIB(n *Net) (*ib, error) {
	p := &n.p
	l := &ib{n: n, cap: int32(p.Buffer / p.CreditUnit)}
	if pkt := n.g.MTU + p.HeaderBytes + p.FirstBytes; int(l.cap)*p.CreditUnit < pkt {
		return nil, fmt.Errorf("packet: %w: buffer %d bytes per VL holds %d credits of %d bytes, less than one %d-byte packet (MTU %d and headers): the link could never send",
			ErrConfig, p.Buffer, l.cap, p.CreditUnit, pkt, n.g.MTU)
	}
	k := len(n.ports) * n.nv
	l.cred = make([]int32, k)
	l.ret = make([]credits, k)
	l.occ = make([]int32, k)
	for i := range n.ports {
		if n.ports[i].cabled {
			for v := range n.nv {
				l.cred[i*n.nv+v] = l.cap
			}
		}
	}
	return l, nil
}

func (l *ib) initQPs() { l.retx = make([][]retx, len(l.n.qps)) }

func (l *ib) activated(*qp) {}

// units is the credits a packet of wire bytes takes.
func (l *ib) units(wire int32) int32 {
	cu := int32(l.n.p.CreditUnit)
	return (wire + cu - 1) / cu
}

// haveCredit says whether port × VL i has units of credit, taking in the
// returns that are due.
func (l *ib) haveCredit(i int, units int32) bool {
	if l.cred[i] >= units {
		return true
	}
	if !l.ret[i].empty() {
		l.cred[i] += l.ret[i].take(l.n.sim.Now())
	}
	return l.cred[i] >= units
}

// nextCredit is when port × VL i's next credit return arrives; 0: none
// is on its way.
func (l *ib) nextCredit(i int) des.Time {
	if r := &l.ret[i]; !r.empty() {
		return r.next()
	}
	return 0
}

// returnCredit sends units of VL vl's credit back from the receiving side
// of a link to port up, arriving at at; a port waiting for credit is
// looked at then.
func (l *ib) returnCredit(up topo.PortID, vl uint8, at des.Time, units int32) {
	n := l.n
	l.ret[int(up)*n.nv+int(vl)].add(at, units)
	if n.ports[up].stallSince >= 0 {
		n.schedPort(up, at)
	}
}

// free empties pk's share of the buffer of input port in and sends the
// credit back over its cable, arriving at.
func (l *ib) free(pk *packet, in topo.PortID, at des.Time, u int32) {
	n := l.n
	l.occ[int(in)*n.nv+int(pk.vl)] -= u
	l.returnCredit(n.ports[in].peer, pk.vl, at+n.ports[in].prop, u)
}

func (l *ib) sendable(i int, pk *packet) (int32, des.Time, bool, bool) {
	u := l.units(pk.wire)
	if !l.haveCredit(i, u) {
		return 0, l.nextCredit(i), true, false
	}
	return u, 0, false, true
}

// transmitted takes the packet's credit at the sending side and counts it
// into the receiving side's buffer from its first bit; a switch port also
// lets go of the input buffer the packet was in, whose credit goes back
// when the tail has left.
func (l *ib) transmitted(p topo.PortID, op *oport, pk *packet, u int32, end des.Time) {
	n := l.n
	vl := int(pk.vl)
	i := int(p)*n.nv + vl
	l.cred[i] -= u
	if l.cred[i] < 0 {
		panic(fmt.Sprintf("packet: port %s VL %d: credits %d below zero", n.g.PortName(p), vl, l.cred[i]))
	}
	if op.sw {
		l.free(pk, pk.in, end, u)
	}
	peer := op.peer
	j := int(peer)*n.nv + vl
	l.occ[j] += u
	if l.occ[j] > l.maxOcc {
		l.maxOcc = l.occ[j]
		if l.occ[j] > l.cap {
			panic(fmt.Sprintf("packet: port %s VL %d: buffer %d credits over its %d", n.g.PortName(peer), vl, l.occ[j], l.cap))
		}
	}
}

// admit takes every packet: its buffer was counted when it started.
func (l *ib) admit(int32, *packet, topo.PortID) bool { return true }

func (l *ib) queued(int, *packet)   {}
func (l *ib) unqueued(int, *packet) {}

// deliver takes a packet's tail at a NIC: the NIC drains at line rate, so
// the credit goes straight back.
func (l *ib) deliver(id int32, pk *packet, in topo.PortID) {
	l.free(pk, in, l.n.sim.Now(), l.units(pk.wire))
	l.n.take(id, pk)
}

// strand frees the packet's buffer and has its QP resend it after the
// retry timeout.
func (l *ib) strand(id int32, pk *packet) {
	n := l.n
	l.free(pk, pk.in, n.sim.Now(), l.units(pk.wire))
	n.lose(id, pk)
	n.sim.After(n.p.RetryTimeout, evResend, pk.qp, pk.chunk, int64(pk.payload))
}

func (l *ib) linkDown(topo.PortID) {}

func (l *ib) handle(e des.Event) {
	if e.Kind() != evResend {
		panic(fmt.Sprintf("packet: InfiniBand: event kind %d", e.Kind()))
	}
	l.resend(e.A, e.B, int32(e.C))
}

// resend queues a lost packet's payload on its QP again.
func (l *ib) resend(qi, chunk int32, payload int32) {
	n := l.n
	l.retx[qi] = append(l.retx[qi], retx{chunk, payload})
	q := &n.qps[qi]
	if !q.active {
		q.active = true
		n.nics[q.nic].active.push(qi)
		n.kick(q.port)
	}
}

// kickNIC serves the NIC's active QPs a packet each in turn: a QP's lost
// packets first, then its messages in order, each message's first packet
// with RETH; a QP waits for its message overhead and for credit.
func (l *ib) kickNIC(p topo.PortID, op *oport, ns *nicState) {
	n := l.n
	now := n.sim.Now()
	var wake des.Time
	blocked := false
	for range ns.active.len() {
		qi := ns.active.pop()
		q := &n.qps[qi]
		if q.readyAt > now {
			wake = earliest(wake, q.readyAt)
			ns.active.push(qi)
			continue
		}
		rx := &l.retx[qi]
		again := len(*rx) > 0
		var chunk, payload int32
		if again {
			// A resent packet goes as its own RDMA WRITE (with RETH).
			chunk, payload = (*rx)[0].chunk, (*rx)[0].payload
		} else {
			chunk = q.msgs.front()
			payload = min(int32(n.g.MTU), n.w.chunks[chunk].bytes-q.off)
		}
		wire := payload + int32(n.p.HeaderBytes)
		if again || q.off == 0 {
			wire += int32(n.p.FirstBytes)
		}
		u := l.units(wire)
		i := int(p)*n.nv + int(q.vl)
		if !l.haveCredit(i, u) {
			blocked = true
			if w := l.nextCredit(i); w > 0 {
				wake = earliest(wake, w)
			}
			ns.active.push(qi)
			continue
		}
		id := n.newPacket()
		pk := &n.pkts[id]
		*pk = packet{chunk: chunk, qp: qi, dst: q.dst, in: topo.NoPort, wire: wire, payload: payload, vl: q.vl}
		if again {
			n.resent += int64(payload)
			n.resentPkts++
			*rx = (*rx)[1:]
			if len(*rx) == 0 {
				*rx = nil
			}
		} else {
			n.injected += int64(payload)
			n.injectedPkts++
			q.off += payload
			if q.off == n.w.chunks[chunk].bytes {
				q.msgs.pop()
				q.off = 0
				q.readyAt = now + op.ser(wire) + n.p.MsgOverhead
			}
		}
		if q.msgs.empty() && len(*rx) == 0 {
			q.active = false
		}
		if q.active {
			ns.active.push(qi)
		}
		n.transmit(p, op, id, pk, u)
		return
	}
	n.idle(p, op, blocked, wake)
}

func (l *ib) maxBuffer() int64 { return int64(l.maxOcc) * int64(l.n.p.CreditUnit) }

// invariants checks, on every link and VL: credits in hand are never
// negative, the receive buffer never holds more than its capacity, and
// credits in hand + credits on their way back + buffer in use (packets on
// the wire count from when they start) = capacity.
func (l *ib) invariants() error {
	n := l.n
	for i := range n.ports {
		op := &n.ports[i]
		if !op.cabled {
			continue
		}
		for v := range n.nv {
			j := i*n.nv + v
			occ := l.occ[int(op.peer)*n.nv+v]
			switch {
			case l.cred[j] < 0:
				return fmt.Errorf("port %s VL %d: %d credits", n.g.PortName(topo.PortID(i)), v, l.cred[j])
			case occ < 0 || occ > l.cap:
				return fmt.Errorf("port %s VL %d: buffer holds %d credits of %d", n.g.PortName(op.peer), v, occ, l.cap)
			case int64(l.cred[j])+l.ret[j].pending()+int64(occ) != int64(l.cap):
				return fmt.Errorf("port %s VL %d: %d in hand + %d returning + %d buffered != %d",
					n.g.PortName(topo.PortID(i)), v, l.cred[j], l.ret[j].pending(), occ, l.cap)
			}
		}
	}
	return nil
}

// verify checks that on every link and VL nothing is left queued, and the
// sender's credits plus those on their way back equal the receiver's
// buffer, which holds nothing.
func (l *ib) verify() error {
	n := l.n
	for i := range n.ports {
		op := &n.ports[i]
		if !op.cabled {
			continue
		}
		for v := range n.nv {
			j := i*n.nv + v
			if !n.q[j].empty() {
				return fmt.Errorf("packet: port %s VL %d: %d packets left queued: %w", n.g.PortName(topo.PortID(i)), v, n.q[j].len(), ErrDrop)
			}
			got := int64(l.cred[j]) + l.ret[j].pending() + int64(l.occ[int(op.peer)*n.nv+v])
			if got != int64(l.cap) || l.occ[int(op.peer)*n.nv+v] != 0 {
				return fmt.Errorf("packet: port %s VL %d: %d credits in hand, %d returning, %d buffered at %s; want %d, %d, 0",
					n.g.PortName(topo.PortID(i)), v, l.cred[j], l.ret[j].pending(), l.occ[int(op.peer)*n.nv+v], n.g.PortName(op.peer), l.cap, l.cap)
			}
		}
	}
	return nil
}
