package rctest

import (
	"fmt"
	"net/netip"

	"github.com/ibex-rdma/ibex/rc"
	"github.com/ibex-rdma/ibex/rc/rcwire"
	"github.com/ibex-rdma/ibex/wire"
)

// maxFlush bounds the packets one Flush takes from the engine: a Poll that
// never runs dry is a bug, reported rather than looped on.
const maxFlush = 1 << 14

// maxHeaders is room for the headers, pad and ICRC around a payload.
const maxHeaders = 64

// QP is one rc engine on a Network: its Conn, its Host and an Endpoint,
// with the encoding a UDP provider does: each packet becomes one RoCEv2
// UDP payload (package wire, through rcwire) with an ICRC for the pair of
// addresses, and a datagram that does not decode or fails its ICRC is
// discarded, as corruption on a real network is.
type QP struct {
	Conn *rc.Conn
	Host *Host
	// Check, if set, runs after every packet the engine receives and after
	// every Flush; Deliver and Flush return its error.
	Check func(*rc.Conn) error
	// Trace, if set, sees every packet before the engine receives it.
	Trace func(now int64, p *rc.Packet)

	ep        *Endpoint
	peer      netip.AddrPort
	destQPN   uint32
	tx, rx    wire.ICRCPrefix
	scratch   []byte
	out       [][]byte
	bufs      [][]byte
	sizes     []int
	ce        []bool
	discarded uint64
	pkt       rc.Packet
	wp        wire.Packet
}

// NewQP creates the engine for cfg with host h and attaches it to n at
// addr, sending to peer. The engine receives whatever arrives at addr.
func NewQP(n *Network, addr, peer netip.AddrPort, cfg rc.Config, h *Host) (*QP, error) {
	c, err := rc.New(cfg, h)
	if err != nil {
		return nil, err
	}
	mtu := cfg.MTU
	if mtu == 0 {
		mtu = 1024 // rc's default
	}
	q := &QP{Conn: c, Host: h, peer: peer, destQPN: cfg.DestQPN, scratch: make([]byte, mtu)}
	if q.tx, err = wire.NewICRCPrefix(&wire.Encap{Src: addr, Dst: peer, DF: true}); err != nil {
		return nil, err
	}
	if q.rx, err = wire.NewICRCPrefix(&wire.Encap{Src: peer, Dst: addr, DF: true}); err != nil {
		return nil, err
	}
	q.ep = n.Endpoint(addr)
	return q, nil
}

// Endpoint returns the QP's endpoint.
func (q *QP) Endpoint() *Endpoint { return q.ep }

// Discarded returns how many datagrams failed to decode or failed their
// ICRC check.
func (q *QP) Discarded() uint64 { return q.discarded }

// Flush takes every packet the engine has to send now and sends them to
// the peer as one batch. It returns how many it sent.
func (q *QP) Flush() (int, error) {
	now := q.ep.n.Now()
	k := 0
	pkt, wp := &q.pkt, &q.wp
	for ; k < maxFlush && q.Conn.Poll(now, pkt, q.scratch); k++ {
		if len(q.out) == k {
			q.out = append(q.out, make([]byte, 0, maxHeaders+len(q.scratch)))
		}
		rcwire.ToWire(pkt, q.destQPN, wp)
		b, err := wire.AppendIB(q.out[k][:0], wp, &q.tx)
		if err != nil {
			return k, fmt.Errorf("rctest: host %s: the engine polled a packet that does not encode: %v: %w", q.Host.Name, wp, err)
		}
		q.out[k] = b
	}
	q.ep.Send(q.peer, q.out[:k])
	if k == maxFlush {
		return k, fmt.Errorf("rctest: host %s: Poll still had packets after %d", q.Host.Name, k)
	}
	if q.Check != nil {
		if err := q.Check(q.Conn); err != nil {
			return k, fmt.Errorf("host %s, after sending %d packets: %w", q.Host.Name, k, err)
		}
	}
	return k, nil
}

// Deliver receives at most limit datagrams that have arrived and hands the
// good ones to the engine. It returns how many it received. A datagram
// longer than a packet of the QP's path MTU is truncated, and so fails its
// ICRC: like a NIC, the QP drops what it was not set up to receive.
func (q *QP) Deliver(limit int) (int, error) {
	for len(q.bufs) < limit {
		q.bufs = append(q.bufs, make([]byte, maxHeaders+len(q.scratch)))
		q.sizes = append(q.sizes, 0)
		q.ce = append(q.ce, false)
	}
	n := q.ep.RecvCE(q.bufs[:limit], q.sizes[:limit], nil, q.ce[:limit])
	now := q.ep.n.Now()
	pkt, wp := &q.pkt, &q.wp
	for i := range n {
		b := q.bufs[i][:q.sizes[i]]
		if wire.DecodeIB(b, wp) != nil || q.rx.Check(b) != nil {
			q.discarded++
			continue
		}
		rcwire.FromWire(wp, pkt)
		pkt.CE = q.ce[i]
		if q.Trace != nil {
			q.Trace(now, pkt)
		}
		q.Conn.Receive(now, pkt)
		if q.Check != nil {
			if err := q.Check(q.Conn); err != nil {
				return i + 1, fmt.Errorf("host %s, after %v: %w", q.Host.Name, wp, err)
			}
		}
	}
	return n, nil
}

// Tick fires the engine's timers due at the network's time.
func (q *QP) Tick() { q.Conn.Tick(q.ep.n.Now()) }
