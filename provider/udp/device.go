package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/rc"
	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/verbs/driver"
	"github.com/ibex-rdma/ibex/wire"
)

const (
	maxDgram = 4096 + 128 // largest RoCEv2 datagram we send or accept
	sockBuf  = 16 << 20   // socket buffers requested (SO_RCVBUFFORCE as root)
)

// PortCounters are a device's port counters, with the InfiniBand names
// (PortXmitData and PortRcvData count 4-byte words, as IBA 16.1.3.5 says).
type PortCounters struct {
	PortXmitData, PortRcvData uint64
	PortXmitPkts, PortRcvPkts uint64
	PortRcvErrors             uint64 // malformed packets and bad ICRCs
	ICRCErrors                uint64
	UnknownQP                 uint64 // packets for a QP that is not here or not ready
	PortXmitDiscards          uint64 // datagrams the socket refused
}

type counters struct {
	xmitData, rcvData, xmitPkts, rcvPkts, rcvErrors, icrcErrors, unknownQP, xmitDiscards atomic.Uint64

	// Not port counters: how the datagrams crossed the socket.
	xmitMsgs, xmitSuper atomic.Uint64 // messages sent; of them GSO super-datagrams
	rcvMsgs, rcvSuper   atomic.Uint64 // messages received; of them GRO super-datagrams
	syscalls            atomic.Uint64 // sendmmsg and recvmmsg calls
}

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

// device is one socket and its progress loop.
type device struct {
	name  string
	addr  netip.AddrPort
	gid   verbs.GID
	mtu   verbs.MTU
	conn  *net.UDPConn
	io    *sockIO
	start time.Time
	ctrs  counters

	mu       sync.Mutex // guards cmds and ctxs
	cmds     []cmd
	ctxs     map[*opened]struct{}
	pending  atomic.Bool // cmds is not empty
	sleeping atomic.Bool
	stop     atomic.Bool
	done     chan struct{}

	// Owned by the loop goroutine.
	armed  int64 // the read deadline set (an engine deadline; 0: none; -1: unknown)
	qps    map[uint32]*qpDriver
	active []*qpDriver
	icrc   map[netip.AddrPort]*wire.ICRCPrefix
	idPre  map[netip.AddrPort]*[udpMaxSegs]wire.ICRCPrefix // send prefixes per IPv4 ID, see sockIO

	// receive's look-ups of the last packet (runs of packets share them),
	// and the QPs whose counters wait for the end of the batch.
	lastSrc   netip.AddrPort
	lastPre   *wire.ICRCPrefix
	lastQPN   uint32
	lastQP    *qpDriver
	touched   []*qpDriver
	ready     []*qpDriver // QPs with something new since the last transmit
	nextTimer int64       // the earliest engine deadline at the last full pass
	scanAll   bool        // visit every QP in the next transmit
	held      []heldPkt   // acknowledgements of this transmit pass, see hold
	acks      []*qpDriver // QPs asked for an acknowledgement in the message being delivered
	scratch   []byte
}

func startDevice(name string, addr netip.AddrPort) (*device, error) {
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return nil, fmt.Errorf("udp: device %s: bind %v: %w", name, addr, err)
	}
	d := &device{name: name, addr: addr, conn: conn, start: time.Now(), ctxs: map[*opened]struct{}{},
		done: make(chan struct{}), qps: map[uint32]*qpDriver{}, icrc: map[netip.AddrPort]*wire.ICRCPrefix{},
		idPre: map[netip.AddrPort]*[udpMaxSegs]wire.ICRCPrefix{}, touched: make([]*qpDriver, 0, 256),
		held: make([]heldPkt, 0, 64), acks: make([]*qpDriver, 0, 64), scratch: make([]byte, maxDgram)}
	d.gid = verbs.GID(addr.Addr().As16())
	d.mtu = pathMTU(addr.Addr())
	growBuffers(conn)
	raw, err := conn.SyscallConn()
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("udp: device %s: %w", name, err)
	}
	sa, err := getsockname(raw)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("udp: device %s: getsockname: %w", name, err)
	}
	_, v6 := sa.(*unix.SockaddrInet6)
	d.io = newSockIO(raw, v6, &d.ctrs)
	go d.loop()
	return d, nil
}

// pathMTU is the largest IB MTU whose RoCEv2 datagram fits the MTU of the
// interface that holds addr (4096 on loopback, 1024 on a 1500-byte link).
func pathMTU(a netip.Addr) verbs.MTU {
	link := 1500
	if ifs, err := net.Interfaces(); err == nil {
	search:
		for _, ifc := range ifs {
			addrs, _ := ifc.Addrs()
			for _, x := range addrs {
				if n, ok := x.(*net.IPNet); ok {
					if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a.Unmap() {
						link = ifc.MTU
						break search
					}
				}
			}
		}
	}
	overhead := 40 + 8 + ib.BTHLen + 28 + 4 // IPv6 header, UDP, BTH, largest extension, ICRC
	m := verbs.MTU256
	for c := verbs.MTU256; c <= verbs.MTU4096; c++ {
		if c.Bytes()+overhead <= link {
			m = c
		}
	}
	return m
}

// growBuffers asks for large socket buffers, forcing past rmem_max when
// the process may (CAP_NET_ADMIN); the send window is sized from the result.
func growBuffers(c *net.UDPConn) {
	raw, err := c.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, sockBuf) != nil {
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, sockBuf)
		}
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, sockBuf) != nil {
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, sockBuf)
		}
	})
}

// rcvBuf reads the socket's receive buffer size.
func (d *device) rcvBuf() int {
	raw, err := d.conn.SyscallConn()
	if err != nil {
		return 212992
	}
	n := 212992
	_ = raw.Control(func(fd uintptr) {
		if v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF); err == nil {
			n = v
		}
	})
	return n
}

func (d *device) addContext(drv *opened) {
	d.mu.Lock()
	d.ctxs[drv] = struct{}{}
	d.mu.Unlock()
}

func (d *device) dropContext() (last bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for drv := range d.ctxs {
		if drv.closed {
			delete(d.ctxs, drv)
		}
	}
	return len(d.ctxs) == 0
}

func (d *device) stopLoop() {
	d.stop.Store(true)
	_ = d.conn.SetReadDeadline(time.Now())
	<-d.done
	_ = d.conn.Close()
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

func (d *device) now() int64 { return int64(time.Since(d.start)) }

func (d *device) counters() PortCounters {
	c := &d.ctrs
	return PortCounters{
		PortXmitData: c.xmitData.Load() / 4, PortRcvData: c.rcvData.Load() / 4,
		PortXmitPkts: c.xmitPkts.Load(), PortRcvPkts: c.rcvPkts.Load(), PortRcvErrors: c.rcvErrors.Load(),
		ICRCErrors: c.icrcErrors.Load(), UnknownQP: c.unknownQP.Load(), PortXmitDiscards: c.xmitDiscards.Load(),
	}
}

// loop is the device's progress goroutine.
func (d *device) loop() {
	defer close(d.done)
	s := d.io
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
			if n, _ := s.recv(); n > 0 {
				d.deliver(n, &pkt, &wp)
			}
			continue
		}

		// Receive, or sleep until a datagram, the next timer or a wake-up
		// by post. The first read of wait does not block: one system call
		// serves a busy loop and a sleeping one alike (they cost 1.5 µs
		// each in the VMs this was measured on).
		d.arm(next)
		d.sleeping.Store(true)
		if d.pending.Load() || d.stop.Load() { // see post and stopLoop
			d.sleeping.Store(false)
			continue
		}
		n, err := s.wait()
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

// arm sets the socket's read deadline to the engine deadline next (0:
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

// transmit runs due timers and sends what every engine has to send; it
// returns the earliest engine deadline (0: none).
//
// Only QPs with something new — a packet received, a request issued, a
// state change — are visited, unless a timer is due: then every QP is, and
// the earliest deadline is found again. A pass over a thousand idle QPs
// would otherwise cost every packet of a busy one.
func (d *device) transmit(now int64, pkt *rc.Packet, wp *wire.Packet) (next int64) {
	if d.scanAll || (d.nextTimer != 0 && now >= d.nextTimer) {
		for i := 0; i < len(d.active); i++ {
			if dl := d.drain(now, d.active[i], pkt, wp); dl != 0 && (next == 0 || dl < next) {
				next = dl
			}
		}
		d.nextTimer, d.scanAll = next, false
	} else {
		for _, q := range d.ready {
			if dl := d.drain(now, q, pkt, wp); dl != 0 && (d.nextTimer == 0 || dl < d.nextTimer) {
				d.nextTimer = dl
			}
		}
	}
	for i, q := range d.ready {
		q.ready = false
		d.ready[i] = nil
	}
	d.ready = d.ready[:0]
	d.release(nil, wp)
	d.io.flush()
	return d.nextTimer
}

// markReady puts q on the list transmit visits next.
func (d *device) markReady(q *qpDriver) {
	if !q.ready {
		q.ready = true
		d.ready = append(d.ready, q)
	}
}

// drain runs q's due timers and queues what its engine has to send; it
// returns the engine's next deadline.
func (d *device) drain(now int64, q *qpDriver, pkt *rc.Packet, wp *wire.Packet) int64 {
	s := d.io
	e := q.eng
	if e == nil {
		return 0
	}
	if dl := e.Deadline(); dl != 0 && dl <= now {
		e.Tick(now)
	}
	for {
		if s.full() {
			s.flush()
		}
		// The engine writes the payload where the datagram will carry it
		// (after a BTH: most packets have no extension header), so that
		// encoding does not copy it again.
		buf := s.bufs[s.nbuf][:0:maxDgram]
		if !e.Poll(now, pkt, buf[ib.BTHLen:maxDgram]) {
			break
		}
		if !s.reachable(q.peer) {
			d.ctrs.xmitDiscards.Add(1)
			continue
		}
		if pkt.Opcode == ib.RCAck || pkt.Opcode == ib.RCAtomicAck {
			// Acknowledgements go last, see hold.
			d.hold(q, pkt, wp)
			continue
		}
		if len(d.held) > 0 && ib.Opcode(pkt.Opcode).Has(ib.MaskResponse) {
			// A READ response: the QP's earlier acknowledgements first
			// (responses keep their order), the payload saved meanwhile.
			pkt.Payload = d.scratch[:copy(d.scratch, pkt.Payload)]
			d.release(q, wp)
			buf = s.bufs[s.nbuf][:0:maxDgram]
		}
		d.encode(q, pkt, wp, buf)
	}
	q.syncStats()
	q.afterEngine()
	return e.Deadline()
}

// heldPkt is an acknowledgement waiting for the end of a transmit pass.
type heldPkt struct {
	q   *qpDriver
	pkt rc.Packet
}

// hold keeps an acknowledgement (ACK, NAK, atomic ACK: no payload) until
// the end of the transmit pass, so that it leaves after the requests that
// pass sends to the same peer: a request followed by a smaller datagram is
// one GSO super-datagram, so the ACK of a ping and the pong that answers it
// cost one trip through the kernel instead of two. Requests and responses
// are independent streams (IBA 9.5, rxe sends them from separate tasks);
// within the responses of a QP the order is kept.
func (d *device) hold(q *qpDriver, pkt *rc.Packet, wp *wire.Packet) {
	if len(d.held) == cap(d.held) {
		d.release(nil, wp)
	}
	d.held = append(d.held, heldPkt{q: q, pkt: *pkt})
	d.held[len(d.held)-1].pkt.Payload = nil
}

// release queues the held packets of q (nil: all).
func (d *device) release(q *qpDriver, wp *wire.Packet) {
	s := d.io
	kept := d.held[:0]
	for i := range d.held {
		h := &d.held[i]
		if q != nil && h.q != q {
			kept = append(kept, *h)
			continue
		}
		if s.full() {
			s.flush()
		}
		d.encode(h.q, &h.pkt, wp, s.bufs[s.nbuf][:0:maxDgram])
	}
	clear(d.held[len(kept):])
	d.held = kept
}

// encode queues pkt for q's peer, encoded in buf, the transmit queue's
// next buffer, with the ICRC for the IPv4 ID the datagram will leave with.
func (d *device) encode(q *qpDriver, pkt *rc.Packet, wp *wire.Packet, buf []byte) {
	s := d.io
	n := len(pkt.Payload)
	hl := ib.Opcode(pkt.Opcode).HeaderLen()
	if n > 0 && hl != ib.BTHLen && unsafe.SliceData(pkt.Payload) == &buf[:cap(buf)][ib.BTHLen] {
		// Move the payload to where this opcode's headers end. It fits:
		// headers of packets with payload are at most 32 bytes.
		if hl+n <= cap(buf) {
			pkt.Payload = buf[hl : hl+n]
			copy(pkt.Payload, buf[ib.BTHLen:ib.BTHLen+n])
		}
	}
	size := hl + n + (-n & 3) + ib.ICRCLen
	id := s.join(q.peer, size)
	b, err := d.encodeID(q, pkt, wp, buf, id)
	if err != nil {
		d.ctrs.xmitDiscards.Add(1)
		return
	}
	if got := s.push(q.peer, b); got != id {
		// Not the size predicted (a bug, but keep the wire right).
		_, _ = d.encodeID(q, pkt, wp, b[:0], got)
	}
}

// encodeID encodes pkt with the ICRC computed for IPv4 ID id.
func (d *device) encodeID(q *qpDriver, pkt *rc.Packet, wp *wire.Packet, buf []byte, id int) ([]byte, error) {
	if id == 0 || d.io.v6 {
		return q.encode(pkt, wp, buf)
	}
	pre := d.idPrefixes(q.peer)
	if pre == nil {
		return q.encode(pkt, wp, buf)
	}
	saved := q.sendICRC
	q.sendICRC = pre[id]
	b, err := q.encode(pkt, wp, buf)
	q.sendICRC = saved
	return b, err
}

// idPrefixes returns the ICRC prefixes of the flow to peer for IPv4 IDs 0
// to 63 (the IDs of the segments of a super-datagram).
func (d *device) idPrefixes(peer netip.AddrPort) *[udpMaxSegs]wire.ICRCPrefix {
	if p, ok := d.idPre[peer]; ok {
		return p
	}
	if len(d.idPre) > 4096 {
		clear(d.idPre)
	}
	p := new([udpMaxSegs]wire.ICRCPrefix)
	for i := range p {
		var err error
		if p[i], err = wire.NewICRCPrefix(&wire.Encap{Src: d.addr, Dst: peer, DF: true, TTL: 64, ID: uint16(i)}); err != nil {
			p = nil
			break
		}
	}
	d.idPre[peer] = p
	return p
}

// deliver splits the n messages received into datagrams and processes
// them.
func (d *device) deliver(n int, pkt *rc.Packet, wp *wire.Packet) {
	wireClock.Load()
	s := d.io
	now := d.now()
	d.ctrs.rcvMsgs.Add(uint64(n))
	super := 0
	for i := 0; i < n; i++ {
		b, src, seg, ok := s.message(i)
		if seg < len(b) {
			super++
		}
		if !ok || len(b) == 0 {
			d.ctrs.rcvPkts.Add(1)
			d.ctrs.rcvErrors.Add(1)
			continue
		}
		for len(b) > 0 {
			k := min(seg, len(b))
			d.receive(now, b[:k], src, pkt, wp)
			b = b[k:]
		}
		if len(d.acks) > 0 && i < n-1 {
			// Answer requests that asked for it before reading on, so
			// the sender's window reopens while this batch is processed.
			// (The answers to the batch's last message wait for the end
			// of the loop pass: they may share a datagram with a reply.)
			for _, q := range d.acks {
				d.drain(now, q, pkt, wp)
			}
			d.release(nil, wp)
			s.flush()
		}
		clear(d.acks)
		d.acks = d.acks[:0]
	}
	d.syncTouched()
	if super > 0 {
		d.ctrs.rcvSuper.Add(uint64(super))
	}
}

// wireClock carries happens-before across the kernel for the race
// detector: a datagram sent by one device loop and received by another in
// the same process orders what the sender did before it (the application's
// writes to memory it then asked to send) before what the receiver does
// after. The kernel's socket buffers already order them; the detector
// cannot see through a syscall. An atomic add per batch sent and a load per
// batch received cost nothing measurable.
var wireClock atomic.Uint64

// getsockname returns the socket's local address.
func getsockname(raw interface{ Control(func(uintptr)) error }) (sa unix.Sockaddr, err error) {
	if cerr := raw.Control(func(fd uintptr) { sa, err = unix.Getsockname(int(fd)) }); cerr != nil {
		return nil, cerr
	}
	return sa, err
}

// receive verifies, decodes and delivers one datagram. Nothing in it may
// panic: the network is untrusted.
func (d *device) receive(now int64, b []byte, src netip.AddrPort, pkt *rc.Packet, wp *wire.Packet) {
	d.ctrs.rcvPkts.Add(1)
	d.ctrs.rcvData.Add(uint64(len(b)))
	if err := wire.DecodeIB(b, wp); err != nil {
		d.ctrs.rcvErrors.Add(1)
		return
	}
	if wp.BTH.Opcode.Transport() != ib.RC {
		d.ctrs.unknownQP.Add(1)
		return
	}
	pre := d.lastPre
	if pre == nil || src != d.lastSrc {
		pre = d.prefix(src, d.addr)
		d.lastSrc, d.lastPre = src, pre
	}
	if pre == nil {
		d.ctrs.rcvErrors.Add(1)
		return
	}
	if _, err := pre.CheckAnyID(b); err != nil {
		d.ctrs.icrcErrors.Add(1)
		d.ctrs.rcvErrors.Add(1)
		return
	}
	q := d.lastQP
	if q == nil || wp.BTH.DestQP != d.lastQPN {
		q = d.qps[wp.BTH.DestQP]
		d.lastQPN, d.lastQP = wp.BTH.DestQP, q
	}
	if q == nil || q.eng == nil {
		d.ctrs.unknownQP.Add(1)
		return
	}
	fromWire(wp, pkt)
	if wp.BTH.AckReq && !wp.BTH.Opcode.Has(ib.MaskResponse) && (len(d.acks) == 0 || d.acks[len(d.acks)-1] != q) && len(d.acks) < cap(d.acks) {
		d.acks = append(d.acks, q)
	}
	q.eng.Receive(now, pkt)
	d.markReady(q)
	// The QP's counters follow at once for a response (what a requester
	// counts: RNR NAKs, error NAKs); for a request, whose counts no
	// completion waits on, once per batch (syncStats costs a dozen
	// atomic adds, as much as the rest of a data packet's receive).
	if wp.BTH.Opcode.Has(ib.MaskResponse) || len(d.touched) == cap(d.touched) && cap(d.touched) > 0 {
		q.syncStats()
	} else if len(d.touched) == 0 || d.touched[len(d.touched)-1] != q {
		d.touched = append(d.touched, q)
	}
}

// syncTouched brings the counters of the QPs receive saw up to date.
func (d *device) syncTouched() {
	for i, q := range d.touched {
		q.syncStats()
		d.touched[i] = nil
	}
	d.touched = d.touched[:0]
}

// prefix returns the ICRC prefix of the flow src → dst, cached per source.
func (d *device) prefix(src, dst netip.AddrPort) *wire.ICRCPrefix {
	if p, ok := d.icrc[src]; ok {
		return p
	}
	if len(d.icrc) > 4096 {
		clear(d.icrc) // bound the cache against a flood of spoofed sources
	}
	p, err := wire.NewICRCPrefix(&wire.Encap{Src: src, Dst: dst, DF: true, TTL: 64})
	if err != nil {
		return nil
	}
	d.icrc[src] = &p
	return &p
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

// driver is one context's view of the device.
type opened struct {
	dev    *device
	ctx    driver.Context
	closed bool
}

var attr = verbs.DeviceAttr{
	FWVersion:       "1.0.0",
	NodeGUID:        0x6962_6578_0000_0002,
	SysImageGUID:    0x6962_6578_0000_0002,
	Transport:       "InfiniBand",
	PhysPortCnt:     1,
	MaxMRSize:       1 << 40,
	PageSizeCap:     0xfffff000,
	MaxQP:           1 << 16,
	MaxQPWR:         1 << 14,
	MaxSGE:          32,
	MaxCQ:           1 << 16,
	MaxCQE:          1 << 22,
	MaxMR:           1 << 20,
	MaxPD:           1 << 16,
	MaxQPRdAtom:     128,
	MaxQPInitRdAtom: 128,
	MaxInlineData:   512,
	MaxMsgSize:      1 << 31,
	AtomicCap:       verbs.AtomicGlob,
	// The responder places packets in PSN order, word by word, into
	// PD.AllocMR's mmapped memory; the device loop is a goroutine of its own.
	Caps: verbs.CapSameHost | verbs.CapOtherHosts | verbs.CapOrderedPlacement | verbs.CapProgressThread,
}

func (drv *opened) DeviceAttr() verbs.DeviceAttr { return attr }

func (drv *opened) PortAttr(port uint8) (verbs.PortAttr, error) {
	if port != 1 {
		return verbs.PortAttr{}, fmt.Errorf("udp: port %d: %w", port, verbs.ErrInvalidArgument)
	}
	return verbs.PortAttr{
		State: verbs.PortActive, MaxMTU: verbs.MTU4096, ActiveMTU: drv.dev.mtu, GIDTblLen: 1, GID: drv.dev.gid,
		LinkLayer: "Ethernet", ActiveSpeed: "udp " + drv.dev.addr.String(), MaxMsgSize: attr.MaxMsgSize,
	}, nil
}

func (drv *opened) NewQP(qp driver.QP) (driver.QPDriver, error) {
	q := &qpDriver{dev: drv.dev, qp: qp}
	q.works = make([]driver.SendWork, qp.Cap().MaxSendWR)
	for i := range q.works {
		q.works[i].Init(qp.Cap().MaxSendSGE, qp.Cap().MaxInlineData)
	}
	drv.dev.post(cmd{kind: cmdAddQP, q: q})
	return q, nil
}

func (drv *opened) Close() error {
	drv.dev.mu.Lock()
	drv.closed = true
	drv.dev.mu.Unlock()
	prov.release(drv.dev)
	return nil
}

// AllocMem gives AllocMR page-aligned memory mapped outside the Go heap:
// the garbage collector never scans or moves it, and RDMA buffers of any
// size cost it nothing. Freed (unmapped) after Dereg.
func (drv *opened) AllocMem(n int) ([]byte, func(), error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, nil, fmt.Errorf("udp: alloc mr: mmap %d bytes: %w", n, err)
	}
	return b, func() { _ = unix.Munmap(b) }, nil
}
