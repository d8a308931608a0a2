package wire

import (
	"encoding/binary"
	"github.com/ibex-rdma/ibex/ib"
)

// AETH is the ACK Extended Transport Header (4 bytes) of ACKs, NAKs, READ
// responses (First, Last, Only) and atomic ACKs.
type AETH struct {
	Syndrome ib.Syndrome
	MSN      uint32 // message sequence number, 24 bits
}

// Decode reads an AETH from b.
func (h *AETH) Decode(b []byte) error {
	if len(b) < ib.AETHLen {
		return truncated("aeth", len(b), ib.AETHLen)
	}
	v := binary.BigEndian.Uint32(b)
	h.Syndrome = ib.Syndrome(v >> 24)
	h.MSN = v & mask24
	return nil
}

// Append appends the 4-byte AETH to b. It fails if MSN exceeds 24 bits.
func (h *AETH) Append(b []byte) ([]byte, error) {
	if h.MSN > mask24 {
		return b, errf("aeth", ErrBadField, "msn %#x exceeds 24 bits", uint64(h.MSN))
	}
	b, out := grow(b, ib.AETHLen)
	h.put(out)
	return b, nil
}

func (h *AETH) put(b []byte) {
	binary.BigEndian.PutUint32(b[:ib.AETHLen], uint32(h.Syndrome)<<24|h.MSN)
}
