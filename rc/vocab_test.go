package rc

import (
	"errors"
	"strings"
	"testing"

	"github.com/ibex-rdma/ibex/ib"
)

// The engine's mappings between ib's types, each checked on every value of
// its domain.

var allWR = []ib.WROpcode{ib.WRRDMAWrite, ib.WRRDMAWriteWithImm, ib.WRSend, ib.WRSendWithImm,
	ib.WRRDMARead, ib.WRAtomicCmpAndSwp, ib.WRAtomicFetchAndAdd}

func TestDataOpcode(t *testing.T) {
	type pos struct{ first, last bool }
	var (
		first  = pos{true, false}
		middle = pos{false, false}
		last   = pos{false, true}
		only   = pos{true, true}
	)
	want := map[ib.WROpcode]map[pos]ib.Opcode{
		ib.WRSend:             {first: ib.RCSendFirst, middle: ib.RCSendMiddle, last: ib.RCSendLast, only: ib.RCSendOnly},
		ib.WRSendWithImm:      {first: ib.RCSendFirst, middle: ib.RCSendMiddle, last: ib.RCSendLastImm, only: ib.RCSendOnlyImm},
		ib.WRRDMAWrite:        {first: ib.RCWriteFirst, middle: ib.RCWriteMiddle, last: ib.RCWriteLast, only: ib.RCWriteOnly},
		ib.WRRDMAWriteWithImm: {first: ib.RCWriteFirst, middle: ib.RCWriteMiddle, last: ib.RCWriteLastImm, only: ib.RCWriteOnlyImm},
	}
	seen := map[ib.Opcode]bool{}
	for _, op := range allWR {
		if op.IsRdAtomic() {
			continue // READ and atomics are single request packets: see TestAtomicOpcode
		}
		for _, p := range []pos{first, middle, last, only} {
			got := dataOpcode(op, p.first, p.last)
			if got != want[op][p] {
				t.Errorf("dataOpcode(%v, first %v, last %v) = %v, want %v", op, p.first, p.last, got, want[op][p])
			}
			seen[got] = true
			write := op == ib.WRRDMAWrite || op == ib.WRRDMAWriteWithImm
			if got.Has(ib.MaskWrite) != write || got.Has(ib.MaskSend) == write || got.Has(ib.MaskFirst) != p.first ||
				got.Has(ib.MaskLast) != p.last || got.Has(ib.MaskImmDt) != (op.HasImm() && p.last) ||
				got.Has(ib.MaskRETH) != (write && p.first) || !got.Has(ib.MaskRequest|ib.MaskPayload) {
				t.Errorf("dataOpcode(%v, first %v, last %v) = %v: headers %#x do not fit", op, p.first, p.last, got, got.Mask())
			}
		}
	}
	for op := ib.RCSendFirst; op <= ib.RCWriteOnlyImm; op++ {
		if !seen[op] {
			t.Errorf("%v is never sent", op)
		}
	}
}

func TestAtomicOpcode(t *testing.T) {
	for _, op := range allWR {
		if !op.IsAtomic() {
			continue
		}
		b := atomicOpcode(op)
		if !b.Has(ib.MaskAtomic|ib.MaskAtomicETH|ib.MaskRequest) || atomicOp(b) != op {
			t.Errorf("atomicOpcode(%v) = %v, atomicOp of it %v", op, b, atomicOp(b))
		}
	}
	if atomicOpcode(ib.WRAtomicCmpAndSwp) != ib.RCCompareSwap || atomicOpcode(ib.WRAtomicFetchAndAdd) != ib.RCFetchAdd {
		t.Error("atomic opcodes swapped")
	}
}

func TestNakStatus(t *testing.T) {
	for v := range 256 {
		s := ib.Syndrome(v)
		st, what := nakStatus(s)
		kind := nakKind(s)
		wantSt, wantKind := ib.WCRemOpErr, ErrRemoteOperation
		switch s {
		case ib.SynNAKInvalidRequest:
			wantSt, wantKind = ib.WCRemInvReqErr, ErrInvalidRequest
		case ib.SynNAKRemoteAccess:
			wantSt, wantKind = ib.WCRemAccessErr, ErrRemoteAccess
		}
		if st != wantSt || !errors.Is(kind, wantKind) {
			t.Errorf("syndrome %#02x: status %v, kind %v; want %v, %v", v, st, kind, wantSt, wantKind)
		}
		if what != kind.Error() {
			t.Errorf("syndrome %#02x: requester says %q, responder %q", v, what, kind)
		}
		if s&synReserved == 0 && s.IsNAK() && s.Value() >= 1 && s.Value() <= 3 && !strings.Contains(s.String(), what) {
			t.Errorf("syndrome %v: named %q", s, what)
		}
	}
}

func TestPlaceStatus(t *testing.T) {
	for v := range 256 {
		st := ib.WCStatus(v)
		want := ib.WCLocProtErr
		if st == ib.WCSuccess || st == ib.WCLocLenErr {
			want = st
		}
		if got := placeStatus(st); got != want {
			t.Errorf("placeStatus(%v) = %v, want %v", st, got, want)
		}
	}
}

// TestResponseOpcodes: the engine routes a packet to the requester by
// ib.MaskResponse, which holds for RC 0x0d-0x12 and nothing else.
func TestResponseOpcodes(t *testing.T) {
	for v := range 256 {
		op := ib.Opcode(v)
		if want := op >= ib.RCReadResponseFirst && op <= ib.RCAtomicAck; op.Has(ib.MaskResponse) != want {
			t.Errorf("%v: response %v, want %v", op, op.Has(ib.MaskResponse), want)
		}
	}
}

// TestTimerTables: the requester's timers come from ib; these are the
// values the engine used before it did (4.096 µs × 2^timeout; IBA Table 45).
func TestTimerTables(t *testing.T) {
	for to := range uint8(32) {
		want := int64(0)
		if to != 0 {
			want = 4096 << to
		}
		if got := ib.AckTimeout(to).Nanoseconds(); got != want {
			t.Errorf("timeout %d: %d ns, want %d", to, got, want)
		}
	}
	us := [32]int64{655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
		2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520}
	for c := range 256 {
		if got := ib.RNRTimeout(uint8(c)).Nanoseconds(); got != us[c&31]*1000 {
			t.Errorf("RNR timer %d: %d ns, want %d", c, got, us[c&31]*1000)
		}
	}
}
