package udp

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The real batchConn: a UDP socket, with sendmmsg and recvmmsg called
// directly on it and UDP segmentation offload both ways, in and out of the
// caller's buffers through headers allocated once, so that the data path
// allocates nothing.
//
// Send (GSO, Linux ≥ 4.18): a message of several datagrams is one
// message of sendmmsg, with a UDP_SEGMENT control message giving the
// segment size. The kernel carries it whole as far as it can — through loopback and veth to
// the receiving socket — and segments it in software or on the NIC
// otherwise, numbering the segments' IPv4 IDs (see txq.go).
//
// Receive (GRO, Linux ≥ 5.0): with UDP_GRO set, a read returns a
// super-datagram whole, with a UDP_GRO control message giving its segment
// size; the loop splits it. Without GRO the kernel segments it for us.
//
// ECN (RFC 3168, as RoCEv2 uses it): every datagram leaves ECT(0) (IP_TOS,
// IPV6_TCLASS on the socket), so a congested queue on the way (a switch,
// a qdisc with ecn) marks it CE instead of dropping it; the TOS or traffic
// class of each received datagram comes with it (IP_RECVTOS,
// IPV6_RECVTCLASS), and message.CE reports CE. The ICRC masks both fields,
// so marking on the way does not break it. IBEX_UDP_ECN=0 turns it off.
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
	sockBuf      = 16 << 20 // socket buffers requested (SO_RCVBUFFORCE as root)
	cmsgU16Space = 24       // unix.CmsgSpace(2) on 64-bit Linux, a control buffer per message
	cmsgIntSpace = 24       // unix.CmsgSpace(4)
	// rcvCtlSpace is a received message's control buffer: UDP_GRO's
	// segment size (an int) and the TOS (IP_TOS, a byte) or traffic class
	// (IPV6_TCLASS, an int), CmsgSpace(4) each.
	rcvCtlSpace = 2 * cmsgIntSpace

	ecnMask = 0x03 // the ECN field of the TOS / traffic class
	ecnECT0 = 0x02 // ECN-capable transport, codepoint 0 (what RoCEv2 NICs send)
	ecnCE   = 0x03 // congestion experienced
)

// sockIO is a device's UDP socket as a batchConn. Only the loop goroutine
// uses it, but for SetReadDeadline.
type sockIO struct {
	ctrs *counters
	conn *net.UDPConn
	fd   int // valid until the loop exits: the conn is closed only after
	raw  syscall.RawConn
	// The waiting read goes through a second descriptor of the socket
	// held by an os.File: its RawConn returns the poller's error as it is,
	// while net's allocates an *OpError for each — and every wake-up of
	// the loop by a post (SetReadDeadline(now)) is one.
	rfile *os.File
	rraw  syscall.RawConn
	local netip.AddrPort
	v6    bool // an AF_INET6 socket
	gso   bool // send super-datagrams
	gro   bool // the socket delivers super-datagrams
	ecn   bool // datagrams leave ECT(0); received ones carry their TOS

	// Send.
	msgs  []message // the messages of the Send in progress: the caller's, or own
	own   []message // split's (cap txCap)
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6
	ctl   []byte
	wfrom int // messages hdrs[wfrom:wto] for writeFn
	wto   int
	wn    int
	werr  syscall.Errno

	// Receive.
	rhdrs  []unix.Mmsghdr
	riovs  []unix.Iovec
	rnames []unix.RawSockaddrInet6
	rctl   []byte
	rlen   int // messages the Recv in progress asks for
	rdirty int // headers the last recvmmsg may have changed
	rn     int
	rerr   syscall.Errno

	readFn  func(uintptr) bool // method values, made once: passing them allocates nothing
	writeFn func(uintptr) bool
}

func envOff(name string) bool { v := os.Getenv(name); return v == "0" || v == "off" || v == "false" }

// listenUDP is the listenFunc of real devices: a UDP socket bound to addr,
// with large buffers.
func listenUDP(addr netip.AddrPort, c *counters) (batchConn, error) {
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return nil, fmt.Errorf("bind %v: %w", addr, err)
	}
	growBuffers(conn)
	s, err := newSockIO(conn, c)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	return s, nil
}

// growBuffers asks for large socket buffers, forcing past rmem_max when
// the process may (CAP_NET_ADMIN); the send window is sized from the result.
func growBuffers(c *net.UDPConn) {
	raw, err := c.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, sockBuf) != nil {
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, sockBuf)
		}
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sockBuf) != nil {
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, sockBuf)
		}
	})
}

// getsockname returns the socket's local address.
func getsockname(raw interface{ Control(func(uintptr)) error }) (sa unix.Sockaddr, err error) {
	if cerr := raw.Control(func(fd uintptr) { sa, err = unix.Getsockname(int(fd)) }); cerr != nil {
		return nil, cerr
	}
	return sa, err
}

// newSockIO sets conn up for the loop: UDP_GRO if allowed, and the
// headers. It counts messages and system calls in c.
func newSockIO(conn *net.UDPConn, c *counters) (*sockIO, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	sa, err := getsockname(raw)
	if err != nil {
		return nil, fmt.Errorf("getsockname: %w", err)
	}
	s := &sockIO{ctrs: c, conn: conn, raw: raw, gso: !envOff("IBEX_UDP_GSO")}
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		s.local = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
	case *unix.SockaddrInet6:
		s.local, s.v6 = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), uint16(sa.Port)), true
	}
	_ = raw.Control(func(fd uintptr) {
		s.fd = int(fd)
		// Path MTU discovery on: DF set, and IPv4 ID 0 on every datagram
		// (the segments of a super-datagram 0, 1, 2, ...). The ICRC covers
		// the ID and the loop computes it for these (wire/doc.go); with
		// the kernel's default, IP_PMTUDISC_WANT, the ID comes from a
		// hashed counter and a receiver that checks the real headers
		// (Linux rxe) drops every packet.
		_ = unix.SetsockoptInt(s.fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
		if s.v6 {
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
		if !envOff("IBEX_UDP_ECN") {
			s.ecn = setECN(s.fd, s.v6)
		}
	})
	s.own = make([]message, 0, txCap)
	s.hdrs = make([]unix.Mmsghdr, txCap)
	s.iovs = make([]unix.Iovec, txCap)
	s.names = make([]unix.RawSockaddrInet6, txCap)
	s.ctl = make([]byte, txCap*cmsgU16Space)

	s.rhdrs = make([]unix.Mmsghdr, txCap)
	s.riovs = make([]unix.Iovec, txCap)
	s.rnames = make([]unix.RawSockaddrInet6, txCap)
	s.rctl = make([]byte, txCap*rcvCtlSpace)
	for i := range s.rhdrs {
		h := &s.rhdrs[i].Hdr
		h.Iov = &s.riovs[i]
		h.SetIovlen(1)
		h.Name = (*byte)(unsafe.Pointer(&s.rnames[i]))
		h.Control = &s.rctl[i*rcvCtlSpace]
	}
	s.rdirty = len(s.rhdrs)
	s.readFn = s.readBatch
	s.writeFn = s.writeBatch
	nfd, err := unix.Dup(s.fd)
	if err == nil {
		if err = unix.SetNonblock(nfd, true); err != nil {
			_ = unix.Close(nfd)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("udp: dup the socket for its reads: %w", err)
	}
	s.rfile = os.NewFile(uintptr(nfd), "udp "+s.local.String())
	if s.rraw, err = s.rfile.SyscallConn(); err != nil {
		_ = s.rfile.Close()
		return nil, fmt.Errorf("udp: dup the socket for its reads: %w", err)
	}
	return s, nil
}

func (s *sockIO) LocalAddr() netip.AddrPort         { return s.local }
func (s *sockIO) BatchSize() int                    { return txCap }
func (s *sockIO) Offload() (gso, gro bool)          { return s.gso, s.gro }
func (s *sockIO) SetReadDeadline(t time.Time) error { return s.rfile.SetReadDeadline(t) }
func (s *sockIO) Close() error {
	_ = s.rfile.Close()
	return s.conn.Close()
}
func (s *sockIO) SourcePorts() bool { return false }

// RecvBuffer reads the socket's receive buffer size.
func (s *sockIO) RecvBuffer() int {
	n := 212992
	_ = s.raw.Control(func(fd uintptr) {
		if v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF); err == nil {
			n = v
		}
	})
	return n
}

// Send implements batchConn.
func (s *sockIO) Send(msgs []message) (pkts, bytes int) {
	s.msgs = msgs
	s.build(0)
	for i := 0; i < len(s.msgs); {
		n, errno := s.sendmmsg(i, len(s.msgs))
		if errno == unix.EAGAIN {
			// The socket's send buffer is full: wait until it drains.
			s.ctrs.xmitWait.Add(1)
			s.wfrom, s.wto = i, len(s.msgs)
			if err := s.raw.Write(s.writeFn); err != nil {
				break // closed: the rest is dropped
			}
			n, errno = s.wn, s.werr
		}
		if errno == 0 {
			p, b := s.sent(i, i+n)
			pkts, bytes = pkts+p, bytes+b
			i += n
			continue
		}
		m := &s.msgs[i]
		switch {
		case errno == unix.EINTR:
		case errno == unix.ENOBUFS:
			// The queue discipline dropped it: the protocol retransmits.
			i = len(s.msgs)
		case len(m.Buffers) > 1 && (errno == unix.EIO || errno == unix.EINVAL):
			// The kernel will not segment (an egress device without
			// checksum offload, or a route it cannot segment for): plain
			// datagrams from now on.
			s.gso = false
			s.split(i)
			s.build(i)
		default:
			// Refused (unreachable, filtered, too big): skip it.
			i++
		}
	}
	s.msgs = nil
	return pkts, bytes
}

// split turns messages i and after into one message per datagram, in a
// list of its own (the caller's stays as it was).
func (s *sockIO) split(i int) {
	own := append(s.own[:0], s.msgs[:i]...)
	for _, m := range s.msgs[i:] {
		for k := range m.Buffers {
			own = append(own, message{Buffers: m.Buffers[k : k+1], Addr: m.Addr})
		}
	}
	s.own, s.msgs = own, own
}

// build fills the sendmmsg headers of messages i and after.
func (s *sockIO) build(i int) {
	k := 0 // the first iovec of message i
	for _, m := range s.msgs[:i] {
		k += len(m.Buffers)
	}
	for ; i < len(s.msgs); i++ {
		m := &s.msgs[i]
		first := k
		for _, b := range m.Buffers {
			s.iovs[k].Base = unsafe.SliceData(b)
			s.iovs[k].SetLen(len(b))
			k++
		}
		h := &s.hdrs[i].Hdr
		h.Iov = &s.iovs[first]
		h.SetIovlen(len(m.Buffers))
		h.Name = (*byte)(unsafe.Pointer(&s.names[i]))
		h.Namelen = putSockaddr(&s.names[i], m.Addr, s.v6)
		h.Control, h.Controllen = nil, 0
		if len(m.Buffers) > 1 {
			c := s.ctl[i*cmsgU16Space : (i+1)*cmsgU16Space]
			ch := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
			ch.Level, ch.Type = unix.SOL_UDP, unix.UDP_SEGMENT
			ch.SetLen(unix.CmsgLen(2))
			binary.NativeEndian.PutUint16(c[unix.CmsgLen(0):], uint16(len(m.Buffers[0])))
			h.Control = &c[0]
			h.SetControllen(unix.CmsgSpace(2))
		}
	}
}

// sent counts messages from to to as sent and returns their datagrams and
// bytes.
func (s *sockIO) sent(from, to int) (pkts, bytes int) {
	super := 0
	for _, m := range s.msgs[from:to] {
		pkts += len(m.Buffers)
		for _, b := range m.Buffers {
			bytes += len(b)
		}
		if len(m.Buffers) > 1 {
			super++
		}
	}
	s.ctrs.xmitMsgs.Add(uint64(to - from))
	if super > 0 {
		s.ctrs.xmitSuper.Add(uint64(super))
	}
	return pkts, bytes
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

// Recv implements batchConn.
func (s *sockIO) Recv(msgs []message, wait bool) (int, error) {
	msgs = msgs[:min(len(msgs), len(s.rhdrs))]
	for i := range msgs {
		b := msgs[i].Buffers[0]
		s.riovs[i].Base = unsafe.SliceData(b)
		s.riovs[i].SetLen(len(b))
	}
	s.rlen = len(msgs)
	// Read first, without blocking, whether or not we may wait: RawConn.Read
	// returns at once, without calling readFn, when the read deadline has
	// already passed, and the loop arms the deadline with the next engine
	// timer — which, with a thousand QPs, is often due by the time the loop
	// waits. Reading only in RawConn.Read then starved the receive path:
	// every pass ran the due timers and retransmitted, none read, and the
	// ACKs waited in the socket (megabytes of them, no drops) until retry_cnt
	// ran out (TestConformance/ThousandQPs under load, issue 17 item 4).
	n, errno := s.recv()
	if errno != 0 && errno != unix.EAGAIN {
		return 0, errno
	}
	if n == 0 && wait {
		if err := s.rraw.Read(s.readFn); err != nil {
			return 0, err
		}
		if s.rerr != 0 {
			return 0, s.rerr
		}
		n = s.rn
	}
	for i := range msgs[:n] {
		s.message(i, &msgs[i])
	}
	return n, nil
}

// recv reads a batch of messages without blocking: how many, or 0.
func (s *sockIO) recv() (int, syscall.Errno) {
	for i := range s.rhdrs[:s.rdirty] {
		h := &s.rhdrs[i].Hdr
		h.Namelen = unix.SizeofSockaddrInet6
		h.SetControllen(rcvCtlSpace)
		h.Flags = 0
	}
	for {
		s.ctrs.syscalls.Add(1)
		n, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(s.fd), uintptr(unsafe.Pointer(&s.rhdrs[0])), uintptr(s.rlen), unix.MSG_DONTWAIT, 0, 0)
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

// message fills m from received message i: its length, its source and its
// segment size (N when it holds one datagram); N is 0 for a message to
// drop (truncated, or from an address we cannot parse).
func (s *sockIO) message(i int, m *message) {
	h := &s.rhdrs[i]
	n := int(h.Len)
	m.N, m.Seg, m.Addr, m.ID, m.CE = 0, 0, netip.AddrPort{}, -1, false
	if h.Hdr.Flags&unix.MSG_TRUNC != 0 || n > len(m.Buffers[0]) {
		return
	}
	src, ok := getSockaddr(&s.rnames[i], h.Hdr.Namelen)
	if !ok {
		return
	}
	m.N, m.Seg, m.Addr = n, n, src
	if (s.gro || s.ecn) && h.Hdr.Flags&unix.MSG_CTRUNC == 0 {
		g, tos, ok := parseControl(s.rctl[i*rcvCtlSpace:][:min(int(h.Hdr.Controllen), rcvCtlSpace)])
		if g > 0 && g < n {
			m.Seg = g
		}
		m.CE = ok && tos&ecnMask == ecnCE
	}
}

// setECN makes the socket send ECT(0) and report the TOS (traffic class)
// of what it receives; false if the kernel refused (no ECN then).
func setECN(fd int, v6 bool) bool {
	// An AF_INET6 socket sends IPv4 (to mapped addresses) with IP_TOS and
	// IPv6 with IPV6_TCLASS, and reports each with its own option.
	ok := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TOS, ecnECT0) == nil &&
		unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVTOS, 1) == nil
	if v6 {
		ok = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_TCLASS, ecnECT0) == nil &&
			unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1) == nil
	}
	return ok
}

// groSize returns the segment size in a UDP_GRO control message, or 0.
func groSize(c []byte) int {
	g, _, _ := parseControl(c)
	return g
}

// parseControl reads a received message's control messages: the UDP_GRO
// segment size (0: none) and the IP TOS or IPv6 traffic class (ok: one was
// there). Malformed control data yields what was read before it.
func parseControl(c []byte) (seg int, tos byte, ok bool) {
	for len(c) >= unix.SizeofCmsghdr {
		ch := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
		l := int(ch.Len)
		if l < unix.SizeofCmsghdr || l > len(c) {
			return seg, tos, ok
		}
		data := c[unix.CmsgLen(0):l]
		switch {
		case ch.Level == unix.SOL_UDP && ch.Type == unix.UDP_GRO && len(data) >= 4:
			seg = int(binary.NativeEndian.Uint32(data))
		case ch.Level == unix.IPPROTO_IP && ch.Type == unix.IP_TOS && len(data) >= 1:
			tos, ok = data[0], true // one byte
		case ch.Level == unix.IPPROTO_IPV6 && ch.Type == unix.IPV6_TCLASS && len(data) >= 4:
			tos, ok = byte(binary.NativeEndian.Uint32(data)), true // an int
		}
		c = c[min(len(c), unix.CmsgSpace(l-unix.CmsgLen(0))):]
	}
	return seg, tos, ok
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
