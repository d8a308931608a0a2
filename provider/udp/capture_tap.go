package udp

import (
	"bufio"
	"encoding/binary"
	"io"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ibex-rdma/ibex/internal/pcap"
)

// The capture tap: the datagrams a device sends and receives, copied as
// Ethernet frames into a ring of fixed slots that the loop fills and
// WriteTo writes as pcap.
//
// The loop sees UDP payloads only, on both paths: the socket hides the
// IP and UDP headers, and the AF_XDP conn writes and parses its frames
// itself (xdp_linux.go, in UMEM chunks a frame may span two of). So every
// frame's headers are made here, equal to the real ones in every field
// the ICRC covers: addresses and ports (the QP's source port on a conn
// with SourcePorts), lengths, IPv4 ID (sent: the segment's index in its
// super-datagram, what the loop computed the ICRC for; received: the ID
// the conn saw, else the segment's index), DF; TTL 64, TOS ECT(0) when the
// conn sends it, CE on a datagram that arrived marked; a correct IPv4
// header checksum, UDP checksum 0 over IPv4 (as rxe sends) and computed
// over IPv6. The MACs are made up: 02:00 and the address's last four
// bytes.

const (
	capEthLen   = 14
	capHdrMax   = capEthLen + 40 + 8   // Ethernet, IPv6, UDP
	capMinSnap  = capHdrMax + 12       // every header through the BTH, over IPv4 or IPv6
	capMaxFrame = capHdrMax + maxDgram // the longest frame of a datagram the device sends or accepts
	capTTL      = 64                   // as rxe and the AF_XDP conn send
	capIPv4DF   = 0x4000               // Don't Fragment
	capProtoUDP = 17                   // the IP protocol number of UDP
	capFlushBuf = 64 << 10             // WriteTo's buffer
)

// capSlot is one packet of the ring.
type capSlot struct {
	ts   int64  // Unix time, ns
	orig uint32 // the frame's length on the wire
	n    uint32 // bytes kept (at most the snaplen)
}

// tap is one capture's ring. The loop that holds the device (own) records
// into it a batch at a time under mu, taken with TryLock: a batch that
// finds WriteTo holding the ring is counted in missed, not waited for.
type tap struct {
	mu      sync.Mutex
	stopped bool // Stop ran: a pass that loaded the tap before it records nothing

	// The device's side of the headers, set by attach under mu.
	local    netip.AddrPort
	srcPorts bool // message.SrcPort is the datagram's source port
	tos      byte // what sent datagrams carry (ECT(0) or 0)

	snap  int // bytes of each slot
	data  []byte
	slots []capSlot
	seen  uint64 // packets recorded, overwritten ones included
	limit uint64 // record no more than this many (0: no limit)
	done  chan struct{}

	missed atomic.Uint64
}

// newTap makes the ring cfg asks for (cfg validated, defaults applied).
func newTap(cfg CaptureConfig) *tap {
	snap := min(cfg.Snaplen, capMaxFrame)
	return &tap{snap: snap, data: make([]byte, cfg.Packets*snap), slots: make([]capSlot, cfg.Packets),
		limit: uint64(cfg.Count), done: make(chan struct{})}
}

// attach points d's data path at t.
func (t *tap) attach(d *device) {
	t.mu.Lock()
	t.local = d.addr
	t.srcPorts = d.conn.SourcePorts()
	t.tos = sendTOS(d.conn)
	t.mu.Unlock()
	d.tx.tap.Store(t)
}

// sendTOS is the TOS the conn's datagrams leave with.
func sendTOS(c batchConn) byte {
	switch c := c.(type) {
	case *sockIO:
		if c.ecn {
			return ecnECT0
		}
	case *xdpConn:
		if c.ecn {
			return ecnECT0
		}
	}
	return 0
}

// sent records the datagrams of a Send batch.
func (t *tap) sent(out []message) {
	if !t.mu.TryLock() {
		var n uint64
		for i := range out {
			n += uint64(len(out[i].Buffers))
		}
		t.missed.Add(n)
		return
	}
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	ts := time.Now().UnixNano()
	local := t.local.Addr()
	for i := range out {
		m := &out[i]
		sport := t.local.Port()
		if t.srcPorts && m.SrcPort != 0 {
			sport = m.SrcPort
		}
		for k, b := range m.Buffers {
			if !t.record(ts, local, m.Addr.Addr(), sport, m.Addr.Port(), uint16(k), t.tos, b) {
				return
			}
		}
	}
}

// received records the datagrams of the first n messages of a Recv batch.
func (t *tap) received(msgs []message) {
	if !t.mu.TryLock() {
		var n uint64
		for i := range msgs {
			if m := &msgs[i]; m.N > 0 {
				n += uint64((m.N + max(m.Seg, 1) - 1) / max(m.Seg, 1))
			}
		}
		t.missed.Add(n)
		return
	}
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	ts := time.Now().UnixNano()
	local := t.local
	for i := range msgs {
		m := &msgs[i]
		if m.N <= 0 {
			continue // nothing the loop will look at either
		}
		b, seg := m.Buffers[0][:m.N], m.Seg
		if seg <= 0 {
			seg = len(b)
		}
		var tos byte
		if m.CE {
			tos = ecnCE
		}
		for k := 0; len(b) > 0; k++ {
			id := uint16(k)
			if m.ID >= 0 {
				id = uint16(m.ID)
			}
			n := min(seg, len(b))
			if !t.record(ts, m.Addr.Addr(), local.Addr(), m.Addr.Port(), local.Port(), id, tos, b[:n]) {
				return
			}
			b = b[n:]
		}
	}
}

// record puts datagram b, from src:sport to dst:dport, into the next slot
// as a frame; false once the limit is reached.
func (t *tap) record(ts int64, src, dst netip.Addr, sport, dport, id uint16, tos byte, b []byte) bool {
	if t.limit != 0 && t.seen >= t.limit {
		return false
	}
	var h [capHdrMax]byte
	hl := putFrameHeader(h[:], src, dst, sport, dport, id, tos, b)
	i := int(t.seen % uint64(len(t.slots)))
	frame := t.data[i*t.snap : (i+1)*t.snap]
	n := copy(frame, h[:hl])
	n += copy(frame[n:], b)
	t.slots[i] = capSlot{ts: ts, orig: uint32(hl + len(b)), n: uint32(n)}
	t.seen++
	if t.seen == t.limit {
		close(t.done)
	}
	return true
}

// stats reads the counts (mu held).
func (t *tap) stats() CaptureStats {
	kept := min(t.seen, uint64(len(t.slots)))
	return CaptureStats{Seen: t.seen, Kept: int(kept), Overwritten: t.seen - kept, Missed: t.missed.Load()}
}

// writeTo writes the ring, oldest packet first, as a nanosecond
// LINKTYPE_ETHERNET pcap. The data path records nothing meanwhile (it
// counts what it missed).
func (t *tap) writeTo(w io.Writer) (int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cw := &countWriter{w: w}
	bw := bufio.NewWriterSize(cw, capFlushBuf)
	pw, err := pcap.NewWriter(bw, pcap.LinkEthernet, true, uint32(t.snap))
	if err != nil {
		return cw.n, err
	}
	kept := min(t.seen, uint64(len(t.slots)))
	for j := t.seen - kept; j < t.seen; j++ {
		i := int(j % uint64(len(t.slots)))
		s := &t.slots[i]
		r := pcap.Record{Sec: uint32(s.ts / int64(time.Second)), Frac: uint32(s.ts % int64(time.Second)), OrigLen: s.orig,
			Data: t.data[i*t.snap : i*t.snap+int(s.n)]}
		if err := pw.WriteRecord(&r); err != nil {
			return cw.n, err
		}
	}
	err = bw.Flush()
	return cw.n, err
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// putFrameHeader writes the Ethernet, IP and UDP headers of datagram b
// from src:sport to dst:dport into h and returns their length: IPv4 if
// both addresses are (IPv4-mapped ones count), else IPv6.
func putFrameHeader(h []byte, src, dst netip.Addr, sport, dport, id uint16, tos byte, b []byte) int {
	src, dst = src.Unmap(), dst.Unmap()
	be := binary.BigEndian
	putMAC(h[0:6], dst)
	putMAC(h[6:12], src)
	udpLen := 8 + len(b)
	if src.Is4() && dst.Is4() {
		be.PutUint16(h[12:], 0x0800)
		ip := h[capEthLen : capEthLen+20]
		ip[0], ip[1] = 0x45, tos
		be.PutUint16(ip[2:], uint16(20+udpLen))
		be.PutUint16(ip[4:], id)
		be.PutUint16(ip[6:], capIPv4DF)
		ip[8], ip[9] = capTTL, capProtoUDP
		ip[10], ip[11] = 0, 0
		s, d := src.As4(), dst.As4()
		copy(ip[12:16], s[:])
		copy(ip[16:20], d[:])
		be.PutUint16(ip[10:], ^fold(csum(0, ip)))
		u := h[capEthLen+20 : capEthLen+28]
		be.PutUint16(u, sport)
		be.PutUint16(u[2:], dport)
		be.PutUint16(u[4:], uint16(udpLen))
		u[6], u[7] = 0, 0 // as rxe sends it: the ICRC protects the datagram
		return capEthLen + 28
	}
	be.PutUint16(h[12:], 0x86dd)
	ip := h[capEthLen : capEthLen+40]
	be.PutUint32(ip, 6<<28|uint32(tos)<<20)
	be.PutUint16(ip[4:], uint16(udpLen))
	ip[6], ip[7] = capProtoUDP, capTTL
	s, d := src.As16(), dst.As16()
	copy(ip[8:24], s[:])
	copy(ip[24:40], d[:])
	u := h[capEthLen+40 : capEthLen+48]
	be.PutUint16(u, sport)
	be.PutUint16(u[2:], dport)
	be.PutUint16(u[4:], uint16(udpLen))
	u[6], u[7] = 0, 0
	// IPv6 forbids a zero UDP checksum (rxe sends one anyway; Wireshark
	// flags it): the pseudo-header, the UDP header and the datagram.
	var pl [4]byte
	be.PutUint32(pl[:], uint32(udpLen))
	nh := [4]byte{3: capProtoUDP}
	sum := csum(csum(csum(0, ip[8:40]), pl[:]), nh[:])
	c := ^fold(csum(csum(sum, u), b))
	if c == 0 {
		c = 0xffff
	}
	be.PutUint16(u[6:], c)
	return capEthLen + 48
}

// putMAC writes a made-up, locally administered MAC for a: 02:00 and its
// last four bytes (02:00:7f:00:00:01 for 127.0.0.1).
func putMAC(m []byte, a netip.Addr) {
	b := a.As16()
	m[0], m[1] = 0x02, 0
	copy(m[2:6], b[12:16])
}

// csum adds b to the one's-complement sum s (RFC 1071), unfolded.
func csum(s uint32, b []byte) uint32 {
	for len(b) >= 2 {
		s += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
		if s >= 1<<31 {
			s = s&0xffff + s>>16
		}
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	return s
}

// fold folds a sum to 16 bits.
func fold(s uint32) uint16 {
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}
