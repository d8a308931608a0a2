package rctest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
)

// Faults is how a Network misbehaves. The zero value is a perfect network:
// nothing lost, duplicated or corrupted, no partition and no delay (a
// datagram can be received at the time it was sent, in sending order).
// Every random choice is drawn from the network's seed, in sending order.
type Faults struct {
	Loss     float64 // probability that a datagram is lost
	Dup      float64 // probability that it arrives twice
	Corrupt  float64 // probability that an arriving copy has one bit flipped
	MinDelay int64   // ns every copy takes
	Jitter   int64   // up to this many ns more, uniform per copy: reordering
	// Partitions are the times during which every datagram sent is lost;
	// Network.Partition and Heal cut and restore the network by hand.
	Partitions []Window
	// Hold keeps every datagram in flight until Deliver, Drop or Duplicate
	// names it: a scripted test decides what arrives and when.
	Hold bool
	// Bottleneck, if its Rate is set, puts a link in front of every
	// endpoint (a switch's egress port to it, which all senders share).
	Bottleneck Bottleneck
}

// Bottleneck is the link in front of each endpoint: Rate bytes per second,
// serialising the datagrams in sending order. A datagram that would find
// more than Queue bytes waiting is dropped (NetStats.Overflowed, Fate
// Overflowed); one that finds more than MarkAbove bytes waiting arrives
// with ECN CE (NetStats.Marked, Datagram.CE), as an ECN-capable switch
// marks above its threshold. Queue or MarkAbove 0: no limit, no marking.
// MinDelay and Jitter are added after the link.
type Bottleneck struct {
	Rate      int64 // bytes per second; 0: no bottleneck
	Queue     int   // bytes
	MarkAbove int   // bytes
}

// Window is the time span [From, To), in ns of the network's clock.
type Window struct{ From, To int64 }

func (f Faults) String() string {
	s := fmt.Sprintf("loss %.3g dup %.3g corrupt %.3g delay %d+%dns partitions %v", f.Loss, f.Dup, f.Corrupt, f.MinDelay, f.Jitter, f.Partitions)
	if b := f.Bottleneck; b.Rate > 0 {
		s += fmt.Sprintf(" bottleneck %d B/s queue %d mark above %d", b.Rate, b.Queue, b.MarkAbove)
	}
	return s
}

// Datagram is one datagram in flight.
type Datagram struct {
	ID       uint64 // in sending order, from 1 (a duplicate gets its own)
	From, To netip.AddrPort
	At       int64 // when it can be received; held datagrams have none yet
	Data     []byte
	CE       bool // ECN Congestion Experienced: marked at a Bottleneck, or by Mark
}

// NetStats are a network's counters, in datagrams.
type NetStats struct {
	Sent        uint64 // handed to Send
	Lost        uint64 // lost at random
	Partitioned uint64 // lost to a partition
	Unroutable  uint64 // sent to an address with no endpoint
	Duplicated  uint64 // extra copies made
	Corrupted   uint64 // copies with a bit flipped
	Dropped     uint64 // held datagrams dropped by Drop
	Received    uint64 // returned by Recv
	Overflowed  uint64 // dropped at a full Bottleneck queue
	Marked      uint64 // CE-marked at a Bottleneck or by Mark
}

// Network is a seeded in-memory datagram network with a virtual clock, in
// ns, that only its user moves (Advance). It is safe for concurrent use.
type Network struct {
	mu     sync.Mutex
	rng    *rand.Rand
	f      Faults
	now    atomic.Int64 // written with mu held
	cut    bool
	nextID uint64
	eps    map[netip.AddrPort]*Endpoint
	held   []Datagram
	free   [][]byte // datagram buffers to reuse
	tap    func(d *Datagram, f Fate)
	taps   []tapEvent // for tap, when the lock is released
	stats  NetStats
}

type tapEvent struct {
	d Datagram
	f Fate
}

// Fate is what a Network did with a datagram sent.
type Fate uint8

// Fates.
const (
	Queued      Fate = iota // on its way, to arrive at d.At
	Held                    // held (Faults.Hold) for Deliver, Drop or Duplicate
	Lost                    // lost at random (Faults.Loss)
	Partitioned             // lost to a partition
	Unroutable              // sent to an address with no endpoint
	Overflowed              // dropped at a full Bottleneck queue
)

func (f Fate) String() string {
	return [...]string{"queued", "held", "lost", "partitioned", "unroutable", "overflowed"}[f]
}

// Tap has fn called for every copy of a datagram the network queues or
// holds (a corrupted copy as corrupted, a duplicate twice) and for every
// datagram it loses (with ID 0), after the Send that sent it, with a copy
// of the datagram. A Tap is for tests that print or count traffic; it
// costs a copy of every datagram.
func (n *Network) Tap(fn func(d *Datagram, f Fate)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.tap = fn
}

// note records d for the tap; n.mu is held.
func (n *Network) note(d *Datagram, f Fate) {
	if n.tap != nil {
		c := *d
		c.Data = slices.Clone(d.Data)
		n.taps = append(n.taps, tapEvent{c, f})
	}
}

// runTap calls the tap for what was noted; n.mu is not held.
func (n *Network) runTap() {
	n.mu.Lock()
	fn, ev := n.tap, n.taps
	n.taps = nil
	n.mu.Unlock()
	for i := range ev {
		fn(&ev[i].d, ev[i].f)
	}
}

// NewNetwork returns a network at time 0 whose faults are drawn from seed.
func NewNetwork(seed uint64, f Faults) *Network {
	return &Network{rng: rand.New(rand.NewPCG(seed, 0x6e6574)), f: f, eps: map[netip.AddrPort]*Endpoint{}}
}

// Endpoint attaches a new endpoint at addr. It panics if addr has one.
func (n *Network) Endpoint(addr netip.AddrPort) *Endpoint {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.eps[addr] != nil {
		panic("rctest: two endpoints at " + addr.String())
	}
	e := &Endpoint{n: n, addr: addr, ready: make(chan struct{}, 1)}
	e.head.Store(math.MaxInt64)
	n.eps[addr] = e
	return e
}

// Now returns the network's time.
func (n *Network) Now() int64 { return n.now.Load() }

// Advance moves the clock to t; an earlier t changes nothing.
func (n *Network) Advance(t int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if t <= n.now.Load() {
		return
	}
	n.now.Store(t)
	for _, e := range n.eps {
		if len(e.q) > 0 && e.q[0].At <= t {
			e.signal()
		}
	}
}

// Next returns the earliest time a datagram in flight (not held) can be
// received; false if none is in flight.
func (n *Network) Next() (int64, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var t int64
	ok := false
	for _, e := range n.eps {
		if len(e.q) > 0 && (!ok || e.q[0].At < t) {
			t, ok = e.q[0].At, true
		}
	}
	return t, ok
}

// Partition cuts the network: every datagram sent until Heal is lost.
func (n *Network) Partition() { n.mu.Lock(); n.cut = true; n.mu.Unlock() }

// Heal ends a Partition.
func (n *Network) Heal() { n.mu.Lock(); n.cut = false; n.mu.Unlock() }

// Stats returns the network's counters.
func (n *Network) Stats() NetStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// Held returns the held datagrams (Faults.Hold) in sending order. Their
// Data is the network's: not to be modified, and valid until the datagram
// is received or dropped.
func (n *Network) Held() []Datagram {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.held)
}

// Deliver makes held datagram id receivable now; false if none is held.
func (n *Network) Deliver(id uint64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	i := n.heldIndex(id)
	if i < 0 {
		return false
	}
	d := n.held[i]
	n.held = slices.Delete(n.held, i, i+1)
	d.At = n.now.Load()
	n.eps[d.To].arrive(d)
	return true
}

// Mark sets ECN CE on held datagram id, as a congested switch would;
// false if none is held.
func (n *Network) Mark(id uint64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	i := n.heldIndex(id)
	if i < 0 {
		return false
	}
	if !n.held[i].CE {
		n.held[i].CE = true
		n.stats.Marked++
	}
	return true
}

// Drop loses held datagram id; false if none is held.
func (n *Network) Drop(id uint64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	i := n.heldIndex(id)
	if i < 0 {
		return false
	}
	n.free = append(n.free, n.held[i].Data)
	n.held = slices.Delete(n.held, i, i+1)
	n.stats.Dropped++
	return true
}

// Duplicate holds a copy of held datagram id, right after it, and returns
// the copy's ID; false if none is held.
func (n *Network) Duplicate(id uint64) (uint64, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	i := n.heldIndex(id)
	if i < 0 {
		return 0, false
	}
	d := n.held[i]
	n.nextID++
	d.ID, d.Data = n.nextID, n.clone(d.Data)
	n.held = slices.Insert(n.held, i+1, d)
	n.stats.Duplicated++
	return d.ID, true
}

func (n *Network) heldIndex(id uint64) int {
	return slices.IndexFunc(n.held, func(d Datagram) bool { return d.ID == id })
}

// send applies the faults to one datagram; n.mu is held.
func (n *Network) send(from, to netip.AddrPort, b []byte) {
	n.stats.Sent++
	lost := Datagram{From: from, To: to, Data: b}
	dst := n.eps[to]
	if dst == nil {
		n.stats.Unroutable++
		n.note(&lost, Unroutable)
		return
	}
	if n.cut {
		n.stats.Partitioned++
		n.note(&lost, Partitioned)
		return
	}
	for _, w := range n.f.Partitions {
		if now := n.now.Load(); now >= w.From && now < w.To {
			n.stats.Partitioned++
			n.note(&lost, Partitioned)
			return
		}
	}
	if n.f.Loss > 0 && n.rng.Float64() < n.f.Loss {
		n.stats.Lost++
		n.note(&lost, Lost)
		return
	}
	copies := 1
	if n.f.Dup > 0 && n.rng.Float64() < n.f.Dup {
		copies = 2
		n.stats.Duplicated++
	}
	for range copies {
		n.nextID++
		d := Datagram{ID: n.nextID, From: from, To: to, Data: n.clone(b)}
		if n.f.Corrupt > 0 && len(d.Data) > 0 && n.rng.Float64() < n.f.Corrupt {
			d.Data[n.rng.IntN(len(d.Data))] ^= 1 << n.rng.IntN(8)
			n.stats.Corrupted++
		}
		if n.f.Hold {
			n.held = append(n.held, d)
			n.note(&d, Held)
			continue
		}
		d.At = n.now.Load()
		if b := &n.f.Bottleneck; b.Rate > 0 {
			now := d.At
			start := max(dst.linkFree, now)
			queued := int((start - now) * b.Rate / 1e9)
			if b.Queue > 0 && queued+len(d.Data) > b.Queue {
				n.stats.Overflowed++
				n.note(&d, Overflowed)
				n.free = append(n.free, d.Data)
				continue
			}
			if b.MarkAbove > 0 && queued > b.MarkAbove {
				d.CE = true
				n.stats.Marked++
			}
			dst.linkFree = start + (int64(len(d.Data))*1e9+b.Rate-1)/b.Rate
			d.At = dst.linkFree
		}
		d.At += n.f.MinDelay
		if n.f.Jitter > 0 {
			d.At += n.rng.Int64N(n.f.Jitter + 1)
		}
		n.note(&d, Queued)
		dst.arrive(d)
	}
}

// clone copies b into a buffer from the free list; n.mu is held.
func (n *Network) clone(b []byte) []byte {
	var c []byte
	if k := len(n.free); k > 0 {
		c, n.free = n.free[k-1], n.free[:k-1]
	}
	return append(c[:0], b...)
}

// Endpoint is one address on a Network, used like a non-blocking UDP
// socket: batches of datagrams out, batches of arrived datagrams in.
type Endpoint struct {
	n     *Network
	addr  netip.AddrPort
	q     []Datagram   // arriving: a min-heap on (At, ID)
	head  atomic.Int64 // q[0].At, or math.MaxInt64: Recv's lock-free look
	ready chan struct{}
	// linkFree is when the Bottleneck link to this endpoint has sent all
	// it holds; n.mu guards it.
	linkFree int64
}

// Addr returns the endpoint's address.
func (e *Endpoint) Addr() netip.AddrPort { return e.addr }

// Send sends each of pkts to the endpoint at to, as one datagram each, at
// the network's current time. It copies the bytes and never blocks; what
// the network loses is lost silently, as with UDP.
func (e *Endpoint) Send(to netip.AddrPort, pkts [][]byte) {
	if len(pkts) == 0 {
		return
	}
	e.n.mu.Lock()
	for _, b := range pkts {
		e.n.send(e.addr, to, b)
	}
	tap := len(e.n.taps) > 0
	e.n.mu.Unlock()
	if tap {
		e.n.runTap()
	}
}

// Recv receives the datagrams that have arrived by the network's current
// time, oldest first, at most len(bufs): datagram i is copied into bufs[i]
// (truncated if it does not fit), its length stored in sizes[i] and its
// sender in from[i] (from may be nil). It returns how many it received, 0
// if none has arrived; it never blocks.
func (e *Endpoint) Recv(bufs [][]byte, sizes []int, from []netip.AddrPort) int {
	return e.RecvCE(bufs, sizes, from, nil)
}

// RecvCE is Recv that also reports, in ce[i] (ce may be nil), whether
// datagram i arrived CE-marked: what a socket reads from the IP header's
// ECN field.
func (e *Endpoint) RecvCE(bufs [][]byte, sizes []int, from []netip.AddrPort, ce []bool) int {
	if e.head.Load() > e.n.now.Load() {
		return 0 // nothing has arrived (a stale look only delays to the next call)
	}
	e.n.mu.Lock()
	defer e.n.mu.Unlock()
	k := 0
	now := e.n.now.Load()
	for ; k < len(bufs) && len(e.q) > 0 && e.q[0].At <= now; k++ {
		d := e.pop()
		sizes[k] = copy(bufs[k], d.Data)
		if from != nil {
			from[k] = d.From
		}
		if ce != nil {
			ce[k] = d.CE
		}
		e.n.free = append(e.n.free, d.Data)
	}
	e.n.stats.Received += uint64(k)
	return k
}

// Next returns when the endpoint's earliest datagram in flight can be
// received; false if none is in flight to it.
func (e *Endpoint) Next() (int64, bool) {
	e.n.mu.Lock()
	defer e.n.mu.Unlock()
	if len(e.q) == 0 {
		return 0, false
	}
	return e.q[0].At, true
}

// Notify returns a channel that receives a value when a datagram can be
// received at the endpoint (it arrives, or the clock reaches it): a
// provider's blocking receive waits on it, with Recv to take the
// datagrams. A signal may be stale, and several arrivals may make one.
func (e *Endpoint) Notify() <-chan struct{} { return e.ready }

func (e *Endpoint) signal() {
	if len(e.ready) > 0 {
		return // a signal is pending already
	}
	select {
	case e.ready <- struct{}{}:
	default:
	}
}

// arrive queues d; e.n.mu is held.
func (e *Endpoint) arrive(d Datagram) {
	if d.At <= e.n.now.Load() {
		e.signal()
	}
	e.q = append(e.q, d)
	for i := len(e.q) - 1; i > 0; {
		p := (i - 1) / 2
		if !e.q[i].before(&e.q[p]) {
			break
		}
		e.q[i], e.q[p] = e.q[p], e.q[i]
		i = p
	}
	e.head.Store(e.q[0].At)
}

// pop removes the earliest datagram; e.n.mu is held.
func (e *Endpoint) pop() Datagram {
	d := e.q[0]
	last := len(e.q) - 1
	e.q[0] = e.q[last]
	e.q[last] = Datagram{}
	e.q = e.q[:last]
	for i := 0; ; {
		m, l, r := i, 2*i+1, 2*i+2
		if l < last && e.q[l].before(&e.q[m]) {
			m = l
		}
		if r < last && e.q[r].before(&e.q[m]) {
			m = r
		}
		if m == i {
			break
		}
		e.q[i], e.q[m] = e.q[m], e.q[i]
		i = m
	}
	if last > 0 {
		e.head.Store(e.q[0].At)
	} else {
		e.head.Store(math.MaxInt64)
	}
	return d
}

func (d *Datagram) before(o *Datagram) bool { return d.At < o.At || (d.At == o.At && d.ID < o.ID) }
