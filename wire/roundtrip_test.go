package wire_test

import (
	"bytes"
	"errors"
	"flag"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/wire"
)

var (
	seedFlag   = flag.Uint64("seed", 0, "seed for TestRoundTrip (0 picks one from the clock); a failure prints it")
	roundsFlag = flag.Int("rounds", 200, "TestRoundTrip: random packets per opcode")
)

// TestRoundTrip encodes random packets of every opcode in random IPv4 and
// IPv6 encapsulations, decodes them back at both layers, and checks the
// fields, the ICRC against the reference implementation, the UDP-socket
// ICRC checks and the recovery of the IPv4 ID. Replay a failure with
// go test -run TestRoundTrip -seed=N ./wire.
func TestRoundTrip(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d: replay with go test -run TestRoundTrip -seed=%d ./wire", seed, seed)
		}
	})
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	for op := range 256 {
		o := ib.Opcode(op)
		if !o.Valid() {
			continue
		}
		t.Run(o.String(), func(t *testing.T) {
			for range *roundsFlag {
				roundTrip(t, rng, o)
				if t.Failed() {
					return
				}
			}
		})
	}
}

func roundTrip(t *testing.T, rng *rand.Rand, op ib.Opcode) {
	t.Helper()
	f := wire.Frame{Encap: randomEncap(rng, rng.IntN(2) == 0), Packet: randomPacket(rng, op, 2100)}
	fillRandom(rng, f.EthDst[:])
	fillRandom(rng, f.EthSrc[:])
	f.Tagged, f.VLAN = rng.IntN(4) == 0, uint16(rng.Uint32())
	want := f.Packet
	want.BTH.PadCnt = uint8(-len(want.Payload) & 3)

	// Frame layer, appended after some bytes already in the buffer.
	prefix := make([]byte, rng.IntN(8))
	fillRandom(rng, prefix)
	out, err := wire.AppendFrame(prefix, &f)
	if err != nil {
		t.Fatalf("AppendFrame(%v): %v", &f.Packet, err)
	}
	if !bytes.Equal(out[:len(prefix)], prefix) {
		t.Fatalf("AppendFrame overwrote the buffer's prefix")
	}
	raw := out[len(prefix):]
	want.ICRC = f.Packet.ICRC
	if f.Packet.BTH.PadCnt != want.BTH.PadCnt {
		t.Fatalf("AppendFrame set pad count %d, want %d", f.Packet.BTH.PadCnt, want.BTH.PadCnt)
	}
	ref, stored, ok := refICRCFrame(raw)
	if !ok || ref != stored || stored != want.ICRC {
		t.Fatalf("%v: ICRC reference %#08x, stored %#08x, returned %#08x", &want, ref, stored, want.ICRC)
	}
	var g wire.Frame
	if err := wire.DecodeFrame(raw, &g); err != nil {
		t.Fatalf("DecodeFrame(%v): %v\n%x", &want, err, raw)
	}
	wantEncap := f.Encap
	wantEncap.Src = netip.AddrPortFrom(f.Encap.Src.Addr().Unmap(), f.Encap.Src.Port())
	wantEncap.Dst = netip.AddrPortFrom(f.Encap.Dst.Addr().Unmap(), f.Encap.Dst.Port())
	if g.Encap != wantEncap || g.EthDst != f.EthDst || g.EthSrc != f.EthSrc || g.Tagged != f.Tagged || (f.Tagged && g.VLAN != f.VLAN) {
		t.Fatalf("frame round trip:\n got %+v\nwant %+v", g, f)
	}
	if !reflect.DeepEqual(normal(g.Packet), normal(want)) {
		t.Fatalf("frame round trip:\n got %v\nwant %v", &g.Packet, &want)
	}

	// IB layer: AppendIB with the flow's prefix writes the same bytes as the
	// frame's UDP payload, and DecodeIB reads them back.
	pre, err := wire.NewICRCPrefix(&f.Encap)
	if err != nil {
		t.Fatal(err)
	}
	p := f.Packet
	ib, err := wire.AppendIB(nil, &p, &pre)
	if err != nil {
		t.Fatal(err)
	}
	if wantIB := ibOf(t, raw); !bytes.Equal(ib, wantIB) {
		t.Fatalf("AppendIB(%v):\n got %x\nwant %x", &p, ib, wantIB)
	}
	var q wire.Packet
	if err := wire.DecodeIB(ib, &q); err != nil || !reflect.DeepEqual(normal(q), normal(want)) {
		t.Fatalf("DecodeIB: %v\n got %v\nwant %v", err, &q, &want)
	}
	if err := pre.Check(ib); err != nil {
		t.Fatalf("Check: %v", err)
	}

	// A UDP-socket receiver that does not know the IPv4 ID.
	guess := f.Encap
	guess.ID = uint16(rng.Uint32())
	gp, err := wire.NewICRCPrefix(&guess)
	if err != nil {
		t.Fatal(err)
	}
	id, err := gp.CheckAnyID(ib)
	switch {
	case f.Encap.Src.Addr().Unmap().Is6() && err != nil:
		t.Fatalf("CheckAnyID over IPv6: %v", err)
	case f.Encap.Src.Addr().Unmap().Is4() && (err != nil || id != f.Encap.ID):
		t.Fatalf("CheckAnyID = %#04x, %v; want ID %#04x", id, err, f.Encap.ID)
	}
	if guess.ID != f.Encap.ID && f.Encap.Src.Addr().Unmap().Is4() {
		if err := gp.Check(ib); !errors.Is(err, wire.ErrBadICRC) {
			t.Fatalf("Check with the wrong ID: %v, want ErrBadICRC", err)
		}
	}
}

// normal returns p with a nil Payload when it is empty, for DeepEqual.
func normal(p wire.Packet) wire.Packet {
	if len(p.Payload) == 0 {
		p.Payload = nil
	}
	return p
}

func fillRandom(rng *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

// randomEncap returns random IP and UDP fields; IPv4 addresses are
// sometimes given in their IPv4-mapped IPv6 form, as RoCE GIDs are.
func randomEncap(rng *rand.Rand, v6 bool) wire.Encap {
	var e wire.Encap
	if v6 {
		var a, b [16]byte
		fillRandom(rng, a[:])
		fillRandom(rng, b[:])
		a[0], b[0] = 0xfe, 0x20 // never IPv4-mapped
		e.Src = netip.AddrPortFrom(netip.AddrFrom16(a), uint16(rng.Uint32()))
		e.Dst = netip.AddrPortFrom(netip.AddrFrom16(b), wire.UDPPort)
		e.FlowLabel = rng.Uint32() & 0xfffff
	} else {
		var a, b [4]byte
		fillRandom(rng, a[:])
		fillRandom(rng, b[:])
		sa, da := netip.AddrFrom4(a), netip.AddrFrom4(b)
		if rng.IntN(4) == 0 {
			sa, da = netip.AddrFrom16(sa.As16()), netip.AddrFrom16(da.As16())
		}
		e.Src = netip.AddrPortFrom(sa, uint16(rng.Uint32()))
		e.Dst = netip.AddrPortFrom(da, wire.UDPPort)
		e.ID = uint16(rng.Uint32())
		e.DF = rng.IntN(4) != 0
	}
	e.TOS, e.TTL = uint8(rng.Uint32()), uint8(rng.Uint32())
	if rng.IntN(2) == 0 {
		e.UDPChecksum = uint16(rng.Uint32())
	}
	return e
}

// randomPacket returns a packet of opcode op with random fields in range
// and, if op carries one, a random payload of up to maxPayload bytes.
func randomPacket(rng *rand.Rand, op ib.Opcode, maxPayload int) wire.Packet {
	u24 := func() uint32 { return rng.Uint32() & ib.PSNMask }
	bit := func() bool { return rng.IntN(2) == 0 }
	p := wire.Packet{BTH: wire.BTH{
		Opcode: op, SE: bit(), MigReq: bit(), PKey: uint16(rng.Uint32()), FECN: bit(), BECN: bit(),
		DestQP: u24(), AckReq: bit(), PSN: u24(),
	}}
	m := op.Mask()
	if m&ib.MaskDETH != 0 {
		p.DETH = wire.DETH{QKey: rng.Uint32(), SrcQP: u24()}
	}
	if m&ib.MaskRETH != 0 {
		p.RETH = wire.RETH{VA: rng.Uint64(), RKey: rng.Uint32(), DMALen: rng.Uint32()}
	}
	if m&ib.MaskAtomicETH != 0 {
		p.AtomicETH = wire.AtomicETH{VA: rng.Uint64(), RKey: rng.Uint32(), SwapAdd: rng.Uint64(), Compare: rng.Uint64()}
	}
	if m&ib.MaskAETH != 0 {
		p.AETH = wire.AETH{Syndrome: ib.Syndrome(rng.Uint32()), MSN: u24()}
	}
	if m&ib.MaskAtomicAckETH != 0 {
		p.AtomicAck = rng.Uint64()
	}
	if m&ib.MaskImmDt != 0 {
		p.Imm = rng.Uint32()
	}
	if m&ib.MaskIETH != 0 {
		p.InvalidateRKey = rng.Uint32()
	}
	if m&ib.MaskPayload != 0 {
		n := rng.IntN(9) // small sizes exercise every pad count
		if bit() {
			n = rng.IntN(maxPayload + 1)
		}
		p.Payload = make([]byte, n)
		fillRandom(rng, p.Payload)
	}
	return p
}
