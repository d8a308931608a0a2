package rc

import (
	"errors"
	"fmt"

	"github.com/ibex-rdma/ibex/ib"
)

// What the external tests (sim_test.go, scenario_test.go, fuzz_test.go,
// which drive the engine through package rctest) may see of its insides.

// RaceEnabled reports whether the race detector is on.
const RaceEnabled = raceEnabled

// Invariants checks the engine's internal consistency: what must hold
// between any two calls, whatever arrived. It is cheap enough to run after
// every packet.
func Invariants(c *Conn) error {
	r, s := &c.req, &c.resp
	switch {
	case r.n < 0 || r.n > len(r.ring) || r.head < 0 || r.head >= len(r.ring):
		return fmt.Errorf("request ring: head %d, %d queued of %d", r.head, r.n, len(r.ring))
	case r.next < 0 || r.next > r.n:
		return fmt.Errorf("transmit point %d outside the %d requests queued", r.next, r.n)
	case s.outN < 0 || s.outN > len(s.out) || s.resNext < 0 || s.resNext >= len(s.res):
		return fmt.Errorf("responder: %d responses queued of %d, resource %d of %d", s.outN, len(s.out), s.resNext, len(s.res))
	}
	if c.dead {
		return nil // a stopped requester's state no longer matters
	}
	switch {
	case ib.PSNDiff(r.sentEnd, r.una) < 0:
		return fmt.Errorf("una %#x beyond the end of what was sent, %#x", r.una, r.sentEnd)
	case int(ib.PSNDiff(r.sentEnd, r.una)) > c.cfg.Window:
		return fmt.Errorf("%d PSNs unacknowledged, window %d", ib.PSNDiff(r.sentEnd, r.una), c.cfg.Window)
	case ib.PSNDiff(r.sentEnd, r.psn) < 0:
		return fmt.Errorf("transmit psn %#x beyond the end of what was sent, %#x", r.psn, r.sentEnd)
	}
	// The oldest request is never behind the acknowledged point: una only
	// moves past a request once it has completed.
	if r.n > 0 && r.at(0).started && ib.PSNDiff(r.at(0).firstPSN, r.una) > 0 {
		return fmt.Errorf("una %#x behind head psn %#x", r.una, r.at(0).firstPSN)
	}
	// Requests start in order: a started prefix, then none started (the
	// last is checked, not every one, to keep this cheap).
	started := 0
	for ; started < r.n && r.at(started).started; started++ {
		if w := r.at(started); w.Op == ib.WRRDMARead && w.recvd > w.Len {
			return fmt.Errorf("READ %d: %d bytes received of %d", w.ID, w.recvd, w.Len)
		}
	}
	if started < r.n-1 && r.at(r.n-1).started {
		return errors.New("a started request behind one not started")
	}
	return nil
}

// Armed checks the engine's liveness after it has sent all it could: a
// requester with packets unacknowledged must have a timer that will wake
// it (a retransmit timeout or the end of an RNR wait), or nothing would
// ever retransmit them after a loss.
func Armed(c *Conn) error {
	r := &c.req
	if c.dead || r.maxRTO == 0 || ib.PSNDiff(r.sentEnd, r.una) <= 0 || r.n == 0 {
		return nil
	}
	if c.Deadline() == 0 {
		return fmt.Errorf("no timer armed with psns [%#x, %#x) unacknowledged", r.una, r.sentEnd)
	}
	return nil
}

// DebugState describes the engine's state for a failure message.
func DebugState(c *Conn) string {
	r := &c.req
	s := fmt.Sprintf("req: una %#x psn %#x sentEnd %#x next %d off %d n %d retrying %v retryPSN %#x retryLeft %d rto %d deadline %d rnrUntil %d;",
		r.una, r.psn, r.sentEnd, r.next, r.off, r.n, r.retrying, r.retryPSN, r.retryLeft, r.rto, r.deadlineAt, r.rnrUntil)
	for i := 0; i < min(r.n, 4); i++ {
		w := r.at(i)
		s += fmt.Sprintf(" [%d %v first %#x npkts %d len %d recvd %d done %v started %v]", w.ID, w.Op, w.firstPSN, w.npkts, w.Len, w.recvd, w.done, w.started)
	}
	s += fmt.Sprintf("; resp: epsn %#x inMsg %v nakSent %v outN %d res:", c.resp.epsn, c.resp.inMsg, c.resp.nakSent, c.resp.outN)
	for _, x := range c.resp.res {
		s += fmt.Sprintf(" {%v %#x-%#x va %#x len %d}", x.read, x.first, x.last, x.va, x.len)
	}
	return s
}

// Kinds of ResponseState (state.go), for the Export/Import tests.
const (
	ResponseAck       = itemAck
	ResponseNak       = itemNak
	ResponseAtomicAck = itemAtomicAck
	ResponseRead      = itemRead
)
