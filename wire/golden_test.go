package wire_test

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"strconv"
	"testing"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/wire"
)

// The golden tests decode every frame of the captures Linux rxe produced
// (../shared/testdata/rxe-pcaps, described in its README and logs/), check
// the header facts every rxe frame shares, the ICRC four ways, byte-exact
// re-encoding, and then what each capture is documented to contain.

var (
	clientV4 = netip.MustParseAddr("10.50.0.11")
	serverV4 = netip.MustParseAddr("10.50.0.10")
	clientV6 = netip.MustParseAddr("fe80::5054:ff:fe50:11")
	serverV6 = netip.MustParseAddr("fe80::5054:ff:fe50:10")
	hostV4   = netip.MustParseAddr("10.50.0.1")
)

const goldenFrames = 311 // README: 309 VM-side frames plus the 2-frame host probe

func TestGoldenCaptures(t *testing.T) {
	caps := loadCaptures(t)
	total := 0
	seen := map[string]bool{}
	for _, c := range caps {
		t.Run(c.name, func(t *testing.T) {
			fs := decodeAll(t, c)
			for i := range fs {
				checkGoldenFrame(t, c.name, i, c.frames[i], &fs[i])
			}
			checkIPIDsCountUp(t, c.name, fs)
			check, ok := goldenFiles[c.name]
			if !ok {
				t.Fatalf("no expectations for %s.pcap; add them to goldenFiles", c.name)
			}
			check(t, fs)
		})
		total += len(c.frames)
		seen[c.name] = true
	}
	if total != goldenFrames {
		t.Errorf("%d frames in all captures, want %d", total, goldenFrames)
	}
	for name := range goldenFiles {
		if !seen[name] {
			t.Errorf("%s.pcap missing", name)
		}
	}
}

// isHostProbe reports whether f is the one frame not built by rxe: the
// host-built GSI probe from 10.50.0.1.
func isHostProbe(f *wire.Frame) bool { return f.Encap.Src.Addr() == hostV4 }

// checkGoldenFrame checks what holds for every captured frame.
func checkGoldenFrame(t *testing.T, file string, i int, raw []byte, f *wire.Frame) {
	t.Helper()
	where := func() string { return file + " frame " + strconv.Itoa(i+1) }
	p := &f.Packet
	e := f.Encap

	// ICRC: the reference implementation, the package's ICRC over the IP
	// packet, the per-flow prefix, and the stored value all agree.
	ref, stored, ok := refICRCFrame(raw)
	if !ok || ref != stored || stored != p.ICRC {
		t.Errorf("%s: reference ICRC %#08x, stored %#08x, decoded %#08x", where(), ref, stored, p.ICRC)
	}
	if got, err := wire.ICRC(raw[14:]); err != nil || got != stored {
		t.Errorf("%s: wire.ICRC = %#08x, %v; want %#08x", where(), got, err, stored)
	}
	ibb := ibOf(t, raw)
	pre, err := wire.NewICRCPrefix(&e)
	if err != nil {
		t.Fatalf("%s: %v", where(), err)
	}
	if err := pre.Check(ibb); err != nil {
		t.Errorf("%s: ICRCPrefix.Check: %v", where(), err)
	}

	// A UDP socket sees addresses and ports but not the IPv4 ID. Assuming
	// ID 0 fails for rxe's non-zero IDs; CheckAnyID recovers the ID.
	sock := wire.Encap{Src: e.Src, Dst: e.Dst, DF: true}
	spre, err := wire.NewICRCPrefix(&sock)
	if err != nil {
		t.Fatal(err)
	}
	id, err := spre.CheckAnyID(ibb)
	if err != nil || id != e.ID {
		t.Errorf("%s: CheckAnyID = %#04x, %v; want ID %#04x", where(), id, err, e.ID)
	}
	if e.Src.Addr().Is4() && e.ID != 0 {
		if err := spre.Check(ibb); !errors.Is(err, wire.ErrBadICRC) {
			t.Errorf("%s: Check with ID 0 on a frame with ID %#04x: %v, want ErrBadICRC", where(), e.ID, err)
		}
	}

	// DecodeIB on the UDP payload gives the same packet.
	var q wire.Packet
	if err := wire.DecodeIB(ibb, &q); err != nil || !reflect.DeepEqual(&q, p) {
		t.Errorf("%s: DecodeIB = %v, %v; want %v", where(), &q, err, p)
	}

	// Re-encoding reproduces the bytes.
	g := *f
	out, err := wire.AppendFrame(nil, &g)
	if err != nil || !bytes.Equal(out, raw) {
		t.Errorf("%s: AppendFrame = %v\n got %x\nwant %x", where(), err, out, raw)
	}
	pp := *p
	out, err = wire.AppendIB(make([]byte, 0, len(ibb)), &pp, &pre)
	if err != nil || !bytes.Equal(out, ibb) {
		t.Errorf("%s: AppendIB = %v\n got %x\nwant %x", where(), err, out, ibb)
	}

	// Header facts of rxe frames (README "Header facts worth testing against").
	if e.Dst.Port() != wire.UDPPort {
		t.Errorf("%s: UDP destination port %d", where(), e.Dst.Port())
	}
	h := &p.BTH
	if h.PKey != 0xffff || h.MigReq || h.FECN || h.BECN || h.SE {
		t.Errorf("%s: BTH %+v: want P_Key 0xffff and MigReq, FECN, BECN, SE clear", where(), *h)
	}
	if isHostProbe(f) {
		return
	}
	if e.UDPChecksum != 0 || e.TTL != 64 || e.TOS != 0 {
		t.Errorf("%s: encap %+v: want UDP checksum 0, TTL/hop limit 64, TOS/traffic class 0", where(), e)
	}
	if e.Src.Addr().Is4() && (!e.DF || e.ID == 0) {
		t.Errorf("%s: IPv4 DF %v ID %#04x: want DF and a non-zero ID", where(), e.DF, e.ID)
	}
	if e.Src.Addr().Is6() && e.FlowLabel != 0 {
		t.Errorf("%s: flow label %#x, want 0", where(), e.FlowLabel)
	}
	// UDP source port: UD QPs and QP1 keep rxe's hash of their own QPN; RC
	// and UC QPs use the flow-label port of the QP pair (perftest and
	// rxe-vectors connect QPs with equal numbers), or of the flow label in
	// the CM REQ (rdma_cm; checked in rdmacm_rping_64B).
	var want uint16
	switch {
	case h.Opcode.Transport() == ib.UD:
		want = wire.QPSourcePort(p.DETH.SrcQP)
	case file == "rdmacm_rping_64B":
		return
	default:
		want = wire.SourcePort(wire.FlowLabel(h.DestQP, h.DestQP))
	}
	if got := e.Src.Port(); got != want {
		t.Errorf("%s: UDP source port %d, want %d", where(), got, want)
	}
}

// checkIPIDsCountUp checks that rxe's IPv4 IDs increase per (source,
// destination), modulo 2^16.
func checkIPIDsCountUp(t *testing.T, file string, fs []wire.Frame) {
	last := map[[2]netip.Addr]uint16{}
	for i := range fs {
		e := &fs[i].Encap
		if !e.Src.Addr().Is4() || isHostProbe(&fs[i]) {
			continue
		}
		k := [2]netip.Addr{e.Src.Addr(), e.Dst.Addr()}
		if prev, ok := last[k]; ok && int16(e.ID-prev) <= 0 {
			t.Errorf("%s frame %d: IPv4 ID %#04x after %#04x from %v", file, i+1, e.ID, prev, e.Src.Addr())
		}
		last[k] = e.ID
	}
}
