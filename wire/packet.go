package wire

import (
	"encoding/binary"
	"fmt"
	"github.com/ibex-rdma/ibex/ib"
	"strings"
)

// MaxIBLen is the largest IB transport packet (BTH through ICRC) an IPv4
// datagram can carry, 65535 − 20 − 8 rounded down to the multiple of 4
// every IB packet is; the encoders apply it to IPv6 too.
const MaxIBLen = 65504

// Packet is one decoded IB transport packet: the BTH, the extension headers
// its opcode carries (Opcode.Mask says which; the others are zero), the
// payload and the ICRC.
type Packet struct {
	BTH            BTH
	DETH           DETH      // MaskDETH: UD only
	RETH           RETH      // MaskRETH
	AtomicETH      AtomicETH // MaskAtomicETH
	AETH           AETH      // MaskAETH
	AtomicAck      uint64    // MaskAtomicAckETH: the original remote value
	Imm            uint32    // MaskImmDt: immediate data, the 4 wire bytes read big-endian
	InvalidateRKey uint32    // MaskIETH: the R_Key to invalidate

	// Payload excludes the pad and the ICRC. After DecodeIB it aliases the
	// decoded buffer (with its capacity clipped to its length).
	Payload []byte

	// ICRC is the invariant CRC: as read from the wire after a decode, as
	// written after an encode.
	ICRC uint32
}

// DecodeIB decodes an IB transport packet — BTH, extension headers, payload,
// pad, ICRC: what a UDP socket on port 4791 receives — into p. It allocates
// nothing, and p.Payload aliases b.
//
// DecodeIB checks the lengths, the opcode, the transport version and the pad
// count. It reads but cannot verify the ICRC, which also covers the IP and
// UDP headers: verify it with ICRCPrefix.Check or CheckAnyID. Pad bytes and
// reserved bits are not checked, as in rxe. Checks that need QP state (PSN,
// P_Key, path MTU, RETH length) belong to the protocol engine. After an
// error, p holds what was decoded before it.
func DecodeIB(b []byte, p *Packet) error {
	if len(b) < ib.BTHLen+ib.ICRCLen {
		return truncated("bth", len(b), ib.BTHLen+ib.ICRCLen)
	}
	*p = Packet{}
	if err := p.BTH.Decode(b); err != nil {
		return err
	}
	if len(b)%4 != 0 {
		return errf("ib", ErrBadLength, "packet length %d not a multiple of 4", uint64(len(b)))
	}
	op := p.BTH.Opcode
	m := op.Mask()
	end := len(b) - ib.ICRCLen
	body := b[:end]
	off := ib.BTHLen
	if m&ib.MaskHeaders != 0 {
		var err error
		if off, err = p.decodeExt(body, off, m); err != nil {
			return err
		}
	}
	rest := end - off
	pad := int(p.BTH.PadCnt)
	if m&ib.MaskPayload == 0 {
		if pad != 0 {
			return errf("bth", ErrBadPad, "pad count %d on opcode %#02x, which carries no payload", uint64(pad), uint64(op))
		}
		if rest != 0 {
			return errf("ib", ErrBadLength, "opcode %#02x carries no payload, got %d bytes", uint64(op), uint64(rest))
		}
	} else {
		if pad > rest {
			return errf("bth", ErrBadPad, "pad count %d exceeds the %d bytes after the headers", uint64(pad), uint64(rest))
		}
		p.Payload = body[off : end-pad : end-pad]
	}
	p.ICRC = binary.LittleEndian.Uint32(b[end:])
	return nil
}

// decodeExt decodes the extension headers in m from b[off:] in wire order
// and returns the offset after them.
func (p *Packet) decodeExt(b []byte, off int, m ib.Mask) (int, error) {
	if m&ib.MaskDETH != 0 {
		if err := p.DETH.Decode(b[off:]); err != nil {
			return 0, err
		}
		off += ib.DETHLen
	}
	if m&ib.MaskRETH != 0 {
		if err := p.RETH.Decode(b[off:]); err != nil {
			return 0, err
		}
		off += ib.RETHLen
	}
	if m&ib.MaskAtomicETH != 0 {
		if err := p.AtomicETH.Decode(b[off:]); err != nil {
			return 0, err
		}
		off += ib.AtomicETHLen
	}
	if m&ib.MaskAETH != 0 {
		if err := p.AETH.Decode(b[off:]); err != nil {
			return 0, err
		}
		off += ib.AETHLen
	}
	if m&ib.MaskAtomicAckETH != 0 {
		if len(b)-off < ib.AtomicAckETHLen {
			return 0, truncated("atomicacketh", len(b)-off, ib.AtomicAckETHLen)
		}
		p.AtomicAck = binary.BigEndian.Uint64(b[off:])
		off += ib.AtomicAckETHLen
	}
	if m&ib.MaskImmDt != 0 {
		if len(b)-off < ib.ImmDtLen {
			return 0, truncated("immdt", len(b)-off, ib.ImmDtLen)
		}
		p.Imm = binary.BigEndian.Uint32(b[off:])
		off += ib.ImmDtLen
	}
	if m&ib.MaskIETH != 0 {
		if len(b)-off < ib.IETHLen {
			return 0, truncated("ieth", len(b)-off, ib.IETHLen)
		}
		p.InvalidateRKey = binary.BigEndian.Uint32(b[off:])
		off += ib.IETHLen
	}
	if m&ib.MaskCNPReserved != 0 {
		// Reserved: senders zero it, receivers ignore it (mlx5 does).
		if len(b)-off < ib.CNPReservedLen {
			return 0, truncated("cnp", len(b)-off, ib.CNPReservedLen)
		}
		off += ib.CNPReservedLen
	}
	return off, nil
}

// AppendIB appends p as an IB transport packet — what goes into a UDP
// datagram — to dst and returns the extended slice. It writes the headers
// p.BTH.Opcode carries (ignoring the other header fields), the payload, zero
// pad bytes up to a multiple of 4, and the ICRC computed with icrc, which
// must describe the IP and UDP headers the datagram will travel in.
//
// AppendIB sets p.BTH.PadCnt and p.ICRC to the values it wrote. It allocates
// only if dst lacks room for the packet (p.BTH.Opcode.HeaderLen() +
// len(p.Payload) + 3 + ICRCLen bytes suffice).
func AppendIB(dst []byte, p *Packet, icrc *ICRCPrefix) ([]byte, error) {
	dst, pkt, err := p.appendIB(dst)
	if err != nil {
		return dst, err
	}
	p.ICRC = icrc.sum(pkt[:len(pkt)-ib.ICRCLen])
	binary.LittleEndian.PutUint32(pkt[len(pkt)-ib.ICRCLen:], p.ICRC)
	return dst, nil
}

// appendIB appends p with a zero ICRC and returns the whole slice and the
// packet's part of it.
func (p *Packet) appendIB(dst []byte) (all, pkt []byte, err error) {
	op := p.BTH.Opcode
	if !op.Valid() {
		return dst, nil, errf("bth", ErrBadOpcode, "opcode %#02x unknown", uint64(op))
	}
	m := op.Mask()
	n := len(p.Payload)
	if m&ib.MaskPayload == 0 && n != 0 {
		return dst, nil, errf("ib", ErrBadField, "opcode %#02x carries no payload, got %d bytes", uint64(op), uint64(n))
	}
	pad := -n & 3
	hl := op.HeaderLen()
	total := hl + n + pad + ib.ICRCLen
	if total > MaxIBLen {
		return dst, nil, errf("ib", ErrBadField, "packet of %d bytes exceeds %d", uint64(total), MaxIBLen)
	}
	p.BTH.PadCnt = uint8(pad)
	if err := p.BTH.check(); err != nil {
		return dst, nil, err
	}
	if m&ib.MaskDETH != 0 && p.DETH.SrcQP > mask24 {
		return dst, nil, errf("deth", ErrBadField, "source QP %#x exceeds 24 bits", uint64(p.DETH.SrcQP))
	}
	if m&ib.MaskAETH != 0 && p.AETH.MSN > mask24 {
		return dst, nil, errf("aeth", ErrBadField, "msn %#x exceeds 24 bits", uint64(p.AETH.MSN))
	}
	dst, pkt = grow(dst, total)
	p.BTH.put(pkt)
	off := ib.BTHLen
	if m&ib.MaskHeaders != 0 {
		off = p.putExt(pkt, off, m)
	}
	off += copy(pkt[off:], p.Payload)
	clear(pkt[off:]) // pad and ICRC
	return dst, pkt, nil
}

// putExt writes the extension headers in m at b[off:] in wire order and
// returns the offset after them. b has room for them.
func (p *Packet) putExt(b []byte, off int, m ib.Mask) int {
	if m&ib.MaskDETH != 0 {
		p.DETH.put(b[off:])
		off += ib.DETHLen
	}
	if m&ib.MaskRETH != 0 {
		p.RETH.put(b[off:])
		off += ib.RETHLen
	}
	if m&ib.MaskAtomicETH != 0 {
		p.AtomicETH.put(b[off:])
		off += ib.AtomicETHLen
	}
	if m&ib.MaskAETH != 0 {
		p.AETH.put(b[off:])
		off += ib.AETHLen
	}
	if m&ib.MaskAtomicAckETH != 0 {
		binary.BigEndian.PutUint64(b[off:], p.AtomicAck)
		off += ib.AtomicAckETHLen
	}
	if m&ib.MaskImmDt != 0 {
		binary.BigEndian.PutUint32(b[off:], p.Imm)
		off += ib.ImmDtLen
	}
	if m&ib.MaskIETH != 0 {
		binary.BigEndian.PutUint32(b[off:], p.InvalidateRKey)
		off += ib.IETHLen
	}
	if m&ib.MaskCNPReserved != 0 {
		clear(b[off : off+ib.CNPReservedLen])
		off += ib.CNPReservedLen
	}
	return off
}

// String summarises p for logs, e.g.
// "RC RDMA WRITE Only QP=0x000012 PSN=0x123457 A RETH(va=0x1000 rkey=0xabcd len=8) payload=8".
func (p *Packet) String() string {
	var s strings.Builder
	h := &p.BTH
	fmt.Fprintf(&s, "%v QP=%#06x PSN=%#06x", h.Opcode, h.DestQP, h.PSN)
	for _, f := range [...]struct {
		set  bool
		name string
	}{{h.AckReq, "A"}, {h.SE, "SE"}, {h.MigReq, "M"}, {h.FECN, "FECN"}, {h.BECN, "BECN"}} {
		if f.set {
			s.WriteString(" " + f.name)
		}
	}
	if h.PKey != 0xffff {
		fmt.Fprintf(&s, " pkey=%#04x", h.PKey)
	}
	m := h.Opcode.Mask()
	if m&ib.MaskDETH != 0 {
		fmt.Fprintf(&s, " DETH(qkey=%#x srcqp=%#06x)", p.DETH.QKey, p.DETH.SrcQP)
	}
	if m&ib.MaskRETH != 0 {
		fmt.Fprintf(&s, " RETH(va=%#x rkey=%#x len=%d)", p.RETH.VA, p.RETH.RKey, p.RETH.DMALen)
	}
	if m&ib.MaskAtomicETH != 0 {
		a := &p.AtomicETH
		fmt.Fprintf(&s, " AtomicETH(va=%#x rkey=%#x swap/add=%#x compare=%#x)", a.VA, a.RKey, a.SwapAdd, a.Compare)
	}
	if m&ib.MaskAETH != 0 {
		fmt.Fprintf(&s, " AETH(%v MSN=%d)", p.AETH.Syndrome, p.AETH.MSN)
	}
	if m&ib.MaskAtomicAckETH != 0 {
		fmt.Fprintf(&s, " orig=%#x", p.AtomicAck)
	}
	if m&ib.MaskImmDt != 0 {
		fmt.Fprintf(&s, " imm=%#08x", p.Imm)
	}
	if m&ib.MaskIETH != 0 {
		fmt.Fprintf(&s, " inv_rkey=%#x", p.InvalidateRKey)
	}
	if m&ib.MaskPayload != 0 {
		fmt.Fprintf(&s, " payload=%d", len(p.Payload))
		if h.PadCnt != 0 {
			fmt.Fprintf(&s, "+%dpad", h.PadCnt)
		}
	}
	return s.String()
}
