package udp

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/rc/rctest"
)

// memNet runs devices without sockets: each device's batchConn is an
// endpoint of rctest's seeded in-memory network (loss, duplication,
// corruption, delay and reordering, all drawn from one seed, in sending
// order). The network's virtual clock follows the wall clock, since the
// devices' loops and engine timers do; a sleeping loop wakes on its
// endpoint's Notify (a datagram it can receive now), its read deadline, a
// timer for the next delayed datagram, or a Send to it (which may have
// brought the next delayed datagram forward). The seed fixes which datagrams the network loses, duplicates
// or delays, counted in sending order; which datagrams are sent depends on
// the goroutines' timing, so a seed replays the faults' pattern, not the
// run.
type memNet struct {
	net   *rctest.Network
	seed  uint64
	start time.Time

	mu    sync.Mutex
	eps   map[netip.AddrPort]*rctest.Endpoint // kept across a device's restarts
	conns map[netip.AddrPort]*memConn         // the open ones
}

func newMemNet(seed uint64, f rctest.Faults) *memNet {
	return &memNet{net: rctest.NewNetwork(seed, f), seed: seed, start: time.Now(),
		eps: map[netip.AddrPort]*rctest.Endpoint{}, conns: map[netip.AddrPort]*memConn{}}
}

// memBatch is a memConn's batch: smaller than a socket's, so that the
// loop's queue fills and flushes mid-pass.
const memBatch = 32

var memSeq atomic.Uint32

// devices registers two devices on n, at 10.0.0.1 and 10.0.0.2.
func (n *memNet) devices(t testing.TB) (a, b string) {
	t.Helper()
	k := memSeq.Add(1)
	a, b = fmt.Sprintf("mem%da", k), fmt.Sprintf("mem%db", k)
	for _, d := range []struct{ name, addr string }{{a, "10.0.0.1:4791"}, {b, "10.0.0.2:4791"}} {
		if err := addDevice(d.name, netip.MustParseAddrPort(d.addr), n.listen); err != nil {
			t.Fatal(err)
		}
	}
	return a, b
}

// now moves the network's clock to the wall clock's and returns it.
func (n *memNet) now() int64 {
	t := int64(time.Since(n.start))
	n.net.Advance(t)
	return t
}

// listen is the devices' listenFunc: an endpoint at addr.
func (n *memNet) listen(addr netip.AddrPort, _ *counters) (batchConn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conns[addr] != nil {
		return nil, fmt.Errorf("bind %v: address in use", addr)
	}
	ep := n.eps[addr]
	if ep == nil {
		ep = n.net.Endpoint(addr)
		n.eps[addr] = ep
	}
	c := &memConn{n: n, ep: ep, wake: make(chan struct{}, 1), timer: time.NewTimer(time.Hour),
		bufs: make([][]byte, memBatch), sizes: make([]int, memBatch), from: make([]netip.AddrPort, memBatch)}
	c.timer.Stop()
	// What arrived for an earlier device at addr is not this one's, as a
	// new socket does not get its predecessor's datagrams.
	n.now()
	scratch := make([]byte, maxDgram)
	for ep.Recv([][]byte{scratch}, c.sizes[:1], nil) > 0 {
	}
	n.conns[addr] = c
	return c, nil
}

// kick wakes the conn at addr, if one is open.
func (n *memNet) kick(addr netip.AddrPort) {
	n.mu.Lock()
	c := n.conns[addr]
	n.mu.Unlock()
	if c != nil {
		c.kick()
	}
}

// memConn is a batchConn on a memNet: no segmentation offload, every
// message one datagram.
type memConn struct {
	n     *memNet
	ep    *rctest.Endpoint
	wake  chan struct{} // a token: a Send to it, the deadline moved, or the conn closed
	timer *time.Timer   // the loop's

	mu       sync.Mutex
	deadline time.Time
	closed   bool

	// Recv's, loop-owned.
	bufs  [][]byte
	sizes []int
	from  []netip.AddrPort
}

func (c *memConn) kick() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *memConn) LocalAddr() netip.AddrPort { return c.ep.Addr() }
func (c *memConn) BatchSize() int            { return memBatch }
func (c *memConn) Offload() (gso, gro bool)  { return false, false }
func (c *memConn) RecvBuffer() int           { return 4 << 20 }

func (c *memConn) Send(msgs []message) (pkts, bytes int) {
	c.n.now()
	var last netip.AddrPort
	for i := range msgs {
		m := &msgs[i]
		c.ep.Send(m.Addr, m.Buffers)
		for _, b := range m.Buffers {
			bytes += len(b)
		}
		pkts += len(m.Buffers)
		if m.Addr != last {
			c.n.kick(m.Addr)
			last = m.Addr
		}
	}
	return pkts, bytes
}

func (c *memConn) Recv(msgs []message, wait bool) (int, error) {
	msgs = msgs[:min(len(msgs), len(c.bufs))]
	for i := range msgs {
		c.bufs[i] = msgs[i].Buffers[0]
	}
	for {
		c.mu.Lock()
		closed, dl := c.closed, c.deadline
		c.mu.Unlock()
		if closed {
			return 0, net.ErrClosed
		}
		if wait && !dl.IsZero() && !time.Now().Before(dl) {
			return 0, os.ErrDeadlineExceeded // as a socket's: without reading
		}
		c.n.now()
		k := c.ep.Recv(c.bufs[:len(msgs)], c.sizes, c.from)
		for i := range k {
			msgs[i].N, msgs[i].Seg, msgs[i].Addr, msgs[i].ID, msgs[i].CE = c.sizes[i], c.sizes[i], c.from[i], -1, false
		}
		if k > 0 || !wait {
			return k, nil
		}
		// Sleep until a datagram arrives, the deadline, or the next
		// delayed datagram's time (no one moves the clock meanwhile).
		at := dl
		if next, ok := c.ep.Next(); ok {
			if t := c.n.start.Add(time.Duration(next)); at.IsZero() || t.Before(at) {
				at = t
			}
		}
		if at.IsZero() {
			select {
			case <-c.ep.Notify():
			case <-c.wake:
			}
			continue
		}
		c.timer.Reset(time.Until(at))
		select {
		case <-c.ep.Notify():
		case <-c.wake:
		case <-c.timer.C:
		}
		c.timer.Stop()
	}
}

func (c *memConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	c.kick()
	return nil
}

func (c *memConn) SourcePorts() bool { return false }

func (c *memConn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.kick()
	c.n.mu.Lock()
	if c.n.conns[c.ep.Addr()] == c {
		delete(c.n.conns, c.ep.Addr())
	}
	c.n.mu.Unlock()
	return nil
}
