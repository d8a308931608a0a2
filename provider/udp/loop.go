package udp

import (
	"errors"
	"os"
	"runtime"
	"time"

	"github.com/ibex-rdma/ibex/rc"
	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/wire"
)

// The progress loop: commands from application goroutines, timers and
// transmission, receive, and sleep.

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
	ssn  uint64
	from verbs.QPState
	to   verbs.QPState
	attr verbs.QPAttr
}

// post queues a command for the loop and wakes it if it sleeps. The loop
// sets sleeping and then looks at pending; post sets pending and then looks
// at sleeping: one of them sees the other (the atomics are sequentially
// consistent), so a command never waits for the loop's next wake-up.
func (d *device) post(c cmd) {
	d.mu.Lock()
	d.cmds = append(d.cmds, c)
	d.pending.Store(true)
	d.mu.Unlock()
	if d.sleeping.Load() {
		_ = d.conn.SetReadDeadline(time.Now())
	}
}

// loop is the device's progress goroutine.
func (d *device) loop() {
	defer close(d.done)
	var cmds []cmd
	var pkt rc.Packet
	var wp wire.Packet
	for !d.stop.Load() {
		// Commands from application goroutines.
		d.mu.Lock()
		cmds, d.cmds = d.cmds, cmds[:0]
		d.pending.Store(false)
		d.mu.Unlock()
		for i := range cmds {
			d.apply(&cmds[i])
		}
		clear(cmds)

		// Timers and transmission: every engine until it has nothing to
		// send, so that what follows only a packet or a timer can wait.
		next := d.transmit(d.now(), &pkt, &wp)

		if d.pending.Load() {
			// More commands already: receive without waiting, and go on.
			if n, _ := d.conn.Recv(d.rx, false); n > 0 {
				d.deliver(n, &pkt, &wp)
			}
			continue
		}

		// Receive, or sleep until a datagram, the next timer or a wake-up
		// by post. The first read of a waiting Recv does not block: one
		// system call serves a busy loop and a sleeping one alike (they
		// cost 1.5 µs each in the VMs this was measured on).
		d.arm(next)
		d.sleeping.Store(true)
		if d.pending.Load() || d.stop.Load() { // see post and stopLoop
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
			d.deliver(n, &pkt, &wp)
			// Let the goroutines the completions woke run now, on this
			// processor, before the loop's own sends: a reply they post
			// then leaves with them, in the same sendmmsg.
			runtime.Gosched()
		}
	}
	for _, q := range d.qps {
		q.eng = nil
	}
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

// apply runs one command in the loop.
func (d *device) apply(c *cmd) {
	q := c.q
	switch c.kind {
	case cmdAddQP:
		d.qps[q.qp.Num()] = q
		d.lastQP = nil
		d.active = append(d.active, q)
	case cmdDelQP:
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
		q.state(d, c.from, c.to, c.attr)
		d.markReady(q)
	}
}
