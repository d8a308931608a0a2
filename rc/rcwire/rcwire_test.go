package rcwire_test

import (
	"bytes"
	"net/netip"
	"reflect"
	"testing"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/rc"
	"github.com/ibex-rdma/ibex/rc/rcwire"
	"github.com/ibex-rdma/ibex/wire"
)

// full sets every field of rc.Packet to a distinct non-zero value.
func full(op ib.Opcode) rc.Packet {
	return rc.Packet{Opcode: op, SE: true, AckReq: true, DestQPN: 0x0abcde, PSN: 0xfedcba,
		VA: 0x1122334455667788, RKey: 0x99aabbcc, DMALen: 0x1234, Syndrome: ib.SynNAKRemoteAccess, MSN: 0x654321,
		SwapAdd: 0x0102030405060708, Compare: 0x1112131415161718, Orig: 0x2122232425262728, Imm: 0xdeadbeef,
		Payload: []byte{1, 2, 3, 4, 5}}
}

// carried is p with only what op's headers carry (IBA Table 38, as
// ib.Opcode.Mask gives it), addressed to destQPN.
func carried(p rc.Packet, destQPN uint32) rc.Packet {
	m := p.Opcode.Mask()
	q := rc.Packet{Opcode: p.Opcode, SE: p.SE, AckReq: p.AckReq, DestQPN: destQPN, PSN: p.PSN}
	if m&(ib.MaskRETH|ib.MaskAtomicETH) != 0 {
		q.VA, q.RKey = p.VA, p.RKey
	}
	if m&ib.MaskRETH != 0 {
		q.DMALen = p.DMALen
	}
	if m&ib.MaskAtomicETH != 0 {
		q.SwapAdd, q.Compare = p.SwapAdd, p.Compare
	}
	if m&ib.MaskAETH != 0 {
		q.Syndrome, q.MSN = p.Syndrome, p.MSN
	}
	if m&ib.MaskAtomicAckETH != 0 {
		q.Orig = p.Orig
	}
	if m&ib.MaskImmDt != 0 {
		q.Imm = p.Imm
	}
	if m&ib.MaskPayload != 0 {
		q.Payload = p.Payload
	}
	return q
}

func rcOpcodes() []ib.Opcode {
	var ops []ib.Opcode
	for v := range 256 {
		if op := ib.Opcode(v); op.Valid() && op.Transport() == ib.RC {
			ops = append(ops, op)
		}
	}
	return ops
}

// TestRoundTrip maps every RC opcode with every field set to wire,
// encodes, decodes and maps back: what the opcode carries survives, the
// rest is zero. The BTH has the default P_Key and the given destination.
func TestRoundTrip(t *testing.T) {
	icrc, err := wire.NewICRCPrefix(&wire.Encap{Src: netip.MustParseAddrPort("10.0.0.1:4791"), Dst: netip.MustParseAddrPort("10.0.0.2:4791"), DF: true, TTL: 64})
	if err != nil {
		t.Fatal(err)
	}
	const dest = 0x123456
	ops := rcOpcodes()
	if len(ops) != 23 {
		t.Fatalf("%d RC opcodes, want 23", len(ops))
	}
	survived := map[string]bool{}
	for _, op := range ops {
		p := carried(full(op), full(op).DestQPN) // the engine sets only what the opcode carries
		want := carried(full(op), dest)

		var wp wire.Packet
		rcwire.ToWire(&p, dest, &wp)
		if wp.BTH.PKey != rcwire.DefaultPKey || wp.BTH.DestQP != dest || wp.BTH.MigReq || wp.BTH.FECN || wp.BTH.BECN {
			t.Errorf("%v: BTH %+v", op, wp.BTH)
		}
		// Direct: FromWire(ToWire(p)) with no bytes between.
		var got rc.Packet
		rcwire.FromWire(&wp, &got)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%v: direct round trip\n got %+v\nwant %+v", op, got, want)
		}
		// Through the bytes.
		b, err := wire.AppendIB(nil, &wp, &icrc)
		if err != nil {
			t.Fatalf("%v: %v", op, err)
		}
		var dp wire.Packet
		if err := wire.DecodeIB(b, &dp); err != nil {
			t.Fatalf("%v: %v", op, err)
		}
		rcwire.FromWire(&dp, &got)
		if len(got.Payload) == 0 {
			got.Payload = nil
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%v: round trip through %d bytes\n got %+v\nwant %+v", op, len(b), got, want)
		}

		// A packet with every field set maps to the same wire packet:
		// fields the opcode does not carry are not sent.
		all := full(op)
		if !op.Has(ib.MaskPayload) {
			all.Payload = nil
		}
		var wa wire.Packet
		rcwire.ToWire(&all, dest, &wa)
		if ba, err := wire.AppendIB(nil, &wa, &icrc); err != nil || !bytes.Equal(ba, b) || !reflect.DeepEqual(wa, wp) {
			t.Errorf("%v: fields the opcode does not carry changed the packet (%v)", op, err)
		}

		v := reflect.ValueOf(want)
		for i := range v.NumField() {
			if !v.Field(i).IsZero() {
				survived[v.Type().Field(i).Name] = true
			}
		}
	}
	// Every field of rc.Packet is carried by some opcode: a field added to
	// rc.Packet fails here until the mapping carries it.
	typ := reflect.TypeFor[rc.Packet]()
	fv := reflect.ValueOf(full(ib.RCAck))
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		if name == "CE" {
			continue // the IP header's ECN, which the provider reads and writes
		}
		if fv.Field(i).IsZero() {
			t.Errorf("full() leaves rc.Packet.%s zero", name)
		}
		if !survived[name] {
			t.Errorf("rc.Packet.%s is carried by no opcode", name)
		}
	}
}

func TestNoAllocs(t *testing.T) {
	p := full(ib.RCWriteFirst)
	var wp wire.Packet
	var q rc.Packet
	if n := testing.AllocsPerRun(100, func() {
		rcwire.ToWire(&p, 0x12, &wp)
		rcwire.FromWire(&wp, &q)
	}); n != 0 {
		t.Errorf("%v allocations per mapping, want 0", n)
	}
}

// TestCNP: an engine's CNP becomes the RoCEv2 CNP mlx5 sends — opcode
// 0x81, BECN, PSN 0, the peer's QP, 16 reserved bytes — and comes back as
// a CNP for that QP, whatever else the engine's packet held.
func TestCNP(t *testing.T) {
	icrc, err := wire.NewICRCPrefix(&wire.Encap{Src: netip.MustParseAddrPort("10.0.0.1:4791"), Dst: netip.MustParseAddrPort("10.0.0.2:4791"), DF: true, TTL: 64})
	if err != nil {
		t.Fatal(err)
	}
	p := full(ib.CNP)
	var wp wire.Packet
	rcwire.ToWire(&p, 0x123456, &wp)
	want := wire.BTH{Opcode: ib.CNP, PKey: rcwire.DefaultPKey, BECN: true, DestQP: 0x123456}
	if wp.BTH != want || wp.Payload != nil {
		t.Fatalf("BTH %+v payload %d, want %+v", wp.BTH, len(wp.Payload), want)
	}
	b, err := wire.AppendIB(nil, &wp, &icrc)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != ib.BTHLen+ib.CNPReservedLen+ib.ICRCLen {
		t.Fatalf("CNP of %d bytes", len(b))
	}
	var dp wire.Packet
	if err := wire.DecodeIB(b, &dp); err != nil {
		t.Fatal(err)
	}
	var got rc.Packet
	rcwire.FromWire(&dp, &got)
	if !reflect.DeepEqual(got, rc.Packet{Opcode: ib.CNP, DestQPN: 0x123456}) {
		t.Fatalf("decoded %+v", got)
	}
}
