package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/metrics"
	"github.com/ibex-rdma/ibex/verbs"
)

// Issue 20, "Observability": ibex stat prints the counters of a daemon or
// of a process under their perfquery and rdma statistic names.

// statAddr is the address of TestStatDaemon's udp0, one no other test
// binds.
const statAddr = "127.0.0.64"

// statEnd is one side of a connected pair of QPs.
type statEnd struct {
	ctx *verbs.Context
	pd  *verbs.PD
	cq  *verbs.CQ
	mr  *verbs.MR
	qp  *verbs.QP
}

func newStatEnd(t *testing.T, device string) *statEnd {
	t.Helper()
	e := &statEnd{}
	ok := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var err error
	e.ctx, err = verbs.Open(device)
	ok(err)
	e.pd, err = e.ctx.AllocPD()
	ok(err)
	e.cq, err = e.ctx.CreateCQ(64)
	ok(err)
	e.mr, err = e.pd.AllocMR(4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	ok(err)
	e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, Cap: verbs.QPCap{MaxSendWR: 32, MaxRecvWR: 32}})
	ok(err)
	t.Cleanup(func() {
		for _, err := range []error{e.qp.Destroy(), e.mr.Dereg(), e.cq.Destroy(), e.pd.Dealloc(), e.ctx.Close()} {
			if err != nil {
				t.Error(err)
			}
		}
	})
	return e
}

// statPair connects two QPs on device and moves n 64-byte WRITEs from a
// to b.
func statPair(t *testing.T, device string, n int) (a, b *statEnd) {
	t.Helper()
	a, b = newStatEnd(t, device), newStatEnd(t, device)
	if err := a.qp.Connect(b.qp.Info(), verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(a.qp.Info(), verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	statWrites(t, a, b, n)
	return a, b
}

func statWrites(t *testing.T, a, b *statEnd, n int) {
	t.Helper()
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: a.mr.Addr(), Length: 64, LKey: a.mr.LKey()}}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 1)
	for i := range n {
		wr.ID = uint64(i)
		if err := a.qp.PostSend([]verbs.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.cq.PollWait(ctx, wc); err != nil || wc[0].Status != verbs.WCSuccess {
			t.Fatalf("WRITE %d: %v %v", i, wc[0], err)
		}
	}
}

// statField finds " name N" in line and returns N (-1: not there).
func statField(line, name string) int64 {
	m := regexp.MustCompile(`(?:^| )` + regexp.QuoteMeta(name) + ` (\d+)`).FindStringSubmatch(line)
	if m == nil {
		return -1
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// statPMA finds perfquery's "Name:....N" line and returns N (-1: none).
func statPMA(out, name string) int64 {
	m := regexp.MustCompile(`(?m)^` + name + `:\.+(\d+)$`).FindStringSubmatch(out)
	if m == nil {
		return -1
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// statLine returns the first line of out that starts with prefix.
func statLine(t *testing.T, out, prefix string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	t.Fatalf("no line starts with %q:\n%s", prefix, out)
	return ""
}

// TestStatURL: --url reads the JSON snapshot a process serves (here this
// process, metrics.Process, with a pair of loop0 QPs that moved WRITEs),
// and prints the port perfquery's way, the hw counters and the QPs
// `rdma statistic`'s way; -d filters; --json gives the snapshot back.
func TestStatURL(t *testing.T) {
	a, b := statPair(t, "loop0", 3)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/counters" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(metrics.Process())
	}))
	defer srv.Close()
	url := srv.URL + "/counters"

	out, err := run(t, "stat", "--url", url, "--qp", "-d", "loop0")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("# Port counters: loop0 port 1 (pid %d, ", os.Getpid()); !strings.HasPrefix(out, want) {
		t.Errorf("output starts %q, want %q", strings.SplitN(out, "\n", 2)[0], want)
	}
	for _, n := range metrics.PortNames {
		if statPMA(out, n) < 0 {
			t.Errorf("no %s line:\n%s", n, out)
		}
	}
	if !strings.Contains(out, "\nPortXmitData:....................0\n") {
		t.Errorf("perfquery's dotted layout:\n%s", out)
	}
	hw := statLine(t, out, "link loop0/1 sent_pkts ")
	for _, n := range metrics.HWNames {
		if statField(hw, n) < 0 {
			t.Errorf("hw line lacks %s: %s", n, hw)
		}
	}
	qa := statLine(t, out, fmt.Sprintf("link loop0/1 lqpn %d state RTS sent_pkts ", a.qp.Num()))
	if got := statField(qa, "sends"); got != 3 {
		t.Errorf("qp a sends %d, want 3: %s", got, qa)
	}
	statLine(t, out, fmt.Sprintf("link loop0/1 lqpn %d state RTS ", b.qp.Num()))

	out, err = run(t, "stat", "--url", url, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var s metrics.Snapshot
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("--json: %v:\n%s", err, out)
	}
	if p, ok := s.Port("loop0", 1); !ok || len(p.HW) != len(metrics.HWNames) || len(s.QPs) < 2 {
		t.Errorf("--json: %+v", s)
	}

	if _, err := run(t, "stat", "--url", url, "-d", "nope0"); err == nil || !strings.Contains(err.Error(), `device "nope0" not found in pid `) ||
		!strings.Contains(err.Error(), "loop0") {
		t.Errorf("-d nope0: %v, want it not found, listing loop0", err)
	}
	if _, err := run(t, "stat", "--url", srv.URL+"/nothing"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("a URL that serves no snapshot: %v", err)
	}
}

// statSnapshot is a made-up snapshot of udp0 with one QP, for the watch
// test: sent is the QP's and the port's sent_pkts and PortXmitPkts.
func statSnapshot(at time.Time, sent uint64) metrics.Snapshot {
	p := metrics.Port{Device: "udp0", Port: 1}
	for _, n := range metrics.PortNames {
		c := metrics.Counter{Name: n}
		if n == "PortXmitPkts" {
			c.Value = sent
		}
		p.PMA = append(p.PMA, c)
	}
	q := metrics.QP{Device: "udp0", QPN: 17, State: "RTS", PID: 42}
	for _, n := range metrics.HWNames {
		c := metrics.Counter{Name: n}
		if n == "sent_pkts" {
			c.Value = sent
		}
		p.HW = append(p.HW, c)
		q.HW = append(q.HW, c)
	}
	p.Extra = []metrics.Counter{{Name: "ICRCErrors", Value: 1}}
	return metrics.Snapshot{Time: at, Source: "pid 42", Ports: []metrics.Port{p}, QPs: []metrics.QP{q}}
}

// TestStatWatch: -w prints the first sample whole and then, per sample,
// what changed: the delta and the rate over the snapshots' interval;
// --count ends it.
func TestStatWatch(t *testing.T) {
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	samples := []metrics.Snapshot{statSnapshot(t0, 10), statSnapshot(t0.Add(2*time.Second), 20), statSnapshot(t0.Add(3*time.Second), 20)}
	var served atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := min(int(served.Add(1))-1, len(samples)-1)
		_ = json.NewEncoder(w).Encode(samples[i])
	}))
	defer srv.Close()

	out, err := run(t, "stat", "--url", srv.URL, "-w", "0.01", "--count", "3", "--qp")
	if err != nil {
		t.Fatal(err)
	}
	if n := served.Load(); n != 3 {
		t.Errorf("%d samples taken, want --count 3", n)
	}
	for _, want := range []string{
		"# Port counters: udp0 port 1 (pid 42, 2025-01-02T03:04:05Z)\n",
		"link udp0/1 lqpn 17 state RTS pid 42 sent_pkts 10 ",
		// the second sample: 10 more packets in 2 s
		"# udp0 port 1: 2.00 s since the previous sample (delta, rate/s)\nPortXmitPkts:....................+10 (5.0/s)\nlink udp0/1 sent_pkts +10 (5.0/s)\n",
		"link udp0/1 lqpn 17 state RTS pid 42 sent_pkts +10 (5.0/s)\n",
		// the third: nothing moved
		"# udp0 port 1: 1.00 s since the previous sample (delta, rate/s)\nno change\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "PortXmitPkts:") != 2 {
		t.Errorf("PortXmitPkts printed %d times, want twice (the first sample, the change):\n%s", strings.Count(out, "PortXmitPkts:"), out)
	}

	// --json: one snapshot a line.
	served.Store(0)
	out, err = run(t, "stat", "--url", srv.URL, "-w", "0.01", "--count", "2", "--json")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("--json -w: %d lines, want 2:\n%s", len(lines), out)
	}
	var s metrics.Snapshot
	if err := json.Unmarshal([]byte(lines[1]), &s); err != nil || !s.Time.Equal(samples[1].Time) {
		t.Errorf("second line: %v %v", s.Time, err)
	}

	for _, args := range [][]string{{"--count", "2"}, {"-w", "-1"}, {"--url", srv.URL, "--socket", "/x"}} {
		if _, err := run(t, append([]string{"stat"}, args...)...); err == nil {
			t.Errorf("ibex stat %v: no error", args)
		}
	}
}

// TestStatNoDaemon: without a daemon the error names the socket.
func TestStatNoDaemon(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	stdout, stderr, code := runMainWithin(t, 30*time.Second, nil, "stat", "--socket", sock)
	if code != 1 || stdout != "" || !strings.Contains(stderr, "no daemon answers on "+sock) {
		t.Errorf("exit %d, stdout %q, stderr %q; want 1 and an error naming %s", code, stdout, stderr, sock)
	}
	// -w too fails at once.
	_, stderr, code = runMainWithin(t, 30*time.Second, []string{"IBEX_DAEMON_SOCKET=" + sock}, "stat", "-w", "1")
	if code != 1 || !strings.Contains(stderr, sock) {
		t.Errorf("-w: exit %d, stderr %q", code, stderr)
	}
}

// TestStatDaemon: with a real daemon and two QPs of this process attached
// to it that moved WRITEs, ibex stat shows the device's packets
// (PortXmitPkts), the QPs with this process's PID, a port sent_pkts that is
// the sum of its QPs', and a QP's sent_pkts at least what its own process
// counted; -w prints a second sample; --json is the daemon's snapshot.
func TestStatDaemon(t *testing.T) {
	d := startDaemonAt(t, statAddr, "IBEX_DAEMON=off")
	sock, daemonPID := d.socket, d.pid
	t.Setenv("IBEX_DAEMON_SOCKET", sock)
	t.Setenv("IBEX_DAEMON", "")
	a, b := statPair(t, "ibexd/udp0", 5)
	seen := a.qp.Stats().PktsSent

	stdout, stderr, code := runMainWithin(t, 30*time.Second, nil, "stat", "--socket", sock, "--qp")
	if code != 0 {
		t.Fatalf("ibex stat: exit %d: %s", code, stderr)
	}
	if want := "# Port counters: udp0 port 1 (daemon " + sock + ", "; !strings.HasPrefix(stdout, want) {
		t.Fatalf("output starts %q, want %q", strings.SplitN(stdout, "\n", 2)[0], want)
	}
	xmit := statPMA(stdout, "PortXmitPkts")
	if xmit <= 0 || statPMA(stdout, "PortRcvPkts") <= 0 {
		t.Errorf("PortXmitPkts %d PortRcvPkts %d, want packets:\n%s", xmit, statPMA(stdout, "PortRcvPkts"), stdout)
	}
	portSent := statField(statLine(t, stdout, "link udp0/1 sent_pkts "), "sent_pkts")
	var sum int64
	for _, l := range strings.Split(stdout, "\n") {
		if strings.HasPrefix(l, "link udp0/1 lqpn ") {
			sum += statField(l, "sent_pkts")
		}
	}
	if portSent != sum || sum > xmit {
		t.Errorf("port sent_pkts %d, its QPs' %d, PortXmitPkts %d: want the QPs' sum, at most what the device sent", portSent, sum, xmit)
	}
	qa := statLine(t, stdout, fmt.Sprintf("link udp0/1 lqpn %d state RTS pid %d ", a.qp.Num(), os.Getpid()))
	if got := statField(qa, "sent_pkts"); got < int64(seen) || got < 5 {
		t.Errorf("qp a sent_pkts %d, want the 5 WRITEs and at least the %d its process saw: %s", got, seen, qa)
	}
	if got := statField(qa, "rdma_sends"); got != 0 {
		t.Errorf("qp a rdma_sends %d, want 0 (WRITEs only)", got)
	}
	statLine(t, stdout, fmt.Sprintf("link udp0/1 lqpn %d state RTS pid %d ", b.qp.Num(), os.Getpid()))

	stdout, stderr, code = runMainWithin(t, 30*time.Second, nil, "stat", "--socket", sock, "-d", "udp0", "-w", "0.1", "--count", "2")
	if code != 0 || strings.Count(stdout, "# Port counters: udp0 port 1") != 1 || !strings.Contains(stdout, "\n# udp0 port 1: ") ||
		!strings.Contains(stdout, " s since the previous sample (delta, rate/s)\n") {
		t.Errorf("-w 0.1 --count 2: exit %d, stderr %q, stdout:\n%s", code, stderr, stdout)
	}

	stdout, _, code = runMainWithin(t, 30*time.Second, nil, "stat", "--socket", sock, "--json")
	var s metrics.Snapshot
	if err := json.Unmarshal([]byte(stdout), &s); code != 0 || err != nil {
		t.Fatalf("--json: exit %d, %v:\n%s", code, err, stdout)
	}
	if s.Source != "daemon "+sock || len(s.QPs) != 2 || s.QPs[0].PID != os.Getpid() {
		t.Errorf("--json: source %q, %d QPs %+v (daemon pid %d)", s.Source, len(s.QPs), s.QPs, daemonPID)
	}
}
