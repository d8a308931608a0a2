package store

import (
	"errors"
	"fmt"
)

// Errors wrapped by this package's errors.
var (
	// ErrConfig: a config field is out of range; the error names it.
	ErrConfig = errors.New("bad config")
	// ErrProtocol: the peer sent something this protocol does not allow.
	ErrProtocol = errors.New("store protocol")
	// ErrRange: the server refused a range or could not read it; the
	// error is a *RangeError naming it.
	ErrRange = errors.New("range refused")
	// ErrClosed: the client was closed, or its connection to the server
	// ended (the error says why).
	ErrClosed = errors.New("client closed")
)

// RangeError is a range the server refused or could not read.
type RangeError struct {
	File  string // the file's name
	Off   int64  // the offset of the part that failed
	Len   int
	Cause string
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("store: %s offset %d length %d: %s", e.File, e.Off, e.Len, e.Cause)
}

// Unwrap makes a RangeError match ErrRange.
func (e *RangeError) Unwrap() error { return ErrRange }

func configErr(format string, args ...any) error {
	return fmt.Errorf("store: %w: "+format, append([]any{ErrConfig}, args...)...)
}
