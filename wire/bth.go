package wire

import (
	"encoding/binary"
	"github.com/ibex-rdma/ibex/ib"
)

// BTH is the Base Transport Header (IBA 9.2), 12 bytes, big-endian:
//
//	byte 0     OpCode
//	byte 1     SE(7) MigReq(6) PadCnt(5:4) TVer(3:0)
//	bytes 2-3  P_Key
//	byte 4     FECN(7) BECN(6) reserved(5:0)   (all ones in the ICRC)
//	bytes 5-7  DestQP
//	byte 8     AckReq(7) reserved(6:0)
//	bytes 9-11 PSN
//
// TVer is always 0: Decode rejects anything else, as rxe does. Reserved
// bits are ignored on decode and sent as 0.
type BTH struct {
	Opcode ib.Opcode
	SE     bool   // solicited event
	MigReq bool   // rxe sends 0; some hardware sends 1, so accept either
	PadCnt uint8  // 0–3 pad bytes after the payload; AppendIB computes it
	PKey   uint16 // partition key; 0xffff is the default partition
	FECN   bool   // forward ECN; 0 on RoCEv2, where ECN lives in the IP header
	BECN   bool   // backward ECN; 0 on RoCEv2
	DestQP uint32 // 24 bits
	AckReq bool   // the responder must acknowledge this PSN
	PSN    uint32 // 24 bits
}

const (
	mask24 = 1<<24 - 1

	bthSE     = 0x80
	bthMigReq = 0x40
	bthTVer   = 0x0f
	bthFECN   = 0x80
	bthBECN   = 0x40
	bthAckReq = 0x80
)

// Decode reads a BTH from b. It checks the length, the version and that the
// opcode is known.
func (h *BTH) Decode(b []byte) error {
	if len(b) < ib.BTHLen {
		return truncated("bth", len(b), ib.BTHLen)
	}
	b = b[:ib.BTHLen]
	op := ib.Opcode(b[0])
	if !op.Valid() {
		return errf("bth", ErrBadOpcode, "opcode %#02x unknown", uint64(op))
	}
	if v := b[1] & bthTVer; v != 0 {
		return errf("bth", ErrBadVersion, "transport version %d, want 0", uint64(v))
	}
	*h = BTH{
		Opcode: op,
		SE:     b[1]&bthSE != 0,
		MigReq: b[1]&bthMigReq != 0,
		PadCnt: b[1] >> 4 & 3,
		PKey:   binary.BigEndian.Uint16(b[2:]),
		FECN:   b[4]&bthFECN != 0,
		BECN:   b[4]&bthBECN != 0,
		DestQP: binary.BigEndian.Uint32(b[4:]) & mask24,
		AckReq: b[8]&bthAckReq != 0,
		PSN:    binary.BigEndian.Uint32(b[8:]) & mask24,
	}
	return nil
}

// Append appends the 12-byte BTH to b. It fails if DestQP or PSN exceeds 24
// bits or PadCnt exceeds 3.
func (h *BTH) Append(b []byte) ([]byte, error) {
	if err := h.check(); err != nil {
		return b, err
	}
	b, out := grow(b, ib.BTHLen)
	h.put(out)
	return b, nil
}

func (h *BTH) check() error {
	if h.DestQP > mask24 {
		return errf("bth", ErrBadField, "destination QP %#x exceeds 24 bits", uint64(h.DestQP))
	}
	if h.PSN > mask24 {
		return errf("bth", ErrBadField, "psn %#x exceeds 24 bits", uint64(h.PSN))
	}
	if h.PadCnt > 3 {
		return errf("bth", ErrBadField, "pad count %d exceeds 3", uint64(h.PadCnt))
	}
	return nil
}

// put writes the BTH into b[:BTHLen]; the fields must have passed check.
func (h *BTH) put(b []byte) {
	b = b[:ib.BTHLen]
	b[0] = byte(h.Opcode)
	b[1] = h.PadCnt<<4 | flag(h.SE, bthSE) | flag(h.MigReq, bthMigReq)
	binary.BigEndian.PutUint16(b[2:], h.PKey)
	binary.BigEndian.PutUint32(b[4:], h.DestQP)
	b[4] = flag(h.FECN, bthFECN) | flag(h.BECN, bthBECN)
	binary.BigEndian.PutUint32(b[8:], h.PSN)
	b[8] = flag(h.AckReq, bthAckReq)
}

func flag(set bool, bit byte) byte {
	if set {
		return bit
	}
	return 0
}

// grow extends b by n bytes and returns the extended slice and its last n
// bytes. It reallocates only when cap(b) is too small.
func grow(b []byte, n int) (all, tail []byte) {
	l := len(b)
	if cap(b)-l < n {
		nb := make([]byte, l, 2*cap(b)+n)
		copy(nb, b)
		b = nb
	}
	b = b[:l+n]
	return b, b[l:]
}
