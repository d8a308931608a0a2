package udp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/psp"
	"github.com/ibex-rdma/ibex/rc/rctest"
	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/verbs/verbstest"
	"github.com/ibex-rdma/ibex/wire"
)

// pspKeyText is the tests' cluster key file: two generations, 1 active.
var pspKeyText = fmt.Sprintf("0:%s\n1:%s\n", strings.Repeat("a5", 32), strings.Repeat("5a", 32))

// pspKeyFile writes pspKeyText to a file.
func pspKeyFile(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "psp.key")
	if err := os.WriteFile(p, []byte(pspKeyText), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// pspMemDevices registers two devices on n with policies pa and pb.
func pspMemDevices(t testing.TB, n *memNet, pa, pb string) (a, b string) {
	t.Helper()
	a, b = n.devices(t)
	key := pspKeyFile(t)
	for _, d := range []struct{ name, pol string }{{a, pa}, {b, pb}} {
		if err := SetPSP(d.name, d.pol, key); err != nil {
			t.Fatal(err)
		}
	}
	return a, b
}

const pspAcc = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

// sealedTap counts the datagrams on n that are sealed and those that are
// not.
func sealedTap(n *memNet) (sealed, plain *atomic.Uint64) {
	sealed, plain = new(atomic.Uint64), new(atomic.Uint64)
	n.net.Tap(func(d *rctest.Datagram, f rctest.Fate) {
		if psp.IsSealed(d.Data) {
			sealed.Add(1)
		} else {
			plain.Add(1)
		}
	})
	return sealed, plain
}

func pspDrops(c PortCounters) uint64 {
	return c.PSPAuthErrors + c.PSPReplayDrops + c.PSPUnknownSPI + c.PSPPlaintextDrops
}

// TestPSPConformanceMem runs the verbs suite (WRITE, READ, SEND, atomics,
// errors, every byte checked) between two devices that encrypt (policy
// "on": the suite's state-machine test moves QPs with Modify and no SPI,
// which "required" refuses): nearly every datagram on the network is
// sealed, and none is dropped by an SA check.
func TestPSPConformanceMem(t *testing.T) {
	n := newMemNet(1, rctest.Faults{})
	sealed, plain := sealedTap(n)
	a, b := pspMemDevices(t, n, "on", "on")
	verbstest.Run(t, verbstest.Config{
		Open: func(t testing.TB) (x, y *verbs.Context) { return memOpen(t, a), memOpen(t, b) },
	})
	t.Logf("sealed datagrams %d, plain %d", sealed.Load(), plain.Load())
	if sealed.Load() < 100*plain.Load() || sealed.Load() == 0 {
		t.Errorf("sealed %d, plain %d: want nearly every datagram sealed", sealed.Load(), plain.Load())
	}
	for _, name := range []string{a, b} {
		if c, _ := Counters(name); pspDrops(c) != 0 {
			t.Errorf("%s: %+v: psp drops on a perfect network", name, c)
		}
	}
}

// TestPSPFaulty moves WRITEs, READs and atomics over a network that loses,
// duplicates, reorders and corrupts: every byte and atomic result is
// right; the corrupted datagrams are refused by the tag (PSPAuthErrors)
// and the duplicates by the replay window (PSPReplayDrops), and the ICRC
// never sees a sealed packet.
func TestPSPFaulty(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-seed %d replays the faults' draws)", seed, seed)
	f := rctest.Faults{Loss: 0.01, Dup: 0.03, Corrupt: 0.02, MinDelay: 5e3, Jitter: 20e3}
	n := newMemNet(seed, f)
	da, db := pspMemDevices(t, n, "required", "required")
	const size = 256 << 10
	a, b := openEnd(t, da, size, 16, pspAcc), openEnd(t, db, size, 16, pspAcc)
	connectEnds(t, a, b)
	rng := rand.New(rand.NewPCG(seed, 1))
	src, dst := a.mr.Bytes(), b.mr.Bytes()
	const data = size - 4096
	var model uint64
	for round := range 20 {
		k := 1 + rng.IntN(64<<10)
		off := rng.IntN(data - k + 1)
		for i := range src[off : off+k] {
			src[off+i] = byte(rng.Uint32())
		}
		a.run(t, a.write(b, off, k))
		if !bytes.Equal(dst[off:off+k], src[off:off+k]) {
			t.Fatalf("seed %d: round %d: WRITE data differs", seed, round)
		}
		clear(src[off : off+k])
		a.run(t, a.read(b, off, k))
		if !bytes.Equal(src[off:off+k], dst[off:off+k]) {
			t.Fatalf("seed %d: round %d: READ data differs", seed, round)
		}
		add := rng.Uint64N(1000)
		a.run(t, verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled,
			SGL:        []verbs.SGE{{Addr: a.mr.Addr() + data, Length: 8, LKey: a.mr.LKey()}},
			RemoteAddr: b.mr.Addr() + data, RKey: b.mr.RKey(), CompareAdd: add})
		if got := binary.NativeEndian.Uint64(src[data:]); got != model {
			t.Fatalf("seed %d: round %d: fetch-add returned %d, want %d", seed, round, got, model)
		}
		model += add
	}
	st := n.net.Stats()
	ca, _ := Counters(da)
	cb, _ := Counters(db)
	t.Logf("network %+v; a %+v; b %+v", st, ca, cb)
	auth, replay := ca.PSPAuthErrors+cb.PSPAuthErrors, ca.PSPReplayDrops+cb.PSPReplayDrops
	if st.Corrupted > 0 && auth == 0 || st.Duplicated > 0 && replay == 0 {
		t.Errorf("corrupted %d, duplicated %d: auth drops %d, replay drops %d", st.Corrupted, st.Duplicated, auth, replay)
	}
	if ca.ICRCErrors+cb.ICRCErrors != 0 || ca.PSPPlaintextDrops+cb.PSPPlaintextDrops != 0 {
		t.Errorf("ICRC errors %d, plaintext drops %d on an encrypted link", ca.ICRCErrors+cb.ICRCErrors, ca.PSPPlaintextDrops+cb.PSPPlaintextDrops)
	}
}

// TestPSPAttacks sends, from the peer's address (spoofed: another port;
// from any other address the source check drops them first), copies
// of a live connection's sealed datagrams (replays), altered copies (one
// bit flipped, in every part), a forged plaintext packet with a right
// ICRC, and a sealed packet under an unknown SPI, all aimed at the
// victim's QP: each is dropped and counted under its reason, the QP stays
// in RTS and its traffic goes on (every byte right).
func TestPSPAttacks(t *testing.T) {
	n := newMemNet(7, rctest.Faults{})
	var mu sync.Mutex
	var captured [][]byte
	n.net.Tap(func(d *rctest.Datagram, f rctest.Fate) {
		mu.Lock()
		if len(captured) < 64 && d.To.Addr() == netip.MustParseAddr("10.0.0.2") && psp.IsSealed(d.Data) {
			captured = append(captured, append([]byte(nil), d.Data...))
		}
		mu.Unlock()
	})
	da, db := pspMemDevices(t, n, "required", "required")
	a, b := openEnd(t, da, 64<<10, 16, pspAcc), openEnd(t, db, 64<<10, 16, pspAcc)
	connectEnds(t, a, b)
	for i := range a.mr.Bytes() {
		a.mr.Bytes()[i] = byte(i)
	}
	a.run(t, a.write(b, 0, 64<<10))
	mu.Lock()
	pkts := captured
	mu.Unlock()
	if len(pkts) == 0 {
		t.Fatal("no sealed datagram seen")
	}
	victim := netip.MustParseAddrPort("10.0.0.2:4791")
	evil := n.net.Endpoint(netip.MustParseAddrPort("10.0.0.1:5000"))
	base, _ := Counters(db)
	send := func(p []byte) {
		evil.Send(victim, [][]byte{p})
		// Let b's loop take it: a poll runs a pass.
		_, _ = b.cq.Poll(make([]verbs.WC, 1))
		time.Sleep(time.Millisecond)
	}
	// Replays of every captured datagram.
	for _, p := range pkts {
		send(p)
	}
	// Altered copies of an authentic packet the victim has not seen (a
	// fresh IV: a seen one is refused by the window first), sealed here
	// with the cluster key: a bit flipped in the BTH, the IV, the
	// ciphertext, the tag.
	keys, err := psp.ParseKeys([]byte(pspKeyText))
	if err != nil {
		t.Fatal(err)
	}
	// (Under the successor SPI, which the receiver accepts with a window
	// of its own: the SA in use has seen IVs above any this sender starts
	// from.)
	ga, gb := a.qp.Info().GID, b.qp.Info().GID
	s, err := psp.NewSender(keys, keys.Successor(b.qp.Info().SPI), psp.Flow{SrcGID: ga, DstGID: gb, SrcQPN: a.qp.Num(), DstQPN: b.qp.Num()})
	if err != nil {
		t.Fatal(err)
	}
	var fresh wire.Packet
	fresh.BTH = wire.BTH{Opcode: ib.RCWriteOnly, PKey: 0xffff, DestQP: b.qp.Num(), PSN: 1}
	fresh.RETH = wire.RETH{VA: b.mr.Addr(), RKey: b.mr.RKey(), DMALen: 8}
	fresh.Payload = []byte("EVILEVIL")
	body, err := wire.AppendIBNoICRC(make([]byte, psp.HeaderLen, 256), &fresh)
	if err != nil {
		t.Fatal(err)
	}
	body = body[:len(body)-ib.ICRCLen]
	copy(body, body[psp.HeaderLen:psp.HeaderLen+ib.BTHLen])
	sealedFresh, err := s.Seal(body)
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []int{0, 3, 9, 17, 23, 24, 40, len(sealedFresh) - 1} {
		q := append([]byte(nil), sealedFresh...)
		q[at] ^= 0x01 // at 0, another valid opcode
		send(q)
	}
	// An unknown SPI.
	q := append([]byte(nil), pkts[0]...)
	q[12] ^= 0x40
	send(q)
	// A forged plaintext WRITE with a right ICRC for the attacker's
	// address, at the victim's QPN.
	var wp wire.Packet
	wp.BTH = wire.BTH{Opcode: ib.RCWriteOnly, PKey: 0xffff, DestQP: b.qp.Num(), PSN: 0}
	wp.RETH = wire.RETH{VA: b.mr.Addr(), RKey: b.mr.RKey(), DMALen: 8}
	wp.Payload = []byte("EVILEVIL")
	pre, err := wire.NewICRCPrefix(&wire.Encap{Src: evil.Addr(), Dst: victim, DF: true, TTL: 64})
	if err != nil {
		t.Fatal(err)
	}
	forged, err := wire.AppendIB(nil, &wp, &pre)
	if err != nil {
		t.Fatal(err)
	}
	send(forged)

	c, _ := Counters(db)
	got := PortCounters{PSPAuthErrors: c.PSPAuthErrors - base.PSPAuthErrors, PSPReplayDrops: c.PSPReplayDrops - base.PSPReplayDrops,
		PSPUnknownSPI: c.PSPUnknownSPI - base.PSPUnknownSPI, PSPPlaintextDrops: c.PSPPlaintextDrops - base.PSPPlaintextDrops}
	t.Logf("%d replays, 8 altered, 1 unknown SPI, 1 plaintext: %+v", len(pkts), got)
	want := PortCounters{PSPAuthErrors: 8, PSPReplayDrops: uint64(len(pkts)), PSPUnknownSPI: 1, PSPPlaintextDrops: 1}
	if got.PSPAuthErrors != want.PSPAuthErrors || got.PSPReplayDrops != want.PSPReplayDrops ||
		got.PSPUnknownSPI != want.PSPUnknownSPI || got.PSPPlaintextDrops != want.PSPPlaintextDrops {
		t.Errorf("drops %+v, want %+v", got, want)
	}
	if bytes.Contains(b.mr.Bytes(), []byte("EVIL")) {
		t.Error("the forged WRITE landed")
	}
	if s := b.qp.State(); s != verbs.QPSRTS {
		t.Errorf("victim QP in %v after the attacks", s)
	}
	clear(b.mr.Bytes())
	a.run(t, a.write(b, 0, 64<<10))
	if !bytes.Equal(a.mr.Bytes(), b.mr.Bytes()) {
		t.Error("a WRITE after the attacks: data differs")
	}
}

// TestPSPRotation streams WRITEs (and READs) while both ends rotate their
// send SA every few milliseconds (RotatePSP) and the receivers follow:
// every request completes with SUCCESS and every byte is right, and no
// datagram is dropped by an SA check or for any other reason (the network
// loses none).
func TestPSPRotation(t *testing.T) {
	n := newMemNet(3, rctest.Faults{})
	da, db := pspMemDevices(t, n, "required", "required")
	const size = 1 << 20
	a, b := openEnd(t, da, size, 16, pspAcc), openEnd(t, db, size, 16, pspAcc)
	connectEnds(t, a, b)
	rng := rand.New(rand.NewPCG(3, 3))
	src, dst := a.mr.Bytes(), b.mr.Bytes()
	done := make(chan struct{})
	rotated := make(chan int)
	go func() {
		k := 0
		defer func() { rotated <- k }()
		for {
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
			if RotatePSP(da, a.qp.Num()) == nil && RotatePSP(db, b.qp.Num()) == nil {
				k++
			}
		}
	}()
	for round := range 100 {
		off := rng.IntN(size / 2)
		k := 1 + rng.IntN(size/2)
		for i := range src[off : off+k] {
			src[off+i] = byte(rng.Uint32())
		}
		a.run(t, a.write(b, off, k), a.read(b, off, min(k, 4096)))
		if !bytes.Equal(dst[off:off+k], src[off:off+k]) {
			t.Fatalf("round %d: data differs", round)
		}
	}
	close(done)
	k := <-rotated
	ca, _ := Counters(da)
	cb, _ := Counters(db)
	rx := b.dev()
	rotations := uint64(0)
	if q := rxQP(rx, b.qp.Num()); q != nil {
		rotations = q.rx.Rotations()
	}
	st := a.qp.Stats()
	t.Logf("%d rotations asked, b's receiver followed %d; a %+v; b %+v; a's retransmits %d", k, rotations, ca, cb, st.Retransmits)
	if k < 3 || rotations < 3 {
		t.Errorf("rotations asked %d, followed %d: want several under traffic", k, rotations)
	}
	if pspDrops(ca)+pspDrops(cb) != 0 || ca.PortRcvErrors+cb.PortRcvErrors+ca.UnknownQP+cb.UnknownQP != 0 {
		t.Errorf("psp drops %d, receive errors %d, unknown QP %d: want none", pspDrops(ca)+pspDrops(cb),
			ca.PortRcvErrors+cb.PortRcvErrors, ca.UnknownQP+cb.UnknownQP)
	}
}

// rxQP returns QP qpn of d, taking the device.
func rxQP(d *device, qpn uint32) *qpDriver {
	v, ok := d.pspQPs.Load(qpn)
	if !ok {
		return nil
	}
	return v.(*qpDriver)
}

// TestPSPPolicies: "required" refuses a peer that announces no SPI, with
// an error that names the policy and the peer; "on" then talks plaintext
// with it (data right, nothing sealed), and "off" announces no SPI.
func TestPSPPolicies(t *testing.T) {
	n := newMemNet(5, rctest.Faults{})
	req, off := pspMemDevices(t, n, "required", "off")
	x, y := openEnd(t, req, 4096, 4, pspAcc), openEnd(t, off, 4096, 4, pspAcc)
	t.Cleanup(func() {
		for _, e := range []*ioEnd{x, y} {
			for _, err := range []error{e.qp.Destroy(), e.mr.Dereg(), e.cq.Destroy(), e.pd.Dealloc(), e.ctx.Close()} {
				if err != nil {
					t.Error(err)
				}
			}
		}
	})
	if y.qp.Info().SPI != 0 || x.qp.Info().SPI == 0 {
		t.Fatalf("spi: off %#x, required %#x", y.qp.Info().SPI, x.qp.Info().SPI)
	}
	err := x.qp.Connect(y.qp.Info(), verbs.ConnectOptions{})
	if !errors.Is(err, ErrPSPRequired) || !strings.Contains(err.Error(), "policy required") ||
		!strings.Contains(err.Error(), fmt.Sprintf("qp %#x at 10.0.0.2", y.qp.Num())) {
		t.Fatalf("required against a plaintext peer: %v", err)
	}
	t.Logf("refused: %v", err)
	if s := x.qp.State(); s == verbs.QPSRTR || s == verbs.QPSRTS {
		t.Fatalf("refused QP in %v", s)
	}

	n = newMemNet(6, rctest.Faults{})
	sealed, plain := sealedTap(n)
	on, off2 := pspMemDevices(t, n, "on", "off")
	u, v := openEnd(t, on, 4096, 4, pspAcc), openEnd(t, off2, 4096, 4, pspAcc)
	connectEnds(t, u, v)
	copy(u.mr.Bytes(), "plaintext peer")
	u.run(t, u.write(v, 0, 4096))
	if !bytes.Equal(u.mr.Bytes(), v.mr.Bytes()) {
		t.Fatal("on with an off peer: data differs")
	}
	if sealed.Load() != 0 || plain.Load() == 0 {
		t.Fatalf("on with an off peer: %d sealed, %d plain datagrams", sealed.Load(), plain.Load())
	}
}

// TestPSPAllocs: WRITEs and READs between two encrypting devices allocate
// nothing, end to end (seal, open, the provider's paths).
func TestPSPAllocs(t *testing.T) {
	n := newMemNet(9, rctest.Faults{})
	da, db := pspMemDevices(t, n, "required", "required")
	x, y := openEnd(t, da, 256<<10, 16, pspAcc), openEnd(t, db, 256<<10, 16, pspAcc)
	connectEnds(t, x, y)
	wr := []verbs.SendWR{x.write(y, 0, 256<<10), x.read(y, 0, 64<<10)}
	wc := make([]verbs.WC, 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	op := func() {
		if err := x.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < 2; {
			k, err := x.cq.PollWait(ctx, wc)
			if err != nil || wc[0].Status != verbs.WCSuccess {
				t.Fatalf("%v %v", wc[0], err)
			}
			got += k
		}
	}
	for range 10 {
		op()
	}
	if a := testing.AllocsPerRun(100, op); a != 0 {
		t.Errorf("%v allocations per 256 KiB WRITE and 64 KiB READ, encrypted", a)
	}
}

// TestPSPSockets: two devices on real UDP sockets (127.0.0.90 and .91,
// GSO and GRO where the kernel has them) that require encryption move
// WRITEs, READs and atomics of many sizes, every byte right, and drop
// nothing.
func TestPSPSockets(t *testing.T) {
	key := pspKeyFile(t)
	k := ioSeq.Add(1)
	var names [2]string
	for i := range names {
		names[i] = fmt.Sprintf("psps%d%c", k, 'a'+i)
		if err := AddDevice(names[i], netip.MustParseAddrPort(fmt.Sprintf("127.0.0.%d:4791", 90+i))); err != nil {
			t.Fatal(err)
		}
		if err := SetPSP(names[i], "required", key); err != nil {
			t.Fatal(err)
		}
	}
	const size = 1 << 20
	a, b := openEnd(t, names[0], size, 16, pspAcc), openEnd(t, names[1], size, 16, pspAcc)
	connectEnds(t, a, b)
	if a.qp.Info().SPI == 0 || b.qp.Info().SPI == 0 {
		t.Fatal("no SPI announced")
	}
	rng := rand.New(rand.NewPCG(11, 11))
	src, dst := a.mr.Bytes(), b.mr.Bytes()
	for _, k := range []int{1, 8, 63, 4096, 4097, 65536, 300 << 10, size - 8} {
		off := rng.IntN(size - 8 - k + 1)
		for i := range src[off : off+k] {
			src[off+i] = byte(rng.Uint32())
		}
		a.run(t, a.write(b, off, k))
		if !bytes.Equal(dst[off:off+k], src[off:off+k]) {
			t.Fatalf("WRITE of %d bytes: data differs", k)
		}
		clear(src[off : off+k])
		a.run(t, a.read(b, off, k))
		if !bytes.Equal(src[off:off+k], dst[off:off+k]) {
			t.Fatalf("READ of %d bytes: data differs", k)
		}
	}
	binary.NativeEndian.PutUint64(dst[size-8:], 41)
	a.run(t, verbs.SendWR{Opcode: verbs.WRAtomicCmpAndSwp, Flags: verbs.SendSignaled,
		SGL:        []verbs.SGE{{Addr: a.mr.Addr(), Length: 8, LKey: a.mr.LKey()}},
		RemoteAddr: b.mr.Addr() + size - 8, RKey: b.mr.RKey(), CompareAdd: 41, Swap: 42})
	if got, now := binary.NativeEndian.Uint64(src), binary.NativeEndian.Uint64(dst[size-8:]); got != 41 || now != 42 {
		t.Fatalf("compare-and-swap returned %d, left %d; want 41, 42", got, now)
	}
	for _, e := range []*ioEnd{a, b} {
		if c, _ := Counters(e.name); pspDrops(c) != 0 || c.ICRCErrors != 0 {
			t.Errorf("%s: %+v", e.name, c)
		}
	}
}

// TestPSPHostileSealed sends an encrypted QP, from its peer's address
// (spoofed port), random datagrams that look sealed: TVer 1, a valid
// opcode, the QP's number, its SPI, the successor, another or a flipped
// one, random IVs, lengths and bodies. None panics the device, every one
// is counted as dropped, and the QP keeps its state and its traffic.
func TestPSPHostileSealed(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-seed %d replays the datagrams)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 21))
	n := newMemNet(seed, rctest.Faults{})
	da, db := pspMemDevices(t, n, "required", "required")
	a, b := openEnd(t, da, 8192, 16, pspAcc), openEnd(t, db, 8192, 16, pspAcc)
	connectEnds(t, a, b)
	a.run(t, a.write(b, 0, 8192))
	keys, err := psp.ParseKeys([]byte(pspKeyText))
	if err != nil {
		t.Fatal(err)
	}
	spi := b.qp.Info().SPI
	spis := []uint32{spi, keys.Successor(spi), spi ^ 1<<31, rng.Uint32()}
	ops := []ib.Opcode{ib.RCWriteOnly, ib.RCWriteFirst, ib.RCSendOnly, ib.RCReadRequest, ib.RCAck, ib.RCCompareSwap, ib.RCReadResponseOnly, ib.CNP}
	evil := n.net.Endpoint(netip.MustParseAddrPort("10.0.0.1:5001"))
	victim := netip.MustParseAddrPort("10.0.0.2:4791")
	base, _ := Counters(db)
	const count = 2000
	for i := range count {
		k := psp.MinLen + rng.IntN(200)
		if rng.IntN(4) > 0 {
			k &^= 3
		}
		p := make([]byte, k)
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		p[0] = byte(ops[rng.IntN(len(ops))])
		p[1] = p[1]&^0x0f | psp.TVer
		p[5], p[6], p[7] = byte(b.qp.Num()>>16), byte(b.qp.Num()>>8), byte(b.qp.Num())
		binary.BigEndian.PutUint32(p[12:], spis[rng.IntN(len(spis))])
		if rng.IntN(10) == 0 {
			binary.BigEndian.PutUint64(p[16:], 0)
		}
		evil.Send(victim, [][]byte{p})
		if i%100 == 0 {
			_, _ = b.cq.Poll(make([]verbs.WC, 1))
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	var c PortCounters
	for {
		c, _ = Counters(db)
		if c.PortRcvErrors-base.PortRcvErrors >= count || time.Now().After(deadline) {
			break
		}
		_, _ = b.cq.Poll(make([]verbs.WC, 1))
		time.Sleep(time.Millisecond)
	}
	drops := c.PortRcvErrors - base.PortRcvErrors
	t.Logf("%d hostile sealed datagrams: %d receive errors (auth %d, replay %d, unknown SPI %d)", count, drops,
		c.PSPAuthErrors-base.PSPAuthErrors, c.PSPReplayDrops-base.PSPReplayDrops, c.PSPUnknownSPI-base.PSPUnknownSPI)
	if drops != count {
		t.Fatalf("%d of %d dropped", drops, count)
	}
	if s := b.qp.State(); s != verbs.QPSRTS {
		t.Fatalf("victim QP in %v", s)
	}
	clear(b.mr.Bytes())
	a.run(t, a.write(b, 0, 8192))
	if !bytes.Equal(a.mr.Bytes(), b.mr.Bytes()) {
		t.Fatal("a WRITE after the hostile datagrams: data differs")
	}
}

// TestPSPReconnect: two QPs moved to RESET and connected to each other
// again keep their keys (a receive SPI is a QP's for its life) and go on
// from their SAs' state: traffic flows after each reconnection, and the
// earlier connections' packets, replayed, are refused by the window. Fails
// with fresh SAs at each reconnection: the replays open in a fresh window.
func TestPSPReconnect(t *testing.T) {
	n := newMemNet(13, rctest.Faults{})
	var mu sync.Mutex
	var captured [][]byte
	n.net.Tap(func(d *rctest.Datagram, f rctest.Fate) {
		mu.Lock()
		if len(captured) < 32 && d.To.Addr() == netip.MustParseAddr("10.0.0.1") && psp.IsSealed(d.Data) {
			captured = append(captured, append([]byte(nil), d.Data...))
		}
		mu.Unlock()
	})
	da, db := pspMemDevices(t, n, "required", "required")
	a, b := openEnd(t, da, 64<<10, 16, pspAcc), openEnd(t, db, 64<<10, 16, pspAcc)
	connectEnds(t, a, b)
	spi := a.qp.Info().SPI
	for round := range 3 {
		for i := range b.mr.Bytes() {
			b.mr.Bytes()[i] = byte(i + round)
		}
		b.run(t, b.write(a, 0, 64<<10))
		a.run(t, a.write(b, 0, 4096))
		if !bytes.Equal(a.mr.Bytes()[4096:], b.mr.Bytes()[4096:]) {
			t.Fatalf("round %d: data differs", round)
		}
		// Both go through RESET and connect again.
		for _, e := range []*ioEnd{a, b} {
			if err := e.qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState); err != nil {
				t.Fatal(err)
			}
		}
		ia, ib := a.qp.Info(), b.qp.Info()
		if ia.SPI != spi {
			t.Fatalf("spi %#x after RESET, was %#x", ia.SPI, spi)
		}
		if err := a.qp.Connect(ib, verbs.ConnectOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := b.qp.Connect(ia, verbs.ConnectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	base, _ := Counters(da)
	mu.Lock()
	old := captured
	mu.Unlock()
	evil := n.net.Endpoint(netip.MustParseAddrPort("10.0.0.2:5002"))
	for _, p := range old {
		evil.Send(netip.MustParseAddrPort("10.0.0.1:4791"), [][]byte{p})
	}
	// a still works both ways with b.
	clear(b.mr.Bytes())
	for i := range 4096 {
		a.mr.Bytes()[i] = byte(3 * i)
	}
	a.run(t, a.write(b, 0, 4096))
	if !bytes.Equal(a.mr.Bytes()[:4096], b.mr.Bytes()[:4096]) {
		t.Fatal("WRITE after the reconnections: data differs")
	}
	deadline := time.Now().Add(5 * time.Second)
	var c PortCounters
	for {
		c, _ = Counters(da)
		if c.PSPReplayDrops-base.PSPReplayDrops >= uint64(len(old)) || time.Now().After(deadline) {
			break
		}
		_, _ = a.cq.Poll(make([]verbs.WC, 1))
		time.Sleep(time.Millisecond)
	}
	t.Logf("%d packets of earlier connections replayed: %d refused as replays, auth %d, unknown SPI %d", len(old),
		c.PSPReplayDrops-base.PSPReplayDrops, c.PSPAuthErrors-base.PSPAuthErrors, c.PSPUnknownSPI-base.PSPUnknownSPI)
	if len(old) == 0 || c.PSPReplayDrops-base.PSPReplayDrops != uint64(len(old)) {
		t.Fatalf("%d replays, %d refused", len(old), c.PSPReplayDrops-base.PSPReplayDrops)
	}
}
