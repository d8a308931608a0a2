package packet

import "github.com/ibex-rdma/ibex/sim/des"

// fifo is a queue of int32 IDs in a slice that is reused once drained, so
// that steady-state queueing allocates nothing.
type fifo struct {
	b []int32
	h int
}

func (q *fifo) len() int     { return len(q.b) - q.h }
func (q *fifo) empty() bool  { return q.h == len(q.b) }
func (q *fifo) front() int32 { return q.b[q.h] }
func (q *fifo) push(v int32) { q.b = append(q.b, v) }

func (q *fifo) pop() int32 {
	v := q.b[q.h]
	q.h++
	if q.h == len(q.b) {
		q.b, q.h = q.b[:0], 0
	} else if q.h >= 64 && q.h*2 >= len(q.b) {
		n := copy(q.b, q.b[q.h:])
		q.b, q.h = q.b[:n], 0
	}
	return v
}

// credit is a credit return on its way back to a sender: units become
// available at time at.
type credit struct {
	at    des.Time
	units int32
}

// credits is one port's pending credit returns for one VL, in time order.
// Returns are taken lazily when the port looks for credit, so a port
// with enough credit costs no event per packet.
type credits struct {
	b []credit
	h int
}

func (c *credits) empty() bool { return c.h == len(c.b) }

// add inserts a return, keeping time order (returns are made when packets
// finish leaving the downstream switch, which is nearly but not exactly in
// time order across its output ports).
func (c *credits) add(at des.Time, units int32) {
	c.b = append(c.b, credit{at, units})
	for i := len(c.b) - 1; i > c.h && c.b[i-1].at > at; i-- {
		c.b[i], c.b[i-1] = c.b[i-1], c.b[i]
	}
}

// take removes the returns due by now and gives their units.
func (c *credits) take(now des.Time) int32 {
	var u int32
	for c.h < len(c.b) && c.b[c.h].at <= now {
		u += c.b[c.h].units
		c.h++
	}
	if c.h == len(c.b) {
		c.b, c.h = c.b[:0], 0
	} else if c.h >= 64 && c.h*2 >= len(c.b) {
		n := copy(c.b, c.b[c.h:])
		c.b, c.h = c.b[:n], 0
	}
	return u
}

// next is the time of the earliest pending return; the queue must not be
// empty.
func (c *credits) next() des.Time { return c.b[c.h].at }

// pending is the units not yet returned.
func (c *credits) pending() int64 {
	var u int64
	for _, r := range c.b[c.h:] {
		u += int64(r.units)
	}
	return u
}

// sent is what a RoCE QP keeps of a packet it sent and the receiver has
// not yet taken, to send it again (go-back-N).
type sent struct{ chunk, payload, wire int32 }

// sentLog is a QP's sent packets from the oldest the receiver has not
// taken on, in PSN order, in a slice reused once drained.
type sentLog struct {
	b []sent
	h int
}

func (l *sentLog) push(s sent)    { l.b = append(l.b, s) }
func (l *sentLog) at(k int) *sent { return &l.b[l.h+k] }

func (l *sentLog) pop() {
	l.h++
	if l.h == len(l.b) {
		l.b, l.h = l.b[:0], 0
	} else if l.h >= 64 && l.h*2 >= len(l.b) {
		n := copy(l.b, l.b[l.h:])
		l.b, l.h = l.b[:n], 0
	}
}
