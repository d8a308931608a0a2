package ib_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/ib"
)

// Every completion status has its libibverbs name (ibv_wc_status_str's
// enum suffixes, in enum order), and a number outside the enum says so.
func TestWCStatusNames(t *testing.T) {
	want := []string{"SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR", "LOC_PROT_ERR",
		"WR_FLUSH_ERR", "MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR", "REM_INV_REQ_ERR",
		"REM_ACCESS_ERR", "REM_OP_ERR", "RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR",
		"REM_INV_RD_REQ_ERR", "REM_ABORT_ERR", "INV_EECN_ERR", "INV_EEC_STATE_ERR", "FATAL_ERR",
		"RESP_TIMEOUT_ERR", "GENERAL_ERR"}
	for v := range 256 {
		s := ib.WCStatus(v)
		got := s.String()
		if v < len(want) {
			if got != want[v] {
				t.Errorf("WCStatus(%d) = %q, want %q", v, got, want[v])
			}
		} else if got != fmt.Sprintf("WCStatus(%d)", v) {
			t.Errorf("WCStatus(%d) = %q, want the number", v, got)
		}
	}
	if ib.WCGeneralErr != 21 || ib.WCRemAccessErr != 10 || ib.WCRetryExcErr != 12 {
		t.Fatal("status numbers differ from ibv_wc_status")
	}
}

// Every WR opcode: the libibverbs number, the predicates, and the name.
func TestWROpcodes(t *testing.T) {
	type row struct {
		name                  string
		atomic, rdAtomic, imm bool
	}
	want := map[ib.WROpcode]row{
		ib.WRRDMAWrite:         {"RDMA_WRITE", false, false, false},
		ib.WRRDMAWriteWithImm:  {"RDMA_WRITE_WITH_IMM", false, false, true},
		ib.WRSend:              {"SEND", false, false, false},
		ib.WRSendWithImm:       {"SEND_WITH_IMM", false, false, true},
		ib.WRRDMARead:          {"RDMA_READ", false, true, false},
		ib.WRAtomicCmpAndSwp:   {"ATOMIC_CMP_AND_SWP", true, true, false},
		ib.WRAtomicFetchAndAdd: {"ATOMIC_FETCH_AND_ADD", true, true, false},
	}
	for v := range 256 {
		o := ib.WROpcode(v)
		w, known := want[o]
		if o.Valid() != known {
			t.Errorf("WROpcode(%d).Valid() = %v", v, o.Valid())
		}
		if !known {
			if o.IsAtomic() || o.IsRdAtomic() || o.HasImm() || !strings.HasPrefix(o.String(), "WROpcode(") {
				t.Errorf("unknown WROpcode(%d): atomic %v rdAtomic %v imm %v name %q", v, o.IsAtomic(), o.IsRdAtomic(), o.HasImm(), o)
			}
			continue
		}
		if o.String() != w.name || o.IsAtomic() != w.atomic || o.IsRdAtomic() != w.rdAtomic || o.HasImm() != w.imm {
			t.Errorf("%d: name %q atomic %v rdAtomic %v imm %v, want %+v", v, o, o.IsAtomic(), o.IsRdAtomic(), o.HasImm(), w)
		}
	}
	// ibv_wr_opcode numbers.
	if ib.WRRDMAWrite != 0 || ib.WRSend != 2 || ib.WRRDMARead != 4 || ib.WRAtomicFetchAndAdd != 6 {
		t.Fatal("WR opcode numbers differ from ibv_wr_opcode")
	}
}

// Every combination of the four access bits prints its names in order.
func TestAccessString(t *testing.T) {
	names := []string{"LOCAL_WRITE", "REMOTE_WRITE", "REMOTE_READ", "REMOTE_ATOMIC"}
	for v := range 16 {
		var parts []string
		for i, n := range names {
			if v&(1<<i) != 0 {
				parts = append(parts, n)
			}
		}
		want := strings.Join(parts, "|")
		if v == 0 {
			want = "none"
		}
		if got := ib.Access(v).String(); got != want {
			t.Errorf("Access(%#x) = %q, want %q", v, got, want)
		}
	}
	if got := (ib.AccessRemoteRead | 0x100).String(); got != "REMOTE_READ|0x100" {
		t.Errorf("unknown bits print as %q", got)
	}
}

// The two timer tables: RNR codes (IBA Table 45) and the ACK timeout
// 4.096 µs × 2^t.
func TestTimers(t *testing.T) {
	if ib.RNRTimeout(0) != 655360*time.Microsecond || ib.RNRTimeout(1) != 10*time.Microsecond ||
		ib.RNRTimeout(12) != 640*time.Microsecond || ib.RNRTimeout(31) != 491520*time.Microsecond {
		t.Fatal("RNR timer table differs from IBA Table 45")
	}
	for c := range 32 {
		if ib.RNRTimeout(uint8(c)) != ib.RNRTimeout(uint8(c+32)) {
			t.Errorf("RNR code %d: the high bits count", c)
		}
		if c > 1 && ib.RNRTimeout(uint8(c)) <= ib.RNRTimeout(uint8(c-1)) {
			t.Errorf("RNR code %d does not wait longer than %d", c, c-1)
		}
	}
	if ib.AckTimeout(0) != 0 || ib.AckTimeout(1) != 8192*time.Nanosecond || ib.AckTimeout(14) != 4096*16384*time.Nanosecond {
		t.Fatal("ACK timeout is not 4.096 µs × 2^t")
	}
}
