package packet

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"time"

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
}

type span struct {
	start, end  des.Time
	gpu, ch, st int32
}

func newTracer(limit int, g *topo.Graph, gpn int) *tracer {
	if limit <= 0 {
		limit = 200_000
	}
	return &tracer{limit: limit, g: g, gpn: gpn}
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
	// Per-port utilisation over the run, as one counter sample per tier's
	// busiest port at the end (a whole-run figure).
	for _, p := range m.n.portStats(m.w.end) {
		sep()
		fmt.Fprintf(w, `{"ph":"C","name":"util %s","pid":-1,"ts":0,"args":{"busy":%s}}`, p.Name, strconv.FormatFloat(p.Util, 'f', 4, 64))
		sep()
		fmt.Fprintf(w, `{"ph":"C","name":"util %s","pid":-1,"ts":%s,"args":{"busy":0}}`, p.Name, us(m.w.end))
	}
	w.WriteString("\n]}\n")
	return w.Flush()
}

// progress prints a line about every second to a terminal or log.
type progress struct {
	w       io.Writer
	start   time.Time
	next    time.Time
	printed bool
}

func (p *progress) tick(m *model) {
	now := time.Now()
	if now.Before(p.next) {
		return
	}
	p.next = now.Add(time.Second)
	p.printed = true
	frac := float64(m.w.stepsRun) / float64(max(m.w.total, 1))
	const width = 30
	bar := make([]byte, width)
	for i := range bar {
		bar[i] = ' '
		if float64(i) < frac*width {
			bar[i] = '='
		}
	}
	el := now.Sub(p.start).Seconds()
	fmt.Fprintf(p.w, "\r[%s] %5.1f%%  simulated %v  %d events  %.2fM events/s  %.0fs",
		bar, 100*frac, m.sim.Now(), m.sim.Events(), float64(m.sim.Events())/el/1e6, el)
}

func (p *progress) finish(m *model) {
	if p.printed {
		fmt.Fprintln(p.w)
	}
}
