package ib

import (
	"fmt"
	"time"
)

// Syndrome is the AETH syndrome byte: bit 7 reserved, bits 6:5 the kind
// (00 ACK, 01 RNR NAK, 10 reserved, 11 NAK), bits 4:0 a value whose meaning
// depends on the kind (credit count, RNR timer, NAK code).
type Syndrome uint8

// Syndromes ibex sends. rxe always ACKs with credit code 31 ("invalid":
// no end-to-end credits); it throttles with RNR NAKs instead.
const (
	SynACK               Syndrome = 0x1f // ACK, credit count invalid
	SynNAKPSNSeq         Syndrome = 0x60 // NAK: PSN sequence error; the BTH PSN is the expected one
	SynNAKInvalidRequest Syndrome = 0x61 // NAK: invalid request
	SynNAKRemoteAccess   Syndrome = 0x62 // NAK: remote access error
	SynNAKRemoteOp       Syndrome = 0x63 // NAK: remote operational error
	SynNAKInvalidRD      Syndrome = 0x64 // NAK: invalid RD request

	synKindMask  = 0x60
	synValueMask = 0x1f
	synACK       = 0x00
	synRNR       = 0x20
	synNAK       = 0x60
)

// SynRNR returns the RNR NAK syndrome carrying the 5-bit timer code (see
// RNRTimeout).
func SynRNR(timer uint8) Syndrome { return synRNR | Syndrome(timer&synValueMask) }

// IsACK reports whether s is a positive acknowledgement.
func (s Syndrome) IsACK() bool { return s&synKindMask == synACK }

// IsRNR reports whether s is a receiver-not-ready NAK.
func (s Syndrome) IsRNR() bool { return s&synKindMask == synRNR }

// IsNAK reports whether s is a NAK (not an RNR NAK).
func (s Syndrome) IsNAK() bool { return s&synKindMask == synNAK }

// Value returns bits 4:0: the credit code of an ACK, the timer code of an
// RNR NAK, the error code of a NAK.
func (s Syndrome) Value() uint8 { return uint8(s & synValueMask) }

var nakNames = [...]string{"PSN sequence error", "invalid request", "remote access error", "remote operational error", "invalid RD request"}

// String describes s the way tshark does, e.g. "ACK (credits invalid)",
// "RNR NAK (timer 27: 122.88ms)", "NAK (remote access error)".
func (s Syndrome) String() string {
	v := s.Value()
	switch {
	case s&0x80 != 0:
		return fmt.Sprintf("syndrome %#02x (reserved bit set)", uint8(s))
	case s.IsACK() && v == synValueMask:
		return "ACK (credits invalid)"
	case s.IsACK():
		return fmt.Sprintf("ACK (credit code %d)", v)
	case s.IsRNR():
		return fmt.Sprintf("RNR NAK (timer %d: %v)", v, RNRTimeout(v))
	case s.IsNAK() && int(v) < len(nakNames):
		return "NAK (" + nakNames[v] + ")"
	case s.IsNAK():
		return fmt.Sprintf("NAK (reserved code %d)", v)
	}
	return fmt.Sprintf("syndrome %#02x (reserved kind)", uint8(s))
}

// rnrMicros is the RNR NAK timer table (IBA Table 45; rxe rnrnak_usec).
var rnrMicros = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880,
	163840, 245760, 327680, 491520,
}

// RNRTimeout returns how long a requester waits after an RNR NAK carrying
// timer code c (only the low 5 bits count): code 0 is 655.36 ms, codes 1–31
// run from 10 µs to 491.52 ms.
func RNRTimeout(c uint8) time.Duration {
	return time.Duration(rnrMicros[c&synValueMask]) * time.Microsecond
}

// AckTimeout returns the local ACK timeout a QP timeout attribute asks for:
// 4.096 µs × 2^timeout (IBA 9.7.6.1.3); 0 means wait forever and returns 0.
func AckTimeout(timeout uint8) time.Duration {
	if timeout == 0 {
		return 0
	}
	return time.Duration(4096<<min(timeout, 31)) * time.Nanosecond
}
