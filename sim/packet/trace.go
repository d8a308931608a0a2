package packet

import (
	"bufio"
	"fmt"
	"io"
	"strconv"

	"github.com/ibex-rdma/ibex/sim/des"
	"github.com/ibex-rdma/ibex/sim/topo"
)

// tracer collects step spans for a Chrome / Perfetto trace: one process
// per host, one thread per GPU and channel.
type tracer struct {
	limit   int
	spans   []span
	dropped int64
	g       *topo.Graph
	gpn     int

	// Counter samples: every interval, per link tier, the utilisation of
	// the tier's sending ports since the last sample and the bytes queued
	// in its switches' output queues.
	interval des.Time
	last     [4]int64 // bytes sent per tier at the last sample
	capacity [4]float64
	samples  []sample
}

type sample struct {
	at     des.Time
	util   [4]float64
	queued [4]int64
}

const evSample uint16 = 100

// sampleTiers takes a counter sample and schedules the next while the run
// has other events.
func (t *tracer) sampleTiers(n *Net) {
	var bytes [4]int64
	var sm sample
	sm.at = n.sim.Now()
	for i := range n.ports {
		op := &n.ports[i]
		if !op.cabled {
			continue
		}
		tier := n.g.Links[op.link].Tier
		bytes[tier] += op.txBytes
		sm.queued[tier] += op.queued
	}
	for k := range bytes {
		if t.capacity[k] > 0 {
			sm.util[k] = float64(bytes[k]-t.last[k]) * 8 / (t.capacity[k] * t.interval.Seconds())
		}
	}
	t.last = bytes
	t.samples = append(t.samples, sm)
	if n.sim.Pending() > 0 && n.w.left > 0 {
		n.sim.After(t.interval, evSample, 0, 0, 0)
	}
}

type span struct {
	start, end  des.Time
	gpu, ch, st int32
}

func newTracer(limit int, interval des.Time, g *topo.Graph, gpn int) *tracer {
	if limit <= 0 {
		limit = 200_000
	}
	if interval <= 0 {
		interval = 10 * des.Microsecond
	}
	t := &tracer{limit: limit, interval: interval, g: g, gpn: gpn}
	for p := range g.Ports {
		if l := g.Ports[p].Link; l != topo.NoLink {
			t.capacity[g.Links[l].Tier] += float64(g.Links[l].Rate)
		}
	}
	return t
}

func (t *tracer) step(p *proc, start, end des.Time) {
	if len(t.spans) >= t.limit {
		t.dropped++
		return
	}
	t.spans = append(t.spans, span{start, end, p.gpu, p.ch, p.step})
}

// us is t in microseconds, as the trace format wants.
func us(t des.Time) string {
	return strconv.FormatFloat(float64(t)/float64(des.Microsecond), 'f', 6, 64)
}

// write writes the trace in the Trace Event Format (JSON object form).
func (t *tracer) write(out io.Writer, m *model) error {
	w := bufio.NewWriter(out)
	fmt.Fprintf(w, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"schedule\":%q,\"bytes\":%d,\"time_us\":%s,\"spans_dropped\":%d},\"traceEvents\":[\n",
		m.cfg.Schedule.String(), m.cfg.Bytes, us(m.w.end), t.dropped)
	first := true
	sep := func() {
		if !first {
			w.WriteString(",\n")
		}
		first = false
	}
	named := map[int32]bool{}
	for _, s := range t.spans {
		host := s.gpu / int32(t.gpn)
		if !named[host] {
			named[host] = true
			sep()
			fmt.Fprintf(w, `{"ph":"M","name":"process_name","pid":%d,"args":{"name":%q}}`, host, t.g.NodeName(topo.NodeID(host)))
		}
		sep()
		fmt.Fprintf(w, `{"ph":"X","name":"step %d","cat":"step","pid":%d,"tid":%d,"ts":%s,"dur":%s,"args":{"gpu":%d,"channel":%d}}`,
			s.st, host, (s.gpu%int32(t.gpn))*1000+s.ch, us(s.start), us(s.end-s.start), s.gpu%int32(t.gpn), s.ch)
	}
	// The fabric as counter tracks: utilisation and queued bytes per link
	// tier, one sample per interval (the value holds until the next).
	if len(t.samples) > 0 {
		sep()
		fmt.Fprintf(w, `{"ph":"M","name":"process_name","pid":-1,"args":{"name":"fabric"}}`)
	}
	for _, sm := range t.samples {
		for k := range sm.util {
			if t.capacity[k] == 0 {
				continue
			}
			tier := topo.LinkTier(k).String()
			sep()
			fmt.Fprintf(w, `{"ph":"C","name":"utilisation %s","pid":-1,"ts":%s,"args":{"busy":%s}}`,
				tier, us(sm.at-t.interval), strconv.FormatFloat(sm.util[k], 'f', 4, 64))
			sep()
			fmt.Fprintf(w, `{"ph":"C","name":"queued bytes %s","pid":-1,"ts":%s,"args":{"bytes":%d}}`, tier, us(sm.at), sm.queued[k])
		}
	}
	w.WriteString("\n]}\n")
	return w.Flush()
}
