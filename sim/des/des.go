// Package des is the discrete-event core of ibex's fabric simulator: a
// simulated clock, a queue of events ordered by time, and a seeded random
// source, so that one seed replays a run exactly.
//
// Events are small values (a time, a kind the model dispatches on, two
// operands), not closures: a packet-level run of a thousand GPUs makes
// hundreds of millions of them, and values in one slice cost no
// allocation and little memory traffic. Events at the same time come out
// in the order they were scheduled, so the order never depends on heap
// layout and a run is a pure function of its inputs and seed.
package des

import (
	"fmt"
	"math/rand/v2"
)

// Time is simulated time in picoseconds: an NDR byte takes 20 ps, and an
// int64 holds 106 days.
type Time int64

// Common units of Time.
const (
	Picosecond  Time = 1
	Nanosecond       = 1000 * Picosecond
	Microsecond      = 1000 * Nanosecond
	Millisecond      = 1000 * Microsecond
	Second           = 1000 * Millisecond
)

// Seconds is t in seconds.
func (t Time) Seconds() float64 { return float64(t) / float64(Second) }

func (t Time) String() string {
	switch {
	case t < Nanosecond && t > -Nanosecond:
		return fmt.Sprintf("%dps", int64(t))
	case t < Microsecond && t > -Microsecond:
		return fmt.Sprintf("%.3fns", float64(t)/float64(Nanosecond))
	case t < Millisecond && t > -Millisecond:
		return fmt.Sprintf("%.3fµs", float64(t)/float64(Microsecond))
	case t < Second && t > -Second:
		return fmt.Sprintf("%.3fms", float64(t)/float64(Millisecond))
	}
	return fmt.Sprintf("%.6fs", t.Seconds())
}

// Event is one scheduled happening. Its kind and operands mean what the
// model says (a packet reaching a port, a credit returning, a flow
// starting). A queue numbers 2^48 events before the tie order wraps.
type Event struct {
	At   Time
	A, B int32
	C    int64
	// ks is the kind in the low 16 bits and the scheduling order (for
	// ties at one time) above: 32 bytes an event, two to a cache line.
	ks uint64
}

// Kind is what the model said the event is.
func (e *Event) Kind() uint16 { return uint16(e.ks) }

// before orders events by time, then by scheduling order.
func (e *Event) before(f *Event) bool {
	return e.At < f.At || e.At == f.At && e.ks>>16 < f.ks>>16
}

// Queue is a min-queue of events: a 4-ary heap (shallower than a binary
// one, and a node's children share a cache line or two).
type Queue struct {
	h   []Event
	seq uint64
}

// NewEvent makes an event for Push.
func NewEvent(at Time, kind uint16, a, b int32, c int64) Event {
	return Event{At: at, A: a, B: b, C: c, ks: uint64(kind)}
}

// Len is the number of events queued.
func (q *Queue) Len() int { return len(q.h) }

// Push queues e (its kind is kept; see NewEvent).
func (q *Queue) Push(e Event) {
	q.seq++
	e.ks = q.seq<<16 | uint64(uint16(e.ks))
	q.h = append(q.h, e)
	i := len(q.h) - 1
	for i > 0 {
		p := (i - 1) / 4
		if !q.h[i].before(&q.h[p]) {
			break
		}
		q.h[i], q.h[p] = q.h[p], q.h[i]
		i = p
	}
}

// Peek is the earliest event; the queue must not be empty.
func (q *Queue) Peek() Event { return q.h[0] }

// Pop removes and returns the earliest event; the queue must not be
// empty.
func (q *Queue) Pop() Event {
	top := q.h[0]
	n := len(q.h) - 1
	last := q.h[n]
	q.h = q.h[:n]
	if n == 0 {
		return top
	}
	// Sift last down from the root.
	i := 0
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		m := c
		for k := c + 1; k < c+4 && k < n; k++ {
			if q.h[k].before(&q.h[m]) {
				m = k
			}
		}
		if !q.h[m].before(&last) {
			break
		}
		q.h[i] = q.h[m]
		i = m
	}
	q.h[i] = last
	return top
}

// Handler is the model: it handles each event, scheduling more on s.
type Handler interface {
	Handle(s *Sim, e Event)
}

// Sim is one simulation run: the clock, the queue and the random source.
type Sim struct {
	now    Time
	q      Queue
	rng    *rand.Rand
	seed   uint64
	events uint64
}

// New starts a run at time 0 with the random source seeded by seed.
func New(seed uint64) *Sim {
	return &Sim{rng: rand.New(rand.NewPCG(seed, 0x6962657873696d)), seed: seed}
}

// Now is the simulated time.
func (s *Sim) Now() Time { return s.now }

// Seed is the run's seed.
func (s *Sim) Seed() uint64 { return s.seed }

// Rand is the run's random source; models draw from it alone, in event
// order, so a seed replays the run.
func (s *Sim) Rand() *rand.Rand { return s.rng }

// Events is the number of events handled so far.
func (s *Sim) Events() uint64 { return s.events }

// Pending is the number of events queued.
func (s *Sim) Pending() int { return s.q.Len() }

// After schedules an event delay from now. A negative delay is a bug in
// the model: the clock never runs backwards.
func (s *Sim) After(delay Time, kind uint16, a, b int32, c int64) {
	if delay < 0 {
		panic(fmt.Sprintf("des: event of kind %d scheduled %v in the past", kind, -delay))
	}
	s.q.Push(Event{At: s.now + delay, A: a, B: b, C: c, ks: uint64(kind)})
}

// Run handles events in order until the queue is empty, the next event
// is after until (0: no limit), or stop returns true (checked between
// events; nil: never). It returns the number of events handled.
func (s *Sim) Run(h Handler, until Time, stop func() bool) uint64 {
	var n uint64
	for s.q.Len() > 0 {
		if until > 0 && s.q.Peek().At > until {
			s.now = until
			break
		}
		if stop != nil && stop() {
			break
		}
		e := s.q.Pop()
		s.now = e.At
		n++
		s.events++
		h.Handle(s, e)
	}
	return n
}
