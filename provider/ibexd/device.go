package ibexd

import (
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ibex-rdma/ibex/internal/ibexdwire"
	"github.com/ibex-rdma/ibex/internal/shmem"
	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/verbs/driver"
)

// device is one context attached to the daemon.
//
// Locks: mu guards the maps and the connection state; sendMu serialises
// writes on conn. Neither is held across a round trip to the daemon
// except where noted.
type device struct {
	name      string
	ctx       driver.Context
	conn      *net.UnixConn
	path      string
	daemonPID int
	attr      verbs.DeviceAttr
	port      verbs.PortAttr
	pkeys     []uint16 // the daemon port's P_Key table, from hello
	db        *shmem.Segment

	sendMu sync.Mutex

	mu       sync.Mutex
	nextID   uint64
	pending  map[uint64]chan reply
	gone     error // set once the daemon is gone
	closing  bool
	qps      map[uint32]*qpDriver
	pds      map[*verbs.PD]uint32
	cqs      map[*verbs.CQ]*cqRing
	mrs      map[*verbs.MR]uint32
	allocs   []alloc
	ringList []*cqRing // the values of cqs (under mu), published in rings for Progress

	rings     atomic.Pointer[[]*cqRing]            // ringList, read without a lock
	qpTable   atomic.Pointer[map[uint32]*qpDriver] // qps, read without a lock by completion delivery
	lastPoll  atomic.Int64                         // when a poller last called Progress (ns since start; 0: it went to sleep)
	wakeRings chan struct{}                        // Idle: the ring goroutines go back to futex sleeps
	done      chan struct{}                        // closed when reader ends

	// QP events from the daemon, handled in order by qpEvents, not by the
	// reader: handling one drains the QP's completion rings, and a drain
	// may wait for an answer (a completion's cause) that only the reader
	// can deliver.
	evMu   sync.Mutex
	evs    []ibexdwire.Event
	evWake chan struct{}
}

// alloc is a piece of memory from AllocMem: a memfd the daemon maps.
type alloc struct {
	seg  *shmem.Segment
	id   uint32 // the daemon's segment id
	base uint64
	size uint64
}

func (d *device) hello() error {
	if err := ibexdwire.Send(d.conn, &ibexdwire.Request{ID: 0, Op: ibexdwire.OpHello, Version: ibexdwire.Version,
		Device: d.name, PID: os.Getpid()}); err != nil {
		return fmt.Errorf("ibexd: hello: %w", err)
	}
	_ = d.conn.SetReadDeadline(time.Now().Add(rpcTimeout))
	var r ibexdwire.Response
	fds, err := ibexdwire.Recv(d.conn, make([]byte, ibexdwire.MaxMessage), &r)
	_ = d.conn.SetReadDeadline(time.Time{})
	if err != nil {
		return fmt.Errorf("ibexd: hello to %s: %w", d.path, err)
	}
	if err := r.Error(); err != nil {
		ibexdwire.CloseFDs(fds)
		return fmt.Errorf("hello: %w", err)
	}
	if r.Attr == nil || len(r.Ports) == 0 || len(fds) != 1 {
		ibexdwire.CloseFDs(fds)
		return fmt.Errorf("ibexd: hello: incomplete answer (attr %v, %d ports, %d descriptors)", r.Attr != nil, len(r.Ports), len(fds))
	}
	db, err := shmem.Map(fds[0])
	if err != nil {
		return fmt.Errorf("ibexd: hello: doorbell: %w", err)
	}
	if len(db.Mem) < ibexdwire.DoorbellSize {
		db.Close()
		return fmt.Errorf("ibexd: hello: doorbell segment of %d bytes", len(db.Mem))
	}
	d.db, d.attr, d.port, d.daemonPID, d.pkeys = db, *r.Attr, r.Ports[0], r.DaemonPID, r.PKeys
	d.attr.BoardID = "IBEX_IBEXD"
	// The transport runs in the daemon's threads: a process spinning
	// on a CQ or on memory should yield its thread now and then.
	d.attr.Caps |= verbs.CapAllocatedMemory | verbs.CapProgressThread
	d.evWake = make(chan struct{}, 1)
	go d.reader()
	go d.qpEvents()
	return nil
}

func (d *device) DeviceAttr() verbs.DeviceAttr { return d.attr }

func (d *device) PortAttr(port uint8) (verbs.PortAttr, error) {
	if port != 1 {
		return verbs.PortAttr{}, fmt.Errorf("ibexd: port %d: the device has port 1: %w", port, verbs.ErrInvalidArgument)
	}
	r, _, err := d.rpc(&ibexdwire.Request{Op: ibexdwire.OpQueryPort, Port: port})
	if err != nil || len(r.Ports) == 0 {
		return d.port, nil // the daemon is gone: what it said last
	}
	return r.Ports[0], nil
}

// PKeys is the daemon's device's P_Key table, as hello gave it
// (driver.PKeyTable); nil: the default one.
func (d *device) PKeys(port uint8) []uint16 {
	if port != 1 {
		return nil
	}
	return d.pkeys
}

// PortCounters are the daemon's device counters (the device is shared by
// every attached process).
func (d *device) PortCounters(port uint8) []verbs.PortCounter {
	r, _, err := d.rpc(&ibexdwire.Request{Op: ibexdwire.OpCounters, Port: port})
	if err != nil {
		return nil
	}
	return r.Counters
}

// DaemonPID is the pid of the daemon this device is attached to.
func (d *device) DaemonPID() int { return d.daemonPID }

func (d *device) Close() error {
	d.mu.Lock()
	d.closing = true
	allocs := d.allocs
	d.allocs = nil
	d.mu.Unlock()
	d.conn.Close() // the daemon tears down whatever is left
	<-d.done
	for _, a := range allocs {
		a.seg.Close()
	}
	d.db.Close()
	return nil
}

// AllocMem gives PD.AllocMR memory the daemon maps: a sealed memfd of its
// own, handed to the daemon at once.
func (d *device) AllocMem(n int) ([]byte, func(), error) {
	seg, err := shmem.Create(fmt.Sprintf("ibexd-mr-%d", os.Getpid()), int64((n+4095)&^4095))
	if err != nil {
		return nil, nil, err
	}
	r, _, err := d.rpc(&ibexdwire.Request{Op: ibexdwire.OpAddSeg}, seg.FD)
	if err != nil {
		seg.Close()
		return nil, nil, err
	}
	a := alloc{seg: seg, id: r.Seg, base: uint64(uintptr(unsafe.Pointer(&seg.Mem[0]))), size: uint64(len(seg.Mem))}
	d.mu.Lock()
	d.allocs = append(d.allocs, a)
	d.mu.Unlock()
	free := func() {
		d.mu.Lock()
		for i := range d.allocs {
			if d.allocs[i].id == a.id {
				d.allocs = append(d.allocs[:i], d.allocs[i+1:]...)
				break
			}
		}
		d.mu.Unlock()
		_, _, _ = d.rpc(&ibexdwire.Request{Op: ibexdwire.OpDelSeg, Seg: a.id})
		a.seg.Close()
	}
	return seg.Mem[:n], free, nil
}

// pdID is the daemon's twin of pd, allocated on first use.
func (d *device) pdID(pd *verbs.PD) (uint32, error) {
	d.mu.Lock()
	id, ok := d.pds[pd]
	d.mu.Unlock()
	if ok {
		return id, nil
	}
	r, _, err := d.rpc(&ibexdwire.Request{Op: ibexdwire.OpAllocPD})
	if err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if id, ok := d.pds[pd]; ok { // another goroutine won
		return id, nil
	}
	d.pds[pd] = r.PD
	return r.PD, nil
}

// AssignKeys registers the MR with the daemon, which assigns its keys.
func (d *device) AssignKeys(mr driver.MR) (uint32, uint32, error) {
	addr, n := uint64(uintptr(unsafe.Pointer(&mr.Bytes()[0]))), uint64(mr.Len())
	d.mu.Lock()
	var a *alloc
	for i := range d.allocs {
		if x := &d.allocs[i]; addr >= x.base && addr-x.base <= x.size && n <= x.size-(addr-x.base) {
			a = x
			break
		}
	}
	var seg uint32
	var off uint64
	if a != nil {
		seg, off = a.id, addr-a.base
	}
	d.mu.Unlock()
	if a == nil {
		return 0, 0, fmt.Errorf("ibexd: memory at %#x (%d bytes) was not allocated with PD.AllocMR: the daemon moves data straight from and into registered memory and can map only memory allocated for it: %w", addr, n, verbs.ErrUnsupported)
	}
	pd, err := d.pdID(mr.PD().PD)
	if err != nil {
		return 0, 0, err
	}
	r, _, err := d.rpc(&ibexdwire.Request{Op: ibexdwire.OpRegMR, PD: pd, Seg: seg, Off: off, Len: n, IOVA: mr.Addr(), Access: mr.Access()})
	if err != nil {
		return 0, 0, err
	}
	d.mu.Lock()
	d.mrs[mr.MR] = r.MR
	d.mu.Unlock()
	return r.LKey, r.RKey, nil
}

// RegMR: the keys were assigned in AssignKeys.
func (d *device) RegMR(mr driver.MR) error { return nil }

// DeregMR deregisters the daemon's twin; the daemon answers once no
// access of its transport is in flight.
func (d *device) DeregMR(mr driver.MR) {
	d.mu.Lock()
	id, ok := d.mrs[mr.MR]
	delete(d.mrs, mr.MR)
	d.mu.Unlock()
	if ok {
		_, _, _ = d.rpc(&ibexdwire.Request{Op: ibexdwire.OpDeregMR, MR: id})
	}
}

func (d *device) qp(n uint32) *qpDriver {
	if t := d.qpTable.Load(); t != nil {
		return (*t)[n]
	}
	return nil
}

// publishQPs republishes the QP table (d.mu held).
func (d *device) publishQPs() {
	t := make(map[uint32]*qpDriver, len(d.qps))
	for n, q := range d.qps {
		t[n] = q
	}
	d.qpTable.Store(&t)
}

// publishRings republishes the ring list (d.mu held).
func (d *device) publishRings() {
	list := append([]*cqRing(nil), d.ringList...)
	d.rings.Store(&list)
}

// Progress drains the completion rings in the caller's goroutine (an
// application that spins on CQ.Poll or on memory). While it does, the
// rings' goroutines nap instead of sleeping on the rings' futex words,
// so the daemon makes no wake-up system call per completion.
func (d *device) Progress() {
	d.lastPoll.Store(nowNs())
	if p := d.rings.Load(); p != nil {
		for _, r := range *p {
			r.drain()
		}
	}
}

// Idle: a poller goes to sleep on a CQ (verbs.CQ.Wait): the ring
// goroutines take over delivery at once.
func (d *device) Idle() {
	if d.lastPoll.Load() != 0 {
		d.lastPoll.Store(0)
		select {
		case d.wakeRings <- struct{}{}:
		default:
		}
	}
}

var start = time.Now()

func nowNs() int64 { return int64(time.Since(start)) + 1 }
