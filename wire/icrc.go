package wire

import (
	"encoding/binary"
	"github.com/ibex-rdma/ibex/ib"
	"hash/crc32"
)

// The ICRC is the IEEE CRC-32 (hash/crc32.ChecksumIEEE) of
//
//	8 bytes of 0xff ‖ IP header ‖ UDP header ‖ BTH ‖ extension headers ‖ payload ‖ pad
//
// with IPv4 TOS, TTL and header checksum, IPv6 traffic class, flow label and
// hop limit, the UDP checksum and BTH byte 4 set to all ones, stored
// little-endian after the pad (rxe_icrc.c; IBA Annex A17.3.3).
//
// Two ways to compute it, both built on the CRC's linearity: the state after
// hashing some bytes, XORed with a precomputed contribution, is the state
// after hashing those bytes with a field changed. ICRC (and so DecodeFrame
// and AppendFrame) hashes the real IP, UDP and BTH bytes and XORs in what
// all-ones masked fields would have changed, so it never copies the
// headers. ICRCPrefix precomputes, per flow, the state after the masked
// headers with zero lengths and ID, and folds each packet's lengths (and ID)
// in with table look-ups: a few XORs instead of hashing 36–56 bytes.

// crcFF is the CRC state (in crc32.Update's convention) after 8 bytes of
// 0xff, the "masked LRH" that stands in for the InfiniBand local route header.
var crcFF = crc32.Update(0, crc32.IEEETable, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})

// ICRC returns the ICRC of ip: an IPv4 or IPv6 packet (no options or
// extension headers) carrying a UDP datagram whose payload is an IB
// transport packet. ip ends with the 4-byte ICRC field, whose value is
// ignored; bytes past the IP length (Ethernet padding) are ignored.
func ICRC(ip []byte) (uint32, error) {
	hdr, udp, err := splitIP(ip)
	if err != nil {
		return 0, err
	}
	if len(udp) < udpHeaderLen+ib.BTHLen+ib.ICRCLen {
		return 0, truncated("udp", len(udp), udpHeaderLen+ib.BTHLen+ib.ICRCLen)
	}
	return icrcIP(ip[:len(hdr)+len(udp)], len(hdr)), nil
}

// splitIP returns the IP header and the UDP datagram of ip, checking only
// what the ICRC depends on.
func splitIP(ip []byte) (hdr, udp []byte, err error) {
	if len(ip) == 0 {
		return nil, nil, truncated("ip", 0, ipv4HeaderLen)
	}
	switch ip[0] >> 4 {
	case 4:
		if len(ip) < ipv4HeaderLen {
			return nil, nil, truncated("ipv4", len(ip), ipv4HeaderLen)
		}
		if ihl := int(ip[0]&0xf) * 4; ihl != ipv4HeaderLen {
			return nil, nil, errf("ipv4", ErrNotRoCE, "header length %d, want 20 (options unsupported)", uint64(ihl))
		}
		if ip[9] != ipProtoUDP {
			return nil, nil, errf("ipv4", ErrNotRoCE, "protocol %d, want 17 (UDP)", uint64(ip[9]))
		}
		n := int(binary.BigEndian.Uint16(ip[2:]))
		if n < ipv4HeaderLen {
			return nil, nil, errf("ipv4", ErrBadLength, "total length %d shorter than the header", uint64(n))
		}
		if n > len(ip) {
			return nil, nil, truncated("ipv4", len(ip), n)
		}
		return ip[:ipv4HeaderLen], ip[ipv4HeaderLen:n], nil
	case 6:
		if len(ip) < ipv6HeaderLen {
			return nil, nil, truncated("ipv6", len(ip), ipv6HeaderLen)
		}
		if ip[6] != ipProtoUDP {
			return nil, nil, errf("ipv6", ErrNotRoCE, "next header %d, want 17 (UDP; extension headers unsupported)", uint64(ip[6]))
		}
		n := ipv6HeaderLen + int(binary.BigEndian.Uint16(ip[4:]))
		if n > len(ip) {
			return nil, nil, truncated("ipv6", len(ip), n)
		}
		return ip[:ipv6HeaderLen], ip[ipv6HeaderLen:n], nil
	}
	return nil, nil, errf("ip", ErrNotRoCE, "version %d, want 4 or 6", uint64(ip[0]>>4))
}

// icrcIP computes the ICRC of ip, an IP packet with a header of hl bytes
// (20 or 40) carrying a UDP datagram of at least 8+12+4 bytes that ends the
// slice, the last 4 being the ICRC field. Rather than hash a masked copy,
// it hashes the real bytes and XORs in, per masked field, the difference
// its all-ones value would have made.
func icrcIP(ip []byte, hl int) uint32 {
	const through = udpHeaderLen + 5 // the UDP header and BTH bytes 0–4
	s := crc32.Update(crcFF, crc32.IEEETable, ip[:hl+through])
	udpSum := ^binary.BigEndian.Uint16(ip[hl+6:])
	bth4 := ^ip[hl+udpHeaderLen+4]
	if hl == ipv6HeaderLen {
		t := &frameTables.v6
		s ^= t.vtf[0][^ip[0]&0x0f] ^ t.vtf[1][^ip[1]] ^ t.vtf[2][^ip[2]] ^ t.vtf[3][^ip[3]] ^
			t.hopLimit[^ip[7]] ^ t.udpSum.at(udpSum)
	} else {
		t := &frameTables.v4
		s ^= t.tos[^ip[1]] ^ t.ttl[^ip[8]] ^ t.ipSum.at(^binary.BigEndian.Uint16(ip[10:])) ^
			t.udpSum.at(udpSum)
	}
	// BTH byte 4 is the last byte hashed: its contributions are the CRC
	// table itself.
	s ^= crc32.IEEETable[bth4]
	return crc32.Update(s, crc32.IEEETable, ip[hl+through:len(ip)-ib.ICRCLen])
}

// maskVariant sets the fields the ICRC does not cover to all ones in b, a
// copy of the IP and UDP headers.
func maskVariant(b []byte, v6 bool) {
	if v6 {
		b[0] |= 0x0f                        // traffic class, high nibble
		b[1], b[2], b[3] = 0xff, 0xff, 0xff // traffic class, flow label
		b[7] = 0xff                         // hop limit
	} else {
		b[1] = 0xff               // TOS
		b[8] = 0xff               // TTL
		b[10], b[11] = 0xff, 0xff // header checksum
	}
	u := ipHeaderLen(v6)
	b[u+6], b[u+7] = 0xff, 0xff // UDP checksum
}

// crcSmall is crc32.Update for a few bytes, byte by byte. Unlike
// crc32.Update, which calls through a function variable, it does not make
// its argument escape, so a stack buffer stays on the stack.
func crcSmall(crc uint32, p []byte) uint32 {
	crc = ^crc
	for _, c := range p {
		crc = crc32.IEEETable[byte(crc)^c] ^ crc>>8
	}
	return ^crc
}

// ICRCPrefix is the ICRC's view of one flow — addresses, ports, IPv4 ID and
// DF — precomputed so that the per-packet cost is the CRC of the IB packet
// alone. Build one per peer with NewICRCPrefix; the zero value is not usable.
// It is a small value, safe to copy and to share between goroutines.
type ICRCPrefix struct {
	base uint32 // CRC state after 8×0xff and the masked headers with zero lengths and ID
	id   uint16 // IPv4 ID assumed for the packets
	v6   bool
}

// NewICRCPrefix precomputes the ICRC state for packets sent from e.Src to
// e.Dst with IPv4 ID e.ID and flag e.DF. It ignores the fields the ICRC
// masks. It fails if the addresses are missing or of different versions.
func NewICRCPrefix(e *Encap) (ICRCPrefix, error) {
	src, dst, v6, err := e.addrs()
	if err != nil {
		return ICRCPrefix{}, err
	}
	// The headers of an empty packet with ID 0, lengths then zeroed: the
	// per-packet lengths and ID are folded in by headerState.
	z := *e
	z.ID = 0
	var buf [ipv6HeaderLen + udpHeaderLen]byte
	z.putHeaders(buf[:], src, dst, v6, 0)
	hl := ipHeaderLen(v6)
	maskVariant(buf[:hl+udpHeaderLen], v6)
	if v6 {
		buf[4], buf[5] = 0, 0 // payload length
	} else {
		buf[2], buf[3] = 0, 0 // total length
	}
	buf[hl+4], buf[hl+5] = 0, 0 // UDP length
	return ICRCPrefix{
		base: crcSmall(crcFF, buf[:hl+udpHeaderLen]),
		id:   e.ID,
		v6:   v6,
	}, nil
}

// headerState returns the CRC state after the headers of a packet whose IB
// part (BTH through ICRC) is ibLen bytes.
func (c *ICRCPrefix) headerState(ibLen int) uint32 {
	udpLen := uint16(udpHeaderLen + ibLen)
	if c.v6 {
		t := &prefixTables.v6
		return c.base ^ t.plen.at(udpLen) ^ t.udpLen.at(udpLen)
	}
	t := &prefixTables.v4
	return c.base ^ t.totLen.at(udpLen+ipv4HeaderLen) ^ t.udpLen.at(udpLen) ^ t.id.at(c.id)
}

// sum returns the ICRC of pkt, an IB packet without its ICRC field.
func (c *ICRCPrefix) sum(pkt []byte) uint32 {
	s := c.headerState(len(pkt) + ib.ICRCLen)
	// BTH byte 4 counts as 0xff: correct the state right after it.
	s = crcSmall(s, pkt[:5]) ^ crc32.IEEETable[^pkt[4]]
	return crc32.Update(s, crc32.IEEETable, pkt[5:])
}

// Check verifies the ICRC at the end of pkt, an IB packet as DecodeIB takes
// it, against the flow's headers (including, for IPv4, the ID the prefix
// was built with).
func (c *ICRCPrefix) Check(pkt []byte) error {
	if len(pkt) < ib.BTHLen+ib.ICRCLen {
		return truncated("icrc", len(pkt), ib.BTHLen+ib.ICRCLen)
	}
	end := len(pkt) - ib.ICRCLen
	got := binary.LittleEndian.Uint32(pkt[end:])
	if want := c.sum(pkt[:end]); got != want {
		return icrcMismatch(got, want)
	}
	return nil
}

func icrcMismatch(got, want uint32) *Error {
	return errf("icrc", ErrBadICRC, "got %#08x, want %#08x", uint64(got), uint64(want))
}
