package udp

import (
	"net/netip"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/internal/partitions"
	"github.com/ibex-rdma/ibex/psp"
	"github.com/ibex-rdma/ibex/rc"
	"github.com/ibex-rdma/ibex/rc/rcwire"
	"github.com/ibex-rdma/ibex/wire"
)

// Receiving: a batch of messages from the conn split into datagrams, each
// verified, decoded and demultiplexed to its QP's engine.

// newRecvBatch returns n messages, each with a receive buffer of its own:
// groSlot bytes if the conn may return super-datagrams (gro), maxDgram
// otherwise.
func newRecvBatch(n int, gro bool) []message {
	slot := maxDgram
	if gro {
		slot = groSlot
	}
	back := make([]byte, n*slot)
	bufs := make([][]byte, n)
	msgs := make([]message, n)
	for i := range msgs {
		bufs[i] = back[i*slot : (i+1)*slot : (i+1)*slot]
		msgs[i].Buffers = bufs[i : i+1]
	}
	return msgs
}

// deliver splits the n messages received into datagrams and processes
// them.
func (d *device) deliver(n int, pkt *rc.Packet, wp *wire.Packet) {
	wireClock.Load()
	if t := d.tx.tap.Load(); t != nil {
		t.received(d.rx[:n])
	}
	now := d.now()
	d.ctrs.rcvMsgs.Add(uint64(n))
	super := 0
	for i := 0; i < n; i++ {
		m := &d.rx[i]
		b, src, seg := m.Buffers[0][:m.N], m.Addr, m.Seg
		if seg < len(b) {
			super++
		}
		if len(b) == 0 {
			d.ctrs.rcvPkts.Add(1)
			d.ctrs.rcvErrors.Add(1)
			continue
		}
		if seg <= 0 {
			seg = len(b) // a conn that broke its contract: one datagram
		}
		for len(b) > 0 {
			k := min(seg, len(b))
			d.receive(now, b[:k], src, m.ID, m.CE, pkt, wp)
			b = b[k:]
		}
		if len(d.acks) > 0 && i < n-1 {
			// Answer requests that asked for it before reading on, so
			// the sender's window reopens while this batch is processed.
			// (The answers to the batch's last message wait for the end
			// of the loop pass: they may share a datagram with a reply.)
			for _, q := range d.acks {
				d.drain(now, q, pkt, wp)
			}
			d.release(nil, wp)
			d.tx.flush()
		}
		clear(d.acks)
		d.acks = d.acks[:0]
	}
	d.syncTouched()
	if super > 0 {
		d.ctrs.rcvSuper.Add(uint64(super))
	}
}

// receive verifies, decodes and delivers one datagram that came with IPv4
// ID id (-1: not known, see message.ID) and ECN CE mark ce. Nothing in it may panic: the
// network is untrusted.
func (d *device) receive(now int64, b []byte, src netip.AddrPort, id int32, ce bool, pkt *rc.Packet, wp *wire.Packet) {
	d.ctrs.rcvPkts.Add(1)
	d.ctrs.rcvData.Add(uint64(len(b)))
	if psp.IsSealed(b) {
		d.receiveSealed(now, b, src, ce, pkt, wp) // psp.go
		return
	}
	if err := wire.DecodeIB(b, wp); err != nil {
		d.ctrs.rcvErrors.Add(1)
		return
	}
	if wp.BTH.Opcode.Transport() != ib.RC && wp.BTH.Opcode != ib.CNP {
		d.ctrs.unknownQP.Add(1)
		return
	}
	pre := d.lastPre
	if pre == nil || src != d.lastSrc {
		pre = d.prefix(src, d.addr)
		d.lastSrc, d.lastPre = src, pre
	}
	if pre == nil {
		d.ctrs.rcvErrors.Add(1)
		return
	}
	var err error
	if id >= 0 {
		err = pre.CheckID(b, uint16(id)) // the IP header was seen: all 32 bits
	} else {
		_, err = pre.CheckAnyID(b) // a socket hides the ID: 16 bits
	}
	if err != nil {
		d.ctrs.icrcErrors.Add(1)
		d.ctrs.rcvErrors.Add(1)
		return
	}
	q := d.lastQP
	if q == nil || wp.BTH.DestQP != d.lastQPN {
		q = d.qps[wp.BTH.DestQP]
		d.lastQPN, d.lastQP = wp.BTH.DestQP, q
	}
	if q == nil || q.eng == nil || q.dropAfter || q.halted.Load() {
		// No QP, or one that takes no packet: not yet in RTR, or in
		// RESET or ERR (which drop what arrives, as rxe does).
		d.ctrs.unknownQP.Add(1)
		return
	}
	if q.rx != nil {
		// An encrypted QP takes sealed packets only.
		d.ctrs.pspPlain.Add(1)
		d.ctrs.rcvErrors.Add(1)
		return
	}
	if src.Addr().Unmap() != q.peer.Addr() {
		// Not from the QP's peer (rxe_recv.c's check_addr compares the
		// source with the QP's address vector too): an impersonation or
		// a stray. The destination needs no check here: the socket or
		// the XDP program takes only datagrams to the device's address,
		// and the ICRC was checked against it. The source port is not
		// compared: peers pick one per QP (wire.SourcePort) or send from
		// their bound port.
		d.ctrs.srcAddrErrors.Add(1)
		d.ctrs.rcvErrors.Add(1)
		return
	}
	d.toEngine(now, q, ce, pkt, wp)
}

// toEngine gives the decoded packet wp, ECN-marked if ce, to q's engine.
func (d *device) toEngine(now int64, q *qpDriver, ce bool, pkt *rc.Packet, wp *wire.Packet) {
	if !partitions.Match(wp.BTH.PKey, q.pkey) {
		// Not the QP's partition, or both limited members (IBA 10.9.3;
		// rxe_recv.c's check_keys). The QP's P_Key is an entry of the
		// port's table, so a packet that matches it matches the table.
		d.ctrs.pkeyViolations.Add(1)
		return
	}
	rcwire.FromWire(wp, pkt)
	pkt.CE = ce // ECN Congestion Experienced: the responder answers with a CNP
	if wp.BTH.AckReq && !wp.BTH.Opcode.Has(ib.MaskResponse) && (len(d.acks) == 0 || d.acks[len(d.acks)-1] != q) && len(d.acks) < cap(d.acks) {
		d.acks = append(d.acks, q)
	}
	q.eng.Receive(now, pkt)
	d.markReady(q)
	// The QP's counters follow at once for a response (what a requester
	// counts: RNR NAKs, error NAKs); for a request, whose counts no
	// completion waits on, once per batch (syncStats costs a dozen
	// atomic adds, as much as the rest of a data packet's receive).
	if wp.BTH.Opcode.Has(ib.MaskResponse) || len(d.touched) == cap(d.touched) && cap(d.touched) > 0 {
		q.syncStats()
	} else if len(d.touched) == 0 || d.touched[len(d.touched)-1] != q {
		d.touched = append(d.touched, q)
	}
}

// syncTouched brings the counters of the QPs receive saw up to date.
func (d *device) syncTouched() {
	for i, q := range d.touched {
		q.syncStats()
		d.touched[i] = nil
	}
	d.touched = d.touched[:0]
}
