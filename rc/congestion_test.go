package rc_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/rc"
	"github.com/ibex-rdma/ibex/rc/rctest"
	"github.com/ibex-rdma/ibex/rc/rcwire"
	"github.com/ibex-rdma/ibex/wire"
)

// The congestion response across QPs: many QP pairs between two "devices"
// (one endpoint each, the engines demultiplexed by QPN, one rc.Pacer per
// device, as provider/udp runs them) start at once through a bottleneck
// that drops what overflows its queue and CE-marks above a threshold.

// cdev is a device: one endpoint, many engines.
type cdev struct {
	name      string
	ep        *rctest.Endpoint
	peer      netip.AddrPort
	pacer     *rc.Pacer
	qps       map[uint32]*cqp
	list      []*cqp
	touched   []*cqp
	nextTimer int64
	tx, rx    wire.ICRCPrefix
	out       [][]byte
	bufs      [][]byte
	sizes     []int
	ce        []bool
	scratch   []byte
	pkt       rc.Packet
	wp        wire.Packet
}

type cqp struct {
	c       *rc.Conn
	h       *rctest.Host
	destQPN uint32
	touched bool
	minWnd  int // the smallest send window seen
	maxWnd  int // the largest
}

func newCdev(t *testing.T, n *rctest.Network, name string, addr, peer netip.AddrPort, pacer *rc.Pacer) *cdev {
	d := &cdev{name: name, ep: n.Endpoint(addr), peer: peer, pacer: pacer, qps: map[uint32]*cqp{}, scratch: make([]byte, 4096)}
	var err error
	if d.tx, err = wire.NewICRCPrefix(&wire.Encap{Src: addr, Dst: peer, DF: true}); err != nil {
		t.Fatal(err)
	}
	if d.rx, err = wire.NewICRCPrefix(&wire.Encap{Src: peer, Dst: addr, DF: true}); err != nil {
		t.Fatal(err)
	}
	for range 64 {
		d.bufs = append(d.bufs, make([]byte, 4096+64))
		d.sizes = append(d.sizes, 0)
		d.ce = append(d.ce, false)
	}
	return d
}

func (d *cdev) add(q *cqp, qpn uint32) {
	d.qps[qpn] = q
	d.list = append(d.list, q)
	d.touch(q)
}

func (d *cdev) touch(q *cqp) {
	if !q.touched {
		q.touched = true
		d.touched = append(d.touched, q)
	}
}

// receive hands every datagram that has arrived to its engine.
func (d *cdev) receive(now int64) error {
	for {
		k := d.ep.RecvCE(d.bufs, d.sizes, nil, d.ce)
		if k == 0 {
			return nil
		}
		for i := range k {
			b := d.bufs[i][:d.sizes[i]]
			if err := wire.DecodeIB(b, &d.wp); err != nil {
				return fmt.Errorf("%s: %v", d.name, err)
			}
			if err := d.rx.Check(b); err != nil {
				return fmt.Errorf("%s: %v", d.name, err)
			}
			q := d.qps[d.wp.BTH.DestQP]
			if q == nil {
				return fmt.Errorf("%s: datagram for unknown qp %#x", d.name, d.wp.BTH.DestQP)
			}
			rcwire.FromWire(&d.wp, &d.pkt)
			d.pkt.CE = d.ce[i]
			q.c.Receive(now, &d.pkt)
			d.touch(q)
		}
	}
}

// transmit runs the due timers and sends what the engines have: every QP
// when a timer is due, else those touched since.
func (d *cdev) transmit(now int64) error {
	list := d.touched
	all := d.nextTimer != 0 && now >= d.nextTimer
	if all {
		list = d.list
		d.nextTimer = 0
	}
	k := 0
	for _, q := range list {
		if dl := q.c.Deadline(); dl != 0 && dl <= now {
			q.c.Tick(now)
		}
		for q.c.Poll(now, &d.pkt, d.scratch) {
			if len(d.out) == k {
				d.out = append(d.out, make([]byte, 0, 4096+64))
			}
			rcwire.ToWire(&d.pkt, q.destQPN, &d.wp)
			b, err := wire.AppendIB(d.out[k][:0], &d.wp, &d.tx)
			if err != nil {
				return err
			}
			d.out[k] = b
			k++
		}
		w := q.c.SendWindow()
		q.minWnd, q.maxWnd = min(q.minWnd, w), max(q.maxWnd, w)
		if dl := q.c.Deadline(); dl != 0 && (d.nextTimer == 0 || dl < d.nextTimer) {
			d.nextTimer = dl
		}
	}
	for _, q := range d.touched {
		q.touched = false
	}
	d.touched = d.touched[:0]
	d.ep.Send(d.peer, d.out[:k])
	return nil
}

// congestionRun is one run: n QP pairs, each WRITEs msgs messages of size
// bytes from a to b at time 0.
type congestionRun struct {
	seed       uint64
	n          int
	msgs, size int
	faults     rctest.Faults
	pacer      bool
}

type congestionResult struct {
	net       rctest.NetStats
	a, b      rc.Stats // summed over the QPs
	minWindow int      // the smallest send window any requester had
	cutQPs    int      // requesters whose window was cut
	time      int64
	netw      *rctest.Network
	dA, dB    *cdev
}

// drive runs the two devices until done, failing if they get stuck.
func drive(t *testing.T, cr congestionRun, net *rctest.Network, dA, dB *cdev, done func() bool) {
	t.Helper()
	const limit = 60e9 // simulated ns
	for !done() {
		now := net.Now()
		for _, d := range []*cdev{dA, dB} {
			if err := d.receive(now); err != nil {
				t.Fatalf("%v: %v", cr, err)
			}
		}
		for _, d := range []*cdev{dA, dB} {
			if err := d.transmit(now); err != nil {
				t.Fatalf("%v: %v", cr, err)
			}
		}
		if done() {
			return
		}
		next := int64(0)
		if at, ok := net.Next(); ok {
			next = at
		}
		for _, d := range []*cdev{dA, dB} {
			if d.nextTimer != 0 && (next == 0 || d.nextTimer < next) {
				next = d.nextTimer
			}
		}
		if next == 0 || next > limit {
			t.Fatalf("%v: stuck at %v with nothing in flight and no timer", cr, now)
		}
		net.Advance(max(next, now))
	}
}

const (
	cgBase   = 0x10000
	cgRKey   = 0x77
	cgTarget = 0x8000 // offset of the region b exposes
)

func (cr congestionRun) String() string {
	return fmt.Sprintf("seed %d: %d QPs × %d WRITEs of %d bytes, pacer %v, faults: %v", cr.seed, cr.n, cr.msgs, cr.size, cr.pacer, cr.faults)
}

func (cr congestionRun) run(t *testing.T) congestionResult {
	t.Helper()
	net := rctest.NewNetwork(cr.seed, cr.faults)
	addrA, addrB := netip.MustParseAddrPort("10.1.0.1:4791"), netip.MustParseAddrPort("10.1.0.2:4791")
	var pa, pb *rc.Pacer
	if cr.pacer {
		pa, pb = rc.NewPacer(0, 0), rc.NewPacer(0, 0)
	}
	dA := newCdev(t, net, "a", addrA, addrB, pa)
	dB := newCdev(t, net, "b", addrB, addrA, pb)
	memSize := cgTarget + cr.msgs*cr.size
	res := congestionResult{dA: dA, dB: dB, minWindow: 1 << 30}
	for i := range cr.n {
		qa, qb := uint32(0x100+2*i), uint32(0x101+2*i)
		ha, hb := rctest.NewHost(fmt.Sprintf("a%d", i), cgBase, memSize), rctest.NewHost(fmt.Sprintf("b%d", i), cgBase, memSize)
		for k := range cr.msgs * cr.size {
			ha.Mem[k] = byte(k*7 + i)
		}
		hb.Register(rctest.Region{RKey: cgRKey, Addr: cgBase + cgTarget, Len: uint64(cr.msgs * cr.size), Access: ib.AccessRemoteWrite})
		cfg := func(qpn, dest uint32, p *rc.Pacer) rc.Config {
			return rc.Config{QPN: qpn, DestQPN: dest, SendPSN: 0x10, RecvPSN: 0x10, MTU: 1024, Timeout: 14, RetryCnt: 7,
				RNRRetry: 7, Access: ib.AccessRemoteWrite, Pacer: p}
		}
		ca, err := rc.New(cfg(qa, qb, pa), ha)
		if err != nil {
			t.Fatal(err)
		}
		cb, err := rc.New(cfg(qb, qa, pb), hb)
		if err != nil {
			t.Fatal(err)
		}
		a, b := &cqp{c: ca, h: ha, destQPN: qb, minWnd: ca.SendWindow()}, &cqp{c: cb, h: hb, destQPN: qa, minWnd: cb.SendWindow()}
		dA.add(a, qa)
		dB.add(b, qb)
		for m := range cr.msgs {
			off := uint64(m * cr.size)
			if err := ha.Post(ca, rc.Request{ID: uint64(m + 1), Op: ib.WRRDMAWrite, Len: uint32(cr.size),
				RemoteAddr: cgBase + cgTarget + off, RKey: cgRKey}, cgBase+off); err != nil {
				t.Fatal(err)
			}
		}
	}
	done := func() bool {
		for _, q := range dA.list {
			if len(q.h.Sends) < cr.msgs {
				return false
			}
		}
		return true
	}
	drive(t, cr, net, dA, dB, done)
	res.time, res.net, res.netw = net.Now(), net.Stats(), net
	for i, q := range dA.list {
		for _, s := range q.h.Sends {
			if s.Status != ib.WCSuccess {
				t.Fatalf("%v: qp %d: completion %+v (stats %+v)", cr, i, s, q.c.Stats())
			}
		}
		if err := q.h.Err(); err != nil {
			t.Fatalf("%v: qp %d: %v", cr, i, err)
		}
		peer := dB.list[i].h
		if !bytes.Equal(peer.Bytes(cgBase+cgTarget, cr.msgs*cr.size), q.h.Bytes(cgBase, cr.msgs*cr.size)) {
			t.Fatalf("%v: qp %d: the peer's memory differs from what was written", cr, i)
		}
		add(&res.a, q.c.Stats())
		add(&res.b, dB.list[i].c.Stats())
		res.minWindow = min(res.minWindow, q.minWnd)
		if q.c.Stats().WindowCuts > 0 {
			res.cutQPs++
		}
	}
	return res
}

func add(sum *rc.Stats, s rc.Stats) {
	sum.PktsSent += s.PktsSent
	sum.Retransmits += s.Retransmits
	sum.Timeouts += s.Timeouts
	sum.Retries += s.Retries
	sum.SeqNaksRecv += s.SeqNaksRecv
	sum.CNPsSent += s.CNPsSent
	sum.CNPsRecv += s.CNPsRecv
	sum.ECNMarked += s.ECNMarked
	sum.WindowCuts += s.WindowCuts
	sum.Paced += s.Paced
}

// TestCongestionManyQPs: 400 QP pairs (100 with the race detector) each
// WRITE 16 KiB at once into a 10 Gb/s bottleneck with a 256 KiB queue
// that marks above 32 KiB: about 6 MB offered into a queue that holds a
// twenty-fourth of it. Every QP completes (none with RETRY_EXC_ERR), with
// the data intact; retransmissions stay under one per packet offered; the
// marks reach the requesters as CNPs and cut their windows; and a window
// cut in the storm grows back when its QP sends alone afterwards.
func TestCongestionManyQPs(t *testing.T) {
	n := 400
	if rc.RaceEnabled || testing.Short() {
		n = 100
	}
	seed := uint64(1)
	if *flagSeed != 0 {
		seed = *flagSeed
	}
	cr := congestionRun{seed: seed, n: n, msgs: 2, size: 8192, pacer: true,
		faults: rctest.Faults{MinDelay: 5_000, Loss: 0.002,
			Bottleneck: rctest.Bottleneck{Rate: 1.25e9, Queue: 256 << 10, MarkAbove: 32 << 10}}}
	res := cr.run(t)
	offered := uint64(n * cr.msgs * cr.size / 1024)
	t.Logf("%v: done at %.1f ms; net %+v; requesters %+v; responders: CNPs sent %d, ECN marked %d; smallest window %d, %d of %d QPs cut",
		cr, float64(res.time)/1e6, res.net, res.a, res.b.CNPsSent, res.b.ECNMarked, res.minWindow, res.cutQPs, n)
	if res.net.Overflowed == 0 || res.net.Marked == 0 {
		t.Fatalf("%v: the bottleneck neither dropped nor marked (%+v): the test does not test congestion", cr, res.net)
	}
	if res.a.Retransmits > offered {
		t.Errorf("%v: %d retransmissions for %d packets offered (ratio %.2f, want ≤ 1)", cr, res.a.Retransmits, offered, float64(res.a.Retransmits)/float64(offered))
	}
	if res.b.ECNMarked == 0 || res.b.CNPsSent == 0 || res.a.CNPsRecv == 0 {
		t.Errorf("%v: marks %d, CNPs sent %d, received %d: ECN did not reach the requesters", cr, res.b.ECNMarked, res.b.CNPsSent, res.a.CNPsRecv)
	}
	if res.minWindow >= 128 || res.cutQPs < n/2 {
		t.Errorf("%v: smallest window %d, %d of %d QPs cut: the windows did not react", cr, res.minWindow, res.cutQPs, n)
	}

	if res.a.Retries > uint64(n/4) {
		t.Errorf("%v: %d whole QP timeouts without progress (retry_cnt spent) over %d QPs", cr, res.a.Retries, n)
	}

	// Alone now, the QP left with the smallest window WRITEs 256 KiB more
	// (its 8 KiB source, 32 times): its window grows back.
	q := res.dA.list[0]
	for _, x := range res.dA.list {
		if x.c.SendWindow() < q.c.SendWindow() {
			q = x
		}
	}
	before := q.c.SendWindow()
	if before >= 64 {
		t.Fatalf("%v: the smallest window after the storm is %d: none was cut", cr, before)
	}
	for k := range 32 {
		if err := q.h.Post(q.c, rc.Request{ID: uint64(100 + k), Op: ib.WRRDMAWrite, Len: uint32(cr.size),
			RemoteAddr: cgBase + cgTarget, RKey: cgRKey}, cgBase); err != nil {
			t.Fatal(err)
		}
	}
	res.dA.touch(q)
	q.maxWnd = before
	drive(t, cr, res.netw, res.dA, res.dB, func() bool { return len(q.h.Sends) == cr.msgs+32 })
	t.Logf("%s: window %d after the storm, up to %d over 256 KiB alone (%d at the end); %+v", q.h.Name, before, q.maxWnd, q.c.SendWindow(), q.c.Stats())
	if q.maxWnd < 2*before || q.maxWnd < before+8 {
		t.Errorf("%v: %s's window went from %d to at most %d over 256 packets alone: it did not grow back", cr, q.h.Name, before, q.maxWnd)
	}
	for _, c := range q.h.Sends {
		if c.Status != ib.WCSuccess {
			t.Fatalf("%v: %s: %+v", cr, q.h.Name, c)
		}
	}
}
