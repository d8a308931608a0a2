package xsk

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// The Ethernet, IP and UDP headers of the frames: written from a header
// prepared once per destination (Flow), and read back checked (Parse).
// Neither allocates.

const (
	ethLen   = 14
	vlanLen  = 4
	ipv4Len  = 20
	ipv6Len  = 40
	udpLen   = 8
	protoUDP = 17
	ttl      = 64 // IPv4 TTL and IPv6 hop limit, as rxe and Linux send them

	etherIPv4 = 0x0800
	etherIPv6 = 0x86dd
	etherVLAN = 0x8100

	// MaxHeader is the longest header Flow writes: Ethernet, IPv6, UDP.
	MaxHeader = ethLen + ipv6Len + udpLen
)

// Flow is the Ethernet, IP and UDP header of the datagrams from one
// address to one peer, ready but for the lengths, the IPv4 checksum and
// the UDP source port. IPv4 datagrams leave with ID 0 and DF set, TTL 64,
// TOS 0 and UDP checksum 0: what a Linux UDP socket with path MTU
// discovery sends, and so what the RoCE ICRC is computed for (the ICRC
// covers the ID and DF). IPv6 ones leave with traffic class 0, flow label
// 0, hop limit 64 and UDP checksum 0, as Linux rxe sends them (rxe never
// checks it; a receiver behind XDP never sees the kernel's check).
type Flow struct {
	hdr [MaxHeader]byte
	n   int    // header length: 42 (IPv4) or 62 (IPv6)
	sum uint32 // IPv4: the header's one's-complement sum less the total length
}

// ErrFamily is NewFlow's error for addresses of different IP versions.
var ErrFamily = errors.New("source and destination addresses of different IP versions")

// NewFlow prepares the header from src to dst (IPv4-mapped IPv6
// addresses count as IPv4) between the MAC addresses given.
func NewFlow(srcMAC, dstMAC [6]byte, src, dst netip.AddrPort) (Flow, error) {
	var f Flow
	sa, da := src.Addr().Unmap(), dst.Addr().Unmap()
	if !sa.IsValid() || !da.IsValid() || sa.Is4() != da.Is4() {
		return f, ErrFamily
	}
	h := f.hdr[:]
	copy(h[0:6], dstMAC[:])
	copy(h[6:12], srcMAC[:])
	var u []byte
	if sa.Is4() {
		binary.BigEndian.PutUint16(h[12:], etherIPv4)
		ip := h[ethLen : ethLen+ipv4Len]
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF, offset 0
		ip[8], ip[9] = ttl, protoUDP
		s4, d4 := sa.As4(), da.As4()
		copy(ip[12:16], s4[:])
		copy(ip[16:20], d4[:])
		for i := 0; i < ipv4Len; i += 2 {
			f.sum += uint32(binary.BigEndian.Uint16(ip[i:]))
		}
		u = h[ethLen+ipv4Len:]
		f.n = ethLen + ipv4Len + udpLen
	} else {
		binary.BigEndian.PutUint16(h[12:], etherIPv6)
		ip := h[ethLen : ethLen+ipv6Len]
		ip[0] = 0x60
		ip[6], ip[7] = protoUDP, ttl
		s6, d6 := sa.As16(), da.As16()
		copy(ip[8:24], s6[:])
		copy(ip[24:40], d6[:])
		u = h[ethLen+ipv6Len:]
		f.n = ethLen + ipv6Len + udpLen
	}
	binary.BigEndian.PutUint16(u[0:], src.Port())
	binary.BigEndian.PutUint16(u[2:], dst.Port())
	return f, nil
}

// SetTOS sets the IPv4 TOS or IPv6 traffic class of the flow's datagrams
// (0 unless set): its low two bits are the ECN field, ECT(0) = 2 for a
// sender that wants congestion marked rather than dropped. The RoCE ICRC
// masks it.
func (f *Flow) SetTOS(tos byte) {
	h := f.hdr[ethLen:]
	if f.n == ethLen+ipv6Len+udpLen {
		h[0] = h[0]&0xf0 | tos>>4
		h[1] = h[1]&0x0f | tos<<4
		return
	}
	f.sum -= uint32(binary.BigEndian.Uint16(h[0:]))
	h[1] = tos
	f.sum += uint32(binary.BigEndian.Uint16(h[0:]))
}

// Len is the header's length.
func (f *Flow) Len() int { return f.n }

// Put writes the header of a datagram of n payload bytes from UDP source
// port sport (0: the flow's) into b, which must hold Len bytes, and
// returns Len. The payload follows at b[Len:].
func (f *Flow) Put(b []byte, n int, sport uint16) int {
	h := b[:f.n]
	copy(h, f.hdr[:f.n])
	u := h[f.n-udpLen:]
	if sport != 0 {
		binary.BigEndian.PutUint16(u[0:], sport)
	}
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen+n))
	if f.n == ethLen+ipv6Len+udpLen {
		binary.BigEndian.PutUint16(h[ethLen+4:], uint16(udpLen+n))
		return f.n
	}
	total := uint16(ipv4Len + udpLen + n)
	binary.BigEndian.PutUint16(h[ethLen+2:], total)
	s := f.sum + uint32(total)
	s = s&0xffff + s>>16
	s = s&0xffff + s>>16
	binary.BigEndian.PutUint16(h[ethLen+10:], ^uint16(s))
	return f.n
}

// Datagram is what Parse found in a frame.
type Datagram struct {
	Off int            // the UDP payload's offset in the frame
	Len int            // the UDP payload's length
	Src netip.AddrPort // the source address and UDP port
	ID  int32          // the IPv4 identification; -1 for IPv6
	CE  bool           // the ECN field is CE (3)
}

// Parse's errors: the frame is not a UDP datagram to the port, or is
// malformed. They are values, so a bad frame costs no allocation.
var (
	ErrShort    = errors.New("frame shorter than its headers")
	ErrNotUDP   = errors.New("not an unfragmented IPv4 or IPv6 UDP datagram without options")
	ErrChecksum = errors.New("bad IPv4 header checksum")
	ErrLength   = errors.New("IP or UDP length disagrees with the frame")
	ErrPort     = errors.New("UDP destination port is not the socket's")
)

// Parse checks the Ethernet (with at most one 802.1Q tag), IP and UDP
// headers of a frame of total bytes whose first fragment is b (all of it
// without multi-buffer; the headers must be in b) and fills d. Ethernet
// padding and trailing bytes beyond the IP length are outside d's payload.
// It rejects IPv4 options, IPv6 extension headers and fragments (the XDP
// program passes those to the kernel anyway). It never panics.
func Parse(b []byte, total int, port uint16, d *Datagram) error {
	if len(b) > total {
		b = b[:total]
	}
	if len(b) < ethLen {
		return ErrShort
	}
	off := ethLen
	et := binary.BigEndian.Uint16(b[12:])
	if et == etherVLAN {
		if len(b) < ethLen+vlanLen {
			return ErrShort
		}
		et = binary.BigEndian.Uint16(b[16:])
		off += vlanLen
	}
	var u []byte
	var ipEnd int // the end of the IP packet in the frame
	switch et {
	case etherIPv4:
		if len(b) < off+ipv4Len+udpLen {
			return ErrShort
		}
		ip := b[off : off+ipv4Len]
		if ip[0] != 0x45 || ip[9] != protoUDP || binary.BigEndian.Uint16(ip[6:])&0x3fff != 0 {
			return ErrNotUDP
		}
		var s uint32
		for i := 0; i < ipv4Len; i += 2 {
			s += uint32(binary.BigEndian.Uint16(ip[i:]))
		}
		s = s&0xffff + s>>16
		s = s&0xffff + s>>16
		if s != 0xffff {
			return ErrChecksum
		}
		n := int(binary.BigEndian.Uint16(ip[2:]))
		if n < ipv4Len+udpLen || off+n > total {
			return ErrLength
		}
		ipEnd = off + n
		u = b[off+ipv4Len:]
		d.Src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[12:16])), binary.BigEndian.Uint16(u))
		d.ID = int32(binary.BigEndian.Uint16(ip[4:]))
		d.CE = ip[1]&3 == 3
		off += ipv4Len
	case etherIPv6:
		if len(b) < off+ipv6Len+udpLen {
			return ErrShort
		}
		ip := b[off : off+ipv6Len]
		if ip[0]>>4 != 6 || ip[6] != protoUDP {
			return ErrNotUDP
		}
		n := int(binary.BigEndian.Uint16(ip[4:]))
		if n < udpLen || off+ipv6Len+n > total {
			return ErrLength
		}
		ipEnd = off + ipv6Len + n
		u = b[off+ipv6Len:]
		src := netip.AddrFrom16([16]byte(ip[8:24]))
		d.Src = netip.AddrPortFrom(src, binary.BigEndian.Uint16(u))
		d.ID = -1
		d.CE = binary.BigEndian.Uint16(ip[0:])>>4&3 == 3
		off += ipv6Len
	default:
		return ErrNotUDP
	}
	if binary.BigEndian.Uint16(u[2:]) != port {
		return ErrPort
	}
	ul := int(binary.BigEndian.Uint16(u[4:]))
	if ul < udpLen || off+ul != ipEnd {
		return ErrLength
	}
	d.Off, d.Len = off+udpLen, ul-udpLen
	return nil
}
