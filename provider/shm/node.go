package shm

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	_ "unsafe" // go:linkname

	"github.com/ibex-rdma/ibex/internal/shmem"
	"github.com/ibex-rdma/ibex/internal/units"
	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/verbs/driver"
)

// DeviceName is the shared-memory device.
const DeviceName = "shm0"

func init() { driver.Register(provider{}) }

type provider struct{}

func (provider) Name() string      { return "shm" }
func (provider) Devices() []string { return []string{DeviceName} }

func (provider) Open(device string, c driver.Context) (driver.Device, error) {
	if device != DeviceName {
		return nil, fmt.Errorf("shm: device %q: %w", device, verbs.ErrNoDevice)
	}
	return openNode(c)
}

// defaultPool is the size of a node's memfd: sparse, so only pages touched
// cost memory. IBEX_SHM_POOL overrides it (bytes, or with a K, M, G or T
// suffix).
const defaultPool = 16 << 30

func poolSize() (int64, error) {
	s := os.Getenv("IBEX_SHM_POOL")
	if s == "" {
		return defaultPool, nil
	}
	n, err := units.ParseBytes(s)
	if err != nil || n > 1<<46 || n < 4*poolStart {
		return 0, fmt.Errorf("shm: IBEX_SHM_POOL=%q: want a size of at least 4M, like 16G", os.Getenv("IBEX_SHM_POOL"))
	}
	return n, nil
}

var (
	nodeSeq   atomic.Uint32
	portState atomic.Uint32 // verbs.PortState of shm0 in this process

	nodesMu sync.Mutex
	nodes   = map[*node]struct{}{}
)

func init() { portState.Store(uint32(verbs.PortActive)) }

// SetPortState changes the state of shm0's port in this process and posts
// PORT_ERR or PORT_ACTIVE to every open context. While the port is down no
// request leaves and none is served: peers see no answer and time out.
func SetPortState(s verbs.PortState) {
	old := verbs.PortState(portState.Swap(uint32(s)))
	if old == s {
		return
	}
	ev := verbs.EventPortActive
	if s != verbs.PortActive {
		ev = verbs.EventPortErr
	}
	nodesMu.Lock()
	defer nodesMu.Unlock()
	for n := range nodes {
		n.ctx.PostEvent(verbs.AsyncEvent{Type: ev, Port: 1})
		n.wake()
	}
}

func portUp() bool { return verbs.PortState(portState.Load()) == verbs.PortActive }

// node is one opened shm device: a pool shared with peers, a listening
// socket peers connect to, and a progress goroutine serving the rings of
// its QPs.
type node struct {
	ctx driver.Context
	pid int
	num uint32
	gid verbs.GID

	seg  *shmem.Segment
	m    mem
	pool *shmem.Pool
	ln   *net.UnixListener
	self *peer // the node as its own peer (QPs connected within the node)

	slots [maxQP]atomic.Pointer[qpDriver]

	mu        sync.Mutex
	peers     map[verbs.GID]*peer
	freeSlots []int
	pending   map[pendKey]pendConn // QPCONNs that came before the QP's RTR
	keys      keyTable
	retired   []retiredHalf
	closed    bool

	doorbell *atomic.Uint32
	sleeping *atomic.Uint32
	stop     chan struct{}
	wg       sync.WaitGroup
}

type pendKey struct {
	gid     verbs.GID
	peerQPN uint32 // the remote QP
	qpn     uint32 // ours
}

type pendConn struct {
	off, gen uint64
}

type retiredHalf struct {
	off uint64
	at  time.Time
}

func openNode(c driver.Context) (*node, error) {
	size, err := poolSize()
	if err != nil {
		return nil, err
	}
	n := &node{ctx: c, pid: os.Getpid(), num: nodeSeq.Add(1), peers: map[verbs.GID]*peer{}, pending: map[pendKey]pendConn{}, stop: make(chan struct{})}
	n.gid = nodeGID(n.pid, n.num)
	n.seg, err = shmem.Create(fmt.Sprintf("ibex-shm:%d:%d", n.pid, n.num), size)
	if err != nil {
		return nil, fmt.Errorf("shm: open %s: %w", DeviceName, err)
	}
	n.m = mem(n.seg.Mem)
	n.m.u64(offMagic).Store(magic)
	n.m.u32(offPid).Store(uint32(n.pid))
	n.m.u32(offNode).Store(n.num)
	n.doorbell, n.sleeping = n.m.u32(offDoorbell), n.m.u32(offSleeping)
	n.pool = shmem.NewPool(poolStart, uint64(size)-poolStart, pageSize)
	n.keys.init()
	for i := maxQP - 1; i >= 0; i-- {
		n.freeSlots = append(n.freeSlots, i)
	}
	n.ln, err = net.ListenUnix("unixpacket", &net.UnixAddr{Name: sockName(n.pid, n.num), Net: "unixpacket"})
	if err != nil {
		_ = n.seg.Close()
		return nil, fmt.Errorf("shm: open %s: listen: %w", DeviceName, err)
	}
	// Let peers of this user reach ordinary (non-pool) memory with
	// process_vm_writev even under Yama ptrace_scope=1.
	_ = shmem.AllowPtrace()
	n.self = &peer{n: n, gid: n.gid, pid: n.pid, m: n.m, ready: make(chan struct{}), keyCache: map[uint32]uint32{}}
	close(n.self.ready)
	n.peers[n.gid] = n.self
	n.wg.Add(2)
	go n.acceptLoop()
	go n.progress()
	nodesMu.Lock()
	nodes[n] = struct{}{}
	nodesMu.Unlock()
	return n, nil
}

// nodeGID names a node: fe80::/64 with the pid and node number as the
// interface identifier. Peers derive the socket to dial from it.
func nodeGID(pid int, num uint32) verbs.GID {
	g := verbs.GID{0: 0xfe, 1: 0x80, 8: 'i', 9: 'x'}
	g[10], g[11] = byte(pid>>24), byte(pid>>16)
	g[12], g[13] = byte(pid>>8), byte(pid)
	g[14], g[15] = byte(num>>8), byte(num)
	return g
}

func parseGID(g verbs.GID) (pid int, num uint32, ok bool) {
	if g[0] != 0xfe || g[1] != 0x80 || g[8] != 'i' || g[9] != 'x' {
		return 0, 0, false
	}
	pid = int(g[10])<<24 | int(g[11])<<16 | int(g[12])<<8 | int(g[13])
	return pid, uint32(g[14])<<8 | uint32(g[15]), pid > 0
}

// sockName is the abstract unix socket of a node (no file to clean up).
func sockName(pid int, num uint32) string { return fmt.Sprintf("@ibex-shm-%d-%d", pid, num) }

var attr = verbs.DeviceAttr{
	FWVersion:       "1.0.0",
	NodeGUID:        0x6962_6578_0000_0003,
	SysImageGUID:    0x6962_6578_0000_0003,
	Transport:       "InfiniBand",
	PhysPortCnt:     1,
	PageSizeCap:     0xfffff000,
	MaxQP:           maxQP,
	MaxQPWR:         1 << 14,
	MaxSGE:          32,
	MaxCQ:           1 << 16,
	MaxCQE:          1 << 22,
	MaxMR:           maxMR,
	MaxPD:           1 << 16,
	MaxQPRdAtom:     resultSlots,
	MaxQPInitRdAtom: resultSlots,
	MaxInlineData:   512,
	MaxMsgSize:      1 << 31,
	AtomicCap:       verbs.AtomicGlob,
	// The initiator copies into the target's shared pool in PostSend, in
	// program order, with no part for the target's CPU.
	Caps: verbs.CapSameHost | verbs.CapOneSided | verbs.CapOrderedPlacement | verbs.CapCompleteAtPost,
}

func (n *node) DeviceAttr() verbs.DeviceAttr {
	a := attr
	a.MaxMRSize = uint64(len(n.m)) - poolStart
	return a
}

func (n *node) PortAttr(port uint8) (verbs.PortAttr, error) {
	if port != 1 {
		return verbs.PortAttr{}, fmt.Errorf("shm: port %d: %w", port, verbs.ErrInvalidArgument)
	}
	return verbs.PortAttr{
		State: verbs.PortState(portState.Load()), MaxMTU: verbs.MTU4096, ActiveMTU: verbs.MTU4096,
		GIDTblLen: 1, GID: n.gid, LinkLayer: "Ethernet", ActiveSpeed: "memory", MaxMsgSize: attr.MaxMsgSize,
	}, nil
}

// Close sends goodbyes, stops the goroutines and unmaps everything.
func (n *node) Close() error {
	nodesMu.Lock()
	delete(nodes, n)
	nodesMu.Unlock()
	n.mu.Lock()
	n.closed = true
	peers := make([]*peer, 0, len(n.peers))
	for _, p := range n.peers {
		if p != n.self {
			peers = append(peers, p)
		}
	}
	n.mu.Unlock()
	close(n.stop)
	_ = n.ln.Close()
	n.wake()
	for _, p := range peers {
		p.bye()
		p.release(errors.New("shm: context closed"))
	}
	n.wg.Wait()
	return n.seg.Close()
}

// wake rouses the node's progress loop if it sleeps.
func (n *node) wake() {
	if n.sleeping.Load() != 0 {
		n.doorbell.Add(1)
		shmem.FutexWake(n.doorbell, 1)
	}
}

// spinFor is how long the progress loop polls before it sleeps: long
// enough to catch a reply to what it just sent, short enough not to hold
// a core a peer needs on a two-core machine.
const spinFor = 20 * time.Microsecond

// sleepFor bounds a futex sleep: a peer that dies never wakes us.
const sleepFor = 100 * time.Millisecond

// progress serves the rings of QPs whose ready bit peers (or we) set.
func (n *node) progress() {
	defer n.wg.Done()
	var idleSince time.Time
	for {
		select {
		case <-n.stop:
			return
		default:
		}
		if time.Duration(nanotime()-int64(n.m.u64(offPolled).Load())) < pollFresh {
			// An application thread is polling and serves the rings
			// itself: stay out of its way (and off its locks).
			shmem.FutexWait(n.doorbell, n.doorbell.Load(), pollSleep)
			continue
		}
		if n.serveReady() {
			idleSince = time.Time{}
			continue
		}
		if idleSince.IsZero() {
			idleSince = time.Now()
		}
		if time.Since(idleSince) < spinFor {
			runtime.Gosched()
			continue
		}
		v := n.doorbell.Load()
		n.sleeping.Store(1)
		if n.anyReady() {
			n.sleeping.Store(0)
			continue
		}
		d := sleepFor
		if time.Duration(nanotime()-int64(n.m.u64(offPolled).Load())) < pollFresh+pollSleep {
			d = pollSleep
		}
		shmem.FutexWait(n.doorbell, v, d)
		n.sleeping.Store(0)
		idleSince = time.Time{}
	}
}

func (n *node) anyReady() bool {
	for w := uint64(0); w < maxQP/64; w++ {
		if n.m.u64(offReady+8*w).Load() != 0 {
			return true
		}
	}
	return false
}

// serveReady takes every ready bit and serves those QPs.
func (n *node) serveReady() bool {
	any := false
	for w := uint64(0); w < maxQP/64; w++ {
		word := n.m.u64(offReady + 8*w)
		if word.Load() == 0 {
			continue
		}
		bits := word.Swap(0)
		for bits != 0 {
			b := bits & -bits
			bits &^= b
			slot := int(w)*64 + trailingZeros(b)
			if q := n.slots[slot].Load(); q != nil {
				q.serve()
			}
			any = true
		}
	}
	return any
}

func trailingZeros(x uint64) int {
	n := 0
	for x&1 == 0 {
		x >>= 1
		n++
	}
	return n
}

// notify sets a QP slot's ready bit in a node's pool (m) and wakes that
// node's loop if it sleeps.
func notify(m mem, slot uint32) {
	if slot >= maxQP {
		return
	}
	m.u64(offReady + 8*uint64(slot/64)).Or(1 << (slot % 64))
	if m.u32(offSleeping).Load() != 0 {
		m.u32(offDoorbell).Add(1)
		shmem.FutexWake(m.u32(offDoorbell), 1)
	}
}

// allocHalf allocates a QP half in the pool, reusing halves retired more
// than a second ago (a peer may still read a retired half for a moment;
// its generation check makes that harmless, the delay makes it rare).
func (n *node) allocHalf() (uint64, error) {
	n.mu.Lock()
	now := time.Now()
	keep := n.retired[:0]
	for _, r := range n.retired {
		if now.Sub(r.at) > time.Second {
			if l, err := n.pool.Free(r.off); err == nil {
				_ = n.seg.PunchHole(int64(r.off), int64(l))
			}
			continue
		}
		keep = append(keep, r)
	}
	n.retired = keep
	n.mu.Unlock()
	return n.pool.Alloc(halfSize)
}

func (n *node) retireHalf(off uint64) {
	n.mu.Lock()
	n.retired = append(n.retired, retiredHalf{off: off, at: time.Now()})
	n.mu.Unlock()
}

var halfGen atomic.Uint64

func (n *node) NewQP(qp driver.QP) (driver.QPDriver, error) {
	n.mu.Lock()
	if len(n.freeSlots) == 0 {
		n.mu.Unlock()
		return nil, fmt.Errorf("shm: create qp: all %d QP slots in use: %w", maxQP, verbs.ErrLimit)
	}
	slot := n.freeSlots[len(n.freeSlots)-1]
	n.freeSlots = n.freeSlots[:len(n.freeSlots)-1]
	n.mu.Unlock()
	q := newQPDriver(n, qp, slot)
	n.slots[slot].Store(q)
	return q, nil
}

func (n *node) freeSlot(slot int) {
	n.slots[slot].Store(nil)
	n.mu.Lock()
	n.freeSlots = append(n.freeSlots, slot)
	n.mu.Unlock()
}

// qpsOf calls fn for each QP linked to peer p.
func (n *node) qpsOf(p *peer, fn func(*qpDriver)) {
	for i := range n.slots {
		if q := n.slots[i].Load(); q != nil {
			if l := q.link.Load(); l != nil && l.peer == p {
				fn(q)
			}
		}
	}
}

// Progress serves ready QPs in the caller's goroutine (verbs calls it from
// an empty CQ poll): a polling application moves its own messages and
// acks without waiting for the progress goroutine to wake.
func (n *node) Progress() {
	n.m.u64(offPolled).Store(uint64(nanotime()))
	n.serveReady()
}

// Idle is driver.Idler: a goroutine that polled a CQ of the device goes to
// sleep on it (verbs.CQ.Wait). Peers skip the doorbell while our last poll is
// fresh and the progress goroutine naps up to pollSleep meanwhile, so without
// this a message that arrives just after the poller stopped waited out that
// nap (issue 22's kv PUTs after an idle moment: ~300 µs). Clearing the poll
// time makes peers ring again, and the wake ends the nap now.
func (n *node) Idle() {
	if n.m.u64(offPolled).Load() != 0 {
		n.m.u64(offPolled).Store(0)
		n.doorbell.Add(1)
		shmem.FutexWake(n.doorbell, 1)
	}
}

// pollFresh is how recent an application poll must be for producers to
// count the node as awake and skip the futex wake: the poller will find
// the work. pollSleep bounds the progress goroutine's sleep meanwhile, in
// case the application stops polling right then.
const (
	pollFresh = 20 * time.Microsecond
	pollSleep = 200 * time.Microsecond
)

//go:linkname nanotime runtime.nanotime
func nanotime() int64
