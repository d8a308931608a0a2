package wire

import (
	"encoding/binary"
	"net/netip"
)

// UDPPort is the IANA UDP destination port of RoCEv2.
const UDPPort = 4791

const (
	ipv4HeaderLen = 20
	ipv6HeaderLen = 40
	udpHeaderLen  = 8
	ipProtoUDP    = 17
	ipv4DF        = 0x4000
)

// Encap is the IP and UDP encapsulation of a RoCEv2 packet, less what
// follows from the packet (lengths, protocol, checksums).
//
// Which fields the ICRC covers is the point of this type: it covers the
// addresses, the ports, and for IPv4 the identification and the DF flag; it
// masks TOS/traffic class, TTL/hop limit, the flow label and the checksums,
// which routers may rewrite. See the package documentation.
type Encap struct {
	// Src and Dst are the IP addresses and UDP ports. Both addresses are
	// IPv4 or both IPv6; IPv4-mapped IPv6 addresses (RoCE GIDs such as
	// ::ffff:10.50.0.10) count as IPv4, as rxe sends them. Dst.Port() is
	// 4791 for RoCEv2. Covered by the ICRC.
	Src, Dst netip.AddrPort

	// ID is the IPv4 identification. Covered by the ICRC. rxe fills it from
	// the kernel's per-destination counter; a Linux UDP socket sends 0 when
	// it is unconnected and DF is set, a per-socket counter when connected.
	ID uint16
	// DF is the IPv4 Don't Fragment flag. Covered by the ICRC. rxe always
	// sets it, and so does a Linux UDP socket with path MTU discovery on.
	DF bool

	TOS       uint8  // IPv4 TOS or IPv6 traffic class (DSCP, ECN). Masked out of the ICRC.
	TTL       uint8  // IPv4 TTL or IPv6 hop limit; rxe sends 64. Masked out of the ICRC.
	FlowLabel uint32 // IPv6 flow label, 20 bits; rxe sends 0. Masked out of the ICRC.

	// UDPChecksum is the UDP checksum field of a frame, kept verbatim:
	// DecodeFrame records it without verifying it and AppendFrame writes it
	// as is. rxe sends 0, for IPv6 too, and never reads it; the ICRC masks
	// it. Captures often hold checksum-offload partial sums instead of real
	// checksums (the host-built frame in the rxe captures does).
	UDPChecksum uint16
}

// addrs returns the unmapped addresses and whether they are IPv6.
func (e *Encap) addrs() (src, dst netip.Addr, v6 bool, err error) {
	src, dst = e.Src.Addr().Unmap(), e.Dst.Addr().Unmap()
	if !src.IsValid() || !dst.IsValid() {
		return src, dst, false, errf("encap", ErrBadField, "source or destination address missing")
	}
	if src.Is4() != dst.Is4() {
		return src, dst, false, errf("encap", ErrBadField, "source and destination addresses of different IP versions")
	}
	if !src.Is4() && e.FlowLabel > 0xfffff {
		return src, dst, false, errf("ipv6", ErrBadField, "flow label %#x exceeds 20 bits", uint64(e.FlowLabel))
	}
	return src, dst, src.Is6(), nil
}

// ipHeaderLen returns 20 or 40.
func ipHeaderLen(v6 bool) int {
	if v6 {
		return ipv6HeaderLen
	}
	return ipv4HeaderLen
}

// putHeaders writes the IP and UDP headers for an IB packet of ibLen bytes
// into b (20+8 or 40+8 bytes), with zero checksums.
func (e *Encap) putHeaders(b []byte, src, dst netip.Addr, v6 bool, ibLen int) {
	udpLen := udpHeaderLen + ibLen
	var u []byte
	if v6 {
		h := b[:ipv6HeaderLen]
		binary.BigEndian.PutUint32(h, 6<<28|uint32(e.TOS)<<20|e.FlowLabel)
		binary.BigEndian.PutUint16(h[4:], uint16(udpLen))
		h[6] = ipProtoUDP
		h[7] = e.TTL
		a, c := src.As16(), dst.As16()
		copy(h[8:], a[:])
		copy(h[24:], c[:])
		u = b[ipv6HeaderLen:]
	} else {
		h := b[:ipv4HeaderLen]
		h[0] = 0x45
		h[1] = e.TOS
		binary.BigEndian.PutUint16(h[2:], uint16(ipv4HeaderLen+udpLen))
		binary.BigEndian.PutUint16(h[4:], e.ID)
		var frag uint16
		if e.DF {
			frag = ipv4DF
		}
		binary.BigEndian.PutUint16(h[6:], frag)
		h[8] = e.TTL
		h[9] = ipProtoUDP
		h[10], h[11] = 0, 0
		a, c := src.As4(), dst.As4()
		copy(h[12:], a[:])
		copy(h[16:], c[:])
		u = b[ipv4HeaderLen:]
	}
	u = u[:udpHeaderLen]
	binary.BigEndian.PutUint16(u, e.Src.Port())
	binary.BigEndian.PutUint16(u[2:], e.Dst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	u[6], u[7] = 0, 0
}

// checksum returns the Internet checksum (RFC 1071) of b, continuing from
// the partial sum s.
func checksum(s uint32, b []byte) uint32 {
	for len(b) >= 8 {
		v := binary.BigEndian.Uint64(b)
		s += uint32(v>>48) + uint32(v>>32&0xffff) + uint32(v>>16&0xffff) + uint32(v&0xffff)
		s = s&0xffff + s>>16
		b = b[8:]
	}
	for len(b) >= 2 {
		s += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	return s
}

// fold finishes a checksum: fold the carries and complement.
func fold(s uint32) uint16 {
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
