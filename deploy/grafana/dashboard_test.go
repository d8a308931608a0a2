package grafana

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ibex-rdma/ibex/metrics/prom"
	_ "github.com/ibex-rdma/ibex/provider/loopback"
	"github.com/ibex-rdma/ibex/verbs"
)

const dashboardFile = "ibex-dashboard.json"

// dashboard is the part of Grafana's dashboard model the tests read.
type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
			Datasource *datasource     `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int                       `json:"id"`
	Type       string                    `json:"type"`
	Title      string                    `json:"title"`
	Datasource *datasource               `json:"datasource"`
	GridPos    *struct{ X, Y, W, H int } `json:"gridPos"`
	Targets    []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

func load(t *testing.T) (dashboard, []byte) {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d, data
}

// emitted is every metric name the exporter emits for a process with a
// device open and a QP on it: zero counters are emitted too, so the names
// do not depend on traffic.
func emitted(t *testing.T) map[string]bool {
	t.Helper()
	c, err := verbs.Open("loopback/loop0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pd, err := c.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Dealloc()
	cq, err := c.CreateCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Destroy()
	qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Destroy()

	reg := prometheus.NewRegistry()
	reg.MustRegister(prom.NewCollector(prom.ProcessSource))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"node_infiniband_port_packets_transmitted_total", "ibex_qp_info", "ibex_up"} {
		if !names[n] {
			t.Fatalf("the exporter emits no %s for a process with a QP on loop0; it emits %v", n, sorted(names))
		}
	}
	return names
}

func sorted(m map[string]bool) []string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// TestDashboard: the dashboard is JSON Grafana imports (a title, a uid,
// unique panel ids, each panel placed), every query runs on the data
// source the datasource variable picks, and every PromQL expression, the
// variables' included, names only metrics the exporter emits.
func TestDashboard(t *testing.T) {
	d, _ := load(t)
	if d.Title == "" || d.UID == "" {
		t.Errorf("title %q uid %q: want both", d.Title, d.UID)
	}
	var dsVar bool
	for _, v := range d.Templating.List {
		if v.Type == "datasource" && v.Name == "datasource" && string(v.Query) == `"prometheus"` {
			dsVar = true
		}
	}
	if !dsVar {
		t.Error("no datasource variable of type datasource over prometheus")
	}
	names := emitted(t)
	ids := map[int]bool{}
	queries := 0
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.GridPos == nil || p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want uid ${datasource}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no queries", p.Title)
		}
		for _, q := range p.Targets {
			queries++
			if err := check(q.Expr, names); err != nil {
				t.Errorf("panel %q query %s: %v", p.Title, q.RefID, err)
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		if err := check(labelValuesMetric(v.Definition), names); err != nil {
			t.Errorf("variable %s: %v", v.Name, err)
		}
	}
	if queries < 10 {
		t.Errorf("%d queries; the dashboard has at least 10", queries)
	}
}

// TestCheckCatches: the check finds a metric the exporter does not emit
// wherever it is in an expression, and ignores what is not a metric name.
func TestCheckCatches(t *testing.T) {
	names := map[string]bool{"node_infiniband_port_packets_transmitted_total": true, "ibex_qp_info": true}
	for _, expr := range []string{
		`rate(node_infiniband_port_packets_transmitted_total{device=~"$device"}[$__rate_interval])`,
		`count by (instance, device, state) (ibex_qp_info{instance=~"$instance",state!="RTS"})`,
		`sum without (pid) (rate(node_infiniband_port_packets_transmitted_total[5m] offset 1h)) > bool 0`,
		`topk(10, ibex_qp_info) and on (device) ibex_qp_info`,
		`label_replace(ibex_qp_info, "x", "$1", "device", "(.*)")`,
	} {
		if err := check(expr, names); err != nil {
			t.Errorf("%s: %v", expr, err)
		}
	}
	for expr, bad := range map[string]string{
		`rate(node_infiniband_port_packets_transmited_total[1m])`: "node_infiniband_port_packets_transmited_total",
		`count by (device) (ibex_qp_info) / ibex_qp_state`:        "ibex_qp_state",
		`sum(rate(ibex_qp_retransmit_total{device="udp0"}[1m]))`:  "ibex_qp_retransmit_total",
		`{__name__="x"}`: "no metric name",
		`rate(node_infiniband_port_packets_transmitted_total[1m]) + rate(port_xmit_data_total[1m])`: "port_xmit_data_total",
	} {
		err := check(expr, names)
		if err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%s: %v, want an error naming %s", expr, err, bad)
		}
	}

	// And on the dashboard itself: each query with one of its metric
	// names misspelt fails.
	d, _ := load(t)
	all := emitted(t)
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			ms := metricNames(q.Expr)
			if len(ms) == 0 {
				continue
			}
			broken := strings.Replace(q.Expr, ms[0], ms[0]+"_x", 1)
			if err := check(broken, all); err == nil {
				t.Errorf("panel %q: %s with %s misspelt passes", p.Title, q.Expr, ms[0])
			}
		}
	}
}

// check says which metric names in a PromQL expression the exporter does
// not emit; an expression with none at all is an error too.
func check(expr string, emitted map[string]bool) error {
	ms := metricNames(expr)
	if len(ms) == 0 {
		return fmt.Errorf("%q: no metric name", expr)
	}
	var missing []string
	for _, m := range ms {
		if !emitted[m] && !slices.Contains(missing, m) {
			missing = append(missing, m)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%q names %s, which the exporter does not emit", expr, strings.Join(missing, ", "))
	}
	return nil
}

// labelValuesMetric is the series selector of a variable's
// label_values(SELECTOR, label) query.
func labelValuesMetric(def string) string {
	s := strings.TrimPrefix(strings.TrimSpace(def), "label_values(")
	if i := strings.LastIndex(s, ","); i >= 0 {
		s = s[:i]
	}
	return s
}

// keywords are PromQL's words that are not metric names: its operators
// and the aggregations, which may put by (...) before their argument;
// those marked true take a parenthesised label list next.
var keywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"and": false, "or": false, "unless": false, "bool": false, "offset": false, "atan2": false,
	"sum": false, "min": false, "max": false, "avg": false, "group": false, "stddev": false, "stdvar": false,
	"count": false, "count_values": false, "bottomk": false, "topk": false, "quantile": false,
	"limitk": false, "limit_ratio": false,
}

// metricNames lists the metric names an expression selects: identifiers
// outside label matchers ({...}), ranges ([...]), strings and Grafana's
// variables ($name, ${name}), that are neither keywords nor functions (an
// identifier followed by "("), nor the labels of by (...) and the like.
func metricNames(expr string) []string {
	var names []string
	isStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isPart := func(c byte) bool { return isStart(c) || c >= '0' && c <= '9' }
	skipLabels := false
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			i = j + 1
		case c == '{' || c == '[':
			end := byte('}')
			if c == '[' {
				end = ']'
			}
			j := i + 1
			for j < len(expr) && expr[j] != end {
				if q := expr[j]; q == '"' || q == '\'' || q == '`' {
					for j++; j < len(expr) && expr[j] != q; j++ {
						if expr[j] == '\\' {
							j++
						}
					}
				}
				j++
			}
			i = j + 1
		case c == '$':
			j := i + 1
			if j < len(expr) && expr[j] == '{' {
				for j < len(expr) && expr[j] != '}' {
					j++
				}
				j++
			} else {
				for j < len(expr) && isPart(expr[j]) {
					j++
				}
			}
			i = j
		case c == '(' && skipLabels:
			for i < len(expr) && expr[i] != ')' {
				i++
			}
			skipLabels = false
			i++
		case c >= '0' && c <= '9' || c == '.':
			for i < len(expr) && (isPart(expr[i]) || expr[i] == '.') {
				i++ // a number or a duration (5m, 1e3)
			}
		case isStart(c):
			j := i
			for j < len(expr) && isPart(expr[j]) {
				j++
			}
			word := expr[i:j]
			k := j
			for k < len(expr) && (expr[k] == ' ' || expr[k] == '\t' || expr[k] == '\n') {
				k++
			}
			takesLabels, isKeyword := keywords[strings.ToLower(word)]
			switch {
			case isKeyword:
				skipLabels = takesLabels
			case k < len(expr) && expr[k] == '(':
				// a function or an aggregation
			default:
				names = append(names, word)
			}
			i = j
		default:
			i++
		}
	}
	return names
}
