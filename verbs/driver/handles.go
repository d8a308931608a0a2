package driver

import (
	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/verbs/internal/hook"
	"github.com/ibex-rdma/ibex/verbs/internal/wq"
)

// verbsSide is the set of provider hooks package verbs hands over (see
// verbs/internal/hook). A mismatch with verbs' providerSide panics at init.
type verbsSide interface {
	Register(p any)
	PostEvent(c *verbs.Context, ev verbs.AsyncEvent)
	CompleteSend(qp *verbs.QP, ssn uint64, st verbs.WCStatus, byteLen uint32, cause error)
	Fail(qp *verbs.QP, cause error, ev verbs.AsyncEventType, post bool)
	RecvBegin(qp *verbs.QP) (uint64, bool)
	RecvPlace(qp *verbs.QP, rsn uint64, off uint64, src []byte) verbs.WCStatus
	RecvComplete(qp *verbs.QP, rsn uint64, st verbs.WCStatus, byteLen uint32, imm uint32, hasImm, write bool, srcQP uint32) bool
	RecvPosted(qp *verbs.QP) uint64
	AddStats(qp *verbs.QP, d verbs.QPStats)
	PDID(pd *verbs.PD) uint32
	RemoteCheck(pd *verbs.PD, rkey uint32, va uint64, n uint64, need verbs.Access) error
	RemoteWrite(pd *verbs.PD, rkey uint32, va uint64, src []byte) bool
	RemoteRead(pd *verbs.PD, rkey uint32, va uint64, dst []byte) bool
	RemoteAtomic(pd *verbs.PD, rkey uint32, va uint64, op verbs.Opcode, compareAdd, swap uint64) (uint64, bool)
	Region(mr *verbs.MR) *wq.Region
}

var (
	v            = hook.Verbs.(verbsSide)
	executeLocal = hook.ExecuteLocal.(func(w *wq.SendWQE, req, resp *verbs.QP) wq.Outcome)
	qpDestroyed  = hook.QPDestroyed.(func(qp *verbs.QP) bool)
)

// Context is the provider's handle on an opened verbs.Context. It has the
// application's methods (Name, QueryDevice, ...) and PostEvent.
type Context struct{ *verbs.Context }

// PostEvent queues an asynchronous event for the application. It never
// blocks: when the queue is full the event is counted in DroppedEvents.
func (c Context) PostEvent(ev verbs.AsyncEvent) { v.PostEvent(c.Context, ev) }

// QP is the provider's handle on a verbs.QP, given to Device.NewQP. It has
// the application's methods (Num, State, Query, DestQPN, Cap, ...) and the
// hooks below; QP.QP is the application's *verbs.QP (zero QP: none).
type QP struct{ *verbs.QP }

// Valid reports whether h names a QP.
func (h QP) Valid() bool { return h.QP != nil }

// PD is the QP's protection domain, as a provider handle.
func (h QP) PD() PD { return PD{h.QP.PD()} }

// Context is the QP's context, as a provider handle.
func (h QP) Context() Context { return Context{h.QP.Context()} }

// CompleteSend reports the completion of the oldest outstanding request,
// named by its ssn (an Issuer's completions); a completion for a request
// verbs already flushed is ignored. An error status moves the QP to ERR
// with cause (which QP.Err then reports) and flushes the rest.
func (h QP) CompleteSend(ssn uint64, st verbs.WCStatus, byteLen uint32, cause error) {
	v.CompleteSend(h.QP, ssn, st, byteLen, cause)
}

// Fail moves the QP to ERR for a reason the provider detected (a responder
// error, a dead peer), posts an event of type ev if post, and flushes both
// queues. Call it with no verbs lock held.
func (h QP) Fail(cause error, ev verbs.AsyncEventType, post bool) { v.Fail(h.QP, cause, ev, post) }

// RecvBegin returns the rsn of the receive at the head of the queue, or
// false when none is posted (the responder then sends an RNR NAK).
func (h QP) RecvBegin() (uint64, bool) { return v.RecvBegin(h.QP) }

// RecvPlace writes src at off of receive rsn: WCLocLenErr if it does not
// fit, WCLocProtErr if an MR refuses, WCWRFlushErr if the receive is gone
// (flushed meanwhile).
func (h QP) RecvPlace(rsn uint64, off uint64, src []byte) verbs.WCStatus {
	return v.RecvPlace(h.QP, rsn, off, src)
}

// RecvComplete completes receive rsn. It returns false when the receive CQ
// overflowed; the provider must then Fail the QP (outside its own locks).
func (h QP) RecvComplete(rsn uint64, st verbs.WCStatus, byteLen uint32, imm uint32, hasImm, write bool, srcQP uint32) bool {
	return v.RecvComplete(h.QP, rsn, st, byteLen, imm, hasImm, write, srcQP)
}

// RecvPosted is the number of receives posted since the QP last left
// RESET (consumed or not): what a transport that grants its peer credits
// publishes.
func (h QP) RecvPosted() uint64 { return v.RecvPosted(h.QP) }

// AddStats adds the transport's counts (what its protocol engine saw) to
// the QP's counters (verbs.QP.Stats).
func (h QP) AddStats(d verbs.QPStats) { v.AddStats(h.QP, d) }

// Destroyed reports, without a lock, whether the application destroyed
// the QP: a provider stops delivering to it.
func (h QP) Destroyed() bool { return qpDestroyed(h.QP) }

// PD is the provider's handle on a verbs.PD: the responder's checks and
// accesses, with the same key, PD, access and bounds rules as ExecuteLocal.
type PD struct{ *verbs.PD }

// ID is the PD's identifier, random and unique among live PDs in practice;
// providers that check PDs in shared memory publish it.
func (h PD) ID() uint32 { return v.PDID(h.PD) }

// RemoteCheck validates an incoming request's rkey: the MR exists in this
// PD, grants need, and holds [va, va+n). The error says which failed.
func (h PD) RemoteCheck(rkey uint32, va uint64, n uint64, need verbs.Access) error {
	return v.RemoteCheck(h.PD, rkey, va, n, need)
}

// RemoteWrite copies src to [va, ...) of rkey; false if the access fails.
func (h PD) RemoteWrite(rkey uint32, va uint64, src []byte) bool {
	return v.RemoteWrite(h.PD, rkey, va, src)
}

// RemoteRead copies [va, ...) of rkey into dst; false if the access fails.
func (h PD) RemoteRead(rkey uint32, va uint64, dst []byte) bool {
	return v.RemoteRead(h.PD, rkey, va, dst)
}

// RemoteAtomic executes an atomic (op is WRAtomicCmpAndSwp or
// WRAtomicFetchAndAdd) on the 8-byte word at va of rkey, atomic against
// the CPU too, and returns the original value; false if the access fails.
func (h PD) RemoteAtomic(rkey uint32, va uint64, op verbs.Opcode, compareAdd, swap uint64) (uint64, bool) {
	return v.RemoteAtomic(h.PD, rkey, va, op, compareAdd, swap)
}

// MR is the provider's handle on a verbs.MR, given to an MRPublisher.
type MR struct{ *verbs.MR }

// PD is the MR's protection domain, as a provider handle.
func (h MR) PD() PD { return PD{h.MR.PD()} }

// Pin marks an access in progress; false means the MR is deregistered.
// Every successful Pin must be followed by Unpin. Pins nest; Dereg waits
// for them to drain.
func (h MR) Pin() bool { return v.Region(h.MR).Pin() }

// Unpin ends an access started by Pin.
func (h MR) Unpin() { v.Region(h.MR).Unpin() }

// Slice returns the bytes [addr, addr+n) of the region, or false when the
// range is not inside it.
func (h MR) Slice(addr uint64, n uint64) ([]byte, bool) { return v.Region(h.MR).Slice(addr, n) }

// ExecuteLocal executes send WQE w of requester QP req directly against
// responder QP resp in the same address space, applying the IB responder
// rules: QP state, opcode permission (QP access flags, max_dest_rd_atomic,
// atomic alignment), receive availability (RNR), rkey, PD, MR access and
// bounds, and receive length. Bytes move with one copy. A zero resp means
// the destination does not exist (Lost). It is the transport of providers
// whose QPs share memory with their peers (loopback); a responder error
// moves resp to ERR, as a real responder does.
func ExecuteLocal(w *SendWQE, req, resp QP) Outcome {
	return executeLocal(w, req.QP, resp.QP)
}
