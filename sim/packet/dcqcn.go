package packet

import (
	"math"

	"github.com/ibex-rdma/ibex/sim/des"
	"github.com/ibex-rdma/ibex/sim/fabric"
)

// DCQCN's reaction point, at the sending QP (Zhu et al., SIGCOMM 2015).
// The notification point is the receiving NIC's CNP in roce.deliver.

// rpState is a QP's DCQCN reaction point. Its timers are not events: the
// stages a timer would have run since the last cut are applied when the
// QP next sends or gets a CNP (advance), so a QP costs nothing while it
// is at line rate, and nothing per timer tick below it.
type rpState struct {
	rc, rt  float64  // current and target rate, bits/s
	alpha   float64  // α as of the last cut
	cut     des.Time // the last CNP; -1: none yet (α starts at 1)
	t, bc   int32    // rate-increase stages since the cut: by the timer, by the byte counter
	bytes   int64    // sent since the last byte-counter stage
	limited bool     // below line rate: paced
}

// onCNP is a CNP reaching QP qi's sender.
func (l *roce) onCNP(qi int32) {
	n := l.n
	l.rps[qi].decrease(&n.p.DCQCN, float64(n.ports[n.qps[qi].port].rate), n.sim.Now())
}

// pace is DCQCN at the sender after QP qi sends wire bytes now: the byte
// counter's stages, and a QP below line rate starts its next packet no
// sooner than wire / Rc after this one.
func (l *roce) pace(qi int32, q *qp, wire int32, now des.Time) {
	r := &l.rps[qi]
	if !r.limited {
		return
	}
	d := &l.n.p.DCQCN
	line := float64(l.n.ports[q.port].rate)
	r.advance(d, line, now)
	r.bytes += int64(wire)
	for r.limited && r.bytes >= d.ByteCounter {
		r.bytes -= d.ByteCounter
		r.bc++
		r.increase(d, line)
	}
	if r.limited {
		q.readyAt = max(q.readyAt, now+des.Time(float64(wire)*8/r.rc*float64(des.Second)))
	}
}

// decrease is DCQCN's rate cut at time now: Rt = Rc, Rc = Rc(1 - α/2),
// α = (1-g)α + g, where α has first decayed by (1-g) for every K since
// the last cut (and is 1 at the first).
func (r *rpState) decrease(d *fabric.DCQCN, line float64, now des.Time) {
	r.advance(d, line, now)
	a := 1.0
	if r.cut >= 0 {
		a = r.alpha * math.Pow(1-d.G, float64((now-r.cut)/d.AlphaTimer))
	}
	r.rt = r.rc
	r.rc = max(r.rc*(1-a/2), d.MinRate)
	r.alpha = (1-d.G)*a + d.G
	r.cut, r.t, r.bc, r.bytes = now, 0, 0, 0
	r.limited = true
}

// advance runs the rate-increase stages the QP's timer has run since its
// last cut.
func (r *rpState) advance(d *fabric.DCQCN, line float64, now des.Time) {
	if !r.limited {
		return
	}
	stages := (now - r.cut) / d.RateTimer
	for r.limited && des.Time(r.t) < stages {
		r.t++
		r.increase(d, line)
	}
}

// increase is one rate-increase stage: fast recovery (Rc = (Rt+Rc)/2) for
// the first F stages of either counter, hyper increase (Rt += R_HAI) once
// both are past F, additive increase (Rt += R_AI) between. Within R_AI of
// the line rate the QP is back at it and stops pacing.
func (r *rpState) increase(d *fabric.DCQCN, line float64) {
	f := int32(d.FastStages)
	switch {
	case max(r.t, r.bc) <= f:
	case min(r.t, r.bc) > f:
		r.rt += d.RateHAI
	default:
		r.rt += d.RateAI
	}
	r.rt = min(r.rt, line)
	r.rc = (r.rt + r.rc) / 2
	if r.rc >= line-d.RateAI {
		r.rc, r.rt, r.limited = line, line, false
	}
}
