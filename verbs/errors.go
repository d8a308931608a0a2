package verbs

import (
	"errors"
	"fmt"
)

// Sentinel errors. Control-path errors wrap one of these, so callers test
// with errors.Is and read the message for what was wrong where.
var (
	// ErrNoDevice: no provider offers a device by that name.
	ErrNoDevice = errors.New("no such device")
	// ErrInvalidArgument: an attribute, flag or size is out of range (EINVAL).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrInvalidState: the object's state does not allow the call, e.g. an
	// illegal QP transition or posting a send before RTS.
	ErrInvalidState = errors.New("invalid state")
	// ErrInvalidLKey: an SGE names an lkey that is not a live MR of the QP's PD.
	ErrInvalidLKey = errors.New("invalid lkey")
	// ErrQueueFull: the send or receive queue has no free slot (ENOMEM).
	ErrQueueFull = errors.New("queue full")
	// ErrLimit: a device limit (max_qp, max_cqe, max_sge, ...) would be exceeded.
	ErrLimit = errors.New("device limit exceeded")
	// ErrBusy: the object is still in use (a PD with MRs or QPs, a CQ with QPs).
	ErrBusy = errors.New("resource busy")
	// ErrClosed: the object was destroyed, deregistered or its context closed.
	ErrClosed = errors.New("object destroyed")
	// ErrCQOverflow: the CQ overflowed and completions were lost; the CQ is in
	// error and its QPs moved to ERR.
	ErrCQOverflow = errors.New("completion queue overflow")
	// ErrUnsupported: the provider does not implement the feature.
	ErrUnsupported = errors.New("not supported")
)

// PostError is returned by QP.PostSend and QP.PostRecv. The requests before
// Index were posted; the one at Index and those after it were not (the
// bad_wr of ibv_post_send).
type PostError struct {
	Op    string // "post send" or "post recv"
	QPN   uint32
	Index int
	Err   error
}

func (e *PostError) Error() string {
	return fmt.Sprintf("%s: qp %#x: wr[%d]: %v", e.Op, e.QPN, e.Index, e.Err)
}

func (e *PostError) Unwrap() error { return e.Err }

func errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), sentinel)
}
