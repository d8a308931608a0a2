package udp

import (
	"encoding/binary"
	"net/netip"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A device's socket I/O: sendmmsg and recvmmsg called directly on the
// socket, with UDP segmentation offload both ways, into and out of buffers
// allocated once, so that the data path allocates nothing.
//
// Send (GSO, Linux ≥ 4.18): consecutive datagrams of one size to one peer
// go out as one super-datagram, a sendmsg with a UDP_SEGMENT control
// message giving the segment size (the last segment may be shorter; a
// shorter datagram therefore ends a run). The kernel carries it whole as
// far as it can — through loopback and veth to the receiving socket — and
// segments it in software or on the NIC otherwise. Segment i of a
// super-datagram leaves with IPv4 ID i (the kernel numbers the segments
// of a datagram from its ID, which IP_PMTUDISC_DO makes 0; measured on
// Linux 6.18 through a TUN device, see TestGSOSegmentICRC), so the loop
// computes each datagram's ICRC for the ID it will have: a peer that
// checks the real headers (Linux rxe) accepts it.
//
// Receive (GRO, Linux ≥ 5.0): with UDP_GRO set, a read returns a
// super-datagram whole, with a UDP_GRO control message giving its segment
// size; the loop splits it. Without GRO the kernel segments it for us.
//
// Both fall back to plain datagrams: GSO when the kernel refuses a
// super-datagram (EIO: the egress device lacks checksum offload; EINVAL),
// detected once and remembered; GRO when the socket option is refused.
// IBEX_UDP_GSO=0 and IBEX_UDP_GRO=0 turn them off.
//
// Blocking stays with the Go netpoller: the loop reads without blocking
// and, when it has nothing to do, waits through the socket's RawConn (so
// read deadlines and the wake-up by SetReadDeadline keep working).

const (
	udpMaxSegs    = 64    // segments per super-datagram: UDP_MAX_SEGMENTS of older kernels (6.18 takes 128)
	udpMaxPayload = 65507 // largest UDP payload over IPv4 (65535-20-8); IPv6 allows 20 more
	groSlot       = 65536 // receive buffer per message with GRO (4 MiB in all): a super-datagram is at most 64 KiB
	txCap         = 128   // datagrams queued per flush (a window of packets)
	rxSlots       = 64    // messages per recvmmsg
	cmsgU16Space  = 24    // unix.CmsgSpace(2) on 64-bit Linux, a control buffer per message
	cmsgIntSpace  = 24    // unix.CmsgSpace(4)
)

// txMsg is one sendmmsg message: datagrams bufs[first:first+n], all to
// peer, all seg bytes but the last (which may be shorter and then closes
// the run).
type txMsg struct {
	peer   netip.AddrPort
	first  int
	n      int
	seg    int
	bytes  int
	closed bool
}

// sockIO is the loop's side of the socket. Only the loop goroutine uses it.
type sockIO struct {
	ctrs *counters
	fd   int // valid until the loop exits: the conn is closed only after
	raw  syscall.RawConn
	v6   bool // an AF_INET6 socket
	gso  bool // send super-datagrams
	gro  bool // the socket delivers super-datagrams

	// Transmit queue.
	bufs  [][]byte // txCap buffers of maxDgram bytes; bufs[i] holds datagram i
	peers []netip.AddrPort
	nbuf  int
	msgs  []txMsg // cap txCap
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6
	ctl   []byte
	wfrom int // messages hdrs[wfrom:wto] for writeFn
	wto   int
	wn    int
	werr  syscall.Errno

	// Receive.
	slot   int // bytes per receive buffer
	rbuf   []byte
	rhdrs  []unix.Mmsghdr
	riovs  []unix.Iovec
	rnames []unix.RawSockaddrInet6
	rctl   []byte
	rdirty int // headers the last recvmmsg may have changed
	rn     int
	rerr   syscall.Errno

	readFn  func(uintptr) bool // method values, made once: passing them allocates nothing
	writeFn func(uintptr) bool
}

func envOff(name string) bool { v := os.Getenv(name); return v == "0" || v == "off" || v == "false" }

// newSockIO sets the socket up for the loop: UDP_GRO if allowed, and the
// buffers.
func newSockIO(raw syscall.RawConn, v6 bool, c *counters) *sockIO {
	s := &sockIO{ctrs: c, raw: raw, v6: v6, gso: !envOff("IBEX_UDP_GSO")}
	_ = raw.Control(func(fd uintptr) {
		s.fd = int(fd)
		// Path MTU discovery on: DF set, and IPv4 ID 0 on every datagram
		// (the segments of a super-datagram 0, 1, 2, ...). The ICRC covers
		// the ID and the loop computes it for these (wire/doc.go); with
		// the kernel's default, IP_PMTUDISC_WANT, the ID comes from a
		// hashed counter and a receiver that checks the real headers
		// (Linux rxe) drops every packet.
		_ = unix.SetsockoptInt(s.fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
		if v6 {
			_ = unix.SetsockoptInt(s.fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO)
		}
		if s.gso {
			// Kernels before 4.18 do not know the option.
			if _, err := unix.GetsockoptInt(s.fd, unix.SOL_UDP, unix.UDP_SEGMENT); err != nil {
				s.gso = false
			}
		}
		if !envOff("IBEX_UDP_GRO") && unix.SetsockoptInt(s.fd, unix.SOL_UDP, unix.UDP_GRO, 1) == nil {
			s.gro = true
		}
	})
	s.bufs = make([][]byte, txCap)
	back := make([]byte, txCap*maxDgram)
	for i := range s.bufs {
		s.bufs[i] = back[i*maxDgram : i*maxDgram : (i+1)*maxDgram]
	}
	s.peers = make([]netip.AddrPort, txCap)
	s.msgs = make([]txMsg, 0, txCap)
	s.hdrs = make([]unix.Mmsghdr, txCap)
	s.iovs = make([]unix.Iovec, txCap)
	s.names = make([]unix.RawSockaddrInet6, txCap)
	s.ctl = make([]byte, txCap*cmsgU16Space)

	s.slot = maxDgram
	if s.gro {
		s.slot = groSlot
	}
	s.rbuf = make([]byte, rxSlots*s.slot)
	s.rhdrs = make([]unix.Mmsghdr, rxSlots)
	s.riovs = make([]unix.Iovec, rxSlots)
	s.rnames = make([]unix.RawSockaddrInet6, rxSlots)
	s.rctl = make([]byte, rxSlots*cmsgIntSpace)
	for i := range s.rhdrs {
		s.riovs[i].Base = &s.rbuf[i*s.slot]
		s.riovs[i].SetLen(s.slot)
		h := &s.rhdrs[i].Hdr
		h.Iov = &s.riovs[i]
		h.SetIovlen(1)
		h.Name = (*byte)(unsafe.Pointer(&s.rnames[i]))
		h.Control = &s.rctl[i*cmsgIntSpace]
	}
	s.rdirty = rxSlots
	s.readFn = s.readBatch
	s.writeFn = s.writeBatch
	return s
}

// reachable reports whether the socket can send to peer at all.
func (s *sockIO) reachable(peer netip.AddrPort) bool {
	return peer.IsValid() && (s.v6 || peer.Addr().Is4())
}

// full reports whether the queue must be flushed before the next datagram.
func (s *sockIO) full() bool { return s.nbuf == len(s.bufs) }

// join returns the index a datagram of size bytes to peer would have in
// the last message, or 0 if it starts a new one.
func (s *sockIO) join(peer netip.AddrPort, size int) int {
	if !s.gso || len(s.msgs) == 0 {
		return 0
	}
	m := &s.msgs[len(s.msgs)-1]
	if m.closed || m.peer != peer || m.n == udpMaxSegs || size > m.seg || m.bytes+size > udpMaxPayload {
		return 0
	}
	return m.n
}

// push queues b, which must be the next buffer (bufs[nbuf]) or replace
// it, for peer and returns its segment index (its IPv4 ID), as join
// computes it for len(b). The queue must not be full.
func (s *sockIO) push(peer netip.AddrPort, b []byte) int {
	i := s.nbuf
	s.bufs[i] = b
	s.peers[i] = peer
	s.nbuf++
	k := s.join(peer, len(b))
	if k == 0 {
		s.msgs = append(s.msgs, txMsg{peer: peer, first: i, n: 1, seg: len(b), bytes: len(b)})
		return 0
	}
	m := &s.msgs[len(s.msgs)-1]
	m.n++
	m.bytes += len(b)
	m.closed = len(b) < m.seg
	return k
}

// flush sends the queue.
func (s *sockIO) flush() {
	c := s.ctrs
	if s.nbuf == 0 {
		return
	}
	wireClock.Add(1)
	s.build(0)
	for i := 0; i < len(s.msgs); {
		n, errno := s.sendmmsg(i, len(s.msgs))
		if errno == unix.EAGAIN {
			// The socket's send buffer is full: wait until it drains.
			s.wfrom, s.wto = i, len(s.msgs)
			if err := s.raw.Write(s.writeFn); err != nil {
				s.discard(c, i, len(s.msgs))
				break
			}
			n, errno = s.wn, s.werr
		}
		if errno == 0 {
			s.sent(c, i, i+n)
			i += n
			continue
		}
		m := &s.msgs[i]
		switch {
		case errno == unix.EINTR:
		case errno == unix.ENOBUFS:
			// The queue discipline dropped it: the protocol retransmits.
			s.discard(c, i, len(s.msgs))
			i = len(s.msgs)
		case m.n > 1 && (errno == unix.EIO || errno == unix.EINVAL):
			// The kernel will not segment (an egress device without
			// checksum offload, or a route it cannot segment for): plain
			// datagrams from now on.
			s.gso = false
			s.split(i)
			s.build(i)
		default:
			// Refused (unreachable, filtered, too big): skip it.
			s.discard(c, i, i+1)
			i++
		}
	}
	s.nbuf = 0
	s.msgs = s.msgs[:0]
}

// split turns messages i and after into one message per datagram.
func (s *sockIO) split(i int) {
	first := s.msgs[i].first
	s.msgs = s.msgs[:i]
	for k := first; k < s.nbuf; k++ {
		s.msgs = append(s.msgs, txMsg{peer: s.peers[k], first: k, n: 1, seg: len(s.bufs[k]), bytes: len(s.bufs[k])})
	}
}

// build fills the sendmmsg headers of messages i and after.
func (s *sockIO) build(i int) {
	for ; i < len(s.msgs); i++ {
		m := &s.msgs[i]
		for k := m.first; k < m.first+m.n; k++ {
			s.iovs[k].Base = unsafe.SliceData(s.bufs[k])
			s.iovs[k].SetLen(len(s.bufs[k]))
		}
		h := &s.hdrs[i].Hdr
		h.Iov = &s.iovs[m.first]
		h.SetIovlen(m.n)
		h.Name = (*byte)(unsafe.Pointer(&s.names[i]))
		h.Namelen = putSockaddr(&s.names[i], m.peer, s.v6)
		h.Control, h.Controllen = nil, 0
		if m.n > 1 {
			c := s.ctl[i*cmsgU16Space : (i+1)*cmsgU16Space]
			ch := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
			ch.Level, ch.Type = unix.SOL_UDP, unix.UDP_SEGMENT
			ch.SetLen(unix.CmsgLen(2))
			binary.NativeEndian.PutUint16(c[unix.CmsgLen(0):], uint16(m.seg))
			h.Control = &c[0]
			h.SetControllen(unix.CmsgSpace(2))
		}
	}
}

func (s *sockIO) sent(c *counters, from, to int) {
	var pkts, bytes, super uint64
	for _, m := range s.msgs[from:to] {
		pkts += uint64(m.n)
		bytes += uint64(m.bytes)
		if m.n > 1 {
			super++
		}
	}
	c.xmitPkts.Add(pkts)
	c.xmitData.Add(bytes)
	c.xmitMsgs.Add(uint64(to - from))
	if super > 0 {
		c.xmitSuper.Add(super)
	}
}

func (s *sockIO) discard(c *counters, from, to int) {
	var pkts uint64
	for _, m := range s.msgs[from:to] {
		pkts += uint64(m.n)
	}
	c.xmitDiscards.Add(pkts)
}

func (s *sockIO) sendmmsg(from, to int) (int, syscall.Errno) {
	s.ctrs.syscalls.Add(1)
	n, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&s.hdrs[from])), uintptr(to-from), 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), 0
}

// writeBatch is the RawConn.Write callback: false asks the netpoller to
// wait for room.
func (s *sockIO) writeBatch(uintptr) bool {
	s.wn, s.werr = s.sendmmsg(s.wfrom, s.wto)
	return s.werr != unix.EAGAIN
}

// recv reads a batch of messages without blocking: how many, or 0.
func (s *sockIO) recv() (int, syscall.Errno) {
	for i := range s.rhdrs[:s.rdirty] {
		h := &s.rhdrs[i].Hdr
		h.Namelen = unix.SizeofSockaddrInet6
		h.SetControllen(cmsgIntSpace)
		h.Flags = 0
	}
	for {
		s.ctrs.syscalls.Add(1)
		n, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&s.rhdrs[0])), uintptr(len(s.rhdrs)), unix.MSG_DONTWAIT, 0, 0)
		switch errno {
		case 0:
			s.rdirty = int(n)
			return int(n), 0
		case unix.EINTR:
			continue
		}
		s.rdirty = 0
		return 0, errno
	}
}

// readBatch is the RawConn.Read callback: false asks the netpoller to wait
// for data.
func (s *sockIO) readBatch(uintptr) bool {
	s.rn, s.rerr = s.recv()
	return s.rerr != unix.EAGAIN
}

// wait blocks until messages arrive or the read deadline passes and returns
// how many arrived.
func (s *sockIO) wait() (int, error) {
	if err := s.raw.Read(s.readFn); err != nil {
		return 0, err
	}
	if s.rerr != 0 {
		return 0, s.rerr
	}
	return s.rn, nil
}

// message returns received message i: its bytes, its source and its
// segment size (len(b) when it holds one datagram). ok is false for a
// message to drop (truncated, or from an address we cannot parse).
func (s *sockIO) message(i int) (b []byte, src netip.AddrPort, seg int, ok bool) {
	h := &s.rhdrs[i]
	n := int(h.Len)
	if h.Hdr.Flags&unix.MSG_TRUNC != 0 || n > s.slot {
		return nil, src, 0, false
	}
	b = s.rbuf[i*s.slot : i*s.slot+n]
	src, ok = getSockaddr(&s.rnames[i], h.Hdr.Namelen)
	seg = n
	if s.gro && h.Hdr.Flags&unix.MSG_CTRUNC == 0 {
		if g := groSize(s.rctl[i*cmsgIntSpace:][:min(int(h.Hdr.Controllen), cmsgIntSpace)]); g > 0 && g < n {
			seg = g
		}
	}
	return b, src, seg, ok
}

// groSize returns the segment size in a UDP_GRO control message, or 0.
func groSize(c []byte) int {
	for len(c) >= unix.SizeofCmsghdr {
		ch := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
		l := int(ch.Len)
		if l < unix.SizeofCmsghdr || l > len(c) {
			return 0
		}
		if ch.Level == unix.SOL_UDP && ch.Type == unix.UDP_GRO && l >= unix.CmsgLen(4) {
			return int(binary.NativeEndian.Uint32(c[unix.CmsgLen(0):]))
		}
		c = c[min(len(c), unix.CmsgSpace(l-unix.CmsgLen(0))):]
	}
	return 0
}

// putSockaddr writes peer as a sockaddr of the socket's family into sa and
// returns its length.
func putSockaddr(sa *unix.RawSockaddrInet6, peer netip.AddrPort, v6 bool) uint32 {
	port := peer.Port()
	if !v6 {
		p := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		*p = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: peer.Addr().Unmap().As4()}
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&p.Port))[:], port)
		return unix.SizeofSockaddrInet4
	}
	*sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: peer.Addr().As16()}
	binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], port)
	return unix.SizeofSockaddrInet6
}

// getSockaddr parses a received sockaddr.
func getSockaddr(sa *unix.RawSockaddrInet6, n uint32) (netip.AddrPort, bool) {
	switch {
	case sa.Family == unix.AF_INET && n >= unix.SizeofSockaddrInet4:
		p := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&p.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom4(p.Addr), port), true
	case sa.Family == unix.AF_INET6 && n >= unix.SizeofSockaddrInet6:
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), port), true
	}
	return netip.AddrPort{}, false
}
