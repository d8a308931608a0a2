package ib_test

import (
	"strings"
	"testing"

	"github.com/ibex-rdma/ibex/ib"
)

// rxeOpcodes transcribes the header composition of rxe_opcode.c (and IBA
// Table 38) independently of opcode.go: the extension headers in wire order,
// then the kind flags.
var rxeOpcodes = map[ib.Opcode]string{
	0x00: "payload | req send recv first",
	0x01: "payload | req send middle",
	0x02: "payload | req send comp last",
	0x03: "ImmDt payload | req send comp last",
	0x04: "payload | req send recv comp first last",
	0x05: "ImmDt payload | req send recv comp first last",
	0x06: "RETH payload | req write first",
	0x07: "payload | req write middle",
	0x08: "payload | req write last",
	0x09: "ImmDt payload | req write recv comp last",
	0x0a: "RETH payload | req write first last",
	0x0b: "RETH ImmDt payload | req write recv comp first last",
	0x0c: "RETH | req read first last",
	0x0d: "AETH payload | resp read first",
	0x0e: "payload | resp read middle",
	0x0f: "AETH payload | resp read last",
	0x10: "AETH payload | resp read first last",
	0x11: "AETH | resp first last",
	0x12: "AETH AtomicAckETH | resp atomic first last",
	0x13: "AtomicETH | req atomic first last",
	0x14: "AtomicETH | req atomic first last",
	0x16: "IETH payload | req send comp last",
	0x17: "IETH payload | req send recv comp first last",
	0x64: "DETH payload | req send recv comp first last",
	0x65: "DETH ImmDt payload | req send recv comp first last",
	0x81: "CNPReserved | first last",
}

func describe(m ib.Mask) string {
	var hs, ks []string
	for _, b := range []struct {
		bit  ib.Mask
		name string
		hdr  bool
	}{
		{ib.MaskDETH, "DETH", true}, {ib.MaskRETH, "RETH", true}, {ib.MaskAtomicETH, "AtomicETH", true},
		{ib.MaskAETH, "AETH", true}, {ib.MaskAtomicAckETH, "AtomicAckETH", true}, {ib.MaskImmDt, "ImmDt", true},
		{ib.MaskIETH, "IETH", true}, {ib.MaskCNPReserved, "CNPReserved", true}, {ib.MaskPayload, "payload", true},
		{ib.MaskRequest, "req", false}, {ib.MaskResponse, "resp", false}, {ib.MaskSend, "send", false},
		{ib.MaskWrite, "write", false}, {ib.MaskRead, "read", false}, {ib.MaskAtomic, "atomic", false},
		{ib.MaskRecv, "recv", false}, {ib.MaskComplete, "comp", false},
		{ib.MaskFirst, "first", false}, {ib.MaskMiddle, "middle", false}, {ib.MaskLast, "last", false},
	} {
		if m&b.bit == 0 {
			continue
		}
		if b.hdr {
			hs = append(hs, b.name)
		} else {
			ks = append(ks, b.name)
		}
	}
	return strings.Join(hs, " ") + " | " + strings.Join(ks, " ")
}

func TestOpcodeTable(t *testing.T) {
	hdrLen := map[string]int{"DETH": 8, "RETH": 16, "AtomicETH": 28, "AETH": 4, "AtomicAckETH": 8, "ImmDt": 4, "IETH": 4, "CNPReserved": 16, "payload": 0}
	n := 0
	for op := range 256 {
		o := ib.Opcode(op)
		want, ok := rxeOpcodes[o]
		if uc := o &^ 0x20; o.Transport() == ib.UC && uc <= ib.RCWriteOnlyImm {
			want, ok = rxeOpcodes[uc] // UC: the SEND and WRITE opcodes of RC at 0x20 + op
		}
		if o.Valid() != ok {
			t.Errorf("%#02x: Valid = %v, want %v", op, o.Valid(), ok)
			continue
		}
		if !ok {
			if o.Mask() != 0 || o.HeaderLen() != 0 || o.String() != "opcode "+hex2(op) {
				t.Errorf("%#02x: unknown opcode has mask %v, header length %d, name %q", op, o.Mask(), o.HeaderLen(), o.String())
			}
			continue
		}
		n++
		if got := describe(o.Mask()); got != want {
			t.Errorf("%v (%#02x): %q, want %q", o, op, got, want)
		}
		l := 12
		for _, h := range strings.Fields(strings.Split(want, "|")[0]) {
			l += hdrLen[h]
		}
		if o.HeaderLen() != l {
			t.Errorf("%v: header length %d, want %d", o, o.HeaderLen(), l)
		}
		switch {
		case o == ib.CNP:
			if o.Has(ib.MaskRequest) || o.Has(ib.MaskResponse) {
				t.Errorf("%v: a CNP is neither request nor response", o)
			}
		case o.Has(ib.MaskRequest) == o.Has(ib.MaskResponse):
			t.Errorf("%v: must be exactly one of request and response", o)
		}
	}
	if n != 23+12+2+1 {
		t.Errorf("%d opcodes, want 38 (23 RC, 12 UC, 2 UD, CNP)", n)
	}
	for o, name := range map[ib.Opcode]string{
		ib.RCSendOnly: "RC SEND Only", ib.RCReadResponseFirst: "RC RDMA READ response First",
		ib.RCAck: "RC Acknowledge", ib.RCCompareSwap: "RC CmpSwap", ib.RCSendOnlyInvalidate: "RC SEND Only with Invalidate",
		ib.UCWriteLastImm: "UC RDMA WRITE Last with Immediate", ib.UDSendOnly: "UD SEND only",
	} {
		if o.String() != name {
			t.Errorf("%#02x: %q, want %q", uint8(o), o.String(), name)
		}
	}
	if ib.RC.String() != "RC" || ib.UD.String() != "UD" || ib.Opcode(0x80).Transport().String() != "CNP" {
		t.Error("transport names")
	}
}

func hex2(v int) string {
	const d = "0123456789abcdef"
	return "0x" + string(d[v>>4]) + string(d[v&15])
}
