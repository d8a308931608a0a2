package daemon

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ibex-rdma/ibex/internal/ibexdwire"
	"github.com/ibex-rdma/ibex/internal/shmem"
)

// engine is one core's worth of transport: a goroutine locked to a thread
// (pinned to its core when the config names cores) that serves the rings
// and CQs of every process assigned to it, in turn. With work it passes
// again at once; while a process has requests in flight it keeps polling
// (that also drives the device), yielding the CPU between looks; idle for
// poll.spin, it sleeps on its doorbell word until a process rings it, a
// CQ's watcher rings it, or a timeout that doubles up to poll.max_sleep.
//
// Every process on the engine maps its doorbell page: a process can wake
// its engine-mates' engine (spurious wake-ups cost CPU), never reach their
// rings or memory.
type engine struct {
	d       *Daemon
	id      int
	core    int // -1: any of the daemon's cores
	db      *shmem.Segment
	mu      sync.Mutex // serialises add and remove
	clients atomic.Pointer[[]*client]
	stop    chan struct{}
	done    chan struct{}
}

func newEngine(d *Daemon, id, core int, db *shmem.Segment) *engine {
	e := &engine{d: d, id: id, core: core, db: db, stop: make(chan struct{}), done: make(chan struct{})}
	e.clients.Store(&[]*client{})
	go e.run()
	return e
}

// startEngines makes one engine per configured core (one when none is
// configured), each with a fresh doorbell page.
func (d *Daemon) startEngines() error {
	n := max(len(d.cfg.Cores), 1)
	for i := range n {
		db, err := shmem.Create(fmt.Sprintf("ibexd-doorbell-%d", i), ibexdwire.DoorbellSize)
		if err != nil {
			d.stopEngines()
			return err
		}
		d.engines = append(d.engines, newEngine(d, i, d.coreOf(i), db))
	}
	return nil
}

func (d *Daemon) coreOf(i int) int {
	if len(d.cfg.Cores) == 0 {
		return -1
	}
	return d.cfg.Cores[i%len(d.cfg.Cores)]
}

func (d *Daemon) stopEngines() {
	for _, e := range d.engines {
		close(e.stop)
		ibexdwire.Ring(e.db.Mem)
		<-e.done
		e.db.Close()
	}
	d.engines = nil
}

// engineFor picks the engine with the fewest processes.
func (d *Daemon) engineFor() *engine {
	best := d.engines[0]
	for _, e := range d.engines[1:] {
		if len(*e.clients.Load()) < len(*best.clients.Load()) {
			best = e
		}
	}
	return best
}

func (e *engine) add(c *client) {
	e.mu.Lock()
	defer e.mu.Unlock()
	old := *e.clients.Load()
	list := append(append(make([]*client, 0, len(old)+1), old...), c)
	e.clients.Store(&list)
	ibexdwire.Ring(e.db.Mem)
}

// remove takes c off the engine; once it returns, the engine never
// touches c's rings or QPs again.
func (e *engine) remove(c *client) {
	e.mu.Lock()
	old := *e.clients.Load()
	list := make([]*client, 0, len(old))
	for _, x := range old {
		if x != c {
			list = append(list, x)
		}
	}
	e.clients.Store(&list)
	e.mu.Unlock()
	c.engMu.Lock() // a pass in progress ends first
	c.off = true
	c.engMu.Unlock()
}

func (e *engine) run() {
	defer close(e.done)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if e.core >= 0 {
		var set unix.CPUSet
		set.Set(e.core)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			fmt.Fprintf(os.Stderr, "ibexd: engine %d: pin to cpu %d: %v\n", e.id, e.core, err)
		}
	}
	spin := time.Duration(e.d.cfg.Poll.Spin)
	maxSleep := time.Duration(e.d.cfg.Poll.MaxSleep)
	sleeping := ibexdwire.Sleeping(e.db.Mem)
	var idleSince time.Time
	const minSleep = 20 * time.Microsecond
	sleep := minSleep
	for i := 0; ; i++ {
		select {
		case <-e.stop:
			return
		default:
		}
		n, inflight := e.pass()
		if n > 0 {
			idleSince, sleep = time.Time{}, minSleep
			continue
		}
		now := time.Now()
		if idleSince.IsZero() {
			idleSince = now
		}
		// While requests are in flight a response is due soon: keep
		// polling, but let the daemon's other goroutines (the devices'
		// loops, with GOMAXPROCS as small as the cores) and the
		// machine's other processes run between looks.
		if inflight || now.Sub(idleSince) < spin {
			if i%16 == 0 {
				runtime.Gosched()
				yield()
			}
			continue
		}
		// Sleep: arm the CQ watchers, say so, look once more (a
		// doorbell rung before the flag was visible is seen here),
		// then wait.
		e.arm()
		sleeping.Store(1)
		if n, _ = e.pass(); n > 0 {
			sleeping.Store(0)
			continue
		}
		shmem.FutexWait(sleeping, 1, sleep)
		sleeping.Store(0)
		sleep = min(2*sleep, maxSleep)
	}
}

// arm lets the watchers of the engine's CQs wait on them.
func (e *engine) arm() {
	for _, c := range *e.clients.Load() {
		for _, q := range c.set.Load().cqs {
			select {
			case q.arm <- struct{}{}:
			default:
			}
		}
	}
}

// pass is one pass over the engine's processes; a process that broke the
// protocol is detached (off the engine first).
func (e *engine) pass() (n int, inflight bool) {
	for _, c := range *e.clients.Load() {
		k, err := c.pass()
		if err != nil {
			c.engMu.Lock()
			c.off = true
			c.engMu.Unlock()
			go c.detach(err)
			continue
		}
		n += k
		inflight = inflight || c.inflight.Load() > 0
	}
	return n, inflight
}
