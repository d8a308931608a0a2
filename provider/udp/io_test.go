package udp

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/verbs"
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

// ioPair connects a QP on each of two new devices (127.1.n.1 and .2); env
// is applied while each device starts (the I/O switches are read then).
func ioPair(t testing.TB, size, depth int, envA, envB map[string]string) (a, b *ioEnd) {
	t.Helper()
	n := ioSeq.Add(1)
	mk := func(side string, env map[string]string) *ioEnd {
		e := &ioEnd{name: fmt.Sprintf("io%d%s", n, side)}
		host := map[string]string{"a": "1", "b": "2"}[side]
		if err := AddDevice(e.name, netip.MustParseAddrPort(fmt.Sprintf("127.1.%d.%s:4791", n, host))); err != nil {
			t.Fatal(err)
		}
		for k, v := range env {
			t.Setenv(k, v)
		}
		var err error
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		e.ctx, err = verbs.Open("udp/" + e.name)
		must(err)
		for k := range env {
			t.Setenv(k, "")
		}
		e.pd, err = e.ctx.AllocPD()
		must(err)
		e.cq, err = e.ctx.CreateCQ(4 * depth)
		must(err)
		e.mr, err = e.pd.RegMR(make([]byte, size), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
		must(err)
		// Twice the depth kept in flight: see pairOf in bench_test.go.
		e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, Cap: verbs.QPCap{MaxSendWR: 2 * depth, MaxRecvWR: depth}})
		must(err)
		return e
	}
	a, b = mk("a", envA), mk("b", envB)
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
	return a, b
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
				if da.io.gso != gso || db.io.gro != gro {
					t.Skipf("kernel: gso %v, gro %v", da.io.gso, db.io.gro)
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
	if da.io.gso && da.io.gro && m > 2.5 {
		t.Errorf("%.2f messages per round trip, want about 2 (acknowledgements in the replies' super-datagrams)", m)
	}
}
