package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"github.com/ibex-rdma/ibex/rc"
	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/wire"
)

const (
	batch    = 64         // datagrams per recvmmsg/sendmmsg
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

// batchConn is the batched datagram interface of ipv4.PacketConn and
// ipv6.PacketConn.
type batchConn interface {
	ReadBatch(ms []ipv4.Message, flags int) (int, error)
	WriteBatch(ms []ipv4.Message, flags int) (int, error)
}

type v6conn struct{ *ipv6.PacketConn }

func (c v6conn) ReadBatch(ms []ipv4.Message, flags int) (int, error) {
	return c.PacketConn.ReadBatch(ms, flags)
}
func (c v6conn) WriteBatch(ms []ipv4.Message, flags int) (int, error) {
	return c.PacketConn.WriteBatch(ms, flags)
}

// device is one socket and its progress loop.
type device struct {
	name  string
	addr  netip.AddrPort
	gid   verbs.GID
	mtu   verbs.MTU
	conn  *net.UDPConn
	bc    batchConn
	start time.Time
	ctrs  counters

	mu       sync.Mutex // guards cmds and ctxs
	cmds     []cmd
	ctxs     map[*driver]struct{}
	sleeping atomic.Bool
	stop     atomic.Bool
	done     chan struct{}

	// Owned by the loop goroutine.
	qps    map[uint32]*qpDriver
	active []*qpDriver
	icrc   map[netip.AddrPort]*wire.ICRCPrefix
}

func startDevice(name string, addr netip.AddrPort) (*device, error) {
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return nil, fmt.Errorf("udp: device %s: bind %v: %w", name, addr, err)
	}
	d := &device{name: name, addr: addr, conn: conn, start: time.Now(), ctxs: map[*driver]struct{}{},
		done: make(chan struct{}), qps: map[uint32]*qpDriver{}, icrc: map[netip.AddrPort]*wire.ICRCPrefix{}}
	d.gid = verbs.GID(addr.Addr().As16())
	if addr.Addr().Is4() {
		d.bc = ipv4.NewPacketConn(conn)
	} else {
		d.bc = v6conn{ipv6.NewPacketConn(conn)}
	}
	d.mtu = pathMTU(addr.Addr())
	growBuffers(conn)
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
	overhead := 40 + 8 + wire.BTHLen + 28 + 4 // IPv6 header, UDP, BTH, largest extension, ICRC
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

func (d *device) addContext(drv *driver) {
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

// post queues a command for the loop and wakes it if it sleeps.
func (d *device) post(c cmd) {
	d.mu.Lock()
	d.cmds = append(d.cmds, c)
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
	in := make([]ipv4.Message, batch)
	for i := range in {
		in[i].Buffers = [][]byte{make([]byte, maxDgram)}
	}
	out := make([]ipv4.Message, batch)
	outBufs := make([][]byte, batch)
	for i := range out {
		outBufs[i] = make([]byte, 0, maxDgram)
		out[i].Buffers = [][]byte{nil}
	}
	var cmds []cmd
	scratch := make([]byte, 4096)
	var pkt rc.Packet
	var wp wire.Packet
	for !d.stop.Load() {
		// Commands from application goroutines.
		d.mu.Lock()
		cmds, d.cmds = d.cmds, cmds[:0]
		d.mu.Unlock()
		for i := range cmds {
			d.apply(&cmds[i])
		}
		clear(cmds)

		// Timers and transmission.
		now := d.now()
		next := int64(0)
		nout := 0
		for i := 0; i < len(d.active); i++ {
			q := d.active[i]
			e := q.eng
			if e == nil {
				continue
			}
			if dl := e.Deadline(); dl != 0 && dl <= now {
				e.Tick(now)
			}
			for e.Poll(now, &pkt, scratch) {
				b, err := q.encode(&pkt, &wp, outBufs[nout][:0])
				if err != nil {
					continue
				}
				outBufs[nout] = b
				out[nout].Buffers[0] = b
				out[nout].Addr = q.peerUDP
				nout++
				if nout == batch {
					d.send(out[:nout])
					nout = 0
				}
			}
			q.syncStats()
			q.afterEngine()
			if dl := e.Deadline(); dl != 0 && (next == 0 || dl < next) {
				next = dl
			}
		}
		if nout > 0 {
			d.send(out[:nout])
		}

		// Receive: without blocking when there is more to do, else until
		// the next timer or a wake-up.
		d.mu.Lock()
		pending := len(d.cmds) > 0
		d.mu.Unlock()
		var deadline time.Time
		switch {
		case pending || nout > 0:
			deadline = time.Now()
		case next != 0:
			deadline = d.start.Add(time.Duration(next))
		default:
			deadline = time.Now().Add(time.Second)
		}
		_ = d.conn.SetReadDeadline(deadline)
		d.sleeping.Store(true)
		d.mu.Lock()
		pending = len(d.cmds) > 0
		d.mu.Unlock()
		if pending {
			_ = d.conn.SetReadDeadline(time.Now())
		}
		n, err := d.bc.ReadBatch(in, 0)
		d.sleeping.Store(false)
		if n > 0 {
			wireClock.Load()
		}
		if err != nil && !isTimeout(err) && !d.stop.Load() {
			d.ctrs.rcvErrors.Add(1)
		}
		now = d.now()
		for i := 0; i < n; i++ {
			d.receive(now, &in[i], &pkt, &wp)
		}
	}
	for _, q := range d.qps {
		q.eng = nil
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded)
}

// wireClock carries happens-before across the kernel for the race
// detector: a datagram sent by one device loop and received by another in
// the same process orders what the sender did before it (the application's
// writes to memory it then asked to send) before what the receiver does
// after. The kernel's socket buffers already order them; the detector
// cannot see through a syscall. An atomic add per batch sent and a load per
// batch received cost nothing measurable.
var wireClock atomic.Uint64

func (d *device) send(ms []ipv4.Message) {
	wireClock.Add(1)
	for len(ms) > 0 {
		n, err := d.bc.WriteBatch(ms, 0)
		if err != nil {
			if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.ENOBUFS) {
				d.ctrs.xmitDiscards.Add(uint64(len(ms)))
				return // the protocol retransmits
			}
			d.ctrs.xmitDiscards.Add(1)
			n = max(n, 1) // skip the datagram the kernel refused
		}
		for i := 0; i < n; i++ {
			d.ctrs.xmitPkts.Add(1)
			d.ctrs.xmitData.Add(uint64(len(ms[i].Buffers[0])))
		}
		ms = ms[n:]
	}
}

// receive verifies, decodes and delivers one datagram. Nothing in it may
// panic: the network is untrusted.
func (d *device) receive(now int64, m *ipv4.Message, pkt *rc.Packet, wp *wire.Packet) {
	b := m.Buffers[0][:m.N]
	d.ctrs.rcvPkts.Add(1)
	d.ctrs.rcvData.Add(uint64(len(b)))
	ua, ok := m.Addr.(*net.UDPAddr)
	if !ok {
		d.ctrs.rcvErrors.Add(1)
		return
	}
	src := ua.AddrPort()
	if err := wire.DecodeIB(b, wp); err != nil {
		d.ctrs.rcvErrors.Add(1)
		return
	}
	if wp.BTH.Opcode.Transport() != wire.RC {
		d.ctrs.unknownQP.Add(1)
		return
	}
	pre := d.prefix(src, d.addr)
	if pre == nil {
		d.ctrs.rcvErrors.Add(1)
		return
	}
	if _, err := pre.CheckAnyID(b); err != nil {
		d.ctrs.icrcErrors.Add(1)
		d.ctrs.rcvErrors.Add(1)
		return
	}
	q := d.qps[wp.BTH.DestQP]
	if q == nil || q.eng == nil {
		d.ctrs.unknownQP.Add(1)
		return
	}
	fromWire(wp, pkt)
	q.eng.Receive(now, pkt)
	q.syncStats()
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
		d.active = append(d.active, q)
	case cmdDelQP:
		delete(d.qps, q.qp.Num())
		for i, x := range d.active {
			if x == q {
				d.active = append(d.active[:i], d.active[i+1:]...)
				break
			}
		}
		q.eng = nil
	case cmdIssue:
		q.issue(c.ssn)
	case cmdState:
		q.state(d, c.from, c.to, c.attr)
	}
}

// driver is one context's view of the device.
type driver struct {
	dev    *device
	ctx    *verbs.Context
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
}

func (drv *driver) DeviceAttr() verbs.DeviceAttr { return attr }

func (drv *driver) PortAttr(port uint8) (verbs.PortAttr, error) {
	if port != 1 {
		return verbs.PortAttr{}, fmt.Errorf("udp: port %d: %w", port, verbs.ErrInvalidArgument)
	}
	return verbs.PortAttr{
		State: verbs.PortActive, MaxMTU: verbs.MTU4096, ActiveMTU: drv.dev.mtu, GIDTblLen: 1, GID: drv.dev.gid,
		LinkLayer: "Ethernet", ActiveSpeed: "udp " + drv.dev.addr.String(), MaxMsgSize: attr.MaxMsgSize,
	}, nil
}

func (drv *driver) NewQP(qp *verbs.QP) (verbs.QPDriver, error) {
	q := &qpDriver{dev: drv.dev, qp: qp}
	q.works = make([]verbs.SendWork, qp.Cap().MaxSendWR)
	for i := range q.works {
		q.works[i].Init(qp.Cap())
	}
	drv.dev.post(cmd{kind: cmdAddQP, q: q})
	return q, nil
}

func (drv *driver) Close() error {
	drv.dev.mu.Lock()
	drv.closed = true
	drv.dev.mu.Unlock()
	prov.release(drv.dev)
	return nil
}
