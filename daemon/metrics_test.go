package daemon_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ibex-rdma/ibex/daemon"
	"github.com/ibex-rdma/ibex/metrics"
	"github.com/ibex-rdma/ibex/verbs"
)

// TestConfigMetrics: the metrics field is a host:port Prometheus can be
// told; anything else is refused naming the field and its line.
func TestConfigMetrics(t *testing.T) {
	c, err := daemon.ParseConfig([]byte("metrics: 127.0.0.1:9101\n"))
	if err != nil || c.Metrics != "127.0.0.1:9101" {
		t.Fatalf("metrics: 127.0.0.1:9101: %+v %v", c, err)
	}
	if c, err := daemon.ParseConfig([]byte("metrics: \":9101\"\n")); err != nil || c.Metrics != ":9101" {
		t.Fatalf(`metrics: ":9101": %q %v`, c.Metrics, err)
	}
	for in, want := range map[string]string{
		"\nmetrics: 9101\n":           `metrics: "9101" is not host:port; want an address such as 127.0.0.1:9101 or :9101 (line 2)`,
		"metrics: 127.0.0.1:0\n":      `metrics: "127.0.0.1:0" has port "0"`,
		"metrics: 127.0.0.1:http\n":   `metrics: "127.0.0.1:http" has port "http"`,
		"metrics: 127.0.0.1:70000\n":  `has port "70000"; want a port in 1..65535`,
		"metrics: [127.0.0.1:9101]\n": "metrics",
	} {
		_, err := daemon.ParseConfig([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error containing %q", in, err, want)
		}
	}
}

// TestDaemonMetrics: a daemon started with IBEX_METRICS in its
// environment (`ibex daemon` takes it when its config gives no metrics)
// serves its counters: this process's QPs, attached through it, under
// this process's PID with their state, the WRITEs between them in its
// device's port counters under node_exporter's names, and the same
// snapshot as JSON on /counters.
func TestDaemonMetrics(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	t.Setenv("IBEX_METRICS", addr)
	startDaemon(t, "127.0.0.57")

	a, b := openEnd(t, 4096), openEnd(t, 4096)
	if err := a.qp.Connect(b.qp.Info(), verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(a.qp.Info(), verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	const writes = 5
	for range writes {
		if wc := a.write(t, peerInfo{addr: b.mr.Addr(), rkey: b.mr.RKey()}, 0, 0, 64); wc.Status != 0 {
			t.Fatalf("WRITE: %v", wc.Status)
		}
	}

	body := httpGet(t, "http://"+addr+"/metrics")
	pid := os.Getpid()
	for _, qp := range []uint32{a.qp.Num(), b.qp.Num()} {
		line := fmt.Sprintf(`ibex_qp_info{device="udp0",pid="%d",qpn="%d",state="RTS"} 1`, pid, qp)
		if !strings.Contains(body, "\n"+line+"\n") {
			t.Errorf("/metrics has no line %s", line)
		}
	}
	if v := metricValue(t, body, fmt.Sprintf(`ibex_qp_rdma_sends_total{device="udp0",pid="%d",qpn="%d"}`, pid, a.qp.Num())); v != 0 {
		t.Errorf("a QP that WRITEs counts %v SENDs", v)
	}
	if v := metricValue(t, body, fmt.Sprintf(`ibex_qp_sent_pkts_total{device="udp0",pid="%d",qpn="%d"}`, pid, a.qp.Num())); v < writes {
		t.Errorf("ibex_qp_sent_pkts_total of the QP that sent %d WRITEs: %v", writes, v)
	}
	if v := metricValue(t, body, `node_infiniband_port_packets_transmitted_total{device="udp0",port="1"}`); v < 2*writes {
		t.Errorf("node_infiniband_port_packets_transmitted_total after %d WRITEs and their ACKs: %v", writes, v)
	}

	var s metrics.Snapshot
	if err := json.Unmarshal([]byte(httpGet(t, "http://"+addr+"/counters")), &s); err != nil {
		t.Fatalf("/counters: %v", err)
	}
	p, ok := s.Port("udp0", 1)
	if !ok || !strings.HasPrefix(s.Source, "daemon ") || len(s.QPs) != 2 {
		t.Fatalf("/counters: %+v, want the daemon's udp0 port and the two QPs", s)
	}
	// The port's sums keep what the QPs counted once they are gone.
	sent, _ := p.Value("sent_pkts")
	if err := a.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	var after metrics.Snapshot
	if err := json.Unmarshal([]byte(httpGet(t, "http://"+addr+"/counters")), &after); err != nil {
		t.Fatalf("/counters: %v", err)
	}
	p, _ = after.Port("udp0", 1)
	if got, _ := p.Value("sent_pkts"); len(after.QPs) != 1 || got < sent || sent < writes {
		t.Errorf("after a QP's destroy: %d QPs, port sent_pkts %d, before %d (want it kept)", len(after.QPs), got, sent)
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v\n%s", url, resp.Status, err, b)
	}
	return string(b)
}

// metricValue is the value of the series in a /metrics page.
func metricValue(t *testing.T, page, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("/metrics has no %s", series)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
