package wq

import (
	"encoding/binary"

	"github.com/ibex-rdma/ibex/ib"
)

// SendWQE is a posted send request as the send queue holds it. verbs fills
// it at post time, having validated the SGEs against their MRs; a provider
// reads it while it executes or issues the request.
type SendWQE struct {
	ID         uint64 // wr_id
	SSN        uint64 // send sequence number, unique per QP: names the request in CompleteSend
	Op         ib.WROpcode
	Flags      ib.SendFlags
	Signaled   bool // success produces a completion
	Imm        uint32
	RemoteAddr uint64 // RDMA and atomics: the peer's address
	RKey       uint32
	CompareAdd uint64 // CMP_AND_SWP's compare value, FETCH_AND_ADD's addend
	Swap       uint64 // CMP_AND_SWP's swap value
	Length     uint64 // message bytes (8 for atomics)
	SGE        []SGE
	MRs        []*Region // the region of each SGE
	Inline     []byte    // storage; the payload is Inline[:Length] when Flags has SendInline
}

// IsInline reports whether the payload was copied at post time.
func (w *SendWQE) IsInline() bool { return w.Flags&ib.SendInline != 0 }

// Cursor walks the request's local data from its start.
func (w *SendWQE) Cursor() Cursor {
	if w.IsInline() {
		return Flat(w.Inline[:w.Length])
	}
	return Cursor{sge: w.SGE, rs: w.MRs}
}

// CopyTo copies the request into s; it allocates nothing once s is Init.
func (w *SendWQE) CopyTo(s *SendWork) {
	s.SSN, s.ID, s.Op, s.Flags, s.Imm = w.SSN, w.ID, w.Op, w.Flags, w.Imm
	s.RemoteAddr, s.RKey, s.CompareAdd, s.Swap, s.Length = w.RemoteAddr, w.RKey, w.CompareAdd, w.Swap, w.Length
	s.sge = append(s.sge[:0], w.SGE...)
	s.mrs = append(s.mrs[:0], w.MRs...)
	s.inl = w.IsInline()
	s.inline = s.inline[:0]
	if s.inl {
		s.inline = append(s.inline, w.Inline[:w.Length]...)
	}
}

// OutcomeKind says how an executed send attempt ended.
type OutcomeKind uint8

// Outcome kinds.
const (
	// Done: the request completed with Outcome.Status.
	Done OutcomeKind = iota
	// RNR: the responder had no receive posted; verbs retries after the
	// RNR timer given by Outcome.RNRTimer (counted against rnr_retry).
	RNR
	// Lost: no response arrived (unreachable or not-ready responder); verbs
	// retries after the QP's timeout (counted against retry_cnt).
	Lost
)

// Outcome is what an Executor reports for one send attempt.
type Outcome struct {
	Kind     OutcomeKind
	Status   ib.WCStatus // for Done
	ByteLen  uint32      // for Done: bytes moved (READ, atomics, SEND)
	RNRTimer uint8       // for RNR: the responder's min_rnr_timer code
	// Cause explains an error status; it becomes QP.Err() when the QP moves
	// to ERR. Errors only: the success path allocates nothing.
	Cause error
}

// SendWork is a transport's own copy of a send request, taken at Issue
// (SendWQE.CopyTo), so the transport never reads queue memory that verbs
// may reuse after a flush. Init it once with the QP's limits.
type SendWork struct {
	SSN        uint64
	ID         uint64
	Op         ib.WROpcode
	Flags      ib.SendFlags
	Imm        uint32
	RemoteAddr uint64
	RKey       uint32
	CompareAdd uint64
	Swap       uint64
	Length     uint64
	sge        []SGE
	mrs        []*Region
	inline     []byte
	inl        bool
}

// Init sizes the copy for a QP's limits (QPCap.MaxSendSGE and
// MaxInlineData).
func (s *SendWork) Init(maxSGE, maxInline int) {
	s.sge = make([]SGE, 0, maxSGE)
	s.mrs = make([]*Region, 0, maxSGE)
	s.inline = make([]byte, 0, maxInline)
}

// Slices appends to dst the local memory of the message bytes [off, off+n)
// and pins the MRs it lies in; Unpin must follow when ok. write asks for
// memory the transport will write (a READ response): it fails, like a
// dead MR, when an MR lacks LOCAL_WRITE (LOC_PROT_ERR). A transport uses
// it to hand the memory to a system call (process_vm_writev) without a
// bounce copy.
func (s *SendWork) Slices(off, n uint64, dst [][]byte, write bool) ([][]byte, bool) {
	if write && !Writable(s.mrs) {
		return dst, false
	}
	if _, ok := PinAll(s.mrs); !ok {
		return dst, false
	}
	if s.inl {
		return append(dst, s.inline[off:off+n]), true
	}
	c := s.cursorAt(off)
	for n > 0 {
		b := c.Peek()
		if len(b) == 0 {
			break
		}
		if uint64(len(b)) > n {
			b = b[:n]
		}
		dst = append(dst, b)
		n -= uint64(len(b))
		c.Advance(len(b))
	}
	return dst, true
}

// Unpin ends the access started by a successful Slices.
func (s *SendWork) Unpin() { UnpinAll(s.mrs) }

// Release drops the copy's MR references.
func (s *SendWork) Release() {
	clear(s.mrs)
	s.mrs = s.mrs[:0]
}

func (s *SendWork) cursorAt(off uint64) Cursor {
	if s.inl {
		return Flat(s.inline[off:])
	}
	return List(s.sge, s.mrs, off)
}

// Gather copies the message bytes [off, off+len(dst)) into dst. It returns
// false when a local MR was deregistered since posting (LOC_PROT_ERR).
func (s *SendWork) Gather(off uint64, dst []byte) bool {
	if _, ok := PinAll(s.mrs); !ok {
		return false
	}
	Copy(Flat(dst), s.cursorAt(off))
	UnpinAll(s.mrs)
	return true
}

// Scatter places READ response bytes at off of the local SGE list; false
// when an MR is gone or lacks LOCAL_WRITE (LOC_PROT_ERR).
func (s *SendWork) Scatter(off uint64, src []byte) bool {
	if !Writable(s.mrs) {
		return false
	}
	if _, ok := PinAll(s.mrs); !ok {
		return false
	}
	Copy(s.cursorAt(off), Flat(src))
	UnpinAll(s.mrs)
	return true
}

// AtomicResult stores an atomic's original value in the local buffer.
func (s *SendWork) AtomicResult(orig uint64) bool {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], orig)
	return s.Scatter(0, b[:])
}
