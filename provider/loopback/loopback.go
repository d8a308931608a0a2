// Package loopback is ibex's in-process verbs provider: every QP lives in
// this process and a work request moves bytes with one copy, straight from
// the source memory region to the destination one, in the goroutine that
// posted it. It is the reference provider the conformance suite is written
// against and the fastest way to run verbs programs in one process.
//
// The provider registers one device, "loop0", with one Ethernet port whose
// GID is ::ffff:127.0.0.1. Any number of Contexts may open it; QPs of all of
// them can connect to each other by QPN, like QPs on one HCA.
package loopback

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/verbs/driver"
)

// DeviceName is the name of the loopback device.
const DeviceName = "loop0"

func init() { driver.Register(provider{}) }

type provider struct{}

func (provider) Name() string      { return "loopback" }
func (provider) Devices() []string { return []string{DeviceName} }

func (provider) Open(device string, c driver.Context) (driver.Device, error) {
	if device != DeviceName {
		return nil, fmt.Errorf("loopback: device %q: %w", device, verbs.ErrNoDevice)
	}
	d := &opened{ctx: c}
	dev.mu.Lock()
	dev.ctxs[d] = struct{}{}
	dev.mu.Unlock()
	return d, nil
}

// device is the state all contexts of loop0 share.
type device struct {
	mu   sync.RWMutex
	qps  map[uint32]driver.QP
	ctxs map[*opened]struct{}

	portState atomic.Uint32
}

var dev = func() *device {
	d := &device{qps: map[uint32]driver.QP{}, ctxs: map[*opened]struct{}{}}
	d.portState.Store(uint32(verbs.PortActive))
	return d
}()

// gid is loop0's GID: the IPv4-mapped loopback address, as rxe on lo reports.
var gid = verbs.GID{10: 0xff, 11: 0xff, 12: 127, 15: 1}

// nodeGUID spells "ibex" in its top four bytes.
const nodeGUID = 0x6962_6578_0000_0001

var attr = verbs.DeviceAttr{
	FWVersion:       "1.0.0",
	NodeGUID:        nodeGUID,
	SysImageGUID:    nodeGUID,
	Transport:       "InfiniBand",
	PhysPortCnt:     1,
	MaxMRSize:       1 << 40,
	PageSizeCap:     0xfffff000,
	MaxQP:           1 << 16,
	MaxQPWR:         1 << 15,
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
	// The poster's goroutine executes each request against the target QP's
	// memory (in this process only) and completes it at once.
	Caps: verbs.CapOneSided | verbs.CapCompleteAtPost,
}

type opened struct {
	ctx driver.Context
}

func (d *opened) DeviceAttr() verbs.DeviceAttr { return attr }

func (d *opened) PortAttr(port uint8) (verbs.PortAttr, error) {
	if port != 1 {
		return verbs.PortAttr{}, fmt.Errorf("loopback: port %d: %w", port, verbs.ErrInvalidArgument)
	}
	return verbs.PortAttr{
		State:       verbs.PortState(dev.portState.Load()),
		MaxMTU:      verbs.MTU4096,
		ActiveMTU:   verbs.MTU4096,
		GIDTblLen:   1,
		GID:         gid,
		LinkLayer:   "Ethernet",
		ActiveSpeed: "memory",
		MaxMsgSize:  attr.MaxMsgSize,
	}, nil
}

func (d *opened) NewQP(qp driver.QP) (driver.QPDriver, error) {
	dev.mu.Lock()
	defer dev.mu.Unlock()
	if _, dup := dev.qps[qp.Num()]; dup {
		return nil, fmt.Errorf("loopback: qpn %#x already in use", qp.Num())
	}
	dev.qps[qp.Num()] = qp
	return &qpDriver{qp: qp}, nil
}

func (d *opened) Close() error {
	dev.mu.Lock()
	delete(dev.ctxs, d)
	dev.mu.Unlock()
	return nil
}

// SetPortState changes port 1 of loop0 and posts PORT_ACTIVE or PORT_ERR to
// every open context, as a cable pull would. While the port is not ACTIVE
// every request is lost, so requesters retry and end with RETRY_EXC_ERR.
func SetPortState(s verbs.PortState) {
	old := verbs.PortState(dev.portState.Swap(uint32(s)))
	if old == s {
		return
	}
	ev := verbs.EventPortErr
	if s == verbs.PortActive {
		ev = verbs.EventPortActive
	}
	dev.mu.RLock()
	defer dev.mu.RUnlock()
	for d := range dev.ctxs {
		d.ctx.PostEvent(verbs.AsyncEvent{Type: ev, Port: 1})
	}
}

type qpDriver struct {
	qp driver.QP
	// peer caches the destination QP; it is re-resolved when the QP's
	// destination changes or the cached QP is destroyed.
	peer    driver.QP
	peerQPN uint32
}

func (q *qpDriver) Execute(w *driver.SendWQE) driver.Outcome {
	if verbs.PortState(dev.portState.Load()) != verbs.PortActive {
		return driver.Outcome{Kind: driver.Lost}
	}
	return driver.ExecuteLocal(w, q.qp, q.resolve())
}

func (q *qpDriver) resolve() driver.QP {
	dst := q.qp.DestQPN()
	if q.peer.Valid() && q.peerQPN == dst && !q.peer.Destroyed() {
		return q.peer
	}
	dev.mu.RLock()
	p := dev.qps[dst]
	dev.mu.RUnlock()
	q.peer, q.peerQPN = p, dst
	return p
}

func (q *qpDriver) Destroy() {
	dev.mu.Lock()
	if dev.qps[q.qp.Num()] == q.qp {
		delete(dev.qps, q.qp.Num())
	}
	dev.mu.Unlock()
}
