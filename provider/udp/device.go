package udp

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ibex-rdma/ibex/rc"
	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/wire"
)

// The device: its state, and how it starts and stops. Its progress loop is
// in loop.go, sending in send.go and txq.go, receiving in recv.go, the ICRC
// prefix caches in icrc.go; the socket is behind batchConn (batchconn.go).

const (
	maxDgram = 4096 + 128 // largest RoCEv2 datagram we send or accept
	rxSlots  = 64         // messages per receive batch
)

// device is one socket and its progress loop.
type device struct {
	name  string
	addr  netip.AddrPort
	gid   verbs.GID
	mtu   verbs.MTU
	pkeys []uint16 // the port's P_Key table (partitions.go); set before the first context sees the device
	conn  batchConn
	start time.Time
	ctrs  counters
	psp   devicePSP // encryption's policy and keys (psp.go)
	// pspQPs are the QPs that announce an SPI, by number (RotatePSP).
	pspQPs    sync.Map
	frozenPSP map[uint32]PSPState // Freeze's record (FrozenPSP)

	mu       sync.Mutex // guards cmds and ctxs
	cmds     []cmd
	spare    []cmd         // the slice commands() swapped out, for reuse (owner only)
	lastPoll atomic.Int64  // d.now() at the last Progress, 0: never or Idle since
	kick     chan struct{} // wakes the progress goroutine from a nap (Idle, stopLoop)
	ctxs     map[*opened]struct{}
	pending  atomic.Bool // cmds is not empty
	sleeping atomic.Bool
	stop     atomic.Bool
	done     chan struct{}

	// Owned by whoever holds own: the progress goroutine, or a poster or
	// poller running a pass (loop.go).
	own    sync.Mutex
	nap    *time.Timer // the progress goroutine's nap (its own)
	pacer  *rc.Pacer   // spaces the retransmissions of all the device's engines
	pkt    rc.Packet
	wp     wire.Packet
	armed  int64     // the read deadline set (an engine deadline; 0: none; -1: unknown)
	tx     txQueue   // datagrams to send
	rx     []message // the receive batch, into buffers of the device's
	qps    map[uint32]*qpDriver
	active []*qpDriver
	icrc   map[netip.AddrPort]*wire.ICRCPrefix
	idPre  map[netip.AddrPort]*[udpMaxSegs]wire.ICRCPrefix // send prefixes per IPv4 ID, see txQueue

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
	lazyAcks  bool        // a poller's pass: held may wait up to ackDelay (keepAcks)
	heldAt    int64       // d.now() when held last became non-empty
	acks      []*qpDriver // QPs asked for an acknowledgement in the message being delivered
	scratch   []byte
}

// startDevice opens the device's conn with listen and starts its loop.
func startDevice(name string, addr netip.AddrPort, pkeys []uint16, listen listenFunc) (*device, error) {
	d := &device{name: name, addr: addr, pkeys: pkeys, start: time.Now(), ctxs: map[*opened]struct{}{},
		done: make(chan struct{}), kick: make(chan struct{}, 1), nap: time.NewTimer(time.Hour), pacer: rc.NewPacer(0, 0), qps: map[uint32]*qpDriver{}, icrc: map[netip.AddrPort]*wire.ICRCPrefix{},
		idPre: map[netip.AddrPort]*[udpMaxSegs]wire.ICRCPrefix{}, touched: make([]*qpDriver, 0, 256),
		held: make([]heldPkt, 0, 64), acks: make([]*qpDriver, 0, 64), scratch: make([]byte, maxDgram)}
	var err error
	if d.psp, err = loadPSP(name); err != nil {
		return nil, fmt.Errorf("udp: device %s: %w", name, err)
	}
	conn, err := listen(addr, &d.ctrs)
	if err != nil {
		return nil, fmt.Errorf("udp: device %s: %w", name, err)
	}
	d.conn = conn
	d.gid = verbs.GID(addr.Addr().As16())
	d.mtu = pathMTU(addr.Addr())
	d.tx.init(conn, &d.ctrs)
	_, gro := conn.Offload()
	d.rx = newRecvBatch(min(rxSlots, conn.BatchSize()), gro)
	d.captureStarted()
	go d.loop()
	return d, nil
}

// rcvBuf is the conn's receive buffer size.
func (d *device) rcvBuf() int { return d.conn.RecvBuffer() }

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
	d.haltLoop()
	_ = d.conn.Close()
}

// haltLoop stops the progress goroutine, and every poller and poster from
// running a pass, and waits for the goroutine to end.
func (d *device) haltLoop() {
	d.stop.Store(true)
	_ = d.conn.SetReadDeadline(time.Now())
	select {
	case d.kick <- struct{}{}:
	default:
	}
	<-d.done
	d.captureStopped()
}

func (d *device) now() int64 { return int64(time.Since(d.start)) }
