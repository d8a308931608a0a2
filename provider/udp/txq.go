package udp

import (
	"net/netip"
	"sync/atomic"
)

// The transmit queue: the datagrams of a loop pass, encoded in buffers of
// the device's, grouped into the messages the conn's Send takes.
//
// With GSO (batchConn.Offload), consecutive datagrams of one size to one
// peer go out as one super-datagram (the last may be shorter; a shorter
// datagram therefore ends a run). Segment i of a super-datagram leaves with
// IPv4 ID i (the kernel numbers the segments of a datagram from its ID,
// which IP_PMTUDISC_DO makes 0; measured on Linux 6.18 through a TUN
// device, see TestGSOSegmentICRC), so the loop computes each datagram's
// ICRC for the ID it will have: a peer that checks the real headers (Linux
// rxe) accepts it. That is why the queue, not the conn, groups them: the
// group decides the ICRC, which is computed as the datagram is encoded.

const (
	udpMaxSegs    = 64    // segments per super-datagram: UDP_MAX_SEGMENTS of older kernels (6.18 takes 128)
	udpMaxPayload = 65507 // largest UDP payload over IPv4 (65535-20-8); IPv6 allows 20 more
	txCap         = 128   // datagrams queued per flush (a window of packets)
)

// txMsg is one message of the queue: datagrams bufs[first:first+n], all
// to peer, all seg bytes but the last (which may be shorter and then
// closes the run).
type txMsg struct {
	peer   netip.AddrPort
	sport  uint16 // the UDP source port (0: the conn's), see message.SrcPort
	first  int
	n      int
	seg    int
	bytes  int
	closed bool
}

// txQueue is the loop's transmit queue. Only the loop goroutine uses it.
type txQueue struct {
	conn batchConn
	ctrs *counters
	v6   bool // the conn's socket is AF_INET6
	gso  bool // group datagrams into super-datagrams

	bufs [][]byte // buffers of maxDgram bytes; bufs[i] holds datagram i
	nbuf int
	msgs []txMsg   // cap len(bufs)
	out  []message // msgs as Send takes them

	tap atomic.Pointer[tap] // the device's capture (capture.go), nil: none; deliver records into it too
}

// init sets the queue up for conn: a batch of min(txCap, BatchSize)
// datagrams, grouped if conn has GSO.
func (s *txQueue) init(conn batchConn, c *counters) {
	s.conn, s.ctrs = conn, c
	s.gso, _ = conn.Offload()
	s.v6 = conn.LocalAddr().Addr().Is6()
	n := min(txCap, conn.BatchSize())
	s.bufs = make([][]byte, n)
	back := make([]byte, n*maxDgram)
	for i := range s.bufs {
		s.bufs[i] = back[i*maxDgram : i*maxDgram : (i+1)*maxDgram]
	}
	s.msgs = make([]txMsg, 0, n)
	s.out = make([]message, 0, n)
}

// reachable reports whether the socket can send to peer at all.
func (s *txQueue) reachable(peer netip.AddrPort) bool {
	return peer.IsValid() && (s.v6 || peer.Addr().Is4())
}

// full reports whether the queue must be flushed before the next datagram.
func (s *txQueue) full() bool { return s.nbuf == len(s.bufs) }

// join returns the index a datagram of size bytes to peer from source
// port sport would have in the last message, or 0 if it starts a new one.
func (s *txQueue) join(peer netip.AddrPort, sport uint16, size int) int {
	if !s.gso || len(s.msgs) == 0 {
		return 0
	}
	m := &s.msgs[len(s.msgs)-1]
	if m.closed || m.peer != peer || m.sport != sport || m.n == udpMaxSegs || size > m.seg || m.bytes+size > udpMaxPayload {
		return 0
	}
	return m.n
}

// push queues b, which must be the next buffer (bufs[nbuf]) or replace
// it, for peer from sport and returns its segment index (its IPv4 ID), as
// join computes it for len(b). The queue must not be full.
func (s *txQueue) push(peer netip.AddrPort, sport uint16, b []byte) int {
	i := s.nbuf
	s.bufs[i] = b
	s.nbuf++
	k := s.join(peer, sport, len(b))
	if k == 0 {
		s.msgs = append(s.msgs, txMsg{peer: peer, sport: sport, first: i, n: 1, seg: len(b), bytes: len(b)})
		return 0
	}
	m := &s.msgs[len(s.msgs)-1]
	m.n++
	m.bytes += len(b)
	m.closed = len(b) < m.seg
	return k
}

// flush sends the queue and counts what was sent and what was dropped.
func (s *txQueue) flush() {
	if s.nbuf == 0 {
		return
	}
	wireClock.Add(1)
	out := s.out[:0]
	for _, m := range s.msgs {
		out = append(out, message{Buffers: s.bufs[m.first : m.first+m.n], Addr: m.peer, SrcPort: m.sport})
	}
	if t := s.tap.Load(); t != nil {
		t.sent(out)
	}
	pkts, bytes := s.conn.Send(out)
	c := s.ctrs
	if pkts > 0 {
		c.xmitPkts.Add(uint64(pkts))
		c.xmitData.Add(uint64(bytes))
	}
	if pkts < s.nbuf {
		c.xmitDiscards.Add(uint64(s.nbuf - pkts))
	}
	if s.gso {
		s.gso, _ = s.conn.Offload() // off for good if the network refused a super-datagram
	}
	s.out = out
	s.nbuf = 0
	s.msgs = s.msgs[:0]
}
