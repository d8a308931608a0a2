package hwq

import "errors"

// Sentinels. Errors from this package wrap one of them and say what was
// wrong, e.g. "hwq: entry count 1000: not a power of two".
var (
	// ErrBadHeader: Init's Config or the header Attach found is invalid.
	ErrBadHeader = errors.New("bad queue header")
	// ErrCorrupt: the peer's index is impossible (moved backwards, or
	// more than a ring ahead). The peer is broken or hostile: detach it.
	ErrCorrupt = errors.New("queue corrupt")
	// ErrFull: the ring has no free entry; the consumer has not released
	// any. On a CQ this is an overflow (IBV_EVENT_CQ_ERR).
	ErrFull = errors.New("queue full")
	// ErrBadEntry: an entry does not decode (unknown opcode, too many
	// SGEs, inline data too long, ...). A WQE that fails is the QP's
	// error, not the whole client's.
	ErrBadEntry = errors.New("bad queue entry")
)
