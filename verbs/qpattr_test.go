package verbs

import (
	"errors"
	"strings"
	"testing"
)

// TestTransitionTable checks every (from, to) pair: the legal RC moves of
// the IBA table are accepted with exactly their required attributes, and
// everything else is refused with a reason.
func TestTransitionTable(t *testing.T) {
	legal := map[[2]QPState]bool{}
	for k := range rcTransitions {
		legal[k] = true
	}
	for from := QPSReset; from <= QPSErr; from++ {
		for to := QPSReset; to <= QPSErr; to++ {
			tr, inTable := rcTransitions[[2]QPState{from, to}]
			err := checkTransition(from, to, AttrState|tr.req)
			switch {
			case to == QPSReset || to == QPSErr:
				if err != nil {
					t.Errorf("%v→%v: %v; moves to RESET and ERR are always legal", from, to, err)
				}
			case inTable:
				if err != nil {
					t.Errorf("%v→%v with its required attributes: %v", from, to, err)
				}
				if tr.req != 0 {
					missing := tr.req & -tr.req // drop the lowest required bit
					err := checkTransition(from, to, AttrState|tr.req&^missing)
					if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), missing.String()) {
						t.Errorf("%v→%v without %v: %v", from, to, missing, err)
					}
				}
				if extra := attrKnown &^ (tr.req | tr.opt | AttrState); extra != 0 {
					bit := extra & -extra
					err := checkTransition(from, to, AttrState|tr.req|bit)
					if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "not allowed") {
						t.Errorf("%v→%v with extra %v: %v", from, to, bit, err)
					}
				}
			default:
				if !errors.Is(err, ErrInvalidState) {
					t.Errorf("%v→%v accepted or wrong error: %v", from, to, err)
				}
			}
		}
	}
	if !legal[[2]QPState{QPSRTR, QPSRTS}] || legal[[2]QPState{QPSReset, QPSRTS}] {
		t.Fatal("table lost its shape")
	}
}

func TestAttrMaskString(t *testing.T) {
	if got := (AttrState | AttrPathMTU | AttrDestQPN).String(); got != "STATE|PATH_MTU|DEST_QPN" {
		t.Fatalf("mask string %q", got)
	}
	if got := AttrMask(1 << 30).String(); got != "0x40000000" {
		t.Fatalf("unknown bit string %q", got)
	}
}

func TestTimers(t *testing.T) {
	if AckTimeout(0) != 0 || AckTimeout(1).Nanoseconds() != 8192 || AckTimeout(14).Microseconds() != 67108 {
		t.Fatalf("AckTimeout: 0→%v 1→%v 14→%v", AckTimeout(0), AckTimeout(1), AckTimeout(14))
	}
	if RNRDelay(1).Microseconds() != 10 || RNRDelay(14).Microseconds() != 1280 || RNRDelay(0).Microseconds() != 655360 || RNRDelay(31).Microseconds() != 491520 {
		t.Fatal("RNR timer table differs from IBA table 45")
	}
}

func TestMTU(t *testing.T) {
	for m, n := range map[MTU]int{MTU256: 256, MTU1024: 1024, MTU4096: 4096, 0: 0, 6: 0} {
		if m.Bytes() != n {
			t.Errorf("MTU(%d).Bytes() = %d, want %d", m, m.Bytes(), n)
		}
	}
	if m, err := MTUFromBytes(2048); m != MTU2048 || err != nil {
		t.Fatalf("MTUFromBytes(2048) = %v, %v", m, err)
	}
	if _, err := MTUFromBytes(1500); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("MTUFromBytes(1500) = %v", err)
	}
}

func TestGID(t *testing.T) {
	g, err := ParseGID("::ffff:10.0.0.1")
	if err != nil || g.String() != "0000:0000:0000:0000:0000:ffff:0a00:0001" {
		t.Fatalf("ParseGID: %v %v", g, err)
	}
	back, err := ParseGID(g.String())
	if err != nil || back != g {
		t.Fatalf("GID round trip: %v %v", back, err)
	}
	if _, err := ParseGID("fe80::zz"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bad GID accepted: %v", err)
	}
}

// FuzzConnInfoText: parsing never panics, and whatever parses re-encodes to
// text that parses to the same value.
func FuzzConnInfoText(f *testing.F) {
	f.Add("qpn=0x11 psn=0x4d2a41 gid=::1 lid=0 mtu=4096 rkey=0x1 addr=0x2 len=3")
	f.Add("qpn=1 psn=1")
	f.Fuzz(func(t *testing.T, s string) {
		var c ConnInfo
		if c.UnmarshalText([]byte(s)) != nil {
			return
		}
		txt, _ := c.MarshalText()
		var d ConnInfo
		if err := d.UnmarshalText(txt); err != nil || d != c {
			t.Fatalf("%q parsed to %v, re-encoded %q, reparsed %v %v", s, c, txt, d, err)
		}
		bin, _ := c.MarshalBinary()
		var e ConnInfo
		if err := e.UnmarshalBinary(bin); err != nil || e != c {
			t.Fatalf("binary round trip of %v: %v %v", c, e, err)
		}
	})
}
