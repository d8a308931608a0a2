package udp

// The receive path against Linux Soft-RoCE (rdma_rxe): every frame of the
// rxe captures in shared/testdata/rxe-pcaps (README.md there) is handed to
// (*device).receive as the progress loop hands it a datagram from
// recvmmsg: the UDP payload, and the source as a *net.UDPAddr. The device
// has no progress loop; its address is the capture's destination, which
// the ICRC covers.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/internal/pcap"
	"github.com/ibex-rdma/ibex/internal/shared"
	"github.com/ibex-rdma/ibex/rc"
	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/wire"
)

// rxeDir finds shared/testdata/rxe-pcaps: $IBEX_SHARED, or a "shared"
// folder in a parent of the working directory. Without it the tests fail
// on CI (CI=true), where the folder is guaranteed, and skip elsewhere.
func rxeDir(t *testing.T) string {
	t.Helper()
	dir, why := shared.Captures()
	if dir == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	return dir
}

// rxeFrame is one captured frame, reduced to what a UDP socket sees.
type rxeFrame struct {
	file string
	no   int // 1-based frame number
	src  netip.AddrPort
	dst  netip.AddrPort
	id   uint16 // IPv4 identification (0 for IPv6)
	op   ib.Opcode
	ib   []byte // the UDP payload
}

func (f *rxeFrame) String() string { return fmt.Sprintf("%s frame %d (%v)", f.file, f.no, f.op) }

// readRxePcap returns the frames of an Ethernet capture.
func readRxePcap(path string) ([][]byte, error) {
	f, err := pcap.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if f.LinkType != pcap.LinkEthernet {
		return nil, fmt.Errorf("%s: link type %d, want Ethernet (1)", path, f.LinkType)
	}
	out := make([][]byte, len(f.Records))
	for i, r := range f.Records {
		out[i] = r.Data
	}
	return out, nil
}

// rxeFrames reads a capture ("rc_send_64B"), or every capture for "".
func rxeFrames(t *testing.T, name string) []*rxeFrame {
	t.Helper()
	dir := rxeDir(t)
	var files []string
	if name != "" {
		files = []string{filepath.Join(dir, name+".pcap")}
	} else {
		files, _ = filepath.Glob(filepath.Join(dir, "*.pcap"))
		sort.Strings(files)
		if len(files) == 0 {
			t.Fatalf("no captures in %s", dir)
		}
	}
	var out []*rxeFrame
	for _, path := range files {
		raw, err := readRxePcap(path)
		if err != nil {
			t.Fatal(err)
		}
		file := strings.TrimSuffix(filepath.Base(path), ".pcap")
		for i, b := range raw {
			var f wire.Frame
			if err := wire.DecodeFrame(b, &f); err != nil {
				t.Fatalf("%s frame %d: %v", file, i+1, err)
			}
			off := 14
			if f.Tagged {
				off += 4
			}
			if f.Encap.Src.Addr().Is4() {
				off += int(b[off]&0x0f) * 4
			} else {
				off += 40
			}
			udpLen := int(binary.BigEndian.Uint16(b[off+4:]))
			out = append(out, &rxeFrame{file: file, no: i + 1, src: f.Encap.Src, dst: f.Encap.Dst, id: f.Encap.ID,
				op: f.Packet.BTH.Opcode, ib: b[off+8 : off+udpLen]})
		}
	}
	return out
}

// testDevice is a device without a socket or progress loop: receive and
// the command handlers run in the test's goroutine, as they would in the
// loop's. The test owns the device for good (own is held), so posts queue
// their commands for runCmds instead of running them.
func testDevice(addr netip.AddrPort) *device {
	d := &device{name: "rxe-interop", addr: addr, start: time.Now(), ctxs: map[*opened]struct{}{},
		done: make(chan struct{}), qps: map[uint32]*qpDriver{}, icrc: map[netip.AddrPort]*wire.ICRCPrefix{}}
	d.own.Lock()
	return d
}

// srcForm is a form in which the socket layer may report a datagram's
// source address.
type srcForm struct {
	name string
	addr func(netip.AddrPort) netip.AddrPort
}

var srcForms = []srcForm{
	{"as captured", func(a netip.AddrPort) netip.AddrPort { return a }},
	// An AF_INET6 (dual-stack) socket reports IPv4 sources IPv4-mapped.
	{"IPv4-mapped", func(a netip.AddrPort) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr().As16()), a.Port())
	}},
	// A link-local IPv6 source comes with the zone of the receiving
	// interface, which the capture does not record.
	{"zoned", func(a netip.AddrPort) netip.AddrPort {
		if a.Addr().Is6() && a.Addr().IsLinkLocalUnicast() {
			return netip.AddrPortFrom(a.Addr().WithZone("eth0"), a.Port())
		}
		return a
	}},
}

// localForms are the device addresses a capture's destination may take:
// as captured, and (link-local IPv6) with the zone a bind needs.
func localForms(a netip.AddrPort) []netip.AddrPort {
	out := []netip.AddrPort{a}
	if a.Addr().Is6() && a.Addr().IsLinkLocalUnicast() {
		out = append(out, netip.AddrPortFrom(a.Addr().WithZone("eth0"), a.Port()))
	}
	return out
}

// deliver hands the datagram b from src to d.receive as the progress loop
// does, in a buffer of its own (receive may keep nothing of it), as a
// datagram that came with IPv4 ID id (-1: unknown, as from a socket).
func deliver(d *device, b []byte, src netip.AddrPort, id int32) {
	buf := make([]byte, max(maxDgram, len(b)))
	n := copy(buf, b)
	var pkt rc.Packet
	var wp wire.Packet
	d.receive(d.now(), buf[:n], src, id, false, &pkt, &wp)
}

// rcvCounters are the counters receive itself keeps (the packet and byte
// counts may be kept by its caller).
type rcvCounters struct{ rcvErrors, icrcErrors, unknownQP uint64 }

func rcvCtrs(d *device) rcvCounters {
	c := d.counters()
	return rcvCounters{c.PortRcvErrors, c.ICRCErrors, c.UnknownQP}
}

// TestRxeReceive feeds every frame of every rxe capture to a device whose
// address is the frame's destination, with the source in each form the
// socket layer may report it. Every frame must pass (*device).receive's
// checks — length, opcode, pad count, and the ICRC with rxe's non-zero,
// counting IPv4 IDs and zero UDP checksums (CheckAnyID) — and reach the
// QP demux, where, no QP being registered, it is counted as UnknownQP: no
// frame may count as a receive or ICRC error. UC and UD frames (perftest
// -c UC/UD, rdma_cm and GSI MADs) are counted as UnknownQP before the ICRC
// check, ibex having no UC or UD QPs. For each RC frame, the IPv4 ID that
// CheckAnyID solves for must be the ID rxe sent.
func TestRxeReceive(t *testing.T) {
	frames := rxeFrames(t, "")
	rcFrames := 0
	for _, f := range frames {
		if f.op.Transport() == ib.RC {
			rcFrames++
		}
	}
	if rcFrames == 0 {
		t.Fatal("no RC frames")
	}
	for _, sf := range srcForms {
		t.Run(sf.name, func(t *testing.T) {
			devs := map[netip.AddrPort]*device{}
			delivered := 0
			for _, f := range frames {
				for _, local := range localForms(f.dst) {
					d := devs[local]
					if d == nil {
						d = testDevice(local)
						devs[local] = d
					}
					before := rcvCtrs(d)
					// As a socket delivers it (the ICRC checked for any
					// IPv4 ID), and as AF_XDP does (for the ID in its
					// header: all 32 bits).
					deliver(d, f.ib, sf.addr(f.src), -1)
					deliver(d, f.ib, sf.addr(f.src), int32(f.id))
					// With another ID in its header the ICRC no longer
					// matches (a socket could not tell).
					deliver(d, f.ib, sf.addr(f.src), int32(f.id^0x8000))
					got := rcvCtrs(d)
					want := before
					switch {
					case f.op.Transport() != ib.RC:
						want.unknownQP += 3 // dropped before the ICRC check
					case !f.src.Addr().Unmap().Is4():
						want.unknownQP += 3 // IPv6 has no ID
					default:
						want.unknownQP += 2
						want.icrcErrors++
						want.rcvErrors++
					}
					if got != want {
						t.Errorf("%v from %v to %v: counters went from %+v to %+v; want %+v", f, sf.addr(f.src), local, before, got, want)
					}
					delivered++
				}
				if f.op.Transport() != ib.RC {
					continue
				}
				d := devs[f.dst]
				src := sf.addr(f.src)
				pre := d.prefix(src, d.addr)
				if pre == nil {
					t.Fatalf("%v: no ICRC prefix for %v -> %v", f, src, d.addr)
				}
				if id, err := pre.CheckAnyID(f.ib); err != nil || id != f.id {
					t.Errorf("%v: CheckAnyID = %#04x, %v; rxe sent IPv4 ID %#04x", f, id, err, f.id)
				}
			}
			t.Logf("%d deliveries of %d frames (%d RC) from %d captures", delivered, len(frames), rcFrames, countFiles(frames))
		})
	}
}

func countFiles(fs []*rxeFrame) int {
	m := map[string]bool{}
	for _, f := range fs {
		m[f.file] = true
	}
	return len(m)
}

// TestRxeReceiveCorrupt corrupts one byte of every RC frame — in turn a
// BTH PSN byte, a BTH DestQP byte, the last byte before the ICRC (payload,
// pad or extension header) and an ICRC byte — and requires that the
// device count it as an ICRC error (and a receive error) and drop it
// before the QP demux. Flipping these bytes leaves the packet decodable,
// so only the ICRC can catch it.
func TestRxeReceiveCorrupt(t *testing.T) {
	frames := rxeFrames(t, "")
	n := 0
	for _, f := range frames {
		if f.op.Transport() != ib.RC {
			continue
		}
		d := testDevice(f.dst)
		for _, pos := range []struct {
			name string
			off  int
		}{{"BTH PSN", 11}, {"BTH DestQP", 7}, {"last byte before the ICRC", len(f.ib) - 5}, {"ICRC", len(f.ib) - 4}} {
			b := bytes.Clone(f.ib)
			b[pos.off] ^= 0xff
			before := rcvCtrs(d)
			deliver(d, b, f.src, -1)
			got := rcvCtrs(d)
			want := rcvCounters{before.rcvErrors + 1, before.icrcErrors + 1, before.unknownQP}
			if got != want {
				t.Errorf("%v with the %s (offset %d) corrupted: counters went from %+v to %+v; want an ICRC error",
					f, pos.name, pos.off, before, got)
			}
			n++
		}
	}
	t.Logf("%d corrupted frames, all dropped as ICRC errors", n)
}

// TestRxeReceiveCorruptSweep flips every byte of every RC frame in turn
// (XOR 0xff) and requires that receive never panics and never lets a
// corruption reach the QP demux beyond what the ICRC check's documented
// strength allows. With the IPv4 ID unknown, CheckAnyID solves for it and
// keeps 16 of the 32 check bits: about one corruption in 2^16 passes (it
// then meets the engine's PSN and header checks like any packet). IPv6
// frames keep all 32 bits and must never pass. Corrupting the opcode, pad
// count or TVer may fail decoding instead (a receive error without an
// ICRC error), or turn the opcode into a UC or UD one, which the device
// drops as UnknownQP before checking the ICRC.
func TestRxeReceiveCorruptSweep(t *testing.T) {
	frames := rxeFrames(t, "")
	var total, masked, icrc, decode, nonRC, passed, passed6 int
	for _, f := range frames {
		if f.op.Transport() != ib.RC {
			continue
		}
		d := testDevice(f.dst)
		b := bytes.Clone(f.ib)
		for i := range b {
			b[i] ^= 0xff
			before := rcvCtrs(d)
			deliver(d, b, f.src, -1)
			got := rcvCtrs(d)
			total++
			switch {
			case i == 4:
				// BTH byte 4 (FECN, BECN, reserved) is all ones in the
				// ICRC, which routers may not break by setting FECN/BECN:
				// the flip must pass, and receive ignores those bits.
				if got != (rcvCounters{before.rcvErrors, before.icrcErrors, before.unknownQP + 1}) {
					t.Errorf("%v: BTH byte 4 flipped: counters went from %+v to %+v; want it accepted", f, before, got)
				}
				masked++
			case got == rcvCounters{before.rcvErrors + 1, before.icrcErrors + 1, before.unknownQP}:
				icrc++
			case got == rcvCounters{before.rcvErrors + 1, before.icrcErrors, before.unknownQP}:
				decode++
			case got == rcvCounters{before.rcvErrors, before.icrcErrors, before.unknownQP + 1} && ib.Opcode(b[0]).Transport() != ib.RC:
				nonRC++
			case got == rcvCounters{before.rcvErrors, before.icrcErrors, before.unknownQP + 1}:
				passed++
				if f.src.Addr().Is6() {
					passed6++
				}
				t.Logf("%v: byte %d flipped passed the ICRC check", f, i)
			default:
				t.Errorf("%v: byte %d flipped: counters went from %+v to %+v", f, i, before, got)
			}
			b[i] ^= 0xff
		}
	}
	t.Logf("%d corruptions: %d in BTH byte 4 (masked, accepted), %d ICRC errors, %d decode errors, %d turned into UC/UD opcodes (UnknownQP), %d passed",
		total, masked, icrc, decode, nonRC, passed)
	if passed6 > 0 {
		t.Errorf("%d corrupted IPv6 frames passed the 32-bit ICRC check", passed6)
	}
	// About total/2^16 are expected; the data are fixed, the slack generous.
	if limit := total/65536*4 + 4; passed > limit {
		t.Errorf("%d of %d corruptions passed the ICRC check, more than the 2^-16 rate allows (%d)", passed, total, limit)
	}
}

// rxeQP opens a verbs context on a device without a progress loop
// (its socket, on 127.0.0.1, only lets the device close normally), whose
// address is local, and brings up an RC QP to RTR towards rxe's QP
// peerQPN at peer, with the given receive PSN and RNR timer. The loop's
// work — commands, receive, Poll and encode — is done by the test, in its
// goroutine. verbs numbers its QPs itself, so the QP is filed in the
// device's demux under qpn, the QPN rxe's frames address.
func rxeQP(t *testing.T, local, peer netip.AddrPort, qpn, peerQPN, rqPSN uint32, minRNR uint8) (*device, *qpDriver, *verbs.QP, *verbs.CQ, *verbs.MR) {
	t.Helper()
	d := testDevice(local)
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	d.conn = testSockIO(t, conn, &d.ctrs)
	close(d.done)
	name := fmt.Sprintf("rxeinterop%d", rxeSeq.Add(1))
	prov.mu.Lock()
	prov.conf[name], prov.live[name] = local, d
	prov.mu.Unlock()
	ctx, err := verbs.Open("udp/" + name)
	if err != nil {
		t.Fatal(err)
	}
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegMR(make([]byte, 64<<10), verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := ctx.CreateCQ(64)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = qp.Destroy()
		runCmds(d)
		delete(d.qps, qpn)
		_ = mr.Dereg()
		_ = cq.Destroy()
		_ = pd.Dealloc()
		if err := ctx.Close(); err != nil {
			t.Error(err)
		}
		prov.mu.Lock()
		delete(prov.conf, name)
		prov.mu.Unlock()
	})
	runCmds(d)
	q := d.qps[qp.Num()]
	if q == nil {
		t.Fatal("the QP did not reach the device")
	}
	delete(d.qps, qp.Num())
	d.qps[qpn] = q
	all := verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1, AccessFlags: all},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, AH: verbs.AH{DGID: verbs.GID(peer.Addr().As16()), PortNum: 1},
		PathMTU: verbs.MTU1024, DestQPN: peerQPN, RQPSN: rqPSN, MaxDestRdAtomic: 16, MinRNRTimer: minRNR},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer); err != nil {
		t.Fatal(err)
	}
	runCmds(d)
	if q.eng == nil {
		t.Fatal("no engine after RTR")
	}
	return d, q, qp, cq, mr
}

var rxeSeq atomic.Uint32

// runCmds applies the commands verbs posted to the device, as its loop
// would.
func runCmds(d *device) {
	d.mu.Lock()
	cmds := d.cmds
	d.cmds = nil
	d.mu.Unlock()
	for i := range cmds {
		d.apply(&cmds[i])
	}
}

// TestRxeSendQP runs rxe's SEND captures through a verbs RC QP on a
// device: rxe's requests enter by (*device).receive, reach the QP's rc
// engine and land in posted receives; what the engine then sends, encoded
// by the QP driver, must be rxe's responses byte for byte up to the ICRC.
// The ICRC legitimately differs: ibex sends from its device's port (4791)
// and computes the ICRC for the IPv4 ID the kernel gives its datagram (0
// for one sent on its own, as here), rxe from the QP's hashed source port
// with a counting ID, and the ICRC covers both. ibex's must verify for the
// headers ibex sends, and ibex's packet re-encoded in rxe's encapsulation
// must be rxe's frame to the last byte.
// rc_naks_rnr_access posts its receive only after four RNR NAKs (with
// min_rnr_timer 27, as the capture shows), and its WRITE names an rkey
// the PD never registered: ibex must answer as rxe did (RNR NAK ×4, ACK,
// remote access NAK) and move the QP to ERR.
//
// The WRITE, READ and atomic captures name rxe's rkeys and VAs, which a
// verbs MR cannot take; rc's TestRxeResponder covers them.
func TestRxeSendQP(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rnr    int
		minRNR uint8
	}{
		{"rc_send_64B", 0, 12},
		{"rc_send_1027B_pad", 0, 12},
		{"rc_send_4096B", 0, 12},
		{"rc_naks_rnr_access", 4, 27},
	} {
		t.Run(tc.name, func(t *testing.T) { runSendQP(t, tc.name, tc.rnr, tc.minRNR) })
	}
}

func destQP(ib []byte) uint32 { return binary.BigEndian.Uint32(ib[4:]) & 0xffffff }
func psnOf(ib []byte) uint32  { return binary.BigEndian.Uint32(ib[8:]) & 0xffffff }

func runSendQP(t *testing.T, name string, rnr int, minRNR uint8) {
	frames := rxeFrames(t, name)
	first := frames[0] // rxe's client sends first; ibex takes its server's place
	local, peer := first.dst, first.src
	var peerQPN uint32
	for _, f := range frames {
		if f.src.Addr() == local.Addr() {
			peerQPN = destQP(f.ib)
		}
	}
	d, q, qp, cq, mr := rxeQP(t, local, peer, destQP(first.ib), peerQPN, psnOf(first.ib), minRNR)
	if want := netip.AddrPortFrom(peer.Addr(), local.Port()); q.peer != want {
		t.Errorf("the QP sends to %v, want %v (rxe listens on 4791)", q.peer, want)
	}
	const slot = 8192
	posted := 0
	post := func(n int) {
		for range n {
			sge := verbs.SGE{Addr: mr.Addr() + uint64(posted*slot), Length: slot, LKey: mr.LKey()}
			if err := qp.PostRecv([]verbs.RecvWR{{ID: uint64(posted), SGL: []verbs.SGE{sge}}}); err != nil {
				t.Fatal(err)
			}
			posted++
		}
	}
	if rnr == 0 {
		post(8)
	}

	var msgs [][]byte // the SEND messages, from the first transmission of each PSN
	seen := map[uint32]bool{}
	var cur []byte
	var want []*rxeFrame
	var got [][]byte
	var pkt rc.Packet
	var wp wire.Packet
	scratch := make([]byte, 4096)
	for _, f := range frames {
		if f.src.Addr() != peer.Addr() {
			want = append(want, f)
			continue
		}
		if f.op.Has(ib.MaskSend) && !seen[psnOf(f.ib)] {
			seen[psnOf(f.ib)] = true
			var p wire.Packet
			if err := wire.DecodeIB(f.ib, &p); err != nil {
				t.Fatal(err)
			}
			cur = append(cur, p.Payload...)
			if f.op.Has(ib.MaskLast) {
				msgs, cur = append(msgs, cur), nil
			}
		}
		if rnr > 0 && posted == 0 && q.eng != nil && q.eng.Stats().RNRNaksSent == uint64(rnr) {
			post(1) // the server's late ibv_post_recv
		}
		deliver(d, f.ib, f.src, -1)
		runCmds(d)
		for q.eng != nil && q.eng.Poll(d.now(), &pkt, scratch) {
			b, err := q.encode(&pkt, &wp, nil)
			if err != nil {
				t.Fatalf("after %v: encode: %v", f, err)
			}
			got = append(got, b)
		}
		q.syncStats()
		q.afterEngine()
	}

	// ibex's datagrams against rxe's.
	ibexICRC, err := wire.NewICRCPrefix(&wire.Encap{Src: local, Dst: q.peer, DF: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range max(len(got), len(want)) {
		if i >= len(got) {
			t.Errorf("rxe %v: ibex sent nothing", want[i])
			continue
		}
		var p wire.Packet
		if err := wire.DecodeIB(got[i], &p); err != nil {
			t.Fatalf("ibex datagram %d: %v", i, err)
		}
		if i >= len(want) {
			t.Errorf("ibex sent %v; rxe sent nothing more", &p)
			continue
		}
		f := want[i]
		b := got[i]
		if len(b) != len(f.ib) || !bytes.Equal(b[:len(b)-ib.ICRCLen], f.ib[:len(f.ib)-ib.ICRCLen]) {
			var r wire.Packet
			_ = wire.DecodeIB(f.ib, &r)
			t.Errorf("rxe %v: ibex sent %v\nrxe  % x\nibex % x", f, &p, f.ib, b)
			continue
		}
		if err := ibexICRC.Check(b); err != nil {
			t.Errorf("rxe %v: ibex's ICRC does not verify for its own headers (%v -> %v, ID 0): %v", f, local, q.peer, err)
		}
		// Re-encoded inside rxe's encapsulation (rxe's source port and
		// IPv4 ID), ibex's packet is rxe's to the last byte.
		rxeICRC, err := wire.NewICRCPrefix(&wire.Encap{Src: f.src, Dst: f.dst, ID: f.id, DF: true})
		if err != nil {
			t.Fatal(err)
		}
		if b2, err := wire.AppendIB(nil, &p, &rxeICRC); err != nil || !bytes.Equal(b2, f.ib) {
			t.Errorf("rxe %v: ibex's packet in rxe's encapsulation differs (%v)", f, err)
		}
	}

	// The receives.
	wcs := make([]verbs.WC, 16)
	n, err := cq.Poll(wcs)
	if err != nil {
		t.Fatal(err)
	}
	var recvs []verbs.WC
	for _, wc := range wcs[:n] {
		if wc.Status == verbs.WCSuccess {
			recvs = append(recvs, wc)
		}
	}
	if len(recvs) != len(msgs) {
		t.Fatalf("%d successful receive completions (%v), want %d", len(recvs), wcs[:n], len(msgs))
	}
	for i, wc := range recvs {
		if wc.WRID != uint64(i) || wc.ByteLen != uint32(len(msgs[i])) || wc.SrcQP != peerQPN {
			t.Errorf("receive %d: %v, want wr %d, %d bytes from qp %#x", i, wc, i, len(msgs[i]), peerQPN)
		}
		if !bytes.Equal(mr.Bytes()[i*slot:i*slot+len(msgs[i])], msgs[i]) {
			t.Errorf("receive %d: the data placed is not the SEND's payload", i)
		}
	}
	if rnr > 0 {
		if st := qp.State(); st != verbs.QPSErr {
			t.Errorf("QP state %v after the remote access NAK, want ERR", st)
		}
		if s := qp.Stats(); s.RNRNaksSent != uint64(rnr) || s.ErrNaksSent != 1 {
			t.Errorf("QP stats: %d RNR NAKs and %d error NAKs sent, want %d and 1", s.RNRNaksSent, s.ErrNaksSent, rnr)
		}
	}
	t.Logf("%d requests in, %d responses out (%d from rxe), %d messages received", len(frames)-len(want), len(got), len(want), len(msgs))
}
