package wire_test

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/wire"
)

// icrcOf encodes p in e and returns the frame and the ICRC.
func icrcOf(t *testing.T, e wire.Encap, p wire.Packet) ([]byte, uint32) {
	t.Helper()
	f := wire.Frame{Encap: e, Packet: p}
	b, err := wire.AppendFrame(nil, &f)
	if err != nil {
		t.Fatal(err)
	}
	return b, f.Packet.ICRC
}

func testPacket() wire.Packet {
	p := wire.Packet{BTH: wire.BTH{Opcode: ib.RCWriteOnlyImm, PKey: 0xffff, DestQP: 0x12, PSN: 0x123456, AckReq: true}}
	p.RETH = wire.RETH{VA: 0x1000, RKey: 0xabcd, DMALen: 1021}
	p.Imm = 0xdeadbeef
	p.Payload = make([]byte, 1021)
	for i := range p.Payload {
		p.Payload[i] = byte(i * 7)
	}
	return p
}

var (
	v4Encap = wire.Encap{Src: netip.MustParseAddrPort("10.0.0.1:49152"), Dst: netip.MustParseAddrPort("10.0.0.2:4791"), ID: 0x1234, DF: true, TTL: 64}
	v6Encap = wire.Encap{Src: netip.MustParseAddrPort("[fe80::1]:49152"), Dst: netip.MustParseAddrPort("[fe80::2]:4791"), TTL: 64}
)

// TestICRCCoverage changes one header field at a time: the fields IBA masks
// leave the ICRC alone, every other field changes it.
func TestICRCCoverage(t *testing.T) {
	for _, base := range []wire.Encap{v4Encap, v6Encap} {
		_, ref := icrcOf(t, base, testPacket())
		masked := map[string]func(*wire.Encap, *wire.Packet){
			"TOS":          func(e *wire.Encap, _ *wire.Packet) { e.TOS = 0xb8 },
			"TTL":          func(e *wire.Encap, _ *wire.Packet) { e.TTL = 1 },
			"flow label":   func(e *wire.Encap, _ *wire.Packet) { e.FlowLabel = 0xabcde },
			"UDP checksum": func(e *wire.Encap, _ *wire.Packet) { e.UDPChecksum = 0x1234 },
			"FECN":         func(_ *wire.Encap, p *wire.Packet) { p.BTH.FECN = true },
			"BECN":         func(_ *wire.Encap, p *wire.Packet) { p.BTH.BECN = true },
		}
		covered := map[string]func(*wire.Encap, *wire.Packet){
			"source address":      func(e *wire.Encap, _ *wire.Packet) { e.Src = flipAddr(e.Src) },
			"destination address": func(e *wire.Encap, _ *wire.Packet) { e.Dst = flipAddr(e.Dst) },
			"source port":         func(e *wire.Encap, _ *wire.Packet) { e.Src = netip.AddrPortFrom(e.Src.Addr(), e.Src.Port()+1) },
			"destination port":    func(e *wire.Encap, _ *wire.Packet) { e.Dst = netip.AddrPortFrom(e.Dst.Addr(), 4792) },
			"P_Key":               func(_ *wire.Encap, p *wire.Packet) { p.BTH.PKey = 0x7fff },
			"MigReq":              func(_ *wire.Encap, p *wire.Packet) { p.BTH.MigReq = true },
			"SE":                  func(_ *wire.Encap, p *wire.Packet) { p.BTH.SE = true },
			"AckReq":              func(_ *wire.Encap, p *wire.Packet) { p.BTH.AckReq = false },
			"DestQP":              func(_ *wire.Encap, p *wire.Packet) { p.BTH.DestQP ^= 1 },
			"PSN":                 func(_ *wire.Encap, p *wire.Packet) { p.BTH.PSN ^= 0x800000 },
			"RETH":                func(_ *wire.Encap, p *wire.Packet) { p.RETH.RKey ^= 1 << 31 },
			"ImmDt":               func(_ *wire.Encap, p *wire.Packet) { p.Imm ^= 1 },
			"payload":             func(_ *wire.Encap, p *wire.Packet) { p.Payload[500] ^= 0x10 },
			"payload length":      func(_ *wire.Encap, p *wire.Packet) { p.Payload = p.Payload[:1020] },
		}
		if base.Src.Addr().Is4() {
			covered["IPv4 ID"] = func(e *wire.Encap, _ *wire.Packet) { e.ID ^= 0x8000 }
			covered["IPv4 DF"] = func(e *wire.Encap, _ *wire.Packet) { e.DF = false }
		}
		for name, change := range masked {
			e, p := base, testPacket()
			change(&e, &p)
			if _, got := icrcOf(t, e, p); got != ref {
				t.Errorf("%v: changing the masked %s changed the ICRC", base.Src.Addr(), name)
			}
		}
		for name, change := range covered {
			e, p := base, testPacket()
			change(&e, &p)
			if _, got := icrcOf(t, e, p); got == ref {
				t.Errorf("%v: changing the covered %s left the ICRC as is", base.Src.Addr(), name)
			}
		}
	}
}

func flipAddr(a netip.AddrPort) netip.AddrPort {
	b := a.Addr().AsSlice()
	b[len(b)-1] ^= 0x80
	na, _ := netip.AddrFromSlice(b)
	return netip.AddrPortFrom(na, a.Port())
}

// TestICRCPrefixMatchesReference computes ICRCs with the table-driven
// prefix and with the plain reference for random flows, lengths and header
// fields the ICRC masks.
func TestICRCPrefixMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 2000 {
		e := randomEncap(rng, i%2 == 0)
		p := randomPacket(rng, ib.Opcode([]ib.Opcode{ib.RCSendOnly, ib.RCAck, ib.RCReadResponseMiddle}[i%3]), 4096)
		pre, err := wire.NewICRCPrefix(&e)
		if err != nil {
			t.Fatal(err)
		}
		ibb, err := wire.AppendIB(nil, &p, &pre)
		if err != nil {
			t.Fatal(err)
		}
		ref, stored, ok := refICRCIP(refIPPacket(e.Src, e.Dst, e.ID, e.DF, uint8(rng.Uint32()), uint8(rng.Uint32()), ibb))
		if !ok || ref != stored || ref != p.ICRC {
			t.Fatalf("%+v %v: reference %#08x, stored %#08x, prefix %#08x", e, &p, ref, stored, p.ICRC)
		}
		ip := refIPPacket(e.Src, e.Dst, e.ID, e.DF, 0, 64, ibb)
		if got, err := wire.ICRC(append(ip, 0, 0, 0)); err != nil || got != ref { // trailing bytes are ignored
			t.Fatalf("ICRC(ip) = %#08x, %v; want %#08x", got, err, ref)
		}
	}
}

// TestICRCSingleBitFlips flips every bit of an IB packet: Check rejects
// every flip except in BTH byte 4, which the ICRC masks; CheckAnyID, which
// leaves 16 check bits, may accept a rare few.
func TestICRCSingleBitFlips(t *testing.T) {
	for _, e := range []wire.Encap{v4Encap, v6Encap} {
		pre, err := wire.NewICRCPrefix(&e)
		if err != nil {
			t.Fatal(err)
		}
		p := testPacket()
		ibb, err := wire.AppendIB(nil, &p, &pre)
		if err != nil {
			t.Fatal(err)
		}
		missed := 0
		for i := range 8 * len(ibb) {
			ibb[i/8] ^= 1 << (i % 8)
			err := pre.Check(ibb)
			_, anyErr := pre.CheckAnyID(ibb)
			ibb[i/8] ^= 1 << (i % 8)
			if i/8 == 4 { // FECN, BECN, reserved
				if err != nil || anyErr != nil {
					t.Errorf("%v: flipping masked bit %d of BTH byte 4 rejected: %v, %v", e.Src.Addr(), i%8, err, anyErr)
				}
				continue
			}
			if !errors.Is(err, wire.ErrBadICRC) {
				t.Errorf("%v: bit %d flipped: Check = %v, want ErrBadICRC", e.Src.Addr(), i, err)
			}
			if anyErr == nil {
				missed++
			}
		}
		// Expected misses: 8·1077 bits × 2^-16 ≈ 0.13 for IPv4, 0 for IPv6.
		if missed > 2 || (e.Src.Addr().Is6() && missed > 0) {
			t.Errorf("%v: CheckAnyID accepted %d of %d single-bit flips", e.Src.Addr(), missed, 8*len(ibb))
		}
	}
}

// TestCheckAnyIDEveryID recovers each of the 65536 IPv4 IDs from a UDP
// payload, guessing ID 0.
func TestCheckAnyIDEveryID(t *testing.T) {
	p := wire.Packet{BTH: wire.BTH{Opcode: ib.RCAck, PKey: 0xffff, DestQP: 0x11, PSN: 7}, AETH: wire.AETH{Syndrome: ib.SynACK, MSN: 1}}
	guess := v4Encap
	guess.ID = 0
	gp, err := wire.NewICRCPrefix(&guess)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, 64)
	for id := range 1 << 16 {
		e := v4Encap
		e.ID = uint16(id)
		pre, err := wire.NewICRCPrefix(&e)
		if err != nil {
			t.Fatal(err)
		}
		ibb, err := wire.AppendIB(buf[:0], &p, &pre)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := gp.CheckAnyID(ibb); err != nil || got != uint16(id) {
			t.Fatalf("CheckAnyID = %#04x, %v; want %#04x", got, err, id)
		}
	}
}

func TestICRCErrors(t *testing.T) {
	ip := refIPPacket(v4Encap.Src, v4Encap.Dst, 1, true, 0, 64, make([]byte, 16))
	ip6 := refIPPacket(v6Encap.Src, v6Encap.Dst, 0, false, 0, 64, make([]byte, 16))
	mod := func(b []byte, f func([]byte)) []byte { c := append([]byte{}, b...); f(c); return c }
	for name, tc := range map[string]struct {
		ip   []byte
		want error
	}{
		"empty":         {nil, wire.ErrTruncated},
		"short ipv4":    {ip[:19], wire.ErrTruncated},
		"short ipv6":    {ip6[:39], wire.ErrTruncated},
		"ipv4 options":  {mod(ip, func(b []byte) { b[0] = 0x46 }), wire.ErrNotRoCE},
		"not udp":       {mod(ip, func(b []byte) { b[9] = 6 }), wire.ErrNotRoCE},
		"ipv6 ext hdr":  {mod(ip6, func(b []byte) { b[6] = 0 }), wire.ErrNotRoCE},
		"version 5":     {mod(ip, func(b []byte) { b[0] = 0x55 }), wire.ErrNotRoCE},
		"length > data": {mod(ip, func(b []byte) { b[3]++ }), wire.ErrTruncated},
		"length < hdr":  {mod(ip, func(b []byte) { b[2], b[3] = 0, 19 }), wire.ErrBadLength},
		"no ibb packet": {refIPPacket(v4Encap.Src, v4Encap.Dst, 1, true, 0, 64, make([]byte, 15)), wire.ErrTruncated},
	} {
		if _, err := wire.ICRC(tc.ip); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	pre, _ := wire.NewICRCPrefix(&v4Encap)
	if err := pre.Check(make([]byte, 15)); !errors.Is(err, wire.ErrTruncated) {
		t.Errorf("Check(15 bytes) = %v", err)
	}
	if _, err := pre.CheckAnyID(make([]byte, 15)); !errors.Is(err, wire.ErrTruncated) {
		t.Errorf("CheckAnyID(15 bytes) = %v", err)
	}
	if _, err := pre.CheckAnyID(make([]byte, wire.MaxIBLen+1)); !errors.Is(err, wire.ErrBadLength) {
		t.Errorf("CheckAnyID(too long) = %v", err)
	}
	for name, e := range map[string]wire.Encap{
		"no addresses":   {},
		"mixed versions": {Src: v4Encap.Src, Dst: v6Encap.Dst},
		"flow label":     {Src: v6Encap.Src, Dst: v6Encap.Dst, FlowLabel: 1 << 20},
	} {
		if _, err := wire.NewICRCPrefix(&e); !errors.Is(err, wire.ErrBadField) {
			t.Errorf("NewICRCPrefix(%s) = %v, want ErrBadField", name, err)
		}
	}
	// The message names the values, little-endian as stored.
	p := testPacket()
	ibb, _ := wire.AppendIB(nil, &p, &pre)
	binary.LittleEndian.PutUint32(ibb[len(ibb)-4:], 0x12345678)
	if err := pre.Check(ibb); err == nil || err.Error() != "icrc: got 0x12345678, want "+hex32(p.ICRC) {
		t.Errorf("Check: %v", err)
	}
}

func hex32(v uint32) string {
	const digits = "0123456789abcdef"
	b := []byte("0x00000000")
	for i := 9; i >= 2; i-- {
		b[i] = digits[v&0xf]
		v >>= 4
	}
	return string(b)
}

// TestCheckID: a packet built for one IPv4 ID passes CheckID with that ID
// and fails with any other, and with any single bit of its ICRC flipped.
func TestCheckID(t *testing.T) {
	src := netip.MustParseAddrPort("10.1.2.3:49152")
	dst := netip.MustParseAddrPort("10.1.2.4:4791")
	for _, id := range []uint16{0, 1, 0x1234, 0xffff} {
		e := wire.Encap{Src: src, Dst: dst, DF: true, TTL: 64, ID: id}
		pre, err := wire.NewICRCPrefix(&e)
		if err != nil {
			t.Fatal(err)
		}
		p := testPacket()
		b, err := wire.AppendIB(nil, &p, &pre)
		if err != nil {
			t.Fatal(err)
		}
		zero, err := wire.NewICRCPrefix(&wire.Encap{Src: src, Dst: dst, DF: true, TTL: 64})
		if err != nil {
			t.Fatal(err)
		}
		if err := zero.CheckID(b, id); err != nil {
			t.Errorf("id %#x: %v", id, err)
		}
		if err := zero.CheckID(b, id^0x0100); err == nil {
			t.Errorf("id %#x: passed with the wrong ID", id)
		}
		for bit := range 32 {
			b[len(b)-4+bit/8] ^= 1 << (bit % 8)
			if err := zero.CheckID(b, id); err == nil {
				t.Errorf("id %#x: ICRC bit %d flipped passed", id, bit)
			}
			b[len(b)-4+bit/8] ^= 1 << (bit % 8)
		}
	}
}
