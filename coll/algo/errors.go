package algo

import (
	"errors"
	"fmt"
)

// Sentinel errors. Generate's errors wrap ErrInvalid or ErrUnsupported;
// Verify's are *VerifyError values wrapping one of the others.
var (
	// ErrInvalid: an argument is out of range (ranks, root, pipeline, an
	// unknown collective or algorithm name).
	ErrInvalid = errors.New("invalid argument")
	// ErrUnsupported: the algorithm does not implement the collective.
	ErrUnsupported = errors.New("unsupported combination")

	// ErrMalformed: the schedule's shape is wrong: a program of the wrong
	// length, a peer or slot out of range, a transfer to oneself, a slot
	// written by two receives of one step where one of them overwrites.
	ErrMalformed = errors.New("malformed schedule")
	// ErrUnmatched: a send without its receive or a receive without its
	// send, or the two disagree (slots, length, reduce flag, step).
	ErrUnmatched = errors.New("unmatched transfer")
	// ErrDuplicate: a reduce would add a contribution the slot already
	// holds: some rank's data would be counted twice.
	ErrDuplicate = errors.New("contribution reduced twice")
	// ErrBadData: a send reads a slot that holds no data yet, a reduce
	// writes into one, or a reduce combines data of different slots (a
	// wrong slot index).
	ErrBadData = errors.New("wrong data")
	// ErrResult: after the last step a rank's output is not what the
	// collective defines.
	ErrResult = errors.New("wrong result")
)

// VerifyError is the error Verify returns: where the schedule goes wrong
// and how. Rank, Step and Slot are -1 where they do not apply (Step is -1
// for a wrong final result).
type VerifyError struct {
	Rank, Step, Slot int
	Err              error  // ErrMalformed, ErrUnmatched, ErrDuplicate, ErrBadData or ErrResult
	Detail           string // what happened and what was expected
	sched            string
}

func (e *VerifyError) Error() string {
	msg := "coll/algo: verify " + e.sched + ":"
	if e.Rank >= 0 {
		msg += fmt.Sprintf(" rank %d", e.Rank)
	}
	if e.Step >= 0 {
		msg += fmt.Sprintf(" step %d", e.Step)
	}
	if e.Slot >= 0 {
		msg += fmt.Sprintf(" slot %d", e.Slot)
	}
	return msg + ": " + e.Err.Error() + ": " + e.Detail
}

func (e *VerifyError) Unwrap() error { return e.Err }
