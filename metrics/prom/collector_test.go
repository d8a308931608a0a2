package prom

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ibex-rdma/ibex/internal/ibexdwire"
	"github.com/ibex-rdma/ibex/metrics"
)

// fixed is a snapshot with every PMA and hw counter (value: its index+1
// in metrics.PortNames / metrics.HWNames, so each one tells where it came
// from), an extra port counter and a QP.
func fixed() metrics.Snapshot {
	p := metrics.Port{Device: "udp0", Port: 1}
	for i, n := range metrics.PortNames {
		p.PMA = append(p.PMA, metrics.Counter{Name: n, Value: uint64(i + 1)})
	}
	for i, n := range metrics.HWNames {
		p.HW = append(p.HW, metrics.Counter{Name: n, Value: uint64(100 + i)})
	}
	p.Extra = []metrics.Counter{{Name: "ICRCErrors", Value: 2}, {Name: "xdpRedirects", Value: 7},
		{Name: "cnps_sent", Value: 3}, {Name: "np_cnp_sent", Value: 30}, {Name: "out_of_seq_pkts", Value: 6},
		{Name: "timeout_retries", Value: 4}}
	q := metrics.QP{Device: "udp0", QPN: 0x11, State: "RTS", PID: 4242,
		HW:    []metrics.Counter{{Name: "sent_pkts", Value: 9}},
		Extra: []metrics.Counter{{Name: "retransmits", Value: 5}, {Name: "SentPkts", Value: 8}}}
	return metrics.Snapshot{Source: "test", Ports: []metrics.Port{p}, QPs: []metrics.QP{q}}
}

func value(t *testing.T, name string) uint64 {
	t.Helper()
	i := slices.Index(metrics.PortNames, name)
	if i < 0 {
		t.Fatalf("%s is not one of metrics.PortNames", name)
	}
	return uint64(i + 1)
}

// TestCollectorNames: the node_exporter names carry the PMA counters they
// stand for (bytes are words×4), with node_exporter's labels; the rxe hw
// counters come under their own names and, where node_exporter has a name
// for the counter, under that too; a QP's counters under ibex_qp_.
func TestCollectorNames(t *testing.T) {
	c := NewCollector(func() (metrics.Snapshot, error) { return fixed(), nil })
	for _, tc := range []struct {
		name  string
		value uint64
	}{
		{"node_infiniband_port_data_transmitted_bytes_total", 4 * value(t, "PortXmitData")},
		{"node_infiniband_port_data_received_bytes_total", 4 * value(t, "PortRcvData")},
		{"node_infiniband_port_packets_transmitted_total", value(t, "PortXmitPkts")},
		{"node_infiniband_port_packets_received_total", value(t, "PortRcvPkts")},
		{"node_infiniband_port_transmit_wait_total", value(t, "PortXmitWait")},
		{"node_infiniband_port_discards_transmitted_total", value(t, "PortXmitDiscards")},
		{"node_infiniband_port_errors_received_total", value(t, "PortRcvErrors")},
		{"node_infiniband_symbol_error_total", value(t, "SymbolErrorCounter")},
		{"node_infiniband_link_downed_total", value(t, "LinkDownedCounter")},
		{"node_infiniband_link_error_recovery_total", value(t, "LinkErrorRecoveryCounter")},
		{"node_infiniband_port_receive_remote_physical_errors_total", value(t, "PortRcvRemotePhysicalErrors")},
		{"node_infiniband_port_receive_switch_relay_errors_total", value(t, "PortRcvSwitchRelayErrors")},
		{"node_infiniband_port_constraint_errors_transmitted_total", value(t, "PortXmitConstraintErrors")},
		{"node_infiniband_port_constraint_errors_received_total", value(t, "PortRcvConstraintErrors")},
		{"node_infiniband_local_link_integrity_errors_total", value(t, "LocalLinkIntegrityErrors")},
		{"node_infiniband_excessive_buffer_overrun_errors_total", value(t, "ExcessiveBufferOverrunErrors")},
		{"node_infiniband_vl15_dropped_total", value(t, "VL15Dropped")},
		{"node_infiniband_unicast_packets_transmitted_total", value(t, "PortUnicastXmitPkts")},
		{"node_infiniband_unicast_packets_received_total", value(t, "PortUnicastRcvPkts")},
		{"node_infiniband_multicast_packets_transmitted_total", value(t, "PortMulticastXmitPkts")},
		{"node_infiniband_multicast_packets_received_total", value(t, "PortMulticastRcvPkts")},
	} {
		want := "# HELP " + tc.name + " " + helpOf(t, tc.name) + "\n# TYPE " + tc.name + " counter\n" +
			tc.name + `{device="udp0",port="1"} ` + itoa(tc.value) + "\n"
		if err := testutil.CollectAndCompare(c, strings.NewReader(want), tc.name); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}

	// Every series once per name, as a Prometheus exposition: the HELP
	// lines are the package's, checked as they are.
	got := scrape(t, Handler(func() (metrics.Snapshot, error) { return fixed(), nil }))
	hw := func(n string) string { return itoa(uint64(100 + slices.Index(metrics.HWNames, n))) }
	for _, line := range []string{
		`ibex_rdma_hw_duplicate_request_total{device="udp0",port="1"} ` + hw("duplicate_request"),
		`node_infiniband_duplicate_requests_packets_total{device="udp0",port="1"} ` + hw("duplicate_request"),
		`node_infiniband_out_of_sequence_packets_received_total{device="udp0",port="1"} 6`,
		`node_infiniband_packet_sequence_errors_total{device="udp0",port="1"} ` + hw("rcvd_seq_err"),
		`node_infiniband_rnr_nak_retry_packets_received_total{device="udp0",port="1"} ` + hw("rcvd_rnr_err"),
		`node_infiniband_np_cnp_packets_sent_total{device="udp0",port="1"} 3`, // ibex's cnps_sent before mlx5's name
		`node_infiniband_local_ack_timeout_errors_total{device="udp0",port="1"} 4`,
		`node_infiniband_rx_icrc_encapsulated_errors_total{device="udp0",port="1"} 2`,
		`ibex_port_icrc_errors_total{device="udp0",port="1"} 2`,
		`ibex_port_xdp_redirects_total{device="udp0",port="1"} 7`,
		`ibex_qp_retransmits_total{device="udp0",pid="4242",qpn="17"} 5`,
		`ibex_qp_sent_pkts_total{device="udp0",pid="4242",qpn="17"} 9`, // sent_pkts and SentPkts name one metric: the first wins
		`ibex_qp_info{device="udp0",pid="4242",qpn="17",state="RTS"} 1`,
		"ibex_up 1",
	} {
		if !strings.Contains(got, "\n"+line+"\n") {
			t.Errorf("no line %q in\n%s", line, got)
		}
	}
	// Every rxe hw counter, under its own name.
	if n := testutil.CollectAndCount(c, hwNames()...); n != len(metrics.HWNames) {
		t.Errorf("%d ibex_rdma_hw_ series, want one per metrics.HWNames (%d)", n, len(metrics.HWNames))
	}
}

func hwNames() []string {
	var ns []string
	for _, n := range metrics.HWNames {
		ns = append(ns, "ibex_rdma_hw_"+metricName(n)+"_total")
	}
	return ns
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }

// helpOf is the help text of a node_infiniband_ name.
func helpOf(t *testing.T, name string) string {
	t.Helper()
	for _, m := range portMetrics {
		if nodeNamespace+m.name == name {
			return m.help
		}
	}
	t.Fatalf("%s is not one of portMetrics", name)
	return ""
}

// TestCollectorDuplicates: a snapshot with a series twice (a device
// listed twice, two counters whose names become one) still gathers, each
// series once, the first value; a registry would refuse the whole scrape.
func TestCollectorDuplicates(t *testing.T) {
	s := fixed()
	s.Ports = append(s.Ports, s.Ports[0])
	s.Ports[1].PMA = slices.Clone(s.Ports[1].PMA)
	s.Ports[1].PMA[0].Value = 999
	s.Ports[0].Extra = append(s.Ports[0].Extra, metrics.Counter{Name: "xdp_redirects", Value: 8})
	s.QPs = append(s.QPs, s.QPs[0])
	c := NewCollector(func() (metrics.Snapshot, error) { return s, nil })
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if n := len(mf.GetMetric()); n != 1 {
			t.Errorf("%s: %d series, want 1", mf.GetName(), n)
		}
		switch mf.GetName() {
		case "node_infiniband_symbol_error_total":
			if v := mf.GetMetric()[0].GetCounter().GetValue(); v != float64(value(t, "SymbolErrorCounter")) {
				t.Errorf("%s = %v, want the first port's", mf.GetName(), v)
			}
		case "ibex_port_xdp_redirects_total":
			if v := mf.GetMetric()[0].GetCounter().GetValue(); v != 7 {
				t.Errorf("%s = %v, want the first counter's, 7", mf.GetName(), v)
			}
		}
	}
}

// TestCollectorSourceError: a snapshot that fails gives ibex_up 0 and the
// error, which a registry reports while it still gathers the rest.
func TestCollectorSourceError(t *testing.T) {
	c := NewCollector(func() (metrics.Snapshot, error) { return metrics.Snapshot{}, errors.New("no daemon answers") })
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err == nil || !strings.Contains(err.Error(), "no daemon answers") {
		t.Errorf("gather error %v, want the source's", err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != "ibex_up" || mfs[0].GetMetric()[0].GetGauge().GetValue() != 0 {
		t.Errorf("gathered %v, want ibex_up 0 alone", mfs)
	}
}

func TestMetricName(t *testing.T) {
	for in, want := range map[string]string{
		"retransmits":        "retransmits",
		"PktsSent":           "pkts_sent",
		"RNRNaksSent":        "rnr_naks_sent",
		"QPNum":              "qp_num",
		"rdma_sends":         "rdma_sends",
		"xdp.redirects-2":    "xdp_redirects_2",
		"cnps_total":         "cnps",
		"__":                 "unnamed",
		"ECNMarked":          "ecn_marked",
		"out_of_seq_request": "out_of_seq_request",
	} {
		if got := metricName(in); got != want {
			t.Errorf("metricName(%q) = %q, want %q", in, got, want)
		}
	}
}

// scrape is what Prometheus reads from h's /metrics.
func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", w.Code, w.Body)
	}
	return w.Body.String()
}

// TestCollectorTenants: a daemon's tenants, from its status through
// metrics.FromStatus: what each holds, its quotas (those set only) and
// its rate's held passes, labelled by tenant; a tenant listed twice is
// sent once.
func TestCollectorTenants(t *testing.T) {
	st := ibexdwire.Status{Tenants: []ibexdwire.TenantStatus{
		{Name: "blue", Clients: 2, MaxClients: 4, QPs: 5, CQs: 2, MRs: 3, MRBytes: 98304, MaxQPs: 5, MaxMemory: 98304, Rate: 1 << 20, Burst: 65536, Held: 7},
		{Name: "green", Clients: 1, QPs: 1},
		{Name: "green", Clients: 9},
	}}
	got := scrape(t, Handler(func() (metrics.Snapshot, error) { return metrics.FromStatus(st), nil }))
	for _, line := range []string{
		`ibex_tenant_processes{tenant="blue"} 2`,
		`ibex_tenant_qps{tenant="blue"} 5`,
		`ibex_tenant_cqs{tenant="blue"} 2`,
		`ibex_tenant_mrs{tenant="blue"} 3`,
		`ibex_tenant_mr_bytes{tenant="blue"} 98304`,
		`ibex_tenant_quota{quota="max_clients",tenant="blue"} 4`,
		`ibex_tenant_quota{quota="max_qps",tenant="blue"} 5`,
		`ibex_tenant_quota{quota="max_memory",tenant="blue"} 98304`,
		`ibex_tenant_quota{quota="rate",tenant="blue"} 1.048576e+06`,
		`ibex_tenant_rate_held_total{tenant="blue"} 7`,
		`ibex_tenant_processes{tenant="green"} 1`,
		`ibex_tenant_qps{tenant="green"} 1`,
	} {
		if !strings.Contains(got, "\n"+line+"\n") {
			t.Errorf("no line %q in\n%s", line, got)
		}
	}
	for _, absent := range []string{`quota="max_cqs",tenant="blue"`, `quota="max_qps",tenant="green"`} {
		if strings.Contains(got, absent) {
			t.Errorf("a quota that is not set is sent: %s", absent)
		}
	}
}
