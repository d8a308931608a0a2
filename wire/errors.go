package wire

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error from this package is an *Error that wraps one
// of these, so a receiver can count drops by cause with errors.Is and log the
// message, which names the header and the offending value.
var (
	// ErrTruncated: the buffer ends inside a header.
	ErrTruncated = errors.New("truncated")
	// ErrBadOpcode: the BTH opcode is not one this package knows.
	ErrBadOpcode = errors.New("unknown opcode")
	// ErrBadVersion: the BTH transport version (TVer) is not 0; rxe drops these.
	ErrBadVersion = errors.New("unsupported version")
	// ErrBadLength: a length field or the packet length is inconsistent.
	ErrBadLength = errors.New("bad length")
	// ErrBadPad: the BTH pad count does not fit the bytes after the headers.
	ErrBadPad = errors.New("bad pad count")
	// ErrBadICRC: the invariant CRC does not match.
	ErrBadICRC = errors.New("ICRC mismatch")
	// ErrBadChecksum: the IPv4 header checksum does not match.
	ErrBadChecksum = errors.New("checksum mismatch")
	// ErrNotRoCE: the frame is not RoCEv2: another ethertype, IP protocol or
	// UDP port, IP options, or an IP fragment.
	ErrNotRoCE = errors.New("not RoCEv2")
	// ErrBadField: an encoder input is out of range (a 24-bit field above
	// 0xffffff, a payload on an opcode that carries none, mixed address
	// families).
	ErrBadField = errors.New("field out of range")
)

// Error is the error every function of this package returns. The message
// reads "<header>: <what>", for example "bth: opcode 0x1f unknown" or
// "icrc: got 0x12345678, want 0x9abcdef0".
//
// Errors are built only on the failure path; decoding a good packet
// allocates nothing.
type Error struct {
	Header string // where: "eth", "ipv4", "ipv6", "udp", "bth", "reth", "icrc", ...
	Err    error  // the sentinel: ErrTruncated, ErrBadOpcode, ...

	format string // fmt format taking nargs uint64 operands
	args   [3]uint64
	nargs  int
}

func (e *Error) Error() string {
	var what string
	switch e.nargs {
	case 0:
		what = e.format
	case 1:
		what = fmt.Sprintf(e.format, e.args[0])
	case 2:
		what = fmt.Sprintf(e.format, e.args[0], e.args[1])
	default:
		what = fmt.Sprintf(e.format, e.args[0], e.args[1], e.args[2])
	}
	return e.Header + ": " + what
}

// Unwrap returns the sentinel, for errors.Is.
func (e *Error) Unwrap() error { return e.Err }

// errf builds an *Error. format must take exactly len(args) operands, all
// printed from uint64 (%d, %#x, %#08x, ...).
func errf(header string, sentinel error, format string, args ...uint64) *Error {
	e := &Error{Header: header, Err: sentinel, format: format, nargs: len(args)}
	copy(e.args[:], args)
	return e
}

// truncated is the common "have N bytes, need M" error.
func truncated(header string, have, need int) *Error {
	return errf(header, ErrTruncated, "truncated: %d bytes, need %d", uint64(have), uint64(need))
}
