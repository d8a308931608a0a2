package prom

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/metrics"
	"github.com/ibex-rdma/ibex/provider/udp"
	"github.com/ibex-rdma/ibex/verbs"
)

// TestPrometheus runs a real Prometheus server (Debian's prometheus
// package) scraping this process's exporter every second while two udp
// devices in the process WRITE to each other: a rate() query sees the
// packets while they flow, and once they stop, the counters Prometheus
// stored are the ones metrics.Process reports.
//
// Prometheus 2.42 (Debian 12's) hands a new target to its scrape loop
// only on its discovery and scrape managers' 5 s ticks, so the first
// scrape comes 5 to 6 s after it starts; the test needs three scrapes
// (two while the WRITEs flow, one after), and follows them through the
// exporter rather than polling Prometheus on a guess.
func TestPrometheus(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("no prometheus binary: install Debian's prometheus package (apt-get install prometheus) to run this test")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	a, b := newDevices(t)
	w := newWriter(t, a, b)
	dev := w.a.ctx.Name()
	scraped := make(chan struct{}, 16)
	exp, err := Serve(ctx, "127.0.0.1:0", func() (metrics.Snapshot, error) {
		s, err := ProcessSource()
		select {
		case scraped <- struct{}{}:
		default:
		}
		return s, err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Wait()
	defer cancel()

	stop := w.start(t)
	defer stop()
	start := time.Now()
	p := startPrometheus(t, bin, exp.Addr().String())
	// waitScrape waits for Prometheus's next scrape of the exporter.
	waitScrape := func(what string) {
		t.Helper()
		select {
		case <-scraped:
		case <-time.After(15 * time.Second):
			t.Fatalf("%s: no scrape %v after prometheus started; it said:\n%s", what, time.Since(start).Round(time.Millisecond), p.log.String())
		}
	}
	// untilQuery runs q until ok accepts its result, for at most 2 s
	// (Prometheus stores a scrape's samples as it parses the response).
	untilQuery := func(q string, ok func([]sample) bool) []sample {
		t.Helper()
		deadline := time.Now().Add(2 * time.Second)
		for {
			r := p.query(t, q)
			if ok(r) || time.Now().After(deadline) {
				return r
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	sel := fmt.Sprintf(`{job="ibex",device=%q,port="1"}`, dev)
	waitScrape("the first scrape")
	t.Logf("first scrape %v after prometheus started", time.Since(start).Round(time.Millisecond))
	waitScrape("the second scrape")
	rate := "rate(node_infiniband_port_packets_transmitted_total" + sel + "[5s])"
	r := untilQuery(rate, func(r []sample) bool { return len(r) == 1 && r[0].value > 0 })
	if len(r) != 1 || r[0].value <= 0 {
		t.Fatalf("%s = %+v after two scrapes while WRITEs flow (%d completed)", rate, r, w.done.Load())
	}
	t.Logf("%s = %.0f/s while WRITEs flow", rate, r[0].value)

	stop()
	writes := w.done.Load()
	if writes == 0 {
		t.Fatal("no WRITE completed")
	}
	// The counters stay put after the traffic: the next scrape stores
	// what this process reports.
	port, ok := metrics.Process().Port(dev, 1)
	if !ok {
		t.Fatalf("metrics.Process() has no port %s/1: %+v", dev, metrics.Process())
	}
	for len(scraped) > 0 {
		<-scraped // a scrape under way while the traffic stopped
	}
	waitScrape("the scrape after the WRITEs")
	for _, n := range []struct{ metric, counter string }{
		{"node_infiniband_port_packets_transmitted_total", "PortXmitPkts"},
		{"node_infiniband_port_data_transmitted_bytes_total", "PortXmitData"},
		{"node_infiniband_port_packets_received_total", "PortRcvPkts"},
	} {
		want, ok := port.Value(n.counter)
		if !ok {
			t.Fatalf("port %s/1 has no %s", dev, n.counter)
		}
		if n.counter == "PortXmitData" {
			want *= 4 // 4-byte words
		}
		r := untilQuery(n.metric+sel, func(r []sample) bool { return len(r) == 1 && r[0].value == float64(want) })
		if len(r) != 1 || r[0].value != float64(want) {
			t.Errorf("after %d WRITEs: %s%s = %+v, the process reports %d", writes, n.metric, sel, r, want)
			continue
		}
		t.Logf("after %d WRITEs: %s = %d", writes, n.metric, want)
	}
}

var devSeq atomic.Int32

// newDevices adds two udp devices on addresses of their own, the second
// octet from the process ID as provider/udp's tests do, so that test
// processes running at once rarely collide.
func newDevices(t testing.TB) (string, string) {
	t.Helper()
	n := devSeq.Add(1)
	p := 100 + os.Getpid()%150
	a, b := fmt.Sprintf("promtest%da", n), fmt.Sprintf("promtest%db", n)
	for i, name := range []string{a, b} {
		addr := netip.MustParseAddrPort(fmt.Sprintf("127.%d.%d.%d:4791", p, 200+n, i+1))
		if err := udp.AddDevice(name, addr); err != nil {
			t.Fatal(err)
		}
	}
	return a, b
}

// end is one side of a connected RC QP pair.
type end struct {
	ctx *verbs.Context
	pd  *verbs.PD
	cq  *verbs.CQ
	mr  *verbs.MR
	qp  *verbs.QP
}

func newEnd(t testing.TB, device string) *end {
	t.Helper()
	e := &end{}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var err error
	e.ctx, err = verbs.Open("udp/" + device)
	must(err)
	t.Cleanup(func() { e.close(t) })
	e.pd, err = e.ctx.AllocPD()
	must(err)
	e.cq, err = e.ctx.CreateCQ(16)
	must(err)
	e.mr, err = e.pd.AllocMR(64<<10, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	must(err)
	e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	must(err)
	return e
}

// close destroys what newEnd made, in the order an application does, and
// closes the device (its goroutines end).
func (e *end) close(t testing.TB) {
	t.Helper()
	var errs []error
	if e.qp != nil {
		errs = append(errs, e.qp.Destroy())
	}
	if e.mr != nil {
		errs = append(errs, e.mr.Dereg())
	}
	if e.cq != nil {
		errs = append(errs, e.cq.Destroy())
	}
	if e.pd != nil {
		errs = append(errs, e.pd.Dealloc())
	}
	errs = append(errs, e.ctx.Close())
	if err := errors.Join(errs...); err != nil {
		t.Errorf("teardown of %s: %v", e.ctx.Name(), err)
	}
}

// writer WRITEs from a to b, one 16 KiB WRITE at a time, until stopped.
type writer struct {
	a, b *end
	done atomic.Uint64 // WRITEs completed
}

func newWriter(t testing.TB, a, b string) *writer {
	w := &writer{a: newEnd(t, a), b: newEnd(t, b)}
	if err := w.a.qp.Connect(w.b.qp.Info(), verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := w.b.qp.Connect(w.a.qp.Info(), verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	return w
}

// start starts the WRITEs in a goroutine; the function it returns stops
// them and waits for the goroutine (it may be called more than once).
func (w *writer) start(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		wr := []verbs.SendWR{{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL:        []verbs.SGE{{Addr: w.a.mr.Addr(), Length: 16 << 10, LKey: w.a.mr.LKey()}},
			RemoteAddr: w.b.mr.Addr(), RKey: w.b.mr.RKey()}}
		wc := make([]verbs.WC, 1)
		for ctx.Err() == nil {
			if err := w.a.qp.PostSend(wr); err != nil {
				t.Errorf("post WRITE: %v", err)
				return
			}
			// Wait out this WRITE even when stopped: the counters then
			// stay put once stop returns.
			wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
			n, err := w.a.cq.PollWait(wctx, wc)
			wcancel()
			if err != nil || n != 1 || wc[0].Status != verbs.WCSuccess {
				t.Errorf("WRITE %d: %d completions, %v %v", w.done.Load()+1, n, err, wc[0].Status)
				return
			}
			w.done.Add(1)
			// Prometheus needs the traffic for seconds, not its speed.
			time.Sleep(time.Millisecond)
		}
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}

// promServer is a Prometheus server the test started.
type promServer struct {
	url string
	log *syncBuffer // its stderr
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startPrometheus starts bin scraping target every second, with its
// storage in a temporary directory, listening on a free port of
// 127.0.0.1, and waits until it is ready. It stops with the test.
func startPrometheus(t *testing.T, bin, target string) *promServer {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	err := os.WriteFile(cfg, []byte(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: ibex
    static_configs:
      - targets: ['`+target+`']
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()

	p := &promServer{url: "http://" + listen, log: &syncBuffer{}}
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		// Before TempDir's cleanup (registered first, run last).
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(p.url + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("prometheus exited before it was ready: %v\n%s", err, p.log.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready on %s after 10 s: %v\n%s", listen, err, p.log.String())
		}
	}
}

// sample is one series of an instant query's result.
type sample struct {
	labels map[string]string
	value  float64
}

// query runs an instant PromQL query through the HTTP API.
func (p *promServer) query(t *testing.T, q string) []sample {
	t.Helper()
	resp, err := http.Get(p.url + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatalf("query %s: %v", q, err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("query %s: %s: %v", q, resp.Status, err)
	}
	if r.Status != "success" || r.Data.ResultType != "vector" {
		t.Fatalf("query %s: %s %s (%s)", q, r.Status, r.Error, r.Data.ResultType)
	}
	var out []sample
	for _, s := range r.Data.Result {
		str, _ := s.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			t.Fatalf("query %s: value %v: %v", q, s.Value, err)
		}
		out = append(out, sample{labels: s.Metric, value: v})
	}
	return out
}
