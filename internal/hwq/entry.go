package hwq

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/ibex-rdma/ibex/ib"
)

// Typed entries of the verbs data path, little-endian, decoded field by
// field from a private copy (Consumer.CopyOut), never by casting shared
// memory to a struct.
//
// Send WQE (SendWQESize bytes):
//
//	0   wr_id (u64)
//	8   opcode (u8, ib.WROpcode)   9  send flags (u8, ib.SendFlags)
//	10  SGE count (u8)             11 reserved
//	12  imm (u32)
//	16  remote addr (u64)
//	24  rkey (u32)                 28 total length (u32): the SGEs' sum,
//	                                  or the inline length
//	32  compare/add (u64)          40 swap (u64)
//	48  inline length (u32)        52 reserved
//	64  SGEs, 16 bytes each: addr (u64), length (u32), lkey (u32);
//	    or, with SendInline, the inline data
//
// Receive WQE (RecvWQESize bytes):
//
//	0   wr_id (u64)   8 SGE count (u8)   9 reserved
//	16  SGEs as above
//
// CQE (CQESize bytes):
//
//	0   wr_id (u64)
//	8   status (u8, ib.WCStatus)   9 opcode (u8, verbs.WCOpcode numbering)
//	10  wc_flags (u8, verbs.WCFlags)   11 reserved
//	12  byte_len (u32)   16 qp_num (u32)   20 src_qp (u32)   24 imm (u32)
//	28  reserved
const (
	wqeWRID     = 0
	wqeOpcode   = 8
	wqeFlags    = 9
	wqeNSGE     = 10
	wqeImm      = 12
	wqeRAddr    = 16
	wqeRKey     = 24
	wqeTotal    = 28
	wqeCmp      = 32
	wqeSwap     = 40
	wqeInline   = 48
	wqeSGL      = 64
	rqeNSGE     = 8
	rqeSGL      = 16
	sgeSize     = 16
	cqeWRID     = 0
	cqeStatus   = 8
	cqeOpcode   = 9
	cqeFlags    = 10
	cqeByteLen  = 12
	cqeQPNum    = 16
	cqeSrcQP    = 20
	cqeImm      = 24
	maxSGELimit = 255
	maxInline   = maxSize - wqeSGL

	sendFlagsKnown = ib.SendFence | ib.SendSignaled | ib.SendSolicited | ib.SendInline

	// Completion opcodes and flags, numbered as verbs.WCOpcode and
	// verbs.WCFlags (libibverbs); hwq cannot import verbs, which will
	// import it.
	wcRecv            = 128
	wcRecvRDMAWithImm = 129
	wcFetchAdd        = 4
	wcWithImm         = 1 << 1
)

// CQESize is the entry size of a CQ.
const CQESize = 32

var le = binary.LittleEndian

// SGE is a scatter/gather element, laid out as verbs.SGE so the two convert.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// Limits are a queue's capacities, which size its entries and bound what a
// decoded entry may claim. Zero means none: no SGEs, no inline data.
type Limits struct {
	MaxSGE    int // SGEs per WQE, at most 255
	MaxInline int // inline bytes per send WQE
}

func (l Limits) clamp() Limits {
	l.MaxSGE = min(max(l.MaxSGE, 0), maxSGELimit)
	l.MaxInline = min(max(l.MaxInline, 0), maxInline)
	return l
}

// SendWQESize is the entry size for send WQEs of limits l: room for
// MaxSGE SGEs or MaxInline bytes, whichever is larger, rounded up to 8.
func SendWQESize(l Limits) int {
	l = l.clamp()
	return wqeSGL + (max(l.MaxSGE*sgeSize, l.MaxInline)+7)&^7
}

// RecvWQESize is the entry size for receive WQEs of limits l.
func RecvWQESize(l Limits) int {
	return rqeSGL + l.clamp().MaxSGE*sgeSize
}

// SendWQE is a send work request as it travels in a send queue. Decode
// reuses SGL's and Inline's storage: give them capacity once and decoding
// allocates nothing.
type SendWQE struct {
	WRID       uint64
	Opcode     ib.WROpcode
	Flags      ib.SendFlags
	Imm        uint32
	RemoteAddr uint64
	RKey       uint32
	CompareAdd uint64
	Swap       uint64
	Length     uint32 // the total length; Encode computes it
	SGL        []SGE  // without SendInline
	Inline     []byte // with SendInline
}

// Encode writes w into entry b (a Producer.Entry), computing Length. It
// fails, writing nothing, when w does not fit in b or its lengths overflow.
func (w *SendWQE) Encode(b []byte) error {
	var total uint64
	var body int
	if w.Flags&ib.SendInline != 0 {
		if len(w.SGL) != 0 {
			return entryErrorf("send wqe", "sge count %d: an inline request carries no SGEs", len(w.SGL))
		}
		total, body = uint64(len(w.Inline)), len(w.Inline)
	} else {
		if len(w.Inline) != 0 {
			return entryErrorf("send wqe", "inline length %d: without the inline flag", len(w.Inline))
		}
		if len(w.SGL) > maxSGELimit {
			return entryErrorf("send wqe", "sge count %d: more than %d", len(w.SGL), maxSGELimit)
		}
		for i := range w.SGL {
			total += uint64(w.SGL[i].Length)
		}
		body = len(w.SGL) * sgeSize
	}
	if total > math.MaxUint32 {
		return entryErrorf("send wqe", "total length %d: more than 2^32-1", total)
	}
	if wqeSGL+body > len(b) {
		return entryErrorf("send wqe", "entry size %d: %d bytes needed", len(b), wqeSGL+body)
	}
	clear(b[:wqeSGL])
	le.PutUint64(b[wqeWRID:], w.WRID)
	b[wqeOpcode] = byte(w.Opcode)
	b[wqeFlags] = byte(w.Flags)
	le.PutUint32(b[wqeImm:], w.Imm)
	le.PutUint64(b[wqeRAddr:], w.RemoteAddr)
	le.PutUint32(b[wqeRKey:], w.RKey)
	le.PutUint32(b[wqeTotal:], uint32(total))
	le.PutUint64(b[wqeCmp:], w.CompareAdd)
	le.PutUint64(b[wqeSwap:], w.Swap)
	w.Length = uint32(total)
	if w.Flags&ib.SendInline != 0 {
		le.PutUint32(b[wqeInline:], uint32(len(w.Inline)))
		copy(b[wqeSGL:], w.Inline)
		return nil
	}
	b[wqeNSGE] = byte(len(w.SGL))
	putSGL(b[wqeSGL:], w.SGL)
	return nil
}

// Decode fills w from entry b, a private copy, and validates it against
// lim: a known opcode and flags, no more SGEs than MaxSGE, no more inline
// data than MaxInline, a total length that is the sum it claims to be.
// Errors wrap ErrBadEntry and name the field. Semantic checks (lkeys,
// which opcodes may be inline) are the executor's.
func (w *SendWQE) Decode(b []byte, lim Limits) error {
	lim = lim.clamp()
	if len(b) < wqeSGL {
		return entryErrorf("send wqe", "entry size %d: less than %d", len(b), wqeSGL)
	}
	op, flags := ib.WROpcode(b[wqeOpcode]), ib.SendFlags(b[wqeFlags])
	if !op.Valid() {
		return entryErrorf("send wqe", "opcode %d: unknown", uint8(op))
	}
	if flags&^sendFlagsKnown != 0 {
		return entryErrorf("send wqe", "send flags %#x: unknown bits %#x", uint8(flags), uint8(flags&^sendFlagsKnown))
	}
	nsge, inl, total := int(b[wqeNSGE]), le.Uint32(b[wqeInline:]), le.Uint32(b[wqeTotal:])
	w.SGL, w.Inline = w.SGL[:0], w.Inline[:0]
	if flags&ib.SendInline != 0 {
		switch {
		case nsge != 0:
			return entryErrorf("send wqe", "sge count %d: an inline request carries no SGEs", nsge)
		case uint64(inl) > uint64(lim.MaxInline):
			return entryErrorf("send wqe", "inline length %d: more than max_inline_data %d", inl, lim.MaxInline)
		case wqeSGL+int(inl) > len(b):
			return entryErrorf("send wqe", "inline length %d: past the entry's %d bytes", inl, len(b))
		case total != inl:
			return entryErrorf("send wqe", "total length %d: inline length is %d", total, inl)
		}
		w.Inline = append(w.Inline, b[wqeSGL:wqeSGL+int(inl)]...)
	} else {
		switch {
		case inl != 0:
			return entryErrorf("send wqe", "inline length %d: without the inline flag", inl)
		case nsge > lim.MaxSGE:
			return entryErrorf("send wqe", "sge count %d: more than max_sge %d", nsge, lim.MaxSGE)
		case wqeSGL+nsge*sgeSize > len(b):
			return entryErrorf("send wqe", "sge count %d: past the entry's %d bytes", nsge, len(b))
		}
		var sum uint64
		w.SGL, sum = getSGL(w.SGL, b[wqeSGL:], nsge)
		if sum != uint64(total) {
			return entryErrorf("send wqe", "total length %d: the SGEs add up to %d", total, sum)
		}
	}
	w.WRID = le.Uint64(b[wqeWRID:])
	w.Opcode, w.Flags = op, flags
	w.Imm = le.Uint32(b[wqeImm:])
	w.RemoteAddr = le.Uint64(b[wqeRAddr:])
	w.RKey = le.Uint32(b[wqeRKey:])
	w.Length = total
	w.CompareAdd = le.Uint64(b[wqeCmp:])
	w.Swap = le.Uint64(b[wqeSwap:])
	return nil
}

// RecvWQE is a receive work request as it travels in a receive queue.
type RecvWQE struct {
	WRID uint64
	SGL  []SGE
}

// Encode writes w into entry b. It fails, writing nothing, when w does
// not fit.
func (w *RecvWQE) Encode(b []byte) error {
	if len(w.SGL) > maxSGELimit {
		return entryErrorf("recv wqe", "sge count %d: more than %d", len(w.SGL), maxSGELimit)
	}
	if need := rqeSGL + len(w.SGL)*sgeSize; need > len(b) {
		return entryErrorf("recv wqe", "entry size %d: %d bytes needed", len(b), need)
	}
	clear(b[:rqeSGL])
	le.PutUint64(b[wqeWRID:], w.WRID)
	b[rqeNSGE] = byte(len(w.SGL))
	putSGL(b[rqeSGL:], w.SGL)
	return nil
}

// Decode fills w from entry b, a private copy, and checks the SGE count
// against lim.MaxSGE. Errors wrap ErrBadEntry and name the field.
func (w *RecvWQE) Decode(b []byte, lim Limits) error {
	lim = lim.clamp()
	if len(b) < rqeSGL {
		return entryErrorf("recv wqe", "entry size %d: less than %d", len(b), rqeSGL)
	}
	nsge := int(b[rqeNSGE])
	switch {
	case nsge > lim.MaxSGE:
		return entryErrorf("recv wqe", "sge count %d: more than max_sge %d", nsge, lim.MaxSGE)
	case rqeSGL+nsge*sgeSize > len(b):
		return entryErrorf("recv wqe", "sge count %d: past the entry's %d bytes", nsge, len(b))
	}
	w.WRID = le.Uint64(b[wqeWRID:])
	w.SGL, _ = getSGL(w.SGL[:0], b[rqeSGL:], nsge)
	return nil
}

// CQE is a work completion as it travels in a CQ; its fields are those of
// verbs.WC. Opcode and Flags hold verbs.WCOpcode and verbs.WCFlags values.
type CQE struct {
	WRID    uint64
	Status  ib.WCStatus
	Opcode  uint8
	Flags   uint8
	ByteLen uint32
	QPNum   uint32
	SrcQP   uint32
	Imm     uint32
}

// Encode writes e into entry b (at least CQESize bytes).
func (e *CQE) Encode(b []byte) error {
	if len(b) < CQESize {
		return entryErrorf("cqe", "entry size %d: less than %d", len(b), CQESize)
	}
	b = b[:CQESize]
	le.PutUint64(b[cqeWRID:], e.WRID)
	b[cqeStatus], b[cqeOpcode], b[cqeFlags], b[11] = byte(e.Status), e.Opcode, e.Flags, 0
	le.PutUint32(b[cqeByteLen:], e.ByteLen)
	le.PutUint32(b[cqeQPNum:], e.QPNum)
	le.PutUint32(b[cqeSrcQP:], e.SrcQP)
	le.PutUint32(b[cqeImm:], e.Imm)
	le.PutUint32(b[28:], 0)
	return nil
}

// Decode fills e from entry b, a private copy, and checks status, opcode
// and flags are ones libibverbs defines. Errors wrap ErrBadEntry and name
// the field.
func (e *CQE) Decode(b []byte) error {
	if len(b) < CQESize {
		return entryErrorf("cqe", "entry size %d: less than %d", len(b), CQESize)
	}
	st, op, fl := ib.WCStatus(b[cqeStatus]), b[cqeOpcode], b[cqeFlags]
	switch {
	case st > ib.WCGeneralErr:
		return entryErrorf("cqe", "status %d: unknown", uint8(st))
	case op > wcFetchAdd && op != wcRecv && op != wcRecvRDMAWithImm:
		return entryErrorf("cqe", "opcode %d: unknown", op)
	case fl&^wcWithImm != 0:
		return entryErrorf("cqe", "wc flags %#x: unknown bits %#x", fl, fl&^wcWithImm)
	}
	e.WRID = le.Uint64(b[cqeWRID:])
	e.Status, e.Opcode, e.Flags = st, op, fl
	e.ByteLen = le.Uint32(b[cqeByteLen:])
	e.QPNum = le.Uint32(b[cqeQPNum:])
	e.SrcQP = le.Uint32(b[cqeSrcQP:])
	e.Imm = le.Uint32(b[cqeImm:])
	return nil
}

// Push encodes e into the next entry of p and publishes it: the daemon's
// one call per completion. A CQ the application has not drained is
// ErrFull (a CQ overflow, IBV_EVENT_CQ_ERR), and nothing is overwritten.
func (e *CQE) Push(p *Producer) error {
	before := p.reserved
	if _, err := p.Reserve(1); err != nil {
		return err
	}
	if p.reserved == before {
		return fmt.Errorf("hwq: cq of %d: %d completions unconsumed, %d reserved: %w", p.r.count, p.head-p.tail, before, ErrFull)
	}
	if err := e.Encode(p.Entry(int(before))); err != nil {
		p.reserved = before
		return err
	}
	p.Publish()
	return nil
}

func putSGL(b []byte, sgl []SGE) {
	for i := range sgl {
		s := b[i*sgeSize : (i+1)*sgeSize]
		le.PutUint64(s, sgl[i].Addr)
		le.PutUint32(s[8:], sgl[i].Length)
		le.PutUint32(s[12:], sgl[i].LKey)
	}
}

func getSGL(dst []SGE, b []byte, n int) ([]SGE, uint64) {
	var sum uint64
	for i := range n {
		s := b[i*sgeSize : (i+1)*sgeSize]
		sge := SGE{Addr: le.Uint64(s), Length: le.Uint32(s[8:]), LKey: le.Uint32(s[12:])}
		sum += uint64(sge.Length)
		dst = append(dst, sge)
	}
	return dst, sum
}

func entryErrorf(what, format string, args ...any) error {
	return fmt.Errorf("hwq: "+what+": "+format+": %w", append(append([]any{}, args...), ErrBadEntry)...)
}
