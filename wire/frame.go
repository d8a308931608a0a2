package wire

import (
	"encoding/binary"
	"github.com/ibex-rdma/ibex/ib"
	"net/netip"
)

const (
	ethHeaderLen  = 14
	vlanTagLen    = 4
	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86dd
	etherTypeVLAN = 0x8100
)

// Frame is a whole RoCEv2 frame: Ethernet (with at most one 802.1Q tag),
// IPv4 or IPv6, UDP, and the IB transport packet. Captures, AF_PACKET and
// raw sockets see frames; a UDP socket sees only Packet (see DecodeIB).
type Frame struct {
	EthDst, EthSrc [6]byte
	Tagged         bool   // an 802.1Q tag follows the source address
	VLAN           uint16 // the tag control information (PCP, DEI, VID) when Tagged
	Encap          Encap
	Packet         Packet
}

// DecodeFrame decodes an Ethernet frame into f, allocating nothing;
// f.Packet.Payload aliases b. Bytes after the IP packet (Ethernet padding,
// FCS) are ignored.
//
// It checks the IPv4 header checksum, the lengths and UDP port 4791, then
// what DecodeIB checks, and finally the ICRC against the real IP and UDP
// headers. It does not verify the UDP checksum (see Encap.UDPChecksum).
// IPv4 options, IPv6 extension headers and IP fragments are rejected with
// ErrNotRoCE, as are other ethertypes, protocols and ports.
func DecodeFrame(b []byte, f *Frame) error {
	if len(b) < ethHeaderLen {
		return truncated("eth", len(b), ethHeaderLen)
	}
	f.EthDst = [6]byte(b[0:6])
	f.EthSrc = [6]byte(b[6:12])
	f.Tagged, f.VLAN = false, 0
	et := binary.BigEndian.Uint16(b[12:])
	off := ethHeaderLen
	if et == etherTypeVLAN {
		if len(b) < ethHeaderLen+vlanTagLen {
			return truncated("vlan", len(b)-ethHeaderLen, vlanTagLen)
		}
		f.Tagged = true
		f.VLAN = binary.BigEndian.Uint16(b[14:])
		et = binary.BigEndian.Uint16(b[16:])
		off += vlanTagLen
	}
	var want uint8
	switch et {
	case etherTypeIPv4:
		want = 4
	case etherTypeIPv6:
		want = 6
	default:
		return errf("eth", ErrNotRoCE, "ethertype %#04x, want IPv4 or IPv6", uint64(et))
	}
	if len(b) > off && b[off]>>4 != want {
		return errf("eth", ErrNotRoCE, "ethertype %#04x carries IP version %d", uint64(et), uint64(b[off]>>4))
	}
	return decodeIP(b[off:], f)
}

// DecodeIP is DecodeFrame for a bare IP packet (raw sockets, Linux cooked
// or raw-IP captures). It leaves the Ethernet fields of f zero.
func DecodeIP(b []byte, f *Frame) error {
	f.EthDst, f.EthSrc, f.Tagged, f.VLAN = [6]byte{}, [6]byte{}, false, 0
	return decodeIP(b, f)
}

func decodeIP(b []byte, f *Frame) error {
	hdr, udp, err := splitIP(b)
	if err != nil {
		return err
	}
	e := &f.Encap
	v6 := len(hdr) == ipv6HeaderLen
	if v6 {
		vtf := binary.BigEndian.Uint32(hdr)
		src, dst := netip.AddrFrom16([16]byte(hdr[8:24])), netip.AddrFrom16([16]byte(hdr[24:40]))
		if src.Is4In6() || dst.Is4In6() {
			return errf("ipv6", ErrNotRoCE, "IPv4-mapped address in an IPv6 header")
		}
		*e = Encap{
			Src:       netip.AddrPortFrom(src, 0),
			Dst:       netip.AddrPortFrom(dst, 0),
			TOS:       uint8(vtf >> 20),
			FlowLabel: vtf & 0xfffff,
			TTL:       hdr[7],
		}
	} else {
		if frag := binary.BigEndian.Uint16(hdr[6:]); frag&^ipv4DF != 0 {
			return errf("ipv4", ErrNotRoCE, "fragment (flags and offset %#04x)", uint64(frag))
		}
		if got, want := binary.BigEndian.Uint16(hdr[10:]), fold(checksum(0, hdr[:10])+checksum(0, hdr[12:])); got != want {
			return errf("ipv4", ErrBadChecksum, "header checksum %#04x, want %#04x", uint64(got), uint64(want))
		}
		*e = Encap{
			Src: netip.AddrPortFrom(netip.AddrFrom4([4]byte(hdr[12:16])), 0),
			Dst: netip.AddrPortFrom(netip.AddrFrom4([4]byte(hdr[16:20])), 0),
			ID:  binary.BigEndian.Uint16(hdr[4:]),
			DF:  hdr[6]&(ipv4DF>>8) != 0,
			TOS: hdr[1],
			TTL: hdr[8],
		}
	}
	if len(udp) < udpHeaderLen {
		return truncated("udp", len(udp), udpHeaderLen)
	}
	if n := int(binary.BigEndian.Uint16(udp[4:])); n != len(udp) {
		return errf("udp", ErrBadLength, "length %d, but the IP payload is %d bytes", uint64(n), uint64(len(udp)))
	}
	sport, dport := binary.BigEndian.Uint16(udp), binary.BigEndian.Uint16(udp[2:])
	if dport != UDPPort {
		return errf("udp", ErrNotRoCE, "destination port %d, want 4791", uint64(dport))
	}
	e.Src = netip.AddrPortFrom(e.Src.Addr(), sport)
	e.Dst = netip.AddrPortFrom(e.Dst.Addr(), dport)
	e.UDPChecksum = binary.BigEndian.Uint16(udp[6:])
	p := &f.Packet
	if err := DecodeIB(udp[udpHeaderLen:], p); err != nil {
		return err
	}
	if want := icrcIP(b[:len(hdr)+len(udp)], len(hdr)); p.ICRC != want {
		return icrcMismatch(p.ICRC, want)
	}
	return nil
}

// AppendFrame appends f as an Ethernet frame to dst: the Ethernet header
// (with the 802.1Q tag if f.Tagged), the IP and UDP headers from f.Encap
// with the lengths and the IPv4 header checksum filled in (the UDP checksum
// field is f.Encap.UDPChecksum, verbatim), and the IB packet with pad and
// ICRC as AppendIB writes it. It pads nothing to the Ethernet minimum.
//
// It sets f.Packet.BTH.PadCnt and f.Packet.ICRC to the values written and
// allocates only if dst lacks room.
func AppendFrame(dst []byte, f *Frame) ([]byte, error) {
	src, dstIP, v6, err := f.Encap.addrs()
	if err != nil {
		return dst, err
	}
	start := len(dst)
	ethLen := ethHeaderLen
	if f.Tagged {
		ethLen += vlanTagLen
	}
	ipLen := ipHeaderLen(v6)
	hdrLen := ethLen + ipLen + udpHeaderLen
	dst, _ = grow(dst, hdrLen)
	dst, pkt, err := f.Packet.appendIB(dst)
	if err != nil {
		return dst[:start], err
	}
	fr := dst[start:]
	copy(fr, f.EthDst[:])
	copy(fr[6:], f.EthSrc[:])
	et := uint16(etherTypeIPv4)
	if v6 {
		et = etherTypeIPv6
	}
	if f.Tagged {
		binary.BigEndian.PutUint16(fr[12:], etherTypeVLAN)
		binary.BigEndian.PutUint16(fr[14:], f.VLAN)
	}
	binary.BigEndian.PutUint16(fr[ethLen-2:], et)
	hdr := fr[ethLen : ethLen+ipLen]
	udp := fr[ethLen+ipLen:]
	f.Encap.putHeaders(fr[ethLen:], src, dstIP, v6, len(pkt))
	if !v6 {
		binary.BigEndian.PutUint16(hdr[10:], fold(checksum(0, hdr)))
	}
	binary.BigEndian.PutUint16(udp[6:], f.Encap.UDPChecksum)
	f.Packet.ICRC = icrcIP(fr[ethLen:], ipLen)
	binary.LittleEndian.PutUint32(pkt[len(pkt)-ib.ICRCLen:], f.Packet.ICRC)
	return dst, nil
}
