package oob

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Every error from this package is an *Error wrapping one of
// these (or a context error), so callers test with errors.Is.
var (
	// ErrRefused: nothing listens at the address. perftest's client does not
	// retry either; a caller that wants to wait for the server retries on it.
	ErrRefused = errors.New("connection refused")
	// ErrPeerClosed: the peer closed the connection (perftest exits on any
	// error, so its own output says why).
	ErrPeerClosed = errors.New("peer closed the connection")
	// ErrProtocol: the peer sent bytes that are not the message perftest 4.5
	// sends at this step (garbage, or the two ends are at different steps).
	ErrProtocol = errors.New("protocol error")
	// ErrVersion: the peer speaks a perftest version this package cannot.
	ErrVersion = errors.New("unsupported peer version")
	// ErrMismatch: the two ends run different tests (only detectable when both
	// ends are ibex, or from what perftest itself exchanges).
	ErrMismatch = errors.New("test mismatch")
	// ErrState: a method was called out of the order perftest performs it, or
	// after an earlier error left the stream at an unknown position.
	ErrState = errors.New("out of order")
	// ErrInvalid: a local argument cannot be encoded the way perftest expects.
	ErrInvalid = errors.New("invalid argument")
)

// Error is returned by every Conn method: Step is the perftest function the
// exchange mirrors (exchange_versions, ctx_hand_shake, ...), Role the local
// side.
type Error struct {
	Step string // perftest function, e.g. "ctx_hand_shake (qp 1, round 2)"
	Role string // "client" or "server"
	Peer string // remote address
	Err  error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("oob: ")
	if e.Step != "" {
		b.WriteString(e.Step)
	}
	if e.Role != "" || e.Peer != "" {
		b.WriteString(" (")
		b.WriteString(e.Role)
		if e.Peer != "" {
			if e.Role != "" {
				b.WriteString(", ")
			}
			b.WriteString("peer ")
			b.WriteString(e.Peer)
		}
		b.WriteString(")")
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// MismatchError lists what differs between the two ends' tests. It wraps
// ErrMismatch.
type MismatchError struct {
	Diffs []string // "size: we 64, peer 4096"
}

func (e *MismatchError) Error() string {
	return "the two ends run different tests: " + strings.Join(e.Diffs, "; ")
}

func (e *MismatchError) Unwrap() error { return ErrMismatch }

func wrapf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), sentinel)
}
