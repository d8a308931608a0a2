package udp

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/wire"
)

// Tests of the socket I/O (io_linux.go) and the loop's use of it: GSO and
// GRO on and off at either end, the ICRC of every GSO segment against the
// IPv4 header the kernel gives it, the fallback when the kernel refuses a
// super-datagram, hostile super-datagrams, allocations, and an idle loop
// that must stop polling.

var ioSeq atomic.Uint32

type ioEnd struct {
	name string
	ctx  *verbs.Context
	pd   *verbs.PD
	cq   *verbs.CQ
	qp   *verbs.QP
	mr   *verbs.MR
}

// dev returns the end's running device.
func (e *ioEnd) dev() *device {
	prov.mu.Lock()
	defer prov.mu.Unlock()
	return prov.live[e.name]
}

// ioPair connects a QP on each of two new devices (127.p.n.1 and .2, p
// from the process ID so that two test processes rarely collide); env is
// applied while each device starts (the I/O switches are read then).
func ioPair(t testing.TB, size, depth int, envA, envB map[string]string) (a, b *ioEnd) {
	t.Helper()
	n := ioSeq.Add(1)
	mk := func(side string, env map[string]string) *ioEnd {
		name := fmt.Sprintf("io%d%s", n, side)
		host := map[string]string{"a": "1", "b": "2"}[side]
		addr := fmt.Sprintf("127.%d.%d.%s:4791", 2+os.Getpid()%250, n, host)
		if err := AddDevice(name, netip.MustParseAddrPort(addr)); err != nil {
			t.Fatal(err)
		}
		for k, v := range env {
			t.Setenv(k, v)
		}
		e := openEnd(t, name, size, depth, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
		for k := range env {
			t.Setenv(k, "")
		}
		return e
	}
	a, b = mk("a", envA), mk("b", envB)
	connectEnds(t, a, b)
	return a, b
}

// openEnd opens device name and makes a PD, a CQ, an MR of size bytes with
// access acc, and a QP of depth WRs.
func openEnd(t testing.TB, name string, size, depth int, acc verbs.Access) *ioEnd {
	t.Helper()
	e := &ioEnd{name: name}
	var err error
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	e.ctx, err = verbs.Open("udp/" + e.name)
	must(err)
	e.pd, err = e.ctx.AllocPD()
	must(err)
	e.cq, err = e.ctx.CreateCQ(4 * depth)
	must(err)
	e.mr, err = e.pd.RegMR(make([]byte, size), acc)
	must(err)
	e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, Cap: verbs.QPCap{MaxSendWR: depth, MaxRecvWR: depth}})
	must(err)
	return e
}

// connectEnds connects a's QP and b's, and tears both ends down at the
// test's end.
func connectEnds(t testing.TB, a, b *ioEnd) {
	t.Helper()
	if err := a.qp.Connect(b.qp.Info(), verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(a.qp.Info(), verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, e := range []*ioEnd{a, b} {
			for _, err := range []error{e.qp.Destroy(), e.mr.Dereg(), e.cq.Destroy(), e.pd.Dealloc(), e.ctx.Close()} {
				if err != nil {
					t.Error(err)
				}
			}
		}
	})
}

// run posts wrs on e's QP and waits for one completion per signaled WR.
func (e *ioEnd) run(t testing.TB, wrs ...verbs.SendWR) {
	t.Helper()
	if err := e.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 1)
	for _, wr := range wrs {
		if wr.Flags&verbs.SendSignaled == 0 {
			continue
		}
		if n, err := e.cq.PollWait(ctx, wc); err != nil || n != 1 || wc[0].Status != verbs.WCSuccess {
			t.Fatalf("%v: completion %v, %v", wr.Opcode, wc[0], err)
		}
	}
}

func (e *ioEnd) write(to *ioEnd, off, n int) verbs.SendWR {
	return verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: e.mr.Addr() + uint64(off), Length: uint32(n), LKey: e.mr.LKey()}}, RemoteAddr: to.mr.Addr() + uint64(off), RKey: to.mr.RKey()}
}

func (e *ioEnd) read(from *ioEnd, off, n int) verbs.SendWR {
	return verbs.SendWR{Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: e.mr.Addr() + uint64(off), Length: uint32(n), LKey: e.mr.LKey()}}, RemoteAddr: from.mr.Addr() + uint64(off), RKey: from.mr.RKey()}
}

func onOff(on bool) string {
	if on {
		return "1"
	}
	return "0"
}

// TestGSOGRO moves data with WRITEs and READs of sizes around the MTU and
// the 64 KiB super-datagram, with GSO and GRO on and off at both ends (a
// GSO sender to a receiver without GRO makes the kernel segment), and
// checks the bytes, the counters, and that super-datagrams were used
// exactly when both ends allow them.
func TestGSOGRO(t *testing.T) {
	const size = 4 << 20
	sizes := []int{1, 4095, 4096, 4097, 15 * 4096, 16*4096 + 17, 1 << 20, 3<<20 + 5}
	for _, gso := range []bool{true, false} {
		for _, gro := range []bool{true, false} {
			t.Run(fmt.Sprintf("gso=%v/gro=%v", gso, gro), func(t *testing.T) {
				env := map[string]string{"IBEX_UDP_GSO": onOff(gso), "IBEX_UDP_GRO": onOff(gro)}
				a, b := ioPair(t, size, 16, env, env)
				da, db := a.dev(), b.dev()
				gsoA, _ := da.conn.Offload()
				_, groB := db.conn.Offload()
				if gsoA != gso || groB != gro {
					t.Skipf("kernel: gso %v, gro %v", gsoA, groB)
				}
				rng := rand.New(rand.NewPCG(1, 2))
				src := a.mr.Bytes()
				for i := range src {
					src[i] = byte(rng.Uint32())
				}
				off := 0
				for _, n := range sizes {
					if off+n > size {
						off = 0
					}
					a.run(t, a.write(b, off, n))
					if !bytes.Equal(b.mr.Bytes()[off:off+n], src[off:off+n]) {
						t.Fatalf("WRITE of %d bytes at %d: data differs", n, off)
					}
					// Back again by READ into a cleared buffer.
					clear(src[off : off+n])
					a.run(t, a.read(b, off, n))
					if !bytes.Equal(b.mr.Bytes()[off:off+n], src[off:off+n]) {
						t.Fatalf("READ of %d bytes at %d: data differs", n, off)
					}
					off += n
				}
				for _, d := range []*device{da, db} {
					c := d.counters()
					if c.PortRcvErrors != 0 || c.ICRCErrors != 0 || c.UnknownQP != 0 {
						t.Errorf("%s: %+v", d.name, c)
					}
				}
				xs, rs := da.ctrs.xmitSuper.Load()+db.ctrs.xmitSuper.Load(), da.ctrs.rcvSuper.Load()+db.ctrs.rcvSuper.Load()
				t.Logf("datagrams %d in %d messages (%d super) sent, %d messages (%d super) received, %d syscalls",
					da.ctrs.xmitPkts.Load()+db.ctrs.xmitPkts.Load(), da.ctrs.xmitMsgs.Load()+db.ctrs.xmitMsgs.Load(), xs,
					da.ctrs.rcvMsgs.Load()+db.ctrs.rcvMsgs.Load(), rs, da.ctrs.syscalls.Load()+db.ctrs.syscalls.Load())
				if gso != (xs > 0) {
					t.Errorf("gso %v: %d super-datagrams sent", gso, xs)
				}
				if gso && gro != (rs > 0) {
					t.Errorf("gso, gro %v: %d super-datagrams received", gro, rs)
				}
			})
		}
	}
}

// TestPingPongSyscalls checks that a ping-pong of 8-byte WRITE_WITH_IMM
// costs what it should: each side's acknowledgement rides in the same
// super-datagram as its reply, so each round trip is two messages.
func TestPingPongSyscalls(t *testing.T) {
	x, y := ioPair(t, 64, 16, nil, nil)
	ping := verbs.SendWR{Opcode: verbs.WRRDMAWriteWithImm, SGL: []verbs.SGE{{Addr: x.mr.Addr(), Length: 8, LKey: x.mr.LKey()}},
		RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}
	pong := verbs.SendWR{Opcode: verbs.WRRDMAWriteWithImm, SGL: []verbs.SGE{{Addr: y.mr.Addr(), Length: 8, LKey: y.mr.LKey()}},
		RemoteAddr: x.mr.Addr(), RKey: x.mr.RKey()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 1)
	wait := func(cq *verbs.CQ) {
		if n, err := cq.PollWait(ctx, wc); err != nil || n != 1 || wc[0].Status != verbs.WCSuccess {
			t.Fatalf("completion %v, %v", wc[0], err)
		}
	}
	exchange := func() {
		if err := y.qp.PostRecv([]verbs.RecvWR{{}}); err != nil {
			t.Fatal(err)
		}
		if err := x.qp.PostRecv([]verbs.RecvWR{{}}); err != nil {
			t.Fatal(err)
		}
		if err := x.qp.PostSend([]verbs.SendWR{ping}); err != nil {
			t.Fatal(err)
		}
		wait(y.cq)
		if err := y.qp.PostSend([]verbs.SendWR{pong}); err != nil {
			t.Fatal(err)
		}
		wait(x.cq)
	}
	exchange()
	da, db := x.dev(), y.dev()
	msgs := func() uint64 { return da.ctrs.xmitMsgs.Load() + db.ctrs.xmitMsgs.Load() }
	sys := func() uint64 { return da.ctrs.syscalls.Load() + db.ctrs.syscalls.Load() }
	m0, s0 := msgs(), sys()
	const rounds = 2000
	for range rounds {
		exchange()
	}
	m, s := float64(msgs()-m0)/rounds, float64(sys()-s0)/rounds
	t.Logf("per round trip: %.2f messages sent, %.2f sendmmsg/recvmmsg calls", m, s)
	if gso, gro := da.conn.Offload(); gso && gro && m > 2.5 {
		t.Errorf("%.2f messages per round trip, want about 2 (acknowledgements in the replies' super-datagrams)", m)
	}
}

// TestGSOSegmentICRC checks the ICRC of every segment of a super-datagram
// against the IPv4 header it travels with, as Linux rxe checks it: the
// device sends through a TUN interface that offers no offloads, so the
// kernel segments in software, numbering the segments' IPv4 IDs, and the
// test reads the packets back from the interface.
func TestGSOSegmentICRC(t *testing.T) {
	t.Setenv("IBEX_UDP_XDP", "off") // the socket's GSO is under test
	tun, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no TUN device: %v", err)
	}
	defer unix.Close(tun)
	name := fmt.Sprintf("ibxg%d", os.Getpid()%100000)
	var ifr [unix.IFNAMSIZ + 24]byte
	copy(ifr[:], name)
	binary.NativeEndian.PutUint16(ifr[unix.IFNAMSIZ:], unix.IFF_TUN|unix.IFF_NO_PI)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(tun), unix.TUNSETIFF, uintptr(unsafe.Pointer(&ifr[0]))); errno != 0 {
		t.Skipf("TUNSETIFF: %v", errno)
	}
	sub := 100 + os.Getpid()%100
	local, remote := fmt.Sprintf("10.198.%d.1", sub), fmt.Sprintf("10.198.%d.2", sub)
	for _, c := range [][]string{{"ip", "addr", "add", local + "/24", "dev", name}, {"ip", "link", "set", name, "up"}} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Skipf("%v: %v: %s", c, err, out)
		}
	}
	dev := fmt.Sprintf("tun%d", ioSeq.Add(1))
	if err := AddDevice(dev, netip.MustParseAddrPort(local+":4791")); err != nil {
		t.Fatal(err)
	}
	ctx, err := verbs.Open("udp/" + dev)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	pd, _ := ctx.AllocPD()
	defer pd.Dealloc()
	cq, _ := ctx.CreateCQ(16)
	defer cq.Destroy()
	mr, err := pd.RegMR(make([]byte, 64<<10), verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Dereg()
	qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Destroy()
	peer := verbs.ConnInfo{QPN: 0x12345, GID: verbs.GID(netip.MustParseAddr("::ffff:" + remote).As16()), MTU: verbs.MTU1024}
	if err := qp.Connect(peer, verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range mr.Bytes() {
		mr.Bytes()[i] = byte(rng.Uint32())
	}
	// No one answers: the window goes out (and again on timeouts).
	if err := qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{{Addr: mr.Addr(), Length: 60 << 10, LKey: mr.LKey()}},
		RemoteAddr: 0x1000, RKey: 0x77}}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<16)
	checked, maxID := 0, 0
	deadline := time.Now().Add(5 * time.Second)
	for checked < 40 && time.Now().Before(deadline) {
		pfd := []unix.PollFd{{Fd: int32(tun), Events: unix.POLLIN}}
		if n, _ := unix.Poll(pfd, 200); n <= 0 {
			continue
		}
		n, err := unix.Read(tun, buf)
		if err != nil {
			t.Fatal(err)
		}
		ip := buf[:n]
		if n < 28 || ip[0] != 0x45 || ip[9] != unix.IPPROTO_UDP || binary.BigEndian.Uint16(ip[22:]) != wire.UDPPort {
			continue // not ours (IPv6 router solicitations and the like)
		}
		want, err := wire.ICRC(ip)
		if err != nil {
			t.Fatalf("packet %d: %v", checked, err)
		}
		if got := binary.LittleEndian.Uint32(ip[n-4:]); got != want {
			t.Errorf("IPv4 ID %d, %d bytes: ICRC %#08x, want %#08x for the real header", binary.BigEndian.Uint16(ip[4:]), n, got, want)
		}
		maxID = max(maxID, int(binary.BigEndian.Uint16(ip[4:])))
		checked++
	}
	t.Logf("%d packets checked, IPv4 IDs up to %d", checked, maxID)
	if checked < 40 {
		t.Fatalf("only %d packets came out of %s", checked, name)
	}
	if gso, _ := (&ioEnd{name: dev}).dev().conn.Offload(); gso && maxID == 0 {
		t.Errorf("GSO on but every packet had IPv4 ID 0: no super-datagram was segmented")
	}
}

// TestGSOFallback makes the kernel refuse a super-datagram (EINVAL: more
// segments than UDP_MAX_SEGMENTS: 64 in older kernels, 128 in 6.18):
// Send must turn GSO off and send every datagram on its own, in order.
func TestGSOFallback(t *testing.T) {
	tx, _ := udpSocket(t)
	rx, rxAddr := udpSocket(t)
	var c counters
	s := testSockIO(t, tx, &c)
	if !s.gso {
		t.Skip("no GSO in this kernel")
	}
	// Room for more datagrams than the loop ever queues.
	const n = 129
	s.own, s.hdrs = make([]message, 0, n), make([]unix.Mmsghdr, n)
	s.iovs, s.names, s.ctl = make([]unix.Iovec, n), make([]unix.RawSockaddrInet6, n), make([]byte, n*cmsgU16Space)
	bufs := make([][]byte, n)
	for i := range n {
		bufs[i] = make([]byte, 100)
		bufs[i][0] = byte(i)
	}
	pkts, bytes := s.Send([]message{{Buffers: bufs, Addr: rxAddr}})
	if gso, _ := s.Offload(); gso {
		t.Fatal("GSO still on after the kernel refused a super-datagram")
	}
	if pkts != n || bytes != 100*n || c.xmitSuper.Load() != 0 || c.xmitMsgs.Load() != n {
		t.Fatalf("sent %d datagrams, %d bytes, in %d messages (%d super-datagrams); want %d sent alone", pkts, bytes, c.xmitMsgs.Load(), c.xmitSuper.Load(), n)
	}
	got := make([]byte, 200)
	for i := range n {
		_ = rx.SetReadDeadline(time.Now().Add(5 * time.Second))
		m, err := rx.Read(got)
		if err != nil || m != 100 || got[0] != byte(i) {
			t.Fatalf("datagram %d: %d bytes, first %d, %v", i, m, got[0], err)
		}
	}
}

// TestHostileSuperDatagrams sends what a peer must not be able to crash a
// device with — GSO super-datagrams of garbage (split by GRO into
// segments of the sender's choosing), datagrams larger than a receive
// buffer without GRO, empty datagrams — and then checks that the devices
// still work.
func TestHostileSuperDatagrams(t *testing.T) {
	for _, gro := range []bool{true, false} {
		t.Run(fmt.Sprintf("gro=%v", gro), func(t *testing.T) {
			env := map[string]string{"IBEX_UDP_GRO": onOff(gro)}
			a, b := ioPair(t, 1<<20, 16, env, env)
			db := b.dev()
			target := net.UDPAddrFromAddrPort(db.addr)
			atk, _ := udpSocket(t)
			rng := rand.New(rand.NewPCG(5, 6))
			before := db.counters()
			sent := 0
			send := func(p []byte, seg int) {
				var oob []byte
				if seg > 0 {
					oob = make([]byte, unix.CmsgSpace(2))
					h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
					h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
					h.SetLen(unix.CmsgLen(2))
					binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], uint16(seg))
				}
				if _, _, err := atk.WriteMsgUDP(p, oob, target); err != nil {
					t.Logf("send %d bytes seg %d: %v", len(p), seg, err)
					return
				}
				sent++
			}
			for range 50 {
				p := make([]byte, 1+rng.IntN(65000))
				for i := range p {
					p[i] = byte(rng.Uint32())
				}
				// Some with a plausible BTH: an RC opcode to the device's QP.
				if len(p) > 12 && rng.IntN(2) == 0 {
					p[0] = byte(rng.IntN(0x15))
					binary.BigEndian.PutUint32(p[4:], b.qp.Num())
				}
				switch rng.IntN(3) {
				case 0:
					send(p, 0) // one datagram, up to 65000 bytes
				default:
					send(p, 1+rng.IntN(min(len(p), 4200))) // a super-datagram
				}
			}
			send(nil, 0)
			send(make([]byte, 65507), 0)
			// The devices still work, and the garbage was counted.
			a.run(t, a.write(b, 0, 1<<20))
			after := db.counters()
			t.Logf("%d hostile sends: %+v", sent, after)
			if after.PortRcvErrors+after.UnknownQP-before.PortRcvErrors-before.UnknownQP < uint64(sent) {
				t.Errorf("%d hostile sends but only %d errors and %d unknown-QP packets counted", sent,
					after.PortRcvErrors-before.PortRcvErrors, after.UnknownQP-before.UnknownQP)
			}
		})
	}
}

func udpSocket(t *testing.T) (*net.UDPConn, netip.AddrPort) {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, c.LocalAddr().(*net.UDPAddr).AddrPort()
}

func testSockIO(t *testing.T, c *net.UDPConn, ctrs *counters) *sockIO {
	t.Helper()
	s, err := newSockIO(c, ctrs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestCoalesce checks how datagrams group into super-datagrams: one size
// per run, a shorter datagram ends it, at most 64 segments and 65507 bytes,
// one peer; the index returned is the segment's IPv4 ID.
func TestCoalesce(t *testing.T) {
	p1 := netip.MustParseAddrPort("127.0.0.1:4791")
	p2 := netip.MustParseAddrPort("127.0.0.2:4791")
	type dg struct {
		peer netip.AddrPort
		size int
	}
	many := func(n, size int) (out []dg) {
		for range n {
			out = append(out, dg{p1, size})
		}
		return out
	}
	cases := []struct {
		name string
		in   []dg
		ids  []int
		runs []int // datagrams per message
	}{
		{"first packet larger", []dg{{p1, 4128}, {p1, 4112}, {p1, 4112}, {p1, 4112}}, []int{0, 1, 0, 1}, []int{2, 2}},
		{"ack after reply", []dg{{p1, 44}, {p1, 20}}, []int{0, 1}, []int{2}},
		{"ack before reply", []dg{{p1, 20}, {p1, 44}}, []int{0, 0}, []int{1, 1}},
		{"peers", []dg{{p1, 100}, {p2, 100}, {p1, 100}}, []int{0, 0, 0}, []int{1, 1, 1}},
		{"bytes", many(17, 4112), []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0, 1}, []int{15, 2}},
		{"segments", many(66, 100), nil, []int{64, 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &txQueue{gso: true, bufs: make([][]byte, txCap), msgs: make([]txMsg, 0, txCap)}
			for i := range s.bufs {
				s.bufs[i] = make([]byte, 0, maxDgram)
			}
			for i, d := range tc.in {
				want := s.join(d.peer, 0, d.size)
				got := s.push(d.peer, 0, s.bufs[s.nbuf][:d.size])
				if got != want || tc.ids != nil && got != tc.ids[i] {
					t.Errorf("datagram %d: id %d, join said %d, want %v", i, got, want, tc.ids)
				}
			}
			var runs []int
			for _, m := range s.msgs {
				runs = append(runs, m.n)
			}
			if fmt.Sprint(runs) != fmt.Sprint(tc.runs) {
				t.Errorf("runs %v, want %v", runs, tc.runs)
			}
		})
	}
}

// TestCmsgAndSockaddr checks the control-message and address helpers,
// including on malformed input.
func TestCmsgAndSockaddr(t *testing.T) {
	if cmsgU16Space != unix.CmsgSpace(2) || cmsgIntSpace != unix.CmsgSpace(4) {
		t.Fatalf("control buffer sizes %d, %d; want %d, %d", cmsgU16Space, cmsgIntSpace, unix.CmsgSpace(2), unix.CmsgSpace(4))
	}
	c := make([]byte, cmsgIntSpace)
	h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_GRO
	h.SetLen(unix.CmsgLen(4))
	binary.NativeEndian.PutUint32(c[unix.CmsgLen(0):], 4112)
	if g := groSize(c); g != 4112 {
		t.Errorf("groSize = %d, want 4112", g)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for range 10000 {
		b := make([]byte, rng.IntN(64))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		if len(b) >= unix.SizeofCmsghdr && rng.IntN(2) == 0 {
			binary.NativeEndian.PutUint64(b, uint64(rng.IntN(80)))
		}
		groSize(b) // must not panic
	}
	for _, s := range []string{"127.0.0.1:4791", "10.1.2.3:1", "[::1]:4791", "[fe80::1]:9", "[::ffff:10.0.0.1]:4791"} {
		a := netip.MustParseAddrPort(s)
		var sa unix.RawSockaddrInet6
		v6 := a.Addr().Is6() && !a.Addr().Is4In6()
		n := putSockaddr(&sa, a, v6)
		got, ok := getSockaddr(&sa, n)
		if !ok || got != netip.AddrPortFrom(a.Addr().Unmap(), a.Port()) && got != a {
			t.Errorf("%v: round trip gave %v, %v", a, got, ok)
		}
	}
	var sa unix.RawSockaddrInet6
	sa.Family = unix.AF_UNIX
	if _, ok := getSockaddr(&sa, unix.SizeofSockaddrInet6); ok {
		t.Error("an AF_UNIX address parsed")
	}
	sa.Family = unix.AF_INET6
	if _, ok := getSockaddr(&sa, 8); ok {
		t.Error("a truncated AF_INET6 address parsed")
	}
}

// TestSockIOAllocs: queuing, sending, receiving and splitting datagrams
// allocate nothing.
func TestSockIOAllocs(t *testing.T) {
	tx, _ := udpSocket(t)
	rx, rxAddr := udpSocket(t)
	var c counters
	s, r := testSockIO(t, tx, &c), testSockIO(t, rx, &c)
	var q txQueue
	q.init(s, &c)
	_, gro := r.Offload()
	msgs := newRecvBatch(rxSlots, gro)
	round := func() {
		for range 32 {
			b := q.bufs[q.nbuf][:1000]
			q.push(rxAddr, 0, b)
		}
		q.flush()
		got := 0
		for got < 32 {
			n, err := r.Recv(msgs, false)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs[:n] {
				if m.N == 0 {
					t.Fatal("bad message")
				}
				got += (m.N + m.Seg - 1) / m.Seg
			}
		}
	}
	round()
	if a := testing.AllocsPerRun(100, round); a != 0 {
		t.Errorf("%v allocations per 32 datagrams", a)
	}
}

// TestStreamAllocs: 256 KiB WRITEs through two devices allocate nothing,
// end to end.
func TestStreamAllocs(t *testing.T) {
	x, y := ioPair(t, 256<<10, 16, nil, nil)
	wr := []verbs.SendWR{x.write(y, 0, 256<<10)}
	wc := make([]verbs.WC, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	op := func() {
		if err := x.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		if n, err := x.cq.PollWait(ctx, wc); err != nil || n != 1 || wc[0].Status != verbs.WCSuccess {
			t.Fatalf("%v %v", wc[0], err)
		}
	}
	for range 10 {
		op()
	}
	if a := testing.AllocsPerRun(200, op); a != 0 {
		t.Errorf("%v allocations per 256 KiB WRITE", a)
	}
}

// TestIdleLoopSleeps: once the traffic stops, the loops sleep (no
// polling): the process uses almost no CPU.
func TestIdleLoopSleeps(t *testing.T) {
	x, y := ioPair(t, 1<<20, 16, nil, nil)
	for range 20 {
		x.run(t, x.write(y, 0, 1<<20))
	}
	time.Sleep(20 * time.Millisecond)
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	t0 := time.Now()
	time.Sleep(300 * time.Millisecond)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	wall := time.Since(t0)
	t.Logf("idle: %v CPU in %v", cpu, wall)
	if cpu > wall/20 {
		t.Errorf("idle devices used %v CPU in %v", cpu, wall)
	}
	c := x.dev().ctrs.syscalls.Load() + y.dev().ctrs.syscalls.Load()
	time.Sleep(100 * time.Millisecond)
	if d := x.dev().ctrs.syscalls.Load() + y.dev().ctrs.syscalls.Load() - c; d > 2 {
		t.Errorf("idle loops made %d sendmmsg/recvmmsg calls in 100 ms", d)
	}
}

// TestSockIOv6 sends a run of datagrams between two IPv6 sockets: the
// AF_INET6 addresses, GSO and GRO.
func TestSockIOv6(t *testing.T) {
	mk := func() (*net.UDPConn, netip.AddrPort) {
		c, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback})
		if err != nil {
			t.Skipf("no IPv6 loopback: %v", err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c, c.LocalAddr().(*net.UDPAddr).AddrPort()
	}
	tx, txAddr := mk()
	rx, rxAddr := mk()
	var c counters
	s, r := testSockIO(t, tx, &c), testSockIO(t, rx, &c)
	if !s.v6 || s.LocalAddr() != txAddr {
		t.Fatalf("socket bound to %v: v6 %v, local address %v", txAddr, s.v6, s.LocalAddr())
	}
	var q txQueue
	q.init(s, &c)
	for i := range 20 {
		b := q.bufs[q.nbuf][:1000-100*(i/19)] // the last one shorter
		b[0] = byte(i)
		q.push(rxAddr, 0, b)
	}
	q.flush()
	if c.xmitPkts.Load() != 20 || s.gso && c.xmitMsgs.Load() != 1 {
		t.Fatalf("%d datagrams in %d messages", c.xmitPkts.Load(), c.xmitMsgs.Load())
	}
	_, gro := r.Offload()
	msgs := newRecvBatch(rxSlots, gro)
	next := 0
	deadline := time.Now().Add(5 * time.Second)
	for next < 20 && time.Now().Before(deadline) {
		n, err := r.Recv(msgs, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs[:n] {
			if m.N == 0 || m.Addr != txAddr {
				t.Fatalf("message of %d bytes from %v; want one from %v", m.N, m.Addr, txAddr)
			}
			for b := m.Buffers[0][:m.N]; len(b) > 0; b = b[min(m.Seg, len(b)):] {
				if b[0] != byte(next) {
					t.Fatalf("datagram %d: got %d", next, b[0])
				}
				next++
			}
		}
	}
	if next != 20 {
		t.Fatalf("received %d of 20 datagrams", next)
	}
}
