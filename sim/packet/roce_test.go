package packet

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/sim/des"
	"github.com/ibex-rdma/ibex/sim/fabric"
	"github.com/ibex-rdma/ibex/sim/route"
	"github.com/ibex-rdma/ibex/sim/topo"
)

// The RoCE tests: framing on an idle path, PFC under incast (lossless with
// the headroom PFC needs, pause spreading upstream hop by hop, drops and
// go-back-N with too little), DCQCN against PFC alone, the reaction
// point's arithmetic, pacing, determinism, and config errors.

// TestRoCEAlphaBeta: on an idle path a RoCE transfer takes the alpha-beta
// time with RoCEv2's 82 bytes of framing per packet (Ethernet, IPv4, UDP,
// BTH, ICRC, FCS, preamble and inter-frame gap), to the picosecond, and
// the NIC puts exactly those bytes on the wire.
func TestRoCEAlphaBeta(t *testing.T) {
	g := superpod(t, 2, "NDR")
	p, err := fabric.CheckParams(fabric.Params{LinkLayer: fabric.LinkRoCE})
	if err != nil {
		t.Fatal(err)
	}
	if p.HeaderBytes != 82 || p.FirstBytes != 16 {
		t.Fatalf("RoCE headers %d + first %d bytes; want 82 + 16", p.HeaderBytes, p.FirstBytes)
	}
	rt, _ := route.New(g)
	src, dst := g.NIC(0, 0), g.NIC(32, 0) // host 0 and host 32 (second SU): leaf, spine, leaf
	hops := pathHops(t, g, rt, p, src, dst)
	for _, b := range []int64{4096, 100_000, 3<<20 + 7, 16 << 20} {
		cfg := Config{Graph: g, Schedule: oneSend(), Bytes: b, ElemSize: 1, GPUs: []int32{0, 32 * 8}, Channels: 1, Params: fabric.Params{LinkLayer: fabric.LinkRoCE}}
		res, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		want := predict(p, g.MTU, float64(topo.NDR), b, hops)
		ib, err := Run(Config{Graph: g, Schedule: oneSend(), Bytes: b, ElemSize: 1, GPUs: []int32{0, 32 * 8}, Channels: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%9d B: RoCE %v, alpha-beta with 82-byte framing %v; InfiniBand %v", b, res.Time, want, ib.Time)
		if res.Time != want {
			t.Errorf("%d B: simulated %v, alpha-beta %v", b, res.Time, want)
		}
		// The size term differs by 56 bytes a packet from InfiniBand's
		// (to a picosecond a packet: serialisation times are whole ps).
		pkts := (b + int64(g.MTU) - 1) / int64(g.MTU)
		extra := float64(pkts*56*8) / float64(topo.NDR) * float64(des.Second)
		if d := res.Time - ib.Time; math.Abs(float64(d)-extra) > float64(pkts) {
			t.Errorf("%d B: RoCE takes %v more than InfiniBand; %d packets × 56 bytes take %v", b, d, pkts, des.Time(extra))
		}
		checkConservation(t, g, cfg, res)
		if res.ECNMarks != 0 || res.PauseTime != 0 || res.CNPs != 0 || res.Drops != 0 {
			t.Errorf("%d B on an idle path: %d marks, pause %v, %d CNPs, %d drops", b, res.ECNMarks, res.PauseTime, res.CNPs, res.Drops)
		}
	}
}

// incastTree is an incast into host 0 of a k=16 fat tree (8 hosts per
// leaf, 8 spines): 3 senders on host 0's leaf and 8 on the next leaf.
// D-mod-k sends the 8 remote flows up one spine S, so S has one input and
// one output for this traffic, and leaf 1's uplink to S is its only
// link that carries more than one flow. The one oversubscribed port is
// leaf 0's port to host 0, shared by the 3 local inputs and S's: so S's
// queue can build only if leaf 0 pauses it, and leaf 1's uplink is paused
// only if S's queue does, in turn.
func incastTree(t testing.TB) (*topo.Graph, Config) {
	g := fatTreeK(t, 16)
	gpus := []int32{0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15}
	s, err := PatternSchedule(Incast, len(gpus), 0)
	if err != nil {
		t.Fatal(err)
	}
	return g, Config{Graph: g, Schedule: s, Bytes: 2 << 20, GPUs: gpus}
}

// remotePath is the route of the remote flows: host 8's NIC, leaf 1 up to
// S, S down to leaf 0, leaf 0 to host 0's NIC.
func remotePath(t *testing.T, g *topo.Graph) []topo.PortID {
	t.Helper()
	rt, err := route.New(g)
	if err != nil {
		t.Fatal(err)
	}
	path, err := rt.Path(g.NIC(8, 0), g.NIC(0, 0), route.PolicyDModK, 0, nil)
	if err != nil || len(path) != 4 {
		t.Fatalf("path from host 8 to host 0: %v, %v; want 4 hops", path, err)
	}
	return path
}

func portStat(res *Result, p topo.PortID) fabric.PortStat {
	for _, ps := range res.Ports {
		if ps.Port == p {
			return ps
		}
	}
	return fabric.PortStat{Port: p}
}

// TestPFCLossless: the incast runs RoCE with PFC alone and the headroom
// PFC needs (the default), with the invariants checked after every event.
// Nothing is dropped; every sender's NIC is paused; and pause spreads
// upstream hop by hop from the one oversubscribed port: leaf 0 pauses the
// spine's port down to it, and the spine, whose one input feeds that one
// output, pauses leaf 1's uplink.
func TestPFCLossless(t *testing.T) {
	t.Parallel() // see parallel in validate_test.go
	g, cfg := incastTree(t)
	cfg.Params = fabric.Params{LinkLayer: fabric.LinkRoCE, CC: fabric.CCNone}
	m, res := runWithInvariants(t, cfg)
	checkConservation(t, g, cfg, res)
	path := remotePath(t, g)
	up, down := path[1], path[2] // leaf1 -> S, S -> leaf0
	t.Logf("time %v, pause %v in all, %d PAUSE frames, %d drops, fullest buffer %d B (Xoff %d)",
		res.Time, res.PauseTime, res.PauseFrames, res.Drops, res.MaxBuffer, fabric.Defaults.PFCXoff)
	for _, p := range path[1:3] {
		ps := portStat(res, p)
		t.Logf("%s: %d B, paused %v, queue up to %d B; its peer sent %d PAUSE frames", ps.Name, ps.Bytes, ps.PauseTime, ps.MaxQueue, portStat(res, g.Ports[p].Peer).PauseFrames)
	}
	if res.Drops != 0 || res.Lost != 0 || res.Discards != 0 {
		t.Errorf("%d packets dropped, %d bytes lost, %d discarded; want none with the headroom PFC needs", res.Drops, res.Lost, res.Discards)
	}
	var maxCap int32
	for _, c := range roceOf(t, m.n).pcap {
		maxCap = max(maxCap, c)
	}
	if res.MaxBuffer <= int64(fabric.Defaults.PFCXoff) || res.MaxBuffer > int64(maxCap) {
		t.Errorf("fullest buffer %d bytes; want over Xoff %d (PFC at work) and within Xoff + headroom %d", res.MaxBuffer, fabric.Defaults.PFCXoff, maxCap)
	}
	// S has one input and one output for this traffic.
	if a, b := portStat(res, up).Bytes, portStat(res, down).Bytes; a != b || a == 0 {
		t.Fatalf("%s sent %d bytes and %s %d: the remote flows do not all cross S alone", g.PortName(up), a, g.PortName(down), b)
	}
	for _, c := range []struct {
		what   string
		port   topo.PortID
		pauser topo.PortID
	}{
		{"the spine's port down to the congested leaf", down, g.Ports[down].Peer},
		{"leaf 1's uplink, two hops up", up, g.Ports[up].Peer},
	} {
		if ps := portStat(res, c.port); ps.PauseTime <= 0 {
			t.Errorf("%s (%s) never paused", c.what, g.PortName(c.port))
		}
		if ps := portStat(res, c.pauser); ps.PauseFrames <= 0 {
			t.Errorf("%s sent no PAUSE to %s", g.PortName(c.pauser), g.PortName(c.port))
		}
	}
	for _, gpu := range cfg.GPUs[1:] {
		nic := g.Nodes[g.NIC(int(gpu), 0)].FirstPort
		if ps := portStat(res, nic); ps.PauseTime <= 0 {
			t.Errorf("sender %s never paused", g.PortName(nic))
		}
	}
	var sum fabric.PortStat
	for _, ps := range res.Ports {
		sum.PauseTime += ps.PauseTime
		sum.PauseFrames += ps.PauseFrames
		if ps.Util > 1+1e-9 {
			t.Errorf("%s busy %.4f of the run", ps.Name, ps.Util)
		}
	}
	if sum.PauseTime != res.PauseTime || sum.PauseFrames != res.PauseFrames {
		t.Errorf("ports: pause %v, %d frames; result: %v, %d", sum.PauseTime, sum.PauseFrames, res.PauseTime, res.PauseFrames)
	}
}

// TestPFCHeadroomTooSmall: the same incast with 16 KiB of headroom, less
// than the ~27-35 KB that can arrive once a port is over Xoff: packets
// are dropped, the receivers discard what follows a lost packet, the QPs
// go back and send again, and the run completes with every byte
// delivered once: the bytes NICs sent minus those they were sent are the
// bytes lost in the fabric.
func TestPFCHeadroomTooSmall(t *testing.T) {
	t.Parallel() // see parallel in validate_test.go
	g, cfg := incastTree(t)
	cfg.Params = fabric.Params{LinkLayer: fabric.LinkRoCE, CC: fabric.CCNone, PFCHeadroom: 16 << 10}
	_, res := runWithInvariants(t, cfg)
	t.Logf("time %v, %d drops, %d discarded, %d packets lost (%d bytes), pause %v", res.Time, res.Drops, res.Discards, res.LostPkts, res.Lost, res.PauseTime)
	if res.Drops == 0 {
		t.Fatal("no drops with 16 KiB of headroom")
	}
	var drops int64
	for _, ps := range res.Ports {
		drops += ps.Drops
		if ps.Drops > 0 && ps.PauseFrames == 0 {
			t.Errorf("%s dropped %d packets without ever sending PAUSE", ps.Name, ps.Drops)
		}
	}
	if drops != res.Drops || res.LostPkts != res.Drops+res.Discards {
		t.Errorf("ports dropped %d, the run %d; %d lost = %d dropped + %d discarded?", drops, res.Drops, res.LostPkts, res.Drops, res.Discards)
	}
	want := scheduleTraffic(cfg.Schedule, cfg.Bytes, 4, 1, 1, g.MTU, fabric.Defaults.Chunk, cfg.GPUs)
	if res.Payload != want.cross || res.Packets != want.crossPkts {
		t.Errorf("injected %d bytes in %d packets; the schedule moves %d in %d", res.Payload, res.Packets, want.cross, want.crossPkts)
	}
	sent, recv := nicWireBytes(g, res.Ports)
	if sent-recv != res.LostWire {
		t.Errorf("NICs sent %d wire bytes and were sent %d; %d lost in the fabric", sent, recv, res.LostWire)
	}
}

// TestDCQCN: the incast with ECN and DCQCN against PFC alone (Meta's
// mode: switches still mark, nobody reacts). DCQCN slows the senders, so
// the fabric spends far less time paused; marks and CNPs are counted.
// Once the incast is over, the senders' rates, cut far below line rate,
// climb back to it on their timers.
func TestDCQCN(t *testing.T) {
	t.Parallel() // see parallel in validate_test.go
	g, cfg := incastTree(t)
	cfg.Params = fabric.Params{LinkLayer: fabric.LinkRoCE, CC: fabric.CCNone}
	pfc, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Params = fabric.Params{LinkLayer: fabric.LinkRoCE}
	m, dc := runWithInvariants(t, cfg)
	checkConservation(t, g, cfg, dc)
	for _, r := range []struct {
		name string
		res  *Result
	}{{"PFC only", pfc}, {"DCQCN", dc}} {
		t.Logf("%s: time %v, pause %v, %d PAUSE frames, %d marks, %d CNPs, %d drops",
			r.name, r.res.Time, r.res.PauseTime, r.res.PauseFrames, r.res.ECNMarks, r.res.CNPs, r.res.Drops)
	}
	if pfc.ECNMarks == 0 || pfc.CNPs != 0 {
		t.Errorf("PFC only: %d marks, %d CNPs; want marks counted and no CNPs", pfc.ECNMarks, pfc.CNPs)
	}
	if dc.ECNMarks == 0 || dc.CNPs == 0 {
		t.Errorf("DCQCN: %d marks, %d CNPs; want both", dc.ECNMarks, dc.CNPs)
	}
	if dc.PauseTime*2 > pfc.PauseTime {
		t.Errorf("paused %v with DCQCN, %v with PFC alone; want less than half", dc.PauseTime, pfc.PauseTime)
	}
	if dc.Drops != 0 || pfc.Drops != 0 {
		t.Errorf("drops: %d with DCQCN, %d with PFC alone", dc.Drops, pfc.Drops)
	}
	// The senders' rates after the incast, and as their timers run on.
	end := m.sim.Now()
	limited := 0
	rps := roceOf(t, m.n).rps
	for i := range rps {
		r := rps[i]
		line := float64(m.n.ports[m.n.qps[i].port].rate)
		if r.cut < 0 {
			t.Errorf("QP %d never got a CNP", i)
			continue
		}
		if r.limited {
			limited++
		}
		prev := r.rc
		for at := end; at <= end+100*des.Millisecond; at += 5 * des.Millisecond {
			r.advance(&m.n.p.DCQCN, line, at)
			if r.rc < prev {
				t.Errorf("QP %d: rate fell from %.3g to %.3g b/s with no CNP", i, prev, r.rc)
			}
			prev = r.rc
		}
		if r.limited || r.rc != line {
			t.Errorf("QP %d: at %.3g b/s 100 ms after the incast; want back at line rate %.3g", i, r.rc, line)
		}
	}
	if limited == 0 {
		t.Error("no QP was below line rate at the end of the incast")
	}
}

// TestDCQCNReactionPoint checks the reaction point's arithmetic against
// the paper's rules: a cut halves the rate at α = 1, fast recovery halves
// the distance to the target rate each stage for F stages, then additive
// increase raises the target by R_AI, hyper increase (both counters past
// F) by R_HAI; α decays by (1-g) per K without a CNP; no cut goes below
// the minimum rate; within R_AI of line rate the QP is unlimited.
func TestDCQCNReactionPoint(t *testing.T) {
	g := fatTreeK(t, 4)
	m, err := build(Config{Graph: g, Schedule: oneSend(), Bytes: 1 << 20, Params: fabric.Params{LinkLayer: fabric.LinkRoCE}})
	if err != nil {
		t.Fatal(err)
	}
	n := m.n
	d := n.p.DCQCN
	const line = 400e9
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9*want {
			t.Errorf("%s: %.6g; want %.6g", what, got, want)
		}
	}
	r := rpState{rc: line, rt: line, alpha: 1, cut: -1}
	t0 := 100 * des.Microsecond
	r.decrease(&d, line, t0)
	near("first cut: Rc", r.rc, line/2)
	near("first cut: Rt", r.rt, line)
	near("first cut: α", r.alpha, 1)
	r.decrease(&d, line, t0+des.Microsecond) // less than K: α not decayed
	near("second cut: Rc", r.rc, line/4)
	near("second cut: Rt", r.rt, line/2)
	t1 := t0 + des.Microsecond
	// F stages of fast recovery.
	r.advance(&d, line, t1+des.Time(d.FastStages)*d.RateTimer)
	want := line/2 - (line/2-line/4)/math.Pow(2, float64(d.FastStages))
	near("after fast recovery: Rc", r.rc, want)
	near("after fast recovery: Rt", r.rt, line/2)
	// Additive increase.
	r.advance(&d, line, t1+des.Time(d.FastStages+1)*d.RateTimer)
	near("additive increase: Rt", r.rt, line/2+d.RateAI)
	near("additive increase: Rc", r.rc, (line/2+d.RateAI+want)/2)
	// Hyper increase once the byte counter is past F too.
	rt, rc := r.rt, r.rc
	r.bc = int32(d.FastStages) + 1
	r.t++
	r.increase(&d, line)
	near("hyper increase: Rt", r.rt, rt+d.RateHAI)
	near("hyper increase: Rc", r.rc, (rt+d.RateHAI+rc)/2)
	// α decays by (1-g) per whole K since the last cut.
	k := int64(7)
	at := t1 + des.Time(k)*d.AlphaTimer + d.AlphaTimer/2
	r.advance(&d, line, at)
	before := r.rc
	r.decrease(&d, line, at)
	a := math.Pow(1-d.G, float64(k))
	near("cut after 7 K: Rc", r.rc, before*(1-a/2))
	near("cut after 7 K: α", r.alpha, (1-d.G)*a+d.G)
	// The floor.
	for i := range 60 {
		r.decrease(&d, line, at+des.Time(i+1)*des.Nanosecond)
	}
	near("after many cuts: Rc", r.rc, d.MinRate)
	// Back to line rate.
	r = rpState{rc: line - d.RateAI*1.5, rt: line, alpha: 1, cut: 0, limited: true}
	r.increase(&d, line)
	if r.limited || r.rc != line || r.rt != line {
		t.Errorf("within R_AI of line rate: Rc %.6g, Rt %.6g, limited %v; want line rate, unlimited", r.rc, r.rt, r.limited)
	}
}

// TestDCQCNPacing: a QP whose rate DCQCN has cut to a quarter of the line
// paces its packets: an idle-path transfer takes the alpha-beta time at a
// quarter of the rate (within 2%: the per-message overhead overlaps the
// gap after a message's last packet), where at line rate it takes a
// quarter of that.
func TestDCQCNPacing(t *testing.T) {
	g := fatTreeK(t, 4)
	const b = 4 << 20
	cfg := Config{Graph: g, Schedule: oneSend(), Bytes: b, ElemSize: 1, GPUs: []int32{0, 2}, Params: fabric.Params{LinkLayer: fabric.LinkRoCE}}
	m, err := build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rps := roceOf(t, m.n).rps
	if len(rps) != 1 {
		t.Fatalf("%d QPs; want 1", len(rps))
	}
	line := float64(m.n.ports[m.n.qps[0].port].rate)
	// Cut at time 0 (twice: Rt = Rc = line/4), well before the first rate increase.
	rps[0].decrease(&m.n.p.DCQCN, line, 0)
	rps[0].decrease(&m.n.p.DCQCN, line, 0)
	rps[0].rt = rps[0].rc
	if rc := rps[0].rc; rc != line/4 {
		t.Fatalf("rate %g after two cuts; want %g", rc, line/4)
	}
	if err := m.run(time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := m.n.Verify(); err != nil {
		t.Fatal(err)
	}
	res := m.result(cfg, 0)
	p := m.n.p
	path := m.w.conns[0].lat - p.NICLatency
	slow := predict(p, g.MTU, line/4, b, []des.Time{path})
	fast := predict(p, g.MTU, line, b, []des.Time{path})
	t.Logf("at a quarter of line rate %v (alpha-beta %v); at line rate it would take %v", res.Time, slow, fast)
	if e := math.Abs(float64(res.Time-slow)) / float64(slow); e > 0.02 {
		t.Errorf("paced at %g b/s: %v; alpha-beta at that rate %v (off by %.2f%%)", line/4, res.Time, slow, 100*e)
	}
}

// TestRoCEDeterministic: a RoCE run with DCQCN, where ECN marking draws
// from the seeded random source, is a function of its Config and seed.
func TestRoCEDeterministic(t *testing.T) {
	_, cfg := incastTree(t)
	cfg.Params = fabric.Params{LinkLayer: fabric.LinkRoCE, VLs: 2}
	cfg.Seed = 5
	var runs [2]*Result
	for i := range runs {
		res, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		res.Wall = 0
		runs[i] = res
	}
	if !reflect.DeepEqual(runs[0], runs[1]) {
		t.Errorf("seed 5 twice differs: time %v/%v, events %d/%d, marks %d/%d, CNPs %d/%d, pause %v/%v",
			runs[0].Time, runs[1].Time, runs[0].Events, runs[1].Events, runs[0].ECNMarks, runs[1].ECNMarks,
			runs[0].CNPs, runs[1].CNPs, runs[0].PauseTime, runs[1].PauseTime)
	}
	if runs[0].ECNMarks == 0 {
		t.Error("no marks: the test does not exercise the random source")
	}
}

// TestRoCEFailure: a spine's link down to a leaf fails with packets queued
// on it (TestFailureDownlink's case, with RoCE). The stranded packets are
// lost; the receiver sees the gap at the next packet and NAKs, so the QPs
// go back without waiting for the retry timeout.
func TestRoCEFailure(t *testing.T) {
	g := fatTreeK(t, 8)
	cfg := Config{Graph: g, Schedule: flowSchedule(3, [2]int{1, 0}, [2]int{2, 0}), GPUs: []int32{1, 4, 8}, Bytes: 1 << 20,
		Params: fabric.Params{LinkLayer: fabric.LinkRoCE}}
	base, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	down := spineDown(t, g, base.Ports)
	m, queued, at, err := failWhenQueued(t, cfg, down, base.Time/4)
	if err != nil {
		t.Fatalf("failing %s at %v with %d packets queued on it: %v", g.LinkName(g.Ports[down].Link), at, queued, err)
	}
	res := m.result(cfg, 0)
	t.Logf("failing %s at %v with %d queued: %d packets lost, %d discarded; done at %v (%v without the failure)",
		g.LinkName(g.Ports[down].Link), at, queued, res.LostPkts-res.Discards, res.Discards, res.Time, base.Time)
	if res.LostPkts == 0 {
		t.Error("no packet lost")
	}
	if res.Time >= at+fabric.Defaults.RetryTimeout {
		t.Errorf("done at %v: the QPs waited for the retry timeout instead of going back on the NAK", res.Time)
	}
}

// TestRoCEConfigErrors: bad RoCE parameters are refused, naming the field.
func TestRoCEConfigErrors(t *testing.T) {
	g := fatTreeK(t, 4)
	ok := Config{Graph: g, Schedule: oneSend(), Bytes: 1 << 16, Params: fabric.Params{LinkLayer: fabric.LinkRoCE}}
	for _, tc := range []struct {
		p    func(*fabric.Params)
		want string
	}{
		{func(p *fabric.Params) { p.LinkLayer = 2 }, "linklayer(2)"},
		{func(p *fabric.Params) { p.CC = 3 }, "cc(3)"},
		{func(p *fabric.Params) { p.LinkLayer, p.CC = fabric.LinkIB, fabric.CCDCQCN }, "dcqcn needs link layer roce"},
		{func(p *fabric.Params) { p.Routing = fabric.RouteAdaptive }, "adaptive routing with link layer roce"},
		{func(p *fabric.Params) { p.PFCXoff = -1 }, "PFC Xoff -1"},
		{func(p *fabric.Params) { p.PFCHysteresis = fabric.Defaults.PFCXoff + 1 }, "PFC hysteresis"},
		{func(p *fabric.Params) { p.PFCHeadroom = -5 }, "PFC headroom -5"},
		{func(p *fabric.Params) { p.PFCXoff, p.PFCHysteresis, p.PFCHeadroom = 100, 10, 100 }, "less than one"},
		{func(p *fabric.Params) { p.ECNKmin, p.ECNKmax = 2000, 1000 }, "ECN Kmin 2000"},
		{func(p *fabric.Params) { p.ECNPmax = 1.5 }, "ECN Pmax 1.5"},
		{func(p *fabric.Params) { p.ECNPmax = math.NaN() }, "ECN Pmax"},
		{func(p *fabric.Params) { p.DCQCN.G = 2 }, "DCQCN g 2"},
		{func(p *fabric.Params) { p.DCQCN.RateTimer = -1 }, "rate timer"},
		{func(p *fabric.Params) { p.DCQCN.ByteCounter = -1 }, "byte counter -1"},
		{func(p *fabric.Params) { p.DCQCN.FastStages = -1 }, "fast-recovery stages -1"},
		{func(p *fabric.Params) { p.DCQCN.RateAI = 10 }, "R_AI 10"},
		{func(p *fabric.Params) { p.DCQCN.MinRate = math.Inf(1) }, "minimum rate"},
	} {
		cfg := ok
		tc.p(&cfg.Params)
		_, err := Run(cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v; want an error wrapping ErrConfig saying %q", cfg.Params, err, tc.want)
		}
	}
	for _, s := range []string{"ib", "roce"} {
		if l, err := fabric.ParseLinkLayer(s); err != nil || l.String() != s {
			t.Errorf("ParseLinkLayer(%q) = %v, %v", s, l, err)
		}
	}
	for _, s := range []string{"auto", "none", "dcqcn"} {
		if c, err := fabric.ParseCongestionControl(s); err != nil || c.String() != s {
			t.Errorf("ParseCongestionControl(%q) = %v, %v", s, c, err)
		}
	}
	if _, err := fabric.ParseLinkLayer("ethernet"); err == nil {
		t.Error(`ParseLinkLayer("ethernet"): no error`)
	}
	if _, err := fabric.ParseCongestionControl("hpcc"); err == nil {
		t.Error(`ParseCongestionControl("hpcc"): no error`)
	}
	if _, err := Run(ok); err != nil {
		t.Fatalf("the good config: %v", err)
	}
}

// TestRoCEAllocs: once a RoCE incast with DCQCN is under way (PFC frames,
// marks, CNPs, pacing), handling events allocates nothing.
func TestRoCEAllocs(t *testing.T) {
	_, cfg := incastTree(t)
	cfg.Bytes = 64 << 20
	cfg.Params = fabric.Params{LinkLayer: fabric.LinkRoCE}
	m, err := build(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.w.start()
	until := 300 * des.Microsecond
	m.sim.Run(m.n, until, nil) // warm up: queues and logs reach their working size
	allocs := testing.AllocsPerRun(5, func() {
		until += 20 * des.Microsecond
		m.sim.Run(m.n, until, nil)
	})
	if m.w.left == 0 {
		t.Fatal("the run ended during the measurement")
	}
	var frames, cnps int64
	for i := range m.n.ports {
		frames += m.n.ports[i].pauseFrames
		cnps += m.n.ports[i].cnps
	}
	if frames == 0 || cnps == 0 {
		t.Errorf("%d PAUSE frames, %d CNPs so far: the incast does not exercise PFC and DCQCN", frames, cnps)
	}
	if allocs != 0 {
		t.Errorf("%v allocations per 20 µs of simulated time, want 0", allocs)
	}
}

// TestRoCERandomLoss injects faults: switches drop 2% of the packets that
// reach them (resent ones too), on top of what PFC does, for several
// seeds, schedules and settings (ECMP, two priorities, three QPs per
// connection, DCQCN on and off, tiny headroom). Every run completes, with
// the invariants checked after every event, and the payload delivered
// once: the NICs injected what the schedule moves, and the wire bytes
// NICs sent minus those they were sent are the bytes lost in the fabric.
func TestRoCERandomLoss(t *testing.T) {
	t.Parallel() // see parallel in validate_test.go
	g := fatTreeK(t, 4)
	inc, err := PatternSchedule(Incast, 8, 0)
	if err != nil {
		t.Fatal(err)
	}
	a2a, err := PatternSchedule(AllToAll, 8, 0)
	if err != nil {
		t.Fatal(err)
	}
	ring, err := algo.Generate(algo.AllReduce, algo.Ring, 8, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		s *algo.Schedule
		p fabric.Params
	}{
		{inc, fabric.Params{CC: fabric.CCNone}},
		{inc, fabric.Params{VLs: 2, QPsPerConn: 3, Routing: fabric.RouteECMP}},
		{a2a, fabric.Params{Chunk: 20000, Slots: 2, PFCHeadroom: 4096}},
		{ring, fabric.Params{CC: fabric.CCNone, VLs: 2, QPsPerConn: 2}},
	} {
		for seed := uint64(1); seed <= 3; seed++ {
			c.p.LinkLayer = fabric.LinkRoCE
			c.p.RetryTimeout = 50 * des.Microsecond
			cfg := Config{Graph: g, Schedule: c.s, Bytes: 256 << 10, Seed: seed, Params: c.p}
			m, err := build(cfg)
			if err != nil {
				t.Fatal(err)
			}
			m.n.check, roceOf(t, m.n).dropP = true, 0.02
			if err := m.run(time.Now()); err != nil {
				t.Fatalf("case %d seed %d: %v", i, seed, err)
			}
			if err := m.n.Verify(); err != nil {
				t.Fatalf("case %d seed %d: %v", i, seed, err)
			}
			res := m.result(cfg, 0)
			want := scheduleTraffic(cfg.Schedule, cfg.Bytes, 4, 1, 1, g.MTU, m.n.p.Chunk, nil)
			sent, recv := nicWireBytes(g, res.Ports)
			if res.Payload != want.cross || res.Packets != want.crossPkts || sent-recv != res.LostWire {
				t.Errorf("case %d seed %d: injected %d B in %d packets (schedule: %d in %d); NIC wire bytes sent - received %d, lost in the fabric %d",
					i, seed, res.Payload, res.Packets, want.cross, want.crossPkts, sent-recv, res.LostWire)
			}
			if res.Drops == 0 {
				t.Errorf("case %d seed %d: nothing dropped", i, seed)
			}
			if seed == 1 {
				t.Logf("case %d: %v, %d dropped, %d discarded, %d packets resent of %d", i, res.Time, res.Drops, res.Discards, res.LostPkts, res.Packets)
			}
		}
	}
}
