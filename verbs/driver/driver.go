package driver

import (
	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/verbs/internal/wq"
)

// Provider is a family of devices (loopback, shm, udp, ...).
type Provider interface {
	// Name is the provider's short name, e.g. "loopback".
	Name() string
	// Devices lists the device names this provider offers now.
	Devices() []string
	// Open opens a device for one Context. The device reports asynchronous
	// events through c.PostEvent.
	Open(device string, c Context) (Device, error)
}

// Device is one opened device: what a provider implements under a Context.
type Device interface {
	DeviceAttr() verbs.DeviceAttr
	PortAttr(port uint8) (verbs.PortAttr, error)
	// NewQP attaches the transport to a newly created QP. The result must
	// be an Executor or an Issuer, not both.
	NewQP(qp QP) (QPDriver, error)
	// Close releases the device; every QP has been destroyed by then.
	Close() error
}

// QPDriver is a provider's transport for one QP: Destroy, and exactly one
// of Executor and Issuer.
type QPDriver interface {
	// Destroy detaches the transport; verbs calls nothing on it afterwards.
	Destroy()
}

// Executor is a QPDriver that executes requests synchronously (loopback).
type Executor interface {
	QPDriver
	// Execute runs the send WQE at the head of the send queue and reports
	// its outcome. It is called by one goroutine at a time per QP, in
	// posting order, never with a verbs lock held; it moves the bytes.
	Execute(w *SendWQE) Outcome
}

// Issuer is a QPDriver whose transport completes requests asynchronously
// (a network provider running a protocol engine). verbs hands it every
// request in posting order while the QP is in RTS; the transport copies
// what it needs (SendWQE.CopyTo into a SendWork it owns) and later reports
// each completion, in order, with QP.CompleteSend. Issue never blocks on
// the network.
type Issuer interface {
	QPDriver
	Issue(w *SendWQE)
}

// SendWQE is a posted send request as the send queue holds it: ID (wr_id),
// SSN (the send sequence number CompleteSend names it by), Op, Flags,
// Signaled, Imm, RemoteAddr, RKey, CompareAdd, Swap, Length, the
// validated SGE list with the MR region of each, and inline payload.
// Read it during Execute or Issue only: verbs reuses the slot once the
// request completes or is flushed (copy it with CopyTo).
type SendWQE = wq.SendWQE

// SendWork is a transport's own copy of a send request (SendWQE.CopyTo):
// Gather, Scatter and AtomicResult move the local data, Slices hands it
// to a system call, Release drops the MR references. Init it once with
// the QP's MaxSendSGE and MaxInlineData; then nothing allocates.
type SendWork = wq.SendWork

// Outcome is what an Executor reports for one attempt: Kind, and for Done
// the Status, ByteLen and, for errors, the Cause (it becomes QP.Err()).
type Outcome = wq.Outcome

// OutcomeKind says how a send attempt ended.
type OutcomeKind = wq.OutcomeKind

// Outcome kinds.
const (
	// Done: the request completed with Outcome.Status.
	Done = wq.Done
	// RNR: the responder had no receive posted; verbs retries after the
	// RNR timer in Outcome.RNRTimer, counted against rnr_retry.
	RNR = wq.RNR
	// Lost: no response arrived; verbs retries after the QP's timeout,
	// counted against retry_cnt.
	Lost = wq.Lost
)
