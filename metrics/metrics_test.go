package metrics_test

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ibex-rdma/ibex/internal/ibexdwire"
	"github.com/ibex-rdma/ibex/metrics"
	"github.com/ibex-rdma/ibex/provider/loopback"
	"github.com/ibex-rdma/ibex/provider/udp"
	"github.com/ibex-rdma/ibex/verbs"
)

func TestMain(m *testing.M) {
	// A daemon running on this host must not take udp devices over.
	os.Setenv("IBEX_DAEMON", "off")
	goleak.VerifyTestMain(m)
}

// end is one side of a connected pair.
type end struct {
	ctx *verbs.Context
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
	mr  *verbs.MR
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func newEnd(t testing.TB, device string) *end {
	t.Helper()
	e := &end{}
	var err error
	e.ctx, err = verbs.Open(device)
	must(t, err)
	e.pd, err = e.ctx.AllocPD()
	must(t, err)
	e.cq, err = e.ctx.CreateCQ(64)
	must(t, err)
	e.mr, err = e.pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	must(t, err)
	e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16}})
	must(t, err)
	t.Cleanup(func() { e.close(t) })
	return e
}

// close destroys what newEnd made; a QP destroyed already is left be.
func (e *end) close(t testing.TB) {
	if e.ctx == nil {
		return
	}
	if !slices.Contains(e.ctx.QPs(), e.qp) {
		e.qp = nil
	}
	for _, f := range []func() error{
		func() error {
			if e.qp == nil {
				return nil
			}
			return e.qp.Destroy()
		}, e.mr.Dereg, e.cq.Destroy, e.pd.Dealloc, e.ctx.Close} {
		if err := f(); err != nil {
			t.Error(err)
		}
	}
	e.ctx = nil
}

func connect(t testing.TB, a, b *end, opt verbs.ConnectOptions) {
	t.Helper()
	must(t, a.qp.Connect(b.qp.Info(), opt))
	must(t, b.qp.Connect(a.qp.Info(), opt))
}

func (e *end) post(t testing.TB, wrs ...verbs.SendWR) {
	t.Helper()
	must(t, e.qp.PostSend(wrs))
}

func (e *end) write(id uint64, to *end, n uint32) verbs.SendWR {
	return verbs.SendWR{ID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: e.mr.Addr(), Length: n, LKey: e.mr.LKey()}}, RemoteAddr: to.mr.Addr(), RKey: to.mr.RKey()}
}

func (e *end) send(id uint64, n uint32) verbs.SendWR {
	return verbs.SendWR{ID: id, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: e.mr.Addr(), Length: n, LKey: e.mr.LKey()}}}
}

// wait returns the next n completions of e's CQ.
func (e *end) wait(t testing.TB, n int) []verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []verbs.WC
	wc := make([]verbs.WC, n)
	for len(out) < n {
		k, err := e.cq.Poll(wc[:n-len(out)])
		must(t, err)
		out = append(out, wc[:k]...)
		if k == 0 {
			if err := e.cq.Wait(ctx); err != nil {
				t.Fatalf("%d of %d completions: %v", len(out), n, err)
			}
		}
	}
	return out
}

// qpOf finds a QP in a snapshot.
func qpOf(t testing.TB, s metrics.Snapshot, qpn uint32) metrics.QP {
	t.Helper()
	for _, q := range s.QPs {
		if q.QPN == qpn {
			return q
		}
	}
	t.Fatalf("qp %#x not in the snapshot (%d QPs)", qpn, len(s.QPs))
	return metrics.QP{}
}

func value(t testing.TB, v interface{ Value(string) (uint64, bool) }, name string) uint64 {
	t.Helper()
	n, ok := v.Value(name)
	if !ok {
		t.Fatalf("no counter %s", name)
	}
	return n
}

func names(l []metrics.Counter) []string {
	var out []string
	for _, c := range l {
		out = append(out, c.Name)
	}
	return out
}

// TestNames: the lists are the standard ones, in their order, and every
// port and QP of a snapshot has every name, in that order.
func TestNames(t *testing.T) {
	hw := []string{"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request", "rcvd_rnr_err", "send_rnr_err",
		"rcvd_seq_err", "ack_deferred", "retry_exceeded_err", "retry_rnr_exceeded_err", "completer_retry_err", "send_err",
		"link_downed", "rdma_sends", "rdma_recvs"}
	if !slices.Equal(metrics.HWNames, hw) {
		t.Errorf("HWNames %v, want rxe's %v", metrics.HWNames, hw)
	}
	for _, n := range []string{"SymbolErrorCounter", "LinkErrorRecoveryCounter", "LinkDownedCounter", "PortRcvErrors",
		"PortRcvRemotePhysicalErrors", "PortRcvSwitchRelayErrors", "PortXmitDiscards", "PortXmitConstraintErrors",
		"PortRcvConstraintErrors", "LocalLinkIntegrityErrors", "ExcessiveBufferOverrunErrors", "VL15Dropped", "PortXmitWait",
		"PortXmitData", "PortRcvData", "PortXmitPkts", "PortRcvPkts", "PortUnicastXmitPkts", "PortUnicastRcvPkts",
		"PortMulticastXmitPkts", "PortMulticastRcvPkts"} {
		if !slices.Contains(metrics.PortNames, n) {
			t.Errorf("PortNames lacks %s", n)
		}
	}
	a, b := newEnd(t, "loop0"), newEnd(t, "loop0")
	connect(t, a, b, verbs.ConnectOptions{})
	s := metrics.Process()
	p, ok := s.Port("loop0", 1)
	if !ok {
		t.Fatalf("no loop0/1 in %+v", s.Ports)
	}
	if !slices.Equal(names(p.PMA), metrics.PortNames) || !slices.Equal(names(p.HW), metrics.HWNames) {
		t.Errorf("port names: pma %v hw %v", names(p.PMA), names(p.HW))
	}
	q := qpOf(t, s, a.qp.Num())
	if !slices.Equal(names(q.HW), metrics.HWNames) || q.Device != "loop0" || q.State != "RTS" {
		t.Errorf("qp: %+v", q)
	}
	for _, n := range []string{"retransmits", "cnps_sent", "cnps_recv", "ecn_marked", "window_cuts", "paced",
		"seq_naks_sent", "err_naks_sent", "err_naks_recv", "rnr_naks_sent"} {
		if _, ok := q.Value(n); !ok {
			t.Errorf("qp extra lacks %s: %v", n, names(q.Extra))
		}
	}
	if want := "pid " + strconv.Itoa(os.Getpid()); s.Source != want {
		t.Errorf("source %q, want %q", s.Source, want)
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// TestEveryQPStatsField: each counter of verbs.QPStats shows in a QP's
// counters, so a field added later without a mapping fails here.
func TestEveryQPStatsField(t *testing.T) {
	base := verbs.QPStats{Recvs: 10}
	st := metrics.FromStatus(ibexdwire.Status{Clients: []ibexdwire.ClientStatus{{Device: "d", QPs: []ibexdwire.QPStatus{{QPN: 1, Stats: base}}}}})
	want := st.QPs[0]
	rt := reflect.TypeOf(base)
	for i := range rt.NumField() {
		s := base
		f := reflect.ValueOf(&s).Elem().Field(i)
		f.SetUint(f.Uint() + 1)
		got := metrics.FromStatus(ibexdwire.Status{Clients: []ibexdwire.ClientStatus{{Device: "d", QPs: []ibexdwire.QPStatus{{QPN: 1, Stats: s}}}}}).QPs[0]
		if reflect.DeepEqual(got, want) {
			t.Errorf("verbs.QPStats.%s changes no counter of the QP", rt.Field(i).Name)
		}
	}
}

// TestLoopbackCounts: SENDs and WRITEs on loop0 (the executor path) show
// as rdma_sends and rdma_recvs, the port sums its QPs, and the sums stay
// when the QPs are destroyed.
func TestLoopbackCounts(t *testing.T) {
	a, b := newEnd(t, "loop0"), newEnd(t, "loop0")
	connect(t, a, b, verbs.ConnectOptions{})
	before, _ := metrics.Process().Port("loop0", 1) // QPs destroyed by earlier tests count too
	must(t, b.qp.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{{Addr: b.mr.Addr(), Length: 64, LKey: b.mr.LKey()}}},
		{ID: 2, SGL: []verbs.SGE{{Addr: b.mr.Addr(), Length: 64, LKey: b.mr.LKey()}}}}))
	a.post(t, a.send(1, 8), a.send(2, 8), a.write(3, b, 64))
	for _, wc := range a.wait(t, 3) {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("%v", wc)
		}
	}
	b.wait(t, 2)
	s := metrics.Process()
	qa, qb := qpOf(t, s, a.qp.Num()), qpOf(t, s, b.qp.Num())
	for _, c := range []struct {
		q    metrics.QP
		name string
		want uint64
	}{
		{qa, "rdma_sends", 2}, {qa, "sends", 3}, {qa, "rdma_recvs", 0}, {qb, "rdma_recvs", 2}, {qb, "recvs", 2},
		{qa, "retry_exceeded_err", 0}, {qa, "completer_retry_err", 0}, {qb, "rdma_sends", 0},
	} {
		if got := value(t, c.q, c.name); got != c.want {
			t.Errorf("qp %#x %s = %d, want %d", c.q.QPN, c.name, got, c.want)
		}
	}
	p, _ := s.Port("loop0", 1)
	if got := value(t, p, "rdma_sends") - value(t, before, "rdma_sends"); got != 2 {
		t.Errorf("port rdma_sends grew by %d, want 2", got)
	}
	if got := value(t, p, "rdma_recvs") - value(t, before, "rdma_recvs"); got != 2 {
		t.Errorf("port rdma_recvs grew by %d, want 2", got)
	}
	if v := value(t, p, "PortXmitPkts"); v != 0 {
		t.Errorf("loop0 keeps no port counters, PortXmitPkts = %d", v)
	}
	must(t, a.qp.Destroy())
	must(t, b.qp.Destroy())
	s = metrics.Process()
	if len(s.QPs) != 0 {
		t.Errorf("destroyed QPs listed: %+v", s.QPs)
	}
	after, _ := s.Port("loop0", 1)
	for _, n := range []string{"rdma_sends", "rdma_recvs", "sends"} {
		if value(t, after, n) != value(t, p, n) {
			t.Errorf("port %s %d after the QPs were destroyed, %d before", n, value(t, after, n), value(t, p, n))
		}
	}
	a.close(t)
	b.close(t)
	if s := metrics.Process(); len(s.Ports) != 0 || len(verbs.Contexts()) != 0 {
		t.Errorf("with every context closed: %d ports, %d contexts", len(s.Ports), len(verbs.Contexts()))
	}
}

// TestRetryCounters: a requester whose peer stopped answering retries
// (completer_retry_err) and ends in RETRY_EXC_ERR (retry_exceeded_err); a
// SEND no receive waits for ends in RNR_RETRY_EXC_ERR
// (retry_rnr_exceeded_err, and rcvd_rnr_err for each RNR NAK).
// loop0 runs the requests in verbs (Executor).
func TestRetryCounters(t *testing.T) {
	a, b := newEnd(t, "loop0"), newEnd(t, "loop0")
	connect(t, a, b, verbs.ConnectOptions{Set: verbs.AttrTimeout | verbs.AttrRetryCnt, Attr: verbs.QPAttr{Timeout: 1, RetryCnt: 2}})
	must(t, b.qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState))
	a.post(t, a.write(1, b, 8))
	if wc := a.wait(t, 1)[0]; wc.Status != verbs.WCRetryExcErr {
		t.Fatalf("%v, want RETRY_EXC_ERR", wc)
	}
	q := qpOf(t, metrics.Process(), a.qp.Num())
	if got := value(t, q, "retry_exceeded_err"); got != 1 {
		t.Errorf("retry_exceeded_err %d, want 1", got)
	}
	if got := value(t, q, "completer_retry_err"); got != 2 {
		t.Errorf("completer_retry_err %d, want retry_cnt 2", got)
	}
	if got := value(t, q, "retry_rnr_exceeded_err"); got != 0 {
		t.Errorf("retry_rnr_exceeded_err %d, want 0", got)
	}

	c, d := newEnd(t, "loop0"), newEnd(t, "loop0")
	connect(t, c, d, verbs.ConnectOptions{Set: verbs.AttrRNRRetry | verbs.AttrMinRNRTimer, Attr: verbs.QPAttr{RNRRetry: 1, MinRNRTimer: 1}})
	c.post(t, c.send(1, 8))
	if wc := c.wait(t, 1)[0]; wc.Status != verbs.WCRNRRetryExcErr {
		t.Fatalf("%v, want RNR_RETRY_EXC_ERR", wc)
	}
	q = qpOf(t, metrics.Process(), c.qp.Num())
	for n, want := range map[string]uint64{"retry_rnr_exceeded_err": 1, "retry_exceeded_err": 0, "rcvd_rnr_err": 2, "rdma_sends": 1} {
		if got := value(t, q, n); got != want {
			t.Errorf("%s %d, want %d", n, got, want)
		}
	}
}

// TestLinkDowned: loop0's port going down and up twice counts two
// transitions, once however many contexts heard them.
func TestLinkDowned(t *testing.T) {
	a, b := newEnd(t, "loop0"), newEnd(t, "loop0")
	p, _ := metrics.Process().Port("loop0", 1)
	was := value(t, p, "LinkDownedCounter")
	for range 2 {
		loopback.SetPortState(verbs.PortDown)
		loopback.SetPortState(verbs.PortInit) // still down: not another transition
		loopback.SetPortState(verbs.PortActive)
	}
	for _, e := range []*end{a, b} { // the events, read so they do not pile up
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		for range 6 {
			if _, err := e.ctx.AsyncEvent(ctx); err != nil {
				t.Fatal(err)
			}
		}
		cancel()
	}
	p, _ = metrics.Process().Port("loop0", 1)
	if got := value(t, p, "LinkDownedCounter") - was; got != 2 {
		t.Errorf("LinkDownedCounter grew by %d, want 2", got)
	}
	if value(t, p, "link_downed") != value(t, p, "LinkDownedCounter") {
		t.Errorf("link_downed %d, LinkDownedCounter %d", value(t, p, "link_downed"), value(t, p, "LinkDownedCounter"))
	}
}

// TestUDP: on a udp device (the Issuer path, completions from the
// transport's engine) a requester connected to a QP that does not exist
// retries and ends in RETRY_EXC_ERR; the port counts the packets (PMA) and
// the unknown QP (Extra), and its sent_pkts is its QPs'.
func TestUDP(t *testing.T) {
	const dev = "udpmetrics0"
	must(t, udp.AddDevice(dev, netip.MustParseAddrPort("127.0.0.1:0")))
	a, b := newEnd(t, "udp/"+dev), newEnd(t, "udp/"+dev)
	connect(t, a, b, verbs.ConnectOptions{})
	a.post(t, a.write(1, b, 64), a.write(2, b, 64))
	a.wait(t, 2)

	c := newEnd(t, "udp/"+dev)
	ghost := b.qp.Info()
	ghost.QPN = 0xfffff0 // no such QP
	must(t, c.qp.Connect(ghost, verbs.ConnectOptions{Set: verbs.AttrTimeout | verbs.AttrRetryCnt, Attr: verbs.QPAttr{Timeout: 1, RetryCnt: 1}}))
	c.post(t, c.write(1, b, 8))
	if wc := c.wait(t, 1)[0]; wc.Status != verbs.WCRetryExcErr {
		t.Fatalf("%v, want RETRY_EXC_ERR", wc)
	}
	s := metrics.Process()
	q := qpOf(t, s, c.qp.Num())
	if got := value(t, q, "retry_exceeded_err"); got != 1 {
		t.Errorf("retry_exceeded_err %d, want 1", got)
	}
	if got := value(t, q, "completer_retry_err"); got != 1 {
		t.Errorf("completer_retry_err %d, want retry_cnt 1", got)
	}
	if got := value(t, q, "sent_pkts"); got < 2 {
		t.Errorf("sent_pkts %d, want the WRITE and its retry", got)
	}
	if qa := qpOf(t, s, a.qp.Num()); value(t, qa, "sent_pkts") < 2 || value(t, qa, "rcvd_pkts") < 1 {
		t.Errorf("writer: %+v", qa.HW)
	}
	p, ok := s.Port(dev, 1)
	if !ok {
		t.Fatalf("no %s/1", dev)
	}
	var sum uint64
	for _, q := range s.QPs {
		if q.Device == dev {
			sum += value(t, q, "sent_pkts")
		}
	}
	if got := value(t, p, "sent_pkts"); got != sum {
		t.Errorf("port sent_pkts %d, its QPs' %d", got, sum)
	}
	if xmit := value(t, p, "PortXmitPkts"); xmit < sum || value(t, p, "PortUnicastXmitPkts") != xmit {
		t.Errorf("PortXmitPkts %d (unicast %d), QPs sent %d", xmit, value(t, p, "PortUnicastXmitPkts"), sum)
	}
	if value(t, p, "UnknownQP") == 0 || value(t, p, "PortXmitData") == 0 {
		t.Errorf("port %+v %+v", p.PMA, p.Extra)
	}
}

// TestFromStatus maps a daemon's status: QPs with their process, sorted,
// the port's hw counters summed over the device's QPs, send_err from
// PortXmitDiscards.
func TestFromStatus(t *testing.T) {
	st := ibexdwire.Status{Socket: "/s.sock",
		Devices: []ibexdwire.DeviceStatus{{Name: "udp0", Counters: []verbs.PortCounter{
			{Name: "PortXmitPkts", Value: 100}, {Name: "PortXmitDiscards", Value: 3}, {Name: "ICRCErrors", Value: 2}},
			Destroyed: &verbs.QPStats{PktsSent: 20, RetryExceeded: 2}},
			{Name: "udp1"}},
		Clients: []ibexdwire.ClientStatus{
			{PID: 7, Device: "udp0", QPs: []ibexdwire.QPStatus{{QPN: 0x20, State: "RTS", Stats: verbs.QPStats{PktsSent: 5, Retries: 1, SeqNaksRecv: 2}}}},
			{PID: 8, Device: "udp0", QPs: []ibexdwire.QPStatus{{QPN: 0x11, State: "ERR", Stats: verbs.QPStats{PktsSent: 7, RetryExceeded: 1}}}},
		}}
	s := metrics.FromStatus(st)
	if s.Source != "daemon /s.sock" || len(s.QPs) != 2 || s.QPs[0].QPN != 0x11 || s.QPs[0].PID != 8 || s.QPs[1].PID != 7 {
		t.Fatalf("%+v", s)
	}
	if got := value(t, s.QPs[1], "completer_retry_err"); got != 3 {
		t.Errorf("completer_retry_err %d, want timeouts 1 + sequence NAKs 2", got)
	}
	p, ok := s.Port("udp0", 1)
	if !ok {
		t.Fatal("no udp0/1")
	}
	// The sums: the live QPs' and those of the QPs destroyed before.
	for n, want := range map[string]uint64{"sent_pkts": 32, "retry_exceeded_err": 3, "send_err": 3, "PortXmitPkts": 100,
		"PortUnicastXmitPkts": 100, "ICRCErrors": 2, "SymbolErrorCounter": 0} {
		if got := value(t, p, n); got != want {
			t.Errorf("udp0 %s = %d, want %d", n, got, want)
		}
	}
	if p1, ok := s.Port("udp1", 1); !ok || value(t, p1, "sent_pkts") != 0 {
		t.Errorf("udp1: %+v", p1)
	}
}

// TestDaemonNotRunning: the error names the socket.
func TestDaemonNotRunning(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	_, err := metrics.Daemon(context.Background(), sock)
	if err == nil || !strings.Contains(err.Error(), "no daemon answers on "+sock) {
		t.Fatalf("%v, want it to name %s", err, sock)
	}
}

// TestJSON: a snapshot survives json.Marshal, which is what a process
// serves at /counters.
func TestJSON(t *testing.T) {
	a, b := newEnd(t, "loop0"), newEnd(t, "loop0")
	connect(t, a, b, verbs.ConnectOptions{})
	s := metrics.Process()
	var back metrics.Snapshot
	must(t, json.Unmarshal(mustJSON(s), &back))
	if !back.Time.Equal(s.Time) {
		t.Errorf("time %v, want %v", back.Time, s.Time)
	}
	back.Time = s.Time
	if !reflect.DeepEqual(back, s) {
		t.Errorf("round trip:\n%+v\nwant\n%+v", back, s)
	}
	for _, key := range []string{`"pma":`, `"hw":`, `"qpn":`, `"source":"pid `} {
		if !strings.Contains(string(mustJSON(s)), key) {
			t.Errorf("json lacks %s", key)
		}
	}
}

// BenchmarkProcess: what a scrape of this process costs (control path
// only: the snapshot takes each QP's and context's locks once and reads
// atomics), with 64 connected QP pairs on loop0.
func BenchmarkProcess(b *testing.B) {
	for range 64 {
		x, y := newEnd(b, "loop0"), newEnd(b, "loop0")
		connect(b, x, y, verbs.ConnectOptions{})
	}
	b.ReportAllocs()
	var s metrics.Snapshot
	for b.Loop() {
		s = metrics.Process()
	}
	b.ReportMetric(float64(len(s.QPs)), "qps")
}
