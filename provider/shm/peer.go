package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ibex-rdma/ibex/internal/shmem"
	"github.com/ibex-rdma/ibex/verbs"
)

// peer is another node this node talks to: its pool mapped here, and the
// unix sockets to it. The node reaching a peer first dials it; both send a
// hello carrying their pool's memfd (SCM_RIGHTS). If both dial at once
// there are two sockets; either carries messages, and the pool is mapped
// once.
type peer struct {
	n     *node
	gid   verbs.GID
	pid   int
	num   uint32
	seg   *shmem.Segment // nil for the node itself
	m     mem            // the peer's pool
	ready chan struct{}  // closed once the pool is mapped (or the dial failed), by markReady
	err   error          // why the peer cannot be reached, once ready
	once  sync.Once      // ready is closed once: a dial and an accept may race

	// refs pins the mapping while this process touches it; the top bit
	// marks the peer gone (no new pins), and release unmaps after the
	// pins drain.
	refs atomic.Uint64

	mu       sync.Mutex
	conns    []*net.UnixConn
	keyCache map[uint32]uint32 // rkey → key table index, validated on use
	gone     bool
	cause    error
}

const peerGone = 1 << 63

func (p *peer) pin() bool {
	for {
		v := p.refs.Load()
		if v&peerGone != 0 {
			return false
		}
		if p.refs.CompareAndSwap(v, v+1) {
			return true
		}
	}
}

func (p *peer) unpin() { p.refs.Add(^uint64(0)) }

// Socket messages: fixed 32-byte records on a SOCK_SEQPACKET socket.
//
//	0 type, 4 a, 8 b, 16 c, 24 d
const (
	msgHello  = 1 // a pid, b node, c pool size, d magic; the pool's fd attached
	msgQPConn = 2 // a owner QPN, b peer QPN, c half offset, d half gen
	msgQPGone = 3 // a owner QPN, b peer QPN, d half gen
	msgBye    = 4
	recSize   = 32
)

func record(typ uint8, a, b uint32, c, d uint64) []byte {
	r := make([]byte, recSize)
	r[0] = typ
	binary.LittleEndian.PutUint32(r[4:], a)
	binary.LittleEndian.PutUint32(r[8:], b)
	binary.LittleEndian.PutUint64(r[16:], c)
	binary.LittleEndian.PutUint64(r[24:], d)
	return r
}

// dialTimeout bounds connecting to a peer node and its hello.
const dialTimeout = 5 * time.Second

// peerFor returns the peer with GID g, connecting to it if needed. It
// blocks at most dialTimeout.
func (n *node) peerFor(g verbs.GID) (*peer, error) {
	pid, num, ok := parseGID(g)
	if !ok {
		return nil, fmt.Errorf("shm: GID %v is not a shm node's (fe80::6978:PID:NODE)", g)
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, fmt.Errorf("shm: context closed: %w", verbs.ErrClosed)
	}
	p := n.peers[g]
	dial := p == nil
	if dial {
		p = &peer{n: n, gid: g, pid: pid, num: num, ready: make(chan struct{}), keyCache: map[uint32]uint32{}}
		n.peers[g] = p
		n.wg.Add(1) // under n.mu, not closed: Close waits for the dial before it unmaps our pool
	}
	n.mu.Unlock()
	if dial {
		go func() {
			defer n.wg.Done()
			n.dial(p)
		}()
	}
	select {
	case <-p.ready:
	case <-time.After(dialTimeout):
		return nil, fmt.Errorf("shm: node %v (pid %d) did not answer within %v", g, pid, dialTimeout)
	}
	if p.err != nil {
		return nil, p.err
	}
	return p, nil
}

func (n *node) dial(p *peer) {
	fail := func(err error) {
		// If the other side's connection (accepted) already mapped the
		// pool, that one stands and this failure changes nothing.
		p.once.Do(func() {
			p.err = fmt.Errorf("shm: connect to node %d of pid %d: %w", p.num, p.pid, err)
			n.mu.Lock()
			if n.peers[p.gid] == p {
				delete(n.peers, p.gid)
			}
			n.mu.Unlock()
			p.refs.Store(peerGone)
			close(p.ready)
		})
	}
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sockName(p.pid, p.num), Net: "unixpacket"})
	if err != nil {
		fail(err)
		return
	}
	if err := shmem.SendFDs(c, n.hello(), n.seg.FD); err != nil {
		_ = c.Close()
		fail(err)
		return
	}
	if err := n.readHello(c, p); err != nil {
		_ = c.Close()
		fail(err)
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.readLoop(c, p)
	}()
}

func (n *node) hello() []byte {
	return record(msgHello, uint32(n.pid), n.num, uint64(len(n.m)), magic)
}

// readHello reads a peer's hello on c and maps its pool into p (once).
func (n *node) readHello(c *net.UnixConn, p *peer) error {
	_ = c.SetReadDeadline(time.Now().Add(dialTimeout))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	buf := make([]byte, recSize)
	k, fds, err := shmem.RecvFDs(c, buf, 1)
	if err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	if k != recSize || buf[0] != msgHello || binary.LittleEndian.Uint64(buf[24:]) != magic || len(fds) != 1 {
		closeFDs(fds)
		return fmt.Errorf("hello: malformed (%d bytes, %d fds)", k, len(fds))
	}
	pid, num := int(binary.LittleEndian.Uint32(buf[4:])), binary.LittleEndian.Uint32(buf[8:])
	if pid != p.pid || num != p.num {
		closeFDs(fds)
		return fmt.Errorf("hello: from pid %d node %d, expected pid %d node %d", pid, num, p.pid, p.num)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns = append(p.conns, c)
	if p.seg != nil {
		closeFDs(fds)
		return nil
	}
	seg, err := shmem.Map(fds[0])
	if err != nil {
		return fmt.Errorf("hello: map pool of pid %d: %w", pid, err)
	}
	m := mem(seg.Mem)
	if len(m) < 4*poolStart || m.u64(offMagic).Load() != magic || int(m.u32(offPid).Load()) != pid {
		_ = seg.Close()
		return fmt.Errorf("hello: pool of pid %d is not an ibex shm pool", pid)
	}
	p.seg, p.m = seg, m
	p.once.Do(func() { close(p.ready) })
	return nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

func (n *node) acceptLoop() {
	defer n.wg.Done()
	for {
		c, err := n.ln.AcceptUnix()
		if err != nil {
			return
		}
		n.wg.Add(1)
		go n.accepted(c)
	}
}

// accepted handles a connection a peer dialed: its hello, ours, then
// messages.
func (n *node) accepted(c *net.UnixConn) {
	defer n.wg.Done()
	_ = c.SetReadDeadline(time.Now().Add(dialTimeout))
	buf := make([]byte, recSize)
	k, fds, err := shmem.RecvFDs(c, buf, 1)
	if err != nil || k != recSize || buf[0] != msgHello || len(fds) != 1 || binary.LittleEndian.Uint64(buf[24:]) != magic {
		closeFDs(fds)
		_ = c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	pid, num := int(binary.LittleEndian.Uint32(buf[4:])), binary.LittleEndian.Uint32(buf[8:])
	g := nodeGID(pid, num)
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		closeFDs(fds)
		_ = c.Close()
		return
	}
	p := n.peers[g]
	if p == nil {
		p = &peer{n: n, gid: g, pid: pid, num: num, ready: make(chan struct{}), keyCache: map[uint32]uint32{}}
		n.peers[g] = p
	}
	n.mu.Unlock()
	if err := shmem.SendFDs(c, n.hello(), n.seg.FD); err != nil {
		closeFDs(fds)
		_ = c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, c)
	if p.seg == nil {
		seg, err := shmem.Map(fds[0])
		if err == nil && (len(seg.Mem) < 4*poolStart || mem(seg.Mem).u64(offMagic).Load() != magic) {
			_ = seg.Close()
			err = errors.New("not an ibex shm pool")
		}
		if err != nil {
			p.mu.Unlock()
			_ = c.Close()
			return
		}
		p.seg, p.m = seg, mem(seg.Mem)
		p.once.Do(func() { close(p.ready) })
	} else {
		closeFDs(fds)
	}
	p.mu.Unlock()
	n.readLoop(c, p)
}

// send writes a record to the peer on any of its sockets.
func (p *peer) send(r []byte) error {
	if p == p.n.self {
		p.n.handle(p, r)
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var err error = errors.New("no connection")
	for _, c := range p.conns {
		_ = c.SetWriteDeadline(time.Now().Add(dialTimeout))
		if _, err = c.Write(r); err == nil {
			return nil
		}
	}
	return err
}

func (p *peer) bye() {
	if p != p.n.self {
		_ = p.send(record(msgBye, 0, 0, 0, 0))
	}
}

// readLoop handles records from a peer until the socket closes. A close
// without a goodbye means the peer process died (the kernel closes its
// sockets): every QP connected to it moves to ERR.
func (n *node) readLoop(c *net.UnixConn, p *peer) {
	buf := make([]byte, 64)
	for {
		k, err := c.Read(buf)
		if err != nil || k == 0 {
			select {
			case <-n.stop:
			default:
				n.peerLost(p, fmt.Errorf("shm: peer pid %d (node %d) died: its socket closed without a goodbye", p.pid, p.num))
			}
			return
		}
		if k != recSize {
			continue // not ours: ignore rather than trust
		}
		if buf[0] == msgBye {
			n.peerLost(p, fmt.Errorf("shm: peer pid %d (node %d) closed its context", p.pid, p.num))
			return
		}
		n.handle(p, buf[:k])
	}
}

// handle applies a QP record from p.
func (n *node) handle(p *peer, r []byte) {
	if !p.pin() {
		return
	}
	defer p.unpin()
	owner, target := binary.LittleEndian.Uint32(r[4:]), binary.LittleEndian.Uint32(r[8:])
	off, gen := binary.LittleEndian.Uint64(r[16:]), binary.LittleEndian.Uint64(r[24:])
	switch r[0] {
	case msgQPConn:
		if off < poolStart || off%pageSize != 0 || off+halfSize > uint64(len(p.m)) || gen == 0 {
			return
		}
		// n.mu orders this against attach: either attach sees the
		// pending half, or we see its link.
		n.mu.Lock()
		for i := range n.slots {
			q := n.slots[i].Load()
			if q == nil || q.qp.Num() != target {
				continue
			}
			if l, fresh := q.attachPeer(p, owner, off, gen); l != nil {
				n.mu.Unlock()
				if fresh {
					// The peer QP has a new half (it was reset and
					// reconnected): it needs ours again.
					_ = p.send(record(msgQPConn, q.qp.Num(), owner, l.ownOff, l.gen))
				}
				return
			}
		}
		// Our QP is not at RTR yet: keep the half for when it gets there.
		n.pending[pendKey{gid: p.gid, peerQPN: owner, qpn: target}] = pendConn{off: off, gen: gen}
		n.mu.Unlock()
	case msgQPGone:
		n.mu.Lock()
		delete(n.pending, pendKey{gid: p.gid, peerQPN: owner, qpn: target})
		n.mu.Unlock()
		for i := range n.slots {
			if q := n.slots[i].Load(); q != nil && q.qp.Num() == target {
				q.detachPeer(p, gen)
			}
		}
	}
}

// peerLost fails every QP linked to p, then unmaps its pool once no
// access is in flight.
func (n *node) peerLost(p *peer, cause error) {
	p.mu.Lock()
	if p.gone {
		p.mu.Unlock()
		return
	}
	p.gone, p.cause = true, cause
	p.mu.Unlock()
	n.mu.Lock()
	if n.peers[p.gid] == p {
		delete(n.peers, p.gid)
	}
	for k := range n.pending {
		if k.gid == p.gid {
			delete(n.pending, k)
		}
	}
	n.mu.Unlock()
	n.qpsOf(p, func(q *qpDriver) { q.peerDied(cause) })
	p.release(cause)
}

// release marks the peer gone, waits for accesses in flight, closes its
// sockets and unmaps its pool.
func (p *peer) release(cause error) {
	if p == p.n.self {
		return
	}
	for {
		v := p.refs.Load()
		if v&peerGone != 0 || p.refs.CompareAndSwap(v, v|peerGone) {
			break
		}
	}
	for i := 0; p.refs.Load() != peerGone; i++ {
		if i < 100 {
			time.Sleep(time.Microsecond)
		} else {
			time.Sleep(100 * time.Microsecond)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gone = true
	if p.cause == nil {
		p.cause = cause
	}
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	if p.seg != nil {
		_ = p.seg.Close()
		p.seg, p.m = nil, nil
	}
}
