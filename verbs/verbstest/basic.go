package verbstest

import (
	"errors"
	"testing"

	"github.com/ibex-rdma/ibex/verbs"
)

func testDevice(t *testing.T, cfg Config) {
	a, _ := openPair(t, cfg)
	d := a.QueryDevice()
	if d.MaxQP < 1000 || d.MaxQPWR < 64 || d.MaxSGE < 4 || d.MaxCQE < 1024 || d.MaxMRSize < 64<<20 ||
		d.MaxMsgSize < 64<<20 || d.PhysPortCnt < 1 || d.MaxInlineData < 64 {
		t.Fatalf("device attributes below what the suite needs: %+v", d)
	}
	if d.AtomicCap == verbs.AtomicNone {
		t.Fatalf("atomic_cap is ATOMIC_NONE; ibex providers implement atomics")
	}
	p, err := a.QueryPort(1)
	must(t, err, "query port 1")
	if p.State != verbs.PortActive || !p.ActiveMTU.Valid() || p.ActiveMTU > p.MaxMTU || p.MaxMsgSize == 0 {
		t.Fatalf("port 1 attributes: %+v", p)
	}
	_, err = a.QueryPort(0)
	errContains(t, err, verbs.ErrInvalidArgument, "port 0")
	_, err = a.QueryPort(d.PhysPortCnt + 1)
	errContains(t, err, verbs.ErrInvalidArgument)
	_, err = verbs.Open("no-such-device-xyz")
	errContains(t, err, verbs.ErrNoDevice, "no-such-device-xyz")
}

// newPD allocates a PD in a local context, deallocated at cleanup.
func newPD(t testing.TB, c *verbs.Context) *verbs.PD {
	t.Helper()
	pd, err := c.AllocPD()
	must(t, err, "alloc pd")
	t.Cleanup(func() { mustCleanup(t, pd.Dealloc(), "dealloc pd") })
	return pd
}

func testMR(t *testing.T, cfg Config) {
	a, _ := openPair(t, cfg)
	pd := newPD(t, a)
	buf := Buf(a, 4096)
	_, err := pd.RegMR(buf, verbs.AccessRemoteWrite)
	errContains(t, err, verbs.ErrInvalidArgument, "LOCAL_WRITE")
	_, err = pd.RegMR(buf, verbs.AccessRemoteAtomic|verbs.AccessRemoteRead)
	errContains(t, err, verbs.ErrInvalidArgument, "LOCAL_WRITE")
	_, err = pd.RegMR(nil, verbs.AccessLocalWrite)
	errContains(t, err, verbs.ErrInvalidArgument, "length 0")
	_, err = pd.RegMR(buf, 1<<7)
	errContains(t, err, verbs.ErrInvalidArgument, "access")

	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
	must(t, err, "reg mr")
	if mr.Len() != len(buf) || mr.Addr() == 0 || &mr.Bytes()[0] != &buf[0] || mr.Access() != verbs.AccessLocalWrite|verbs.AccessRemoteRead {
		t.Fatalf("mr fields: len %d addr %#x access %v", mr.Len(), mr.Addr(), mr.Access())
	}
	if mr.LKey() == mr.RKey() {
		t.Fatalf("lkey == rkey (%#x): a peer given the rkey could use it as an lkey", mr.LKey())
	}
	must(t, mr.Dereg(), "dereg")
	errContains(t, mr.Dereg(), verbs.ErrClosed)
	// The same buffer may be registered twice, with different keys.
	m1, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	must(t, err, "reg 1")
	m2, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	must(t, err, "reg 2")
	if m1.LKey() == m2.LKey() || m1.RKey() == m2.RKey() {
		t.Fatalf("two registrations share keys")
	}
	must(t, m1.Dereg(), "dereg 1")
	must(t, m2.Dereg(), "dereg 2")
}

// testMRKeys checks rkeys are not sequential or otherwise predictable from
// one another: 256 registrations give 256 distinct keys whose successive
// differences are not constant and which spread over the 32-bit space.
func testMRKeys(t *testing.T, cfg Config) {
	a, _ := openPair(t, cfg)
	pd := newPD(t, a)
	buf := Buf(a, 64)
	seen := map[uint32]bool{}
	var keys []uint32
	for range 256 {
		mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		must(t, err, "reg mr")
		defer func() { _ = mr.Dereg() }()
		if seen[mr.RKey()] {
			t.Fatalf("rkey %#x issued twice", mr.RKey())
		}
		seen[mr.RKey()] = true
		keys = append(keys, mr.RKey())
	}
	diffs := map[uint32]int{}
	var hi int
	for i := 1; i < len(keys); i++ {
		diffs[keys[i]-keys[i-1]]++
		if keys[i]&0x80000000 != 0 {
			hi++
		}
	}
	if len(diffs) < 200 {
		t.Fatalf("rkeys look sequential: only %d distinct steps in 255 (%#x...)", len(diffs), keys[:8])
	}
	if hi < 64 || hi > 192 {
		t.Fatalf("rkeys do not use the top bit evenly: %d of 255 set", hi)
	}
}

func testResources(t *testing.T, cfg Config) {
	a, b := openPair(t, cfg)
	pd, err := a.AllocPD()
	must(t, err, "alloc pd")
	cq, err := a.CreateCQ(16)
	must(t, err, "create cq")
	_, err = a.CreateCQ(0)
	errContains(t, err, verbs.ErrInvalidArgument, "depth 0")
	_, err = a.CreateCQ(a.QueryDevice().MaxCQE + 1)
	errContains(t, err, verbs.ErrInvalidArgument)
	mr, err := pd.RegMR(Buf(pd.Context(), 64), verbs.AccessLocalWrite)
	must(t, err, "reg mr")
	qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq})
	must(t, err, "create qp")
	if qp.State() != verbs.QPSReset {
		t.Fatalf("new qp in %v, want RESET", qp.State())
	}
	_, err = pd.CreateQP(verbs.QPInitAttr{SendCQ: cq})
	errContains(t, err, verbs.ErrInvalidArgument, "recv_cq")
	_, err = pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendSGE: a.QueryDevice().MaxSGE + 1}})
	errContains(t, err, verbs.ErrInvalidArgument, "max_send_sge")
	_, err = pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxInlineData: a.QueryDevice().MaxInlineData + 1}})
	errContains(t, err, verbs.ErrInvalidArgument, "max_inline_data")
	// Only when b is another context in this process: a remote end's CQ
	// is no object here, and one context has no other's CQ to offer.
	if lb, ok := b.(localCtx); ok && lb.c != a {
		cqb, err := lb.c.CreateCQ(4)
		must(t, err, "create cq on b")
		_, err = pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cqb})
		errContains(t, err, verbs.ErrInvalidArgument, "another context")
		must(t, cqb.Destroy(), "destroy cq b")
	}
	// Destruction order is enforced.
	errContains(t, cq.Destroy(), verbs.ErrBusy, "QPs")
	errContains(t, pd.Dealloc(), verbs.ErrBusy)
	errContains(t, a.Close(), verbs.ErrBusy)
	must(t, qp.Destroy(), "destroy qp")
	errContains(t, qp.Destroy(), verbs.ErrClosed)
	errContains(t, qp.PostSend([]verbs.SendWR{{}}), verbs.ErrClosed)
	must(t, mr.Dereg(), "dereg")
	must(t, cq.Destroy(), "destroy cq")
	must(t, pd.Dealloc(), "dealloc pd")
	errContains(t, pd.Dealloc(), verbs.ErrClosed)
}

func modify(t testing.TB, qp qpHandle, a verbs.QPAttr, mask verbs.AttrMask) {
	t.Helper()
	must(t, qp.Modify(&a, mask), "modify")
}

func testStateMachine(t *testing.T, cfg Config) {
	ca, cb := openPair(t, cfg)
	a, b := newEnd(t, localCtx{ca}, endOpts{}), newEnd(t, cb, endOpts{})
	qp := a.qp
	rinfo := b.qp.Info()
	initMask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags
	rtrMask := verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
	rtsMask := verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
	attr := verbs.QPAttr{Port: 1, AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead,
		AH: verbs.AH{DGID: rinfo.GID, PortNum: 1}, PathMTU: rinfo.MTU, DestQPN: rinfo.QPN, RQPSN: rinfo.PSN,
		MaxDestRdAtomic: 4, MinRNRTimer: 12, SQPSN: qp.InitialPSN(), Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxQPRdAtomic: 4}

	// Illegal transitions name both states and the reason.
	attr.State = verbs.QPSRTR
	errContains(t, qp.Modify(&attr, rtrMask), verbs.ErrInvalidState, "RESET→RTR", "illegal transition")
	attr.State = verbs.QPSRTS
	errContains(t, qp.Modify(&attr, rtsMask), verbs.ErrInvalidState, "RESET→RTS")
	attr.State = verbs.QPSSQE
	errContains(t, qp.Modify(&attr, verbs.AttrState), verbs.ErrInvalidState, "SQE")
	// Sends are refused before RTS, receives before INIT.
	errContains(t, qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend}}), verbs.ErrInvalidState, "RESET")
	errContains(t, qp.PostRecv([]verbs.RecvWR{{ID: 1}}), verbs.ErrInvalidState, "RESET")

	// RESET→INIT needs its attributes.
	attr.State = verbs.QPSInit
	errContains(t, qp.Modify(&attr, verbs.AttrState|verbs.AttrPort), verbs.ErrInvalidArgument, "missing", "PKEY_INDEX", "ACCESS_FLAGS")
	errContains(t, qp.Modify(&attr, initMask|verbs.AttrTimeout), verbs.ErrInvalidArgument, "TIMEOUT", "not allowed")
	modify(t, qp, attr, initMask)
	if qp.State() != verbs.QPSInit {
		t.Fatalf("state %v after RESET→INIT", qp.State())
	}
	must(t, qp.PostRecv([]verbs.RecvWR{{ID: 1}}), "post recv in INIT")
	errContains(t, qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend}}), verbs.ErrInvalidState, "INIT")
	attr.State = verbs.QPSRTS
	errContains(t, qp.Modify(&attr, rtsMask), verbs.ErrInvalidState, "INIT→RTS")

	attr.State = verbs.QPSRTR
	errContains(t, qp.Modify(&attr, rtrMask&^verbs.AttrDestQPN&^verbs.AttrPathMTU), verbs.ErrInvalidArgument, "PATH_MTU", "DEST_QPN")
	attr.CurState = verbs.QPSRTS
	errContains(t, qp.Modify(&attr, rtrMask|verbs.AttrCurState), verbs.ErrInvalidState, "cur_qp_state")
	modify(t, qp, attr, rtrMask)
	errContains(t, qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend}}), verbs.ErrInvalidState, "RTR")
	attr.State = verbs.QPSRTS
	modify(t, qp, attr, rtsMask)
	got := qp.Query()
	if got.State != verbs.QPSRTS || got.DestQPN != rinfo.QPN || got.RQPSN != rinfo.PSN || got.Timeout != 14 ||
		got.RetryCnt != 7 || got.MaxDestRdAtomic != 4 || got.PathMTU != rinfo.MTU || got.AccessFlags != attr.AccessFlags {
		t.Fatalf("query after RTS: %+v", got)
	}
	// RTS→RTS may change min_rnr_timer and access, nothing path-related.
	attr.MinRNRTimer = 3
	modify(t, qp, attr, verbs.AttrMinRNRTimer)
	if qp.Query().MinRNRTimer != 3 {
		t.Fatalf("min_rnr_timer not applied")
	}
	errContains(t, qp.Modify(&attr, verbs.AttrDestQPN), verbs.ErrInvalidArgument, "DEST_QPN", "RTS→RTS")
	// RTS→SQD→RTS.
	attr.State = verbs.QPSSQD
	modify(t, qp, attr, verbs.AttrState)
	attr.State = verbs.QPSRTS
	modify(t, qp, attr, verbs.AttrState)
	// Any state → ERR → RESET, and the QP is reusable.
	attr.State = verbs.QPSErr
	modify(t, qp, attr, verbs.AttrState)
	if qp.Err() == nil {
		t.Fatalf("Err() is nil in ERR")
	}
	expectWC(t, a.wait1(), 1, verbs.WCWRFlushErr, 0) // the receive posted in INIT
	attr.State = verbs.QPSInit
	errContains(t, qp.Modify(&attr, initMask), verbs.ErrInvalidState, "ERR→INIT")
	attr.State = verbs.QPSReset
	modify(t, qp, attr, verbs.AttrState)
	if qp.Err() != nil || qp.State() != verbs.QPSReset {
		t.Fatalf("after RESET: state %v err %v", qp.State(), qp.Err())
	}
	// A reset QP connects again and works.
	must(t, qp.Connect(rinfo, verbs.ConnectOptions{}), "reconnect")
	must(t, b.qp.Connect(qp.Info(), verbs.ConnectOptions{}), "connect b")
	b.recv(verbs.RecvWR{ID: 9, SGL: []verbs.SGE{b.sge(0, 16)}})
	a.post(verbs.SendWR{ID: 8, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.sge(0, 16)}})
	wcs := a.wait(1)
	expectWC(t, wcs[0], 8, verbs.WCSuccess, verbs.WCSend)
	wcs = b.wait(1)
	expectWC(t, wcs[0], 9, verbs.WCSuccess, verbs.WCRecv)
}

func testStateValues(t *testing.T, cfg Config) {
	a, _ := openPair(t, cfg)
	e := newEnd(t, localCtx{a}, endOpts{})
	dev := a.QueryDevice()
	bad := []struct {
		name string
		set  verbs.AttrMask
		attr verbs.QPAttr
		want string
	}{
		{"retry_cnt", verbs.AttrRetryCnt, verbs.QPAttr{RetryCnt: 8}, "retry_cnt 8"},
		{"rnr_retry", verbs.AttrRNRRetry, verbs.QPAttr{RNRRetry: 9}, "rnr_retry 9"},
		{"timeout", verbs.AttrTimeout, verbs.QPAttr{Timeout: 32}, "timeout 32"},
		{"min_rnr_timer", verbs.AttrMinRNRTimer, verbs.QPAttr{MinRNRTimer: 40}, "min_rnr_timer 40"},
		{"path_mtu", verbs.AttrPathMTU, verbs.QPAttr{PathMTU: 9}, "path_mtu 9"},
		{"dest_qpn", verbs.AttrDestQPN, verbs.QPAttr{DestQPN: 1 << 24}, "dest_qp_num"},
		{"rq_psn", verbs.AttrRQPSN, verbs.QPAttr{RQPSN: 1 << 24}, "rq_psn"},
		{"sq_psn", verbs.AttrSQPSN, verbs.QPAttr{SQPSN: 1 << 24}, "sq_psn"},
		{"max_dest_rd_atomic", verbs.AttrMaxDestRdAtomic, verbs.QPAttr{MaxDestRdAtomic: uint8(min(dev.MaxQPRdAtom+1, 255))}, "max_dest_rd_atomic"},
		{"port", verbs.AttrPort, verbs.QPAttr{Port: dev.PhysPortCnt + 1}, "port_num"},
		{"pkey_index", verbs.AttrPKeyIndex, verbs.QPAttr{PKeyIndex: 5}, "pkey_index 5"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			if dev.MaxQPRdAtom >= 255 && tc.name == "max_dest_rd_atomic" {
				t.Skip("device allows 255 max_dest_rd_atomic; no larger value fits the attribute")
			}
			err := e.qp.Connect(e.qp.Info(), verbs.ConnectOptions{Set: tc.set, Attr: tc.attr})
			errContains(t, err, verbs.ErrInvalidArgument, tc.want)
			// The failed Connect may have left the QP in INIT or RTR.
			modify(t, e.qp, verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState)
		})
	}
	err := e.qp.Modify(&verbs.QPAttr{}, 1<<30)
	errContains(t, err, verbs.ErrInvalidArgument, "unsupported attribute")
}

func testConnInfo(t *testing.T, cfg Config) {
	a, _ := openPair(t, cfg)
	e := newEnd(t, localCtx{a}, endOpts{})
	ci := e.qp.Info()
	if ci.QPN != e.qp.Num() || ci.PSN != e.qp.InitialPSN() || ci.PSN > 0xffffff || !ci.MTU.Valid() {
		t.Fatalf("Info() = %v", ci)
	}
	ci.RKey, ci.Addr, ci.Len = e.mr.RKey(), e.mr.Addr(), uint64(e.mr.Len())
	bin, err := ci.MarshalBinary()
	must(t, err, "marshal binary")
	var back verbs.ConnInfo
	must(t, back.UnmarshalBinary(bin), "unmarshal binary")
	if back != ci {
		t.Fatalf("binary round trip: %v != %v", back, ci)
	}
	txt, err := ci.MarshalText()
	must(t, err, "marshal text")
	back = verbs.ConnInfo{}
	must(t, back.UnmarshalText(txt), "unmarshal text")
	if back != ci {
		t.Fatalf("text round trip: %v != %v (%s)", back, ci, txt)
	}
	for _, bad := range []struct{ in, want string }{
		{"qpn=0x11", "missing"},
		{string(txt) + " qpn=1", "twice"},
		{"qpn=0x1000000 psn=1 gid=::1 lid=0 mtu=1024 rkey=0 addr=0 len=0", "qpn"},
		{"qpn=1 psn=1 gid=::1 lid=0 mtu=1000 rkey=0 addr=0 len=0", "mtu"},
		{"qpn=1 psn=1 gid=zz lid=0 mtu=1024 rkey=0 addr=0 len=0", "gid"},
		{"qpn=1 psn=1 gid=::1 lid=0 mtu=1024 rkey=0 addr=0 len=0 color=red", "unknown field"},
		{"qpn", "key=value"},
	} {
		var c verbs.ConnInfo
		errContains(t, c.UnmarshalText([]byte(bad.in)), verbs.ErrInvalidArgument, bad.want)
	}
	var c verbs.ConnInfo
	errContains(t, c.UnmarshalBinary(bin[:10]), verbs.ErrInvalidArgument, "bytes")
	bin[0] = 99
	errContains(t, c.UnmarshalBinary(bin), verbs.ErrInvalidArgument, "version")
	if !errors.Is(c.UnmarshalBinary(nil), verbs.ErrInvalidArgument) {
		t.Fatal("nil binary conn info accepted")
	}
}
