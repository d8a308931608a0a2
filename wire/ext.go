package wire

import (
	"encoding/binary"
	"github.com/ibex-rdma/ibex/ib"
)

// The extension headers with more than one field. The one-field headers
// (ImmDt, IETH, AtomicAckETH) are plain integers in Packet.

// RETH is the RDMA Extended Transport Header (16 bytes): the remote buffer of
// an RDMA WRITE (First or Only) or RDMA READ request.
type RETH struct {
	VA     uint64 // remote virtual address
	RKey   uint32
	DMALen uint32 // length of the whole message, not of this packet
}

// Decode reads a RETH from b.
func (h *RETH) Decode(b []byte) error {
	if len(b) < ib.RETHLen {
		return truncated("reth", len(b), ib.RETHLen)
	}
	h.VA = binary.BigEndian.Uint64(b)
	h.RKey = binary.BigEndian.Uint32(b[8:])
	h.DMALen = binary.BigEndian.Uint32(b[12:])
	return nil
}

// Append appends the 16-byte RETH to b.
func (h *RETH) Append(b []byte) []byte {
	b, out := grow(b, ib.RETHLen)
	h.put(out)
	return b
}

func (h *RETH) put(b []byte) {
	b = b[:ib.RETHLen]
	binary.BigEndian.PutUint64(b, h.VA)
	binary.BigEndian.PutUint32(b[8:], h.RKey)
	binary.BigEndian.PutUint32(b[12:], h.DMALen)
}

// AtomicETH is the Atomic Extended Transport Header (28 bytes, packed) of
// CmpSwap and FetchAdd.
type AtomicETH struct {
	VA      uint64 // remote address; must be 8-byte aligned (checked by the responder)
	RKey    uint32
	SwapAdd uint64 // CmpSwap: the swap value; FetchAdd: the addend
	Compare uint64 // CmpSwap: the compare value; FetchAdd: unused (rxe sends 0)
}

// Decode reads an AtomicETH from b.
func (h *AtomicETH) Decode(b []byte) error {
	if len(b) < ib.AtomicETHLen {
		return truncated("atomiceth", len(b), ib.AtomicETHLen)
	}
	h.VA = binary.BigEndian.Uint64(b)
	h.RKey = binary.BigEndian.Uint32(b[8:])
	h.SwapAdd = binary.BigEndian.Uint64(b[12:])
	h.Compare = binary.BigEndian.Uint64(b[20:])
	return nil
}

// Append appends the 28-byte AtomicETH to b.
func (h *AtomicETH) Append(b []byte) []byte {
	b, out := grow(b, ib.AtomicETHLen)
	h.put(out)
	return b
}

func (h *AtomicETH) put(b []byte) {
	b = b[:ib.AtomicETHLen]
	binary.BigEndian.PutUint64(b, h.VA)
	binary.BigEndian.PutUint32(b[8:], h.RKey)
	binary.BigEndian.PutUint64(b[12:], h.SwapAdd)
	binary.BigEndian.PutUint64(b[20:], h.Compare)
}

// DETH is the Datagram Extended Transport Header (8 bytes) of UD packets.
// Byte 4 is reserved.
type DETH struct {
	QKey  uint32
	SrcQP uint32 // 24 bits
}

// Decode reads a DETH from b.
func (h *DETH) Decode(b []byte) error {
	if len(b) < ib.DETHLen {
		return truncated("deth", len(b), ib.DETHLen)
	}
	h.QKey = binary.BigEndian.Uint32(b)
	h.SrcQP = binary.BigEndian.Uint32(b[4:]) & mask24
	return nil
}

// Append appends the 8-byte DETH to b. It fails if SrcQP exceeds 24 bits.
func (h *DETH) Append(b []byte) ([]byte, error) {
	if h.SrcQP > mask24 {
		return b, errf("deth", ErrBadField, "source QP %#x exceeds 24 bits", uint64(h.SrcQP))
	}
	b, out := grow(b, ib.DETHLen)
	h.put(out)
	return b, nil
}

func (h *DETH) put(b []byte) {
	b = b[:ib.DETHLen]
	binary.BigEndian.PutUint32(b, h.QKey)
	binary.BigEndian.PutUint32(b[4:], h.SrcQP)
}
