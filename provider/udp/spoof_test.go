package udp_test

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/provider/udp"
	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/wire"
)

// TestSpoofedSource: a WRITE forged as an attacker on the network would
// (the target's QPN, its expected PSN, a sniffed rkey and address, a
// correct ICRC) but sent from an address that is not the QP's peer is
// dropped and counted in SrcAddrErrors and PortRcvErrors: nothing is
// placed, and the peer's own WRITE then lands and completes.
func TestSpoofedSource(t *testing.T) {
	x, y := pairOf(t, 4096, 16)
	dy := y.ctx.Name()
	py, _ := y.ctx.QueryPort(1)
	target := netip.AddrPortFrom(netip.AddrFrom16(py.GID).Unmap(), wire.UDPPort)
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.80:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	from := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	pre, err := wire.NewICRCPrefix(&wire.Encap{Src: from, Dst: target, DF: true, TTL: 64})
	if err != nil {
		t.Fatal(err)
	}
	// A genuine WRITE first: y's engine runs (Connect returns before the
	// device's loop has it), and the forgery's PSN is the next expected.
	wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{{Addr: x.mr.Addr(), Length: 8, LKey: x.mr.LKey()}},
		RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}}
	if err := x.qp.PostSend(wr); err != nil {
		t.Fatal(err)
	}
	waitOne(t, x.cq, make([]verbs.WC, 1))
	forged := bytes.Repeat([]byte{0xee}, 8)
	p := wire.Packet{BTH: wire.BTH{Opcode: ib.RCWriteOnly, PKey: 0xffff, DestQP: y.qp.Num(), AckReq: true, PSN: (x.qp.Info().PSN + 1) & 0xffffff},
		RETH: wire.RETH{VA: y.mr.Addr(), RKey: y.mr.RKey(), DMALen: 8}, Payload: forged}
	b, err := wire.AppendIB(nil, &p, &pre)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := udp.Counters(dy)
	if _, err := conn.WriteToUDPAddrPort(b, target); err != nil {
		t.Fatal(err)
	}
	now := waitCounters(t, dy, func(c udp.PortCounters) bool { return c.PortRcvPkts > before.PortRcvPkts })
	if got := now.SrcAddrErrors - before.SrcAddrErrors; got != 1 {
		t.Errorf("SrcAddrErrors went up by %d, want 1", got)
	}
	if got := now.PortRcvErrors - before.PortRcvErrors; got != 1 {
		t.Errorf("PortRcvErrors went up by %d, want 1", got)
	}
	if bytes.Equal(y.mr.Bytes()[:8], forged) {
		t.Fatal("the forged WRITE from a stranger's address was placed")
	}

	// The peer's own WRITE at the same PSN lands.
	copy(x.mr.Bytes(), "genuine!")
	if err := x.qp.PostSend(wr); err != nil {
		t.Fatal(err)
	}
	waitOne(t, x.cq, make([]verbs.WC, 1))
	if got := string(y.mr.Bytes()[:8]); got != "genuine!" {
		t.Errorf("the peer's WRITE placed %q, want %q", got, "genuine!")
	}
	// The verbs port counters carry it too.
	pcs, err := y.ctx.PortCounters(1)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range pcs {
		if c.Name == "SrcAddrErrors" {
			found = c.Value >= 1
		}
	}
	if !found {
		t.Errorf("port counters %v: no SrcAddrErrors >= 1", pcs)
	}
}

// waitCounters polls device's counters until ok holds (10 s at most).
func waitCounters(t *testing.T, device string, ok func(udp.PortCounters) bool) udp.PortCounters {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, _ := udp.Counters(device)
		if ok(c) {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("device %s: counters %+v never reached the expected state", device, c)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestForgedAckCounted: an ACK and an error NAK forged from the peer's
// own address (another UDP port of it: the source check compares
// addresses only) but with PSNs outside the requester's window change
// nothing and show in the QP's OutOfWindow counter (metrics'
// out_of_window); a forged CNP from a stranger's address is dropped by the
// source check. The QP then carries a WRITE.
func TestForgedAckCounted(t *testing.T) {
	x, y := pairOf(t, 4096, 16)
	px, _ := x.ctx.QueryPort(1)
	py, _ := y.ctx.QueryPort(1)
	target := netip.AddrPortFrom(netip.AddrFrom16(px.GID).Unmap(), wire.UDPPort)
	send := func(from netip.Addr, p *wire.Packet) {
		t.Helper()
		conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(from, 0)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		pre, err := wire.NewICRCPrefix(&wire.Encap{Src: conn.LocalAddr().(*net.UDPAddr).AddrPort(), Dst: target, DF: true, TTL: 64})
		if err != nil {
			t.Fatal(err)
		}
		b, err := wire.AppendIB(nil, p, &pre)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.WriteToUDPAddrPort(b, target); err != nil {
			t.Fatal(err)
		}
	}
	wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{{Addr: x.mr.Addr(), Length: 8, LKey: x.mr.LKey()}},
		RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}}
	// One WRITE first: the QP's engine runs (Connect returns before the
	// device's loop has it), and its window is then empty.
	if err := x.qp.PostSend(wr); err != nil {
		t.Fatal(err)
	}
	waitOne(t, x.cq, make([]verbs.WC, 1))
	dx := x.ctx.Name()
	before, _ := udp.Counters(dx)
	peer := netip.AddrFrom16(py.GID).Unmap()
	psn := (x.qp.Info().PSN + 1) & 0xffffff // the next to send: every PSN is outside the window
	send(peer, &wire.Packet{BTH: wire.BTH{Opcode: ib.RCAck, PKey: 0xffff, DestQP: x.qp.Num(), PSN: (psn + 5) & 0xffffff}, AETH: wire.AETH{Syndrome: ib.SynACK, MSN: 1}})
	send(peer, &wire.Packet{BTH: wire.BTH{Opcode: ib.RCAck, PKey: 0xffff, DestQP: x.qp.Num(), PSN: (psn - 1) & 0xffffff}, AETH: wire.AETH{Syndrome: ib.SynNAKRemoteAccess, MSN: 1}})
	send(netip.MustParseAddr("127.0.0.81"), &wire.Packet{BTH: wire.BTH{Opcode: ib.CNP, PKey: 0xffff, DestQP: x.qp.Num(), BECN: true}})
	waitCounters(t, dx, func(c udp.PortCounters) bool { return c.PortRcvPkts >= before.PortRcvPkts+3 })
	deadline := time.Now().Add(10 * time.Second)
	for x.qp.Stats().OutOfWindow < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	st := x.qp.Stats()
	if st.OutOfWindow != 2 || st.CNPsRecv != 0 {
		t.Errorf("qp stats: OutOfWindow %d, CNPsRecv %d; want 2 and 0", st.OutOfWindow, st.CNPsRecv)
	}
	if now, _ := udp.Counters(dx); now.SrcAddrErrors-before.SrcAddrErrors != 1 {
		t.Errorf("SrcAddrErrors went up by %d, want 1 (the stranger's CNP)", now.SrcAddrErrors-before.SrcAddrErrors)
	}
	if err := x.qp.PostSend(wr); err != nil {
		t.Fatal(err)
	}
	waitOne(t, x.cq, make([]verbs.WC, 1))
}
