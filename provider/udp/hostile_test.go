package udp_test

import (
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/provider/udp"
	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/wire"
)

// TestHostileInput sends a device what the network may: garbage, truncated
// and malformed headers, bad ICRCs, packets for QPs that do not exist, and
// a well-formed WRITE with a wrong rkey. Each is counted and dropped (the
// last one NAKed, its QP moved to ERR); nothing panics; the device keeps
// working.
func TestHostileInput(t *testing.T) {
	x, y := pairOf(t, 4096, 16)
	da := x.ctx.Name()
	pa, _ := x.ctx.QueryPort(1)
	target := netip.AddrPortFrom(netip.AddrFrom16(pa.GID).Unmap(), wire.UDPPort)
	src := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 0)
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(src))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	from := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	pre, err := wire.NewICRCPrefix(&wire.Encap{Src: from, Dst: target, DF: true})
	if err != nil {
		t.Fatal(err)
	}
	send := func(b []byte) {
		if _, err := conn.WriteToUDPAddrPort(b, target); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := udp.Counters(da)

	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	const garbage = 2000
	for range garbage {
		b := make([]byte, rng.IntN(200))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		send(b)
	}
	// A well-formed WRITE Only to a QPN nobody has.
	p := wire.Packet{BTH: wire.BTH{Opcode: ib.RCWriteOnly, PKey: 0xffff, DestQP: 0xabcdef, AckReq: true, PSN: 1},
		RETH: wire.RETH{VA: 0x1000, RKey: 0x1234, DMALen: 8}, Payload: make([]byte, 8)}
	good, err := wire.AppendIB(nil, &p, &pre)
	if err != nil {
		t.Fatal(err)
	}
	send(good)
	// The same with a corrupted ICRC.
	bad := append([]byte(nil), good...)
	bad[len(bad)-1] ^= 0x40
	send(bad)
	// Truncated headers.
	send(good[:10])
	send(good[:ib.BTHLen+4])

	deadline := time.Now().Add(10 * time.Second)
	var now udp.PortCounters
	for {
		now, _ = udp.Counters(da)
		if now.PortRcvPkts-before.PortRcvPkts >= garbage+4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	got := now.PortRcvPkts - before.PortRcvPkts
	if got < garbage+4 {
		t.Fatalf("device counted %d of %d datagrams received", got, garbage+4)
	}
	errs := now.PortRcvErrors - before.PortRcvErrors
	unknown := now.UnknownQP - before.UnknownQP
	icrc := now.ICRCErrors - before.ICRCErrors
	if errs+unknown < garbage+4 || icrc < 1 || unknown < 1 {
		t.Fatalf("drops not counted: rcv errors %d, icrc errors %d, unknown qp %d of %d hostile datagrams", errs, icrc, unknown, garbage+4)
	}
	t.Logf("%d hostile datagrams: %d receive errors (%d bad ICRC), %d for unknown QPs", got, errs, icrc, unknown)

	// The devices still carry traffic.
	wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{{Addr: x.mr.Addr(), Length: 64, LKey: x.mr.LKey()}},
		RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}}
	if err := x.qp.PostSend(wr); err != nil {
		t.Fatal(err)
	}
	waitOne(t, x.cq, make([]verbs.WC, 1))
}
