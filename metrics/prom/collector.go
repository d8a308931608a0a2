package prom

import (
	"fmt"
	"os"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ibex-rdma/ibex/metrics"
)

// Source takes a snapshot of the counters: metrics.Process for this
// process's devices, the daemon's status for ibexd's.
type Source func() (metrics.Snapshot, error)

// ProcessSource is this process's open verbs contexts (metrics.Process),
// each QP with this process's PID (the pid label), as a daemon's QPs come
// with their processes'.
func ProcessSource() (metrics.Snapshot, error) {
	s := metrics.Process()
	pid := os.Getpid()
	for i := range s.QPs {
		if s.QPs[i].PID == 0 {
			s.QPs[i].PID = pid
		}
	}
	return s, nil
}

// Collector is a prometheus.Collector over a Source: each Collect takes
// one snapshot and turns it into metrics (the package doc lists the
// names). It is an unchecked collector (Describe sends nothing): the
// per-QP and extra counters' names are known only from a snapshot.
type Collector struct {
	src Source

	mu    sync.Mutex
	descs map[string]*prometheus.Desc // by metric name: the ones made so far
}

// NewCollector returns a collector over src.
func NewCollector(src Source) *Collector {
	return &Collector{src: src, descs: map[string]*prometheus.Desc{}}
}

var (
	portLabels = []string{"device", "port"}
	qpLabels   = []string{"device", "qpn", "pid"}
	upDesc     = prometheus.NewDesc("ibex_up", "1 when ibex's counters could be read at this scrape, 0 when not (a daemon that does not answer).", nil, nil)
)

// Describe sends nothing: Collector is unchecked.
func (c *Collector) Describe(chan<- *prometheus.Desc) {}

// Collect takes a snapshot and sends its metrics. A failed snapshot sends
// ibex_up 0 and an invalid metric carrying the error, which the registry
// reports (promhttp logs it with HandlerOpts.ErrorLog) while the other
// collectors' metrics are still served.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s, err := c.src()
	if err != nil {
		ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, 0)
		ch <- prometheus.NewInvalidMetric(upDesc, fmt.Errorf("ibex counters: %w", err))
		return
	}
	ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, 1)
	e := emitter{c: c, ch: ch, seen: map[series]bool{}}
	for _, p := range s.Ports {
		e.port(p)
	}
	for _, q := range s.QPs {
		e.qp(q)
	}
	for _, t := range s.Tenants {
		e.tenant(t)
	}
}

// emitter sends one snapshot's metrics, each series once: a registry
// refuses a whole scrape that has a series twice, and a snapshot could
// (two counters whose names become one, a device listed twice).
type emitter struct {
	c    *Collector
	ch   chan<- prometheus.Metric
	seen map[series]bool
}

// series is a metric name and its label values (at most three: device,
// qpn, pid).
type series struct{ name, a, b, c string }

func (e *emitter) port(p metrics.Port) {
	port := strconv.Itoa(int(p.Port))
	find := func(l []metrics.Counter, name string) (uint64, bool) {
		for _, c := range l {
			if c.Name == name {
				return c.Value, true
			}
		}
		return 0, false
	}
	for _, m := range portMetrics {
		if v, ok := find(p.PMA, m.counter); ok {
			e.send(nodeNamespace+m.name, m.help, portLabels, v*m.scale, p.Device, port)
		}
	}
	for _, m := range hwMetrics {
		v, ok := find(p.HW, m.counter)
		if !ok {
			v, ok = find(p.Extra, m.counter)
		}
		if ok {
			e.send(nodeNamespace+m.name, m.help, portLabels, v, p.Device, port)
		}
	}
	for _, c := range p.HW {
		help := hwHelp[c.Name]
		if help == "" {
			help = "Hardware counter " + c.Name + " of the port."
		}
		e.send("ibex_rdma_hw_"+metricName(c.Name)+"_total", help, portLabels, c.Value, p.Device, port)
	}
	for _, c := range p.Extra {
		e.send("ibex_port_"+metricName(c.Name)+"_total", "Counter "+c.Name+" of the port (ibex's own).", portLabels, c.Value, p.Device, port)
	}
}

// A daemon's tenants.
var (
	tenantProcesses = prometheus.NewDesc("ibex_tenant_processes", "Processes of the tenant attached to the daemon.", []string{"tenant"}, nil)
	tenantHeld      = map[string]*prometheus.Desc{
		"qps":      prometheus.NewDesc("ibex_tenant_qps", "QPs the tenant's processes hold, summed.", []string{"tenant"}, nil),
		"cqs":      prometheus.NewDesc("ibex_tenant_cqs", "CQs the tenant's processes hold, summed.", []string{"tenant"}, nil),
		"mrs":      prometheus.NewDesc("ibex_tenant_mrs", "MRs the tenant's processes hold, summed.", []string{"tenant"}, nil),
		"mr_bytes": prometheus.NewDesc("ibex_tenant_mr_bytes", "Bytes the tenant's processes registered, summed.", []string{"tenant"}, nil),
	}
	tenantQuota    = prometheus.NewDesc("ibex_tenant_quota", "A quota of the tenant (max_clients, max_qps, max_cqs, max_mrs, max_memory in bytes, rate in bytes per second); absent: none.", []string{"tenant", "quota"}, nil)
	tenantRateHeld = prometheus.NewDesc("ibex_tenant_rate_held_total", "Engine passes that held the tenant's send WQEs back in their rings for its rate.", []string{"tenant"}, nil)
)

func (e *emitter) tenant(t metrics.Tenant) {
	key := series{"ibex_tenant", t.Name, "", ""}
	if e.seen[key] {
		return // a tenant listed twice
	}
	e.seen[key] = true
	e.ch <- prometheus.MustNewConstMetric(tenantProcesses, prometheus.GaugeValue, float64(t.Processes), t.Name)
	for _, c := range t.Held {
		if d := tenantHeld[c.Name]; d != nil {
			e.ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(c.Value), t.Name)
		}
	}
	for _, q := range t.Quotas {
		e.ch <- prometheus.MustNewConstMetric(tenantQuota, prometheus.GaugeValue, float64(q.Value), t.Name, q.Name)
	}
	e.ch <- prometheus.MustNewConstMetric(tenantRateHeld, prometheus.CounterValue, float64(t.RateHeld), t.Name)
}

var qpInfo = prometheus.NewDesc("ibex_qp_info", "A QP of a process on the device, labelled with its state; always 1.", []string{"device", "qpn", "pid", "state"}, nil)

func (e *emitter) qp(q metrics.QP) {
	qpn := strconv.FormatUint(uint64(q.QPN), 10) // decimal, as rdma-core's `rdma res show qp` prints lqpn
	pid := strconv.Itoa(q.PID)
	if key := (series{"ibex_qp_info", q.Device, qpn, pid}); !e.seen[key] {
		e.seen[key] = true
		e.ch <- prometheus.MustNewConstMetric(qpInfo, prometheus.GaugeValue, 1, q.Device, qpn, pid, q.State)
	}
	for _, l := range [][]metrics.Counter{q.HW, q.Extra} {
		for _, c := range l {
			e.send("ibex_qp_"+metricName(c.Name)+"_total", "Counter "+c.Name+" of the QP.", qpLabels, c.Value, q.Device, qpn, pid)
		}
	}
}

// send sends a counter unless the series was sent already.
func (e *emitter) send(name, help string, labels []string, v uint64, values ...string) {
	key := series{name: name}
	switch len(values) {
	case 3:
		key.c = values[2]
		fallthrough
	case 2:
		key.b = values[1]
		key.a = values[0]
	}
	if e.seen[key] {
		return
	}
	e.seen[key] = true
	e.ch <- prometheus.MustNewConstMetric(e.c.desc(name, help, labels), prometheus.CounterValue, float64(v), values...)
}

// desc is the descriptor of a metric name, made once: the help and
// labels of a name never change (they follow from the name's prefix and
// counter), and a scrape makes each name's only on the first.
func (c *Collector) desc(name, help string, labels []string) *prometheus.Desc {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.descs[name]
	if d == nil {
		d = prometheus.NewDesc(name, help, labels, nil)
		c.descs[name] = d
	}
	return d
}
