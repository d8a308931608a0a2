package udp

import (
	"unsafe"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/psp"
	"github.com/ibex-rdma/ibex/rc"
	"github.com/ibex-rdma/ibex/wire"
)

// Sending: the loop's transmit pass polls the engines into the transmit
// queue (txq.go), acknowledgements last.

// transmit runs due timers and sends what every engine has to send; it
// returns the earliest engine deadline (0: none).
//
// Only QPs with something new — a packet received, a request issued, a
// state change — are visited, unless a timer is due: then every QP is, and
// the earliest deadline is found again. A pass over a thousand idle QPs
// would otherwise cost every packet of a busy one.
func (d *device) transmit(now int64, pkt *rc.Packet, wp *wire.Packet) (next int64) {
	if d.scanAll || (d.nextTimer != 0 && now >= d.nextTimer) {
		for i := 0; i < len(d.active); i++ {
			if dl := d.drain(now, d.active[i], pkt, wp); dl != 0 && (next == 0 || dl < next) {
				next = dl
			}
		}
		d.nextTimer, d.scanAll = next, false
	} else {
		for _, q := range d.ready {
			if dl := d.drain(now, q, pkt, wp); dl != 0 && (d.nextTimer == 0 || dl < d.nextTimer) {
				d.nextTimer = dl
			}
		}
	}
	for i, q := range d.ready {
		q.ready = false
		d.ready[i] = nil
	}
	d.ready = d.ready[:0]
	if len(d.held) > 0 && !d.keepAcks(now) {
		d.release(nil, wp)
	}
	d.tx.flush()
	return d.nextTimer
}

// markReady puts q on the list transmit visits next.
func (d *device) markReady(q *qpDriver) {
	if !q.ready {
		q.ready = true
		d.ready = append(d.ready, q)
	}
}

// drain runs q's due timers and queues what its engine has to send; it
// returns the engine's next deadline.
func (d *device) drain(now int64, q *qpDriver, pkt *rc.Packet, wp *wire.Packet) int64 {
	s := &d.tx
	e := q.eng
	if e == nil {
		return 0
	}
	if dl := e.Deadline(); dl != 0 && dl <= now {
		e.Tick(now)
	}
	for {
		if s.full() {
			s.flush()
		}
		// The engine writes the payload where the datagram will carry it
		// (after a BTH: most packets have no extension header), so that
		// encoding does not copy it again.
		buf := s.bufs[s.nbuf][:0:maxDgram]
		if !e.Poll(now, pkt, buf[ib.BTHLen+q.sealOff():maxDgram]) {
			break
		}
		if !s.reachable(q.peer) {
			d.ctrs.xmitDiscards.Add(1)
			continue
		}
		if pkt.Opcode == ib.RCAck || pkt.Opcode == ib.RCAtomicAck {
			// Acknowledgements go last, see hold.
			d.hold(q, pkt, wp)
			continue
		}
		if len(d.held) > 0 && pkt.Opcode.Has(ib.MaskResponse) {
			// A READ response: the QP's earlier acknowledgements first
			// (responses keep their order), the payload saved meanwhile.
			pkt.Payload = d.scratch[:copy(d.scratch, pkt.Payload)]
			d.release(q, wp)
			buf = s.bufs[s.nbuf][:0:maxDgram]
		}
		d.encode(q, pkt, wp, buf)
	}
	q.syncStats()
	q.afterEngine()
	return e.Deadline()
}

// ackDelay bounds how long a poller's pass keeps acknowledgements back
// when it has nothing else to send (see keepAcks): well under the peers'
// 2 ms RTO floor, and longer than a spinning program takes to post the
// reply or the next piece that carries them.
const ackDelay = 20_000 // ns

// keepAcks reports whether the held acknowledgements may wait for the
// next pass instead of leaving in this one. They wait in a poller's pass
// (run to completion) while it has no other datagram to send, up to
// ackDelay: the poller is about to answer what it received, or post its
// next request, and they leave in the same system call (on AF_XDP one
// sendto kick for the batch; on a socket one super-datagram to the peer)
// instead of one of their own. The progress goroutine and posts send them
// at once.
func (d *device) keepAcks(now int64) bool {
	return d.lazyAcks && d.tx.nbuf == 0 && now-d.heldAt < ackDelay
}

// farewell sends, before q is destroyed, what its responder owes the
// peer for the requests it executed: its acknowledgements held back by a
// poller's pass (keepAcks), then those still in its engine
// (rc.Conn.PollAck). Hardware and rxe acknowledge as they execute; a QP
// destroyed right after its application saw the peer's last WRITE land
// (ib_write_lat's end) would otherwise take the ACK with it, and the
// peer's WRITE end in RETRY_EXC_ERR.
func (d *device) farewell(q *qpDriver) {
	s := &d.tx
	d.release(q, &d.wp)
	if q.eng != nil && s.reachable(q.peer) {
		for {
			if s.full() {
				s.flush()
			}
			if !q.eng.PollAck(&d.pkt) {
				break
			}
			d.encode(q, &d.pkt, &d.wp, s.bufs[s.nbuf][:0:maxDgram])
		}
	}
	s.flush()
}

// heldPkt is an acknowledgement waiting for the end of a transmit pass.
type heldPkt struct {
	q   *qpDriver
	pkt rc.Packet
}

// hold keeps an acknowledgement (ACK, NAK, atomic ACK: no payload) until
// the end of the transmit pass, so that it leaves after the requests that
// pass sends to the same peer: a request followed by a smaller datagram is
// one GSO super-datagram, so the ACK of a ping and the pong that answers it
// cost one trip through the kernel instead of two. Requests and responses
// are independent streams (IBA 9.5, rxe sends them from separate tasks);
// within the responses of a QP the order is kept.
func (d *device) hold(q *qpDriver, pkt *rc.Packet, wp *wire.Packet) {
	if n := len(d.held); n > 0 && pkt.Opcode == ib.RCAck && pkt.Syndrome == ib.SynACK {
		// A plain ACK is cumulative: it replaces the QP's plain ACK held
		// last (nothing of that QP was queued after it).
		if h := &d.held[n-1]; h.q == q && h.pkt.Opcode == ib.RCAck && h.pkt.Syndrome == ib.SynACK {
			h.pkt = *pkt
			h.pkt.Payload = nil
			return
		}
	}
	if len(d.held) == cap(d.held) {
		d.release(nil, wp)
	}
	if len(d.held) == 0 {
		d.heldAt = d.now()
	}
	d.held = append(d.held, heldPkt{q: q, pkt: *pkt})
	d.held[len(d.held)-1].pkt.Payload = nil
}

// release queues the held packets of q (nil: all).
func (d *device) release(q *qpDriver, wp *wire.Packet) {
	s := &d.tx
	kept := d.held[:0]
	for i := range d.held {
		h := &d.held[i]
		if q != nil && h.q != q {
			kept = append(kept, *h)
			continue
		}
		if s.full() {
			s.flush()
		}
		d.encode(h.q, &h.pkt, wp, s.bufs[s.nbuf][:0:maxDgram])
	}
	clear(d.held[len(kept):])
	d.held = kept
}

// encode queues pkt for q's peer, encoded in buf, the transmit queue's
// next buffer, with the ICRC for the IPv4 ID the datagram will leave with.
//
// A sealed packet (the QP is encrypted) is longer by psp.Overhead, and
// starts sealOff bytes later in buf until it is sealed (psp.go).
func (d *device) encode(q *qpDriver, pkt *rc.Packet, wp *wire.Packet, buf []byte) {
	s := &d.tx
	n := len(pkt.Payload)
	hl := pkt.Opcode.HeaderLen()
	off := q.sealOff()
	if n > 0 && hl != ib.BTHLen && unsafe.SliceData(pkt.Payload) == &buf[:cap(buf)][ib.BTHLen+off] {
		// Move the payload to where this opcode's headers end. It fits:
		// headers of packets with payload are at most 32 bytes.
		if off+hl+n <= cap(buf) {
			pkt.Payload = buf[off+hl : off+hl+n]
			copy(pkt.Payload, buf[off+ib.BTHLen:off+ib.BTHLen+n])
		}
	}
	size := hl + n + (-n & 3) + ib.ICRCLen
	if q.tx != nil {
		size += psp.Overhead
	}
	id := s.join(q.peer, q.sport, size)
	b, err := d.encodeID(q, pkt, wp, buf, id)
	if err != nil {
		d.ctrs.xmitDiscards.Add(1)
		return
	}
	if got := s.push(q.peer, q.sport, b); got != id && q.tx == nil {
		// Not the size predicted (a bug, but keep the wire right).
		_, _ = d.encodeID(q, pkt, wp, b[:0], got)
	}
}

// encodeID encodes pkt with the ICRC computed for IPv4 ID id.
func (d *device) encodeID(q *qpDriver, pkt *rc.Packet, wp *wire.Packet, buf []byte, id int) ([]byte, error) {
	if q.tx != nil {
		return q.seal(pkt, wp, buf) // no ICRC: the tag protects it
	}
	if id == 0 || d.tx.v6 {
		return q.encode(pkt, wp, buf)
	}
	pre := d.idPrefixes(q.peer)
	if pre == nil {
		return q.encode(pkt, wp, buf)
	}
	saved := q.sendICRC
	q.sendICRC = pre[id]
	b, err := q.encode(pkt, wp, buf)
	q.sendICRC = saved
	return b, err
}
