package udp

import (
	"errors"
	"os"
	"runtime"
	"time"

	"github.com/ibex-rdma/ibex/verbs"
)

// Progress: commands, timers and transmission, receive. One goroutine at a
// time owns the device's engines and buffers (device.own): the application
// goroutine that posts a request or polls a CQ of the device, when it can
// take them (run to completion: it sends and receives the batch itself,
// with no hand-off), or else the device's own progress goroutine, which
// serves a process that does not poll — timers, acknowledgements, a
// passive responder — and steps aside while somebody polls.

type cmdKind uint8

const (
	cmdAddQP cmdKind = iota
	cmdDelQP
	cmdIssue
	cmdState
)

type cmd struct {
	kind cmdKind
	q    *qpDriver
	ssn  uint64 // cmdIssue: the request's; cmdState: the command's stateSeq
	from verbs.QPState
	to   verbs.QPState
	attr verbs.QPAttr
}

// pollGrace is how long after the last poll of one of its CQs the device's
// own goroutine leaves the engines to the pollers; meanwhile it naps for
// pollNap between looks (a Go timer sleeps at least about a millisecond on
// Linux: measured 1.06–1.10 ms for any sleep up to 1 ms), and the pollers
// run the timers. A poller that stops (it went to sleep on a completion
// channel, or computes) hands the device back within pollGrace plus a
// nap; an acknowledgement it deferred (run) leaves within a nap, well
// inside the 2 ms lower bound of the peers' retransmit timeout.
const (
	pollGrace = 2 * time.Millisecond
	pollNap   = 500 * time.Microsecond
)

// post queues a command and runs it at once if the device is free (the
// posting goroutine then transmits what it caused); otherwise the owner
// runs it before it lets go (unlock), or the progress goroutine, asleep in
// Recv, is woken for it. The goroutine sets sleeping and then looks at
// pending; post sets pending and then looks at sleeping: one of them sees
// the other (the atomics are sequentially consistent).
func (d *device) post(c cmd) {
	d.mu.Lock()
	d.cmds = append(d.cmds, c)
	d.pending.Store(true)
	d.mu.Unlock()
	if !d.stop.Load() && d.own.TryLock() {
		d.run(false, true)
		d.unlock()
		return
	}
	d.wake()
}

// wake wakes the progress goroutine if it sleeps in Recv; once per sleep
// (the first waker clears sleeping), since SetReadDeadline costs a timer
// update and a netpoller wake-up, and a spinning poller would repeat it.
func (d *device) wake() {
	if d.sleeping.Load() && d.sleeping.CompareAndSwap(true, false) {
		d.ctrs.handoffs.Add(1)
		_ = d.conn.SetReadDeadline(time.Now())
	}
}

// Progress is driver.Progresser: verbs calls it when a CQ of the device is
// found empty. The caller runs a pass — commands, due timers, a batch
// received without waiting, and what the engines answer — in its own
// goroutine. If the progress goroutine is asleep in Recv holding the
// device, it is woken to hand it over; that costs the first poll only.
func (drv *opened) Progress() { drv.dev.progress() }

func (d *device) progress() {
	if d.stop.Load() {
		return
	}
	d.lastPoll.Store(d.now())
	if !d.own.TryLock() {
		d.wake()
		return
	}
	d.run(true, true)
	d.unlock()
}

// Idle is driver.Idler: a goroutine that polled a CQ of the device goes to
// sleep on it (verbs.CQ.Wait), so the progress goroutine takes over now
// rather than after pollGrace.
func (drv *opened) Idle() {
	d := drv.dev
	if d.lastPoll.Load() != 0 {
		d.lastPoll.Store(0)
		select {
		case d.kick <- struct{}{}:
		default:
		}
	}
}

// unlock lets go of the device, first running the commands posted while it
// was held by somebody who could not wait (see post).
func (d *device) unlock() {
	for {
		d.own.Unlock()
		if !d.pending.Load() || !d.own.TryLock() {
			return
		}
		d.run(false, false)
	}
}

// run is one pass: the commands posted; with recv what has arrived (see
// drainRx); then the due timers and what every engine has to send. The
// caller holds own; poller says it is a goroutine that polled, not the
// progress goroutine (its acknowledgements may wait, see keepAcks).
//
// Receiving comes before the timers: with a thousand QPs whose timers are
// due, a pass that ran them first and then read one batch fell behind the
// ACKs their retransmissions brought, until retry_cnt ran out with the
// ACKs unread in the socket (TestConformance/ThousandQPs under -race with
// CPU burners: megabytes queued, no drop).
func (d *device) run(recv, poller bool) (next int64) {
	d.commands()
	if recv {
		d.drainRx(poller)
	}
	d.lazyAcks = poller
	next = d.transmit(d.now(), &d.pkt, &d.wp)
	d.lazyAcks = false
	return next
}

// drainRx receives without waiting until the conn has nothing more (a
// batch comes back short), up to maxDrain batches, and returns how many
// messages.
func (d *device) drainRx(poller bool) (got int) {
	for range maxDrain {
		n, _ := d.conn.Recv(d.rx, false)
		if n == 0 {
			return got
		}
		got += n
		if poller {
			d.ctrs.inlineRcv.Add(uint64(n))
		} else {
			d.ctrs.loopRcv.Add(uint64(n))
		}
		d.deliver(n, &d.pkt, &d.wp)
		if n < len(d.rx) {
			return got
		}
	}
	return got
}

// maxDrain bounds one pass's receiving (maxDrain × rxSlots messages), so
// that the timers and the transmit queue still get their turn.
const maxDrain = 32

// commands applies the queued commands.
func (d *device) commands() {
	if !d.pending.Load() {
		return
	}
	d.mu.Lock()
	cmds := d.cmds
	d.cmds = d.spare[:0]
	d.pending.Store(false)
	d.mu.Unlock()
	for i := range cmds {
		d.apply(&cmds[i])
	}
	clear(cmds)
	d.spare = cmds[:0]
}

// polled reports whether a CQ of the device was polled within pollGrace.
func (d *device) polled() bool {
	t := d.lastPoll.Load()
	return t != 0 && d.now()-t < int64(pollGrace)
}

// loop is the device's progress goroutine.
func (d *device) loop() {
	defer close(d.done)
	d.own.Lock()
	for !d.stop.Load() {
		polled := d.polled() // then what arrives is the pollers' to receive
		d.commands()
		if !polled && d.drainRx(false) > 0 {
			d.yield()
			d.commands()
		}
		next := d.transmit(d.now(), &d.pkt, &d.wp)
		if d.pending.Load() {
			continue // more commands already
		}
		if polled {
			// Somebody polls: leave the device to them, and look again
			// later.
			d.unlock()
			d.nap.Reset(pollNap)
			select {
			case <-d.nap.C:
			case <-d.kick: // Idle, or stopLoop
				d.nap.Stop()
			}
			d.own.Lock()
			continue
		}

		// Receive, or sleep until a datagram, the next timer or a wake-up
		// by post or a poller. The first read of a waiting Recv does not
		// block: one system call serves a busy loop and a sleeping one
		// alike (they cost 1.5 µs each in the VMs this was measured on).
		d.arm(next)
		d.sleeping.Store(true)
		if d.pending.Load() || d.stop.Load() || d.polled() { // see post, progress and stopLoop
			d.sleeping.Store(false)
			continue
		}
		n, err := d.conn.Recv(d.rx, true)
		d.sleeping.Store(false)
		if err != nil {
			d.armed = -1 // expired, or set to now by post
			if !errors.Is(err, os.ErrDeadlineExceeded) && !d.stop.Load() {
				d.ctrs.rcvErrors.Add(1)
			}
		}
		if n > 0 {
			d.ctrs.loopRcv.Add(uint64(n))
			d.deliver(n, &d.pkt, &d.wp)
			d.yield()
		}
	}
	// What the passes kept back (keepAcks) leaves before the device stops.
	d.release(nil, &d.wp)
	d.tx.flush()
	for _, q := range d.qps {
		q.eng = nil
	}
	d.own.Unlock()
}

// yield lets the goroutines that the completions just delivered woke run
// now, on this processor, before the progress goroutine's own sends: a
// reply they post then leaves with the acknowledgements, in one system
// call (their post runs the pass itself, the device being free).
func (d *device) yield() {
	d.unlock()
	runtime.Gosched()
	d.own.Lock()
}

// arm sets the conn's read deadline to the engine deadline next (0:
// none), unless it is set so already.
func (d *device) arm(next int64) {
	if next == d.armed {
		return
	}
	var t time.Time
	if next != 0 {
		t = d.start.Add(time.Duration(next))
	}
	_ = d.conn.SetReadDeadline(t)
	d.armed = next
}

// apply runs one command.
func (d *device) apply(c *cmd) {
	q := c.q
	switch c.kind {
	case cmdAddQP:
		d.qps[q.qp.Num()] = q
		d.lastQP = nil
		d.active = append(d.active, q)
	case cmdDelQP:
		d.farewell(q)
		delete(d.qps, q.qp.Num())
		d.lastQP = nil
		for i, x := range d.active {
			if x == q {
				d.active = append(d.active[:i], d.active[i+1:]...)
				break
			}
		}
		q.eng = nil
	case cmdIssue:
		q.issue(c.ssn)
		d.markReady(q)
	case cmdState:
		q.state(d, c.ssn, c.from, c.to, c.attr)
		d.markReady(q)
	}
}
