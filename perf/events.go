package perf

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/ibex-rdma/ibex/verbs"
)

// -e (perftest's --events): an empty poll sleeps on the completion queue
// instead of spinning. perftest arms the CQ (ibv_req_notify_cq), blocks in
// ibv_get_cq_event and polls again (ctx_notify_events); ibex's completion
// channel is verbs.CQ.Wait, which returns as soon as the CQ holds a
// completion. The polling path (no -e) is unchanged: the loops call idle
// on an empty poll, which then only spins the watchdog.

// events bounds each wait by the watchdog: the wait ends when the CQ holds
// a completion, when the peer has been silent for the timeout, or when the
// run's context ends. One timer and one context serve every wait of a run,
// so a wait allocates nothing.
type events struct {
	parent context.Context
	ctx    context.Context
	cancel context.CancelFunc
	timer  *time.Timer
}

func newEvents(parent context.Context) *events {
	e := &events{parent: parent}
	e.arm()
	return e
}

// arm makes the context the waits use, and the stopped timer that ends it.
func (e *events) arm() {
	e.ctx, e.cancel = context.WithCancel(e.parent)
	e.timer = time.AfterFunc(time.Hour, e.cancel)
	e.timer.Stop()
}

func (e *events) stop() {
	e.timer.Stop()
	e.cancel()
}

// wait sleeps on cq until it holds a completion (nil, false), the
// watchdog's limit passes without one (nil, true), the CQ fails, or the
// run's context ends (the error).
func (e *events) wait(cq *verbs.CQ, wd *watchdog) (expired bool, err error) {
	left := wd.last + wd.limit - nanotime()
	if left <= 0 {
		return true, nil
	}
	e.timer.Reset(time.Duration(left))
	eventWaits.Add(1)
	err = cq.Wait(e.ctx)
	if !e.timer.Stop() {
		// The timer fired and ended e.ctx (or is about to): the next
		// wait needs a fresh one.
		e.cancel()
		e.arm()
	}
	if err == nil {
		return false, nil
	}
	if perr := e.parent.Err(); perr != nil {
		return false, perr
	}
	if errors.Is(err, context.Canceled) {
		// The watchdog's timer: the loop asks again, and an empty poll
		// past the limit is the peer's silence.
		return nanotime()-wd.last > wd.limit, nil
	}
	return false, err
}

// eventWaits counts the waits of -e in this process (the tests check that
// an events run sleeps and a polling one does not).
var eventWaits atomic.Uint64

// idle is called on every empty poll of cq: without -e it spins (the
// watchdog yields the CPU now and then), with -e it sleeps on cq. expired
// says the peer has been silent for the timeout.
func (s *session) idle(cq *verbs.CQ, wd *watchdog) (expired bool, err error) {
	if s.ev == nil {
		return wd.expired(), nil
	}
	return s.ev.wait(cq, wd)
}
