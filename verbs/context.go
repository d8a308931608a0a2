package verbs

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
)

// DeviceAttr are a device's attributes and limits (ibv_device_attr).
type DeviceAttr struct {
	FWVersion       string
	NodeGUID        uint64
	SysImageGUID    uint64
	VendorID        uint32
	VendorPartID    uint32
	HWVersion       uint32
	Transport       string // "InfiniBand" for RC-capable devices
	PhysPortCnt     uint8
	MaxMRSize       uint64
	PageSizeCap     uint64
	MaxQP           int
	MaxQPWR         int
	MaxSGE          int
	MaxCQ           int
	MaxCQE          int
	MaxMR           int
	MaxPD           int
	MaxQPRdAtom     int // max_dest_rd_atomic: incoming READ/atomic per QP
	MaxQPInitRdAtom int // max_rd_atomic: outstanding READ/atomic per QP
	MaxInlineData   int
	MaxMsgSize      uint64
	AtomicCap       AtomicCap
	// BoardID is ibv_devinfo's board_id (the PSID of a real HCA). A
	// provider that sets none gets "IBEX_" and its name in capitals.
	BoardID string
	// Caps is what the transport guarantees beyond the limits above.
	// Programs decide by it, never by a device's name: a device added
	// later, or a new provider, gets every path its guarantees allow.
	Caps DeviceCap
}

// PortAttr are a port's attributes (ibv_port_attr).
type PortAttr struct {
	State       PortState
	MaxMTU      MTU
	ActiveMTU   MTU
	GIDTblLen   int
	GID         GID // GID index 0
	LID         uint16
	SMLID       uint16
	LinkLayer   string // "Ethernet" or "InfiniBand"
	ActiveSpeed string // e.g. "400 Gbps" or "memory"
	MaxMsgSize  uint64
	LMC         uint8 // LID mask count: 0, one LID per port
	// ActiveWidth is ibv_port_attr.active_width (1 = 1X, 2 = 4X, 4 = 8X,
	// 8 = 12X, 16 = 2X); a provider's 0 reads as 1X, what rxe reports on a
	// link without a speed.
	ActiveWidth uint8
	// PKeyTblLen is ibv_port_attr.pkey_tbl_len: the entries of the port's
	// P_Key table (Context.QueryPKey), set by QueryPort.
	PKeyTblLen int
	// PhysState is ibv_port_attr.phys_state (3 = DISABLED, 5 = LINK_UP); a
	// provider's 0 follows State: DISABLED for a down port, else LINK_UP.
	PhysState uint8
}

// Context is an opened device (ibv_context). It is safe for concurrent use.
type Context struct {
	name     string
	provider string
	bind     deviceBinding
	dev      any        // the provider's device, for its optional interfaces
	prog     progresser // dev, if it can progress in the caller's goroutine
	attr     DeviceAttr

	events  chan AsyncEvent
	dropped atomic.Uint64

	mu     sync.Mutex
	closed bool
	npd    int
	ncq    int
	nqp    int
	nmr    int
	qps    []*QP // the QPs that exist, for QPs (registry.go)
}

// Open opens a device by name, e.g. "loop0", or by provider and name,
// "loopback/loop0". An empty name opens the first device of the first
// provider.
func Open(device string) (*Context, error) {
	prov, name, qualified := strings.Cut(device, "/")
	if !qualified {
		prov, name = "", device
	}
	for _, p := range sortedProviders() {
		if prov != "" && p.Name() != prov {
			continue
		}
		for _, d := range p.Devices() {
			if name == "" || d == name {
				c := &Context{name: d, provider: p.Name(), events: make(chan AsyncEvent, 1024)}
				b, err := p.OpenDevice(d, c)
				if err != nil {
					return nil, fmt.Errorf("open %s: %w", d, err)
				}
				c.bind = b.(deviceBinding)
				c.dev = c.bind.Device()
				c.prog, _ = c.dev.(progresser)
				c.attr = c.bind.DeviceAttr()
				if c.attr.BoardID == "" {
					c.attr.BoardID = "IBEX_" + strings.ToUpper(c.provider)
				}
				c.register()
				return c, nil
			}
		}
	}
	var names []string
	for _, d := range Devices() {
		names = append(names, d.Device)
	}
	return nil, fmt.Errorf("open %q: %w (devices: %v)", device, ErrNoDevice, names)
}

// Name is the device name.
func (c *Context) Name() string { return c.name }

// Progress drives the device's transport in the calling goroutine, on a
// device whose transport runs in software and can (shm0, udp0: see
// driver.Progresser), as CQ.Poll does when it finds its CQ empty; on other
// devices it does nothing. It never blocks and allocates nothing.
//
// A program that waits by spinning on memory — for the last byte of an
// RDMA WRITE, as perftest's write_lat and NCCL's LL protocol wait —
// calls it in that loop (UCX's ucp_worker_progress, libfabric's manual
// progress). Without it the device's own goroutine delivers what arrives,
// but only when it next looks, which may be a millisecond later while the
// program also polls a CQ.
func (c *Context) Progress() {
	if c.prog != nil {
		c.prog.Progress()
	}
}

// Provider is the name of the provider that owns the device.
func (c *Context) Provider() string { return c.provider }

// QueryDevice returns the device attributes.
func (c *Context) QueryDevice() DeviceAttr { return c.attr }

// QueryPort returns the attributes of a port (ports are numbered from 1).
func (c *Context) QueryPort(port uint8) (PortAttr, error) {
	if port < 1 || port > c.attr.PhysPortCnt {
		return PortAttr{}, errorf(ErrInvalidArgument, "query port: port %d: device %s has ports 1..%d", port, c.name, c.attr.PhysPortCnt)
	}
	a, err := c.bind.PortAttr(port)
	if err != nil {
		return PortAttr{}, err
	}
	if a.ActiveWidth == 0 {
		a.ActiveWidth = 1
	}
	a.PKeyTblLen = len(c.pkeys(port))
	if a.PhysState == 0 {
		a.PhysState = 5 // LINK_UP
		if a.State == PortDown {
			a.PhysState = 3 // DISABLED
		}
	}
	return a, nil
}

// AsyncEvent waits for the next asynchronous event (ibv_get_async_event).
func (c *Context) AsyncEvent(ctx context.Context) (AsyncEvent, error) {
	select { // a queued event wins over an ended context
	case ev := <-c.events:
		return ev, nil
	default:
	}
	select {
	case ev := <-c.events:
		return ev, nil
	case <-ctx.Done():
		return AsyncEvent{}, ctx.Err()
	}
}

// DroppedEvents counts asynchronous events lost because nobody read them
// and the queue of 1024 was full.
func (c *Context) DroppedEvents() uint64 { return c.dropped.Load() }

// postEvent queues an asynchronous event for the application. It never
// blocks: when the queue is full the event is counted in DroppedEvents.
func (c *Context) postEvent(ev AsyncEvent) {
	if ev.Type == EventPortErr || ev.Type == EventPortActive {
		c.portEvent(ev) // LinkDowned
	}
	select {
	case c.events <- ev:
	default:
		c.dropped.Add(1)
	}
}

// Close closes the context. Every PD, CQ and QP must be destroyed first.
func (c *Context) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errorf(ErrClosed, "close %s", c.name)
	}
	if c.npd+c.ncq+c.nqp+c.nmr > 0 {
		return errorf(ErrBusy, "close %s: %d PDs, %d MRs, %d CQs, %d QPs still exist", c.name, c.npd, c.nmr, c.ncq, c.nqp)
	}
	c.closed = true
	c.unregister()
	return c.bind.Close()
}

// count adjusts a resource count, enforcing a device limit when adding.
func (c *Context) count(field *int, delta, limit int, what string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errorf(ErrClosed, "%s: context %s closed", what, c.name)
	}
	if delta > 0 && limit > 0 && *field+delta > limit {
		return errorf(ErrLimit, "%s: device %s allows %d", what, c.name, limit)
	}
	*field += delta
	return nil
}

// AsyncEventType names an asynchronous event (ibv_event_type).
type AsyncEventType uint8

// Asynchronous event types, numbered as in libibverbs.
const (
	EventCQErr       AsyncEventType = 0
	EventQPFatal     AsyncEventType = 1
	EventQPReqErr    AsyncEventType = 2
	EventQPAccessErr AsyncEventType = 3
	EventCommEst     AsyncEventType = 4
	EventSQDrained   AsyncEventType = 5
	EventPortActive  AsyncEventType = 9
	EventPortErr     AsyncEventType = 10
	EventDeviceFatal AsyncEventType = 8
)

func (t AsyncEventType) String() string {
	switch t {
	case EventCQErr:
		return "CQ_ERR"
	case EventQPFatal:
		return "QP_FATAL"
	case EventQPReqErr:
		return "QP_REQ_ERR"
	case EventQPAccessErr:
		return "QP_ACCESS_ERR"
	case EventCommEst:
		return "COMM_EST"
	case EventSQDrained:
		return "SQ_DRAINED"
	case EventPortActive:
		return "PORT_ACTIVE"
	case EventPortErr:
		return "PORT_ERR"
	case EventDeviceFatal:
		return "DEVICE_FATAL"
	}
	return fmt.Sprintf("AsyncEventType(%d)", uint8(t))
}

// AsyncEvent is an asynchronous event (ibv_async_event). Exactly one of
// QP, CQ and Port is set, as the type says.
type AsyncEvent struct {
	Type AsyncEventType
	QP   *QP
	CQ   *CQ
	Port uint8
	// Cause explains QP and CQ errors.
	Cause error
}

func (e AsyncEvent) String() string {
	switch {
	case e.QP != nil:
		if e.Cause != nil {
			return fmt.Sprintf("%v on qp %#x: %v", e.Type, e.QP.Num(), e.Cause)
		}
		return fmt.Sprintf("%v on qp %#x", e.Type, e.QP.Num())
	case e.CQ != nil:
		return fmt.Sprintf("%v on cq %#x: %v", e.Type, e.CQ.id, e.Cause)
	default:
		return fmt.Sprintf("%v on port %d", e.Type, e.Port)
	}
}

// PortCounter is one named port counter, with the InfiniBand name where
// one exists (PortXmitData, PortRcvPkts, ...).
type PortCounter struct {
	Name  string
	Value uint64
}

// PortCounters returns the port's counters, or ErrUnsupported when the
// provider keeps none (loopback moves no packets).
func (c *Context) PortCounters(port uint8) ([]PortCounter, error) {
	r, ok := c.dev.(portCounterReader)
	if !ok {
		return nil, errorf(ErrUnsupported, "port counters: provider %s keeps none", c.provider)
	}
	if port < 1 || port > c.attr.PhysPortCnt {
		return nil, errorf(ErrInvalidArgument, "port counters: port %d: device %s has ports 1..%d", port, c.name, c.attr.PhysPortCnt)
	}
	return r.PortCounters(port), nil
}

// defaultPKeys is the P_Key table of a port whose provider has none: the
// default partition, full member.
var defaultPKeys = []uint16{0xffff}

// pkeys is port's P_Key table.
func (c *Context) pkeys(port uint8) []uint16 {
	if t, ok := c.dev.(pkeyTable); ok {
		if k := t.PKeys(port); len(k) > 0 {
			return k
		}
	}
	return defaultPKeys
}

// QueryPKey returns entry index of port's P_Key table (ibv_query_pkey):
// a P_Key, bit 15 set for full membership of its partition. A QP's
// pkey_index names one; its packets carry that P_Key, and it accepts only
// packets whose P_Key matches it (the same low 15 bits, one of the two a
// full member). PortAttr.PKeyTblLen is the table's length.
func (c *Context) QueryPKey(port uint8, index int) (uint16, error) {
	if port < 1 || port > c.attr.PhysPortCnt {
		return 0, errorf(ErrInvalidArgument, "query pkey: port %d: device %s has ports 1..%d", port, c.name, c.attr.PhysPortCnt)
	}
	t := c.pkeys(port)
	if index < 0 || index >= len(t) {
		return 0, errorf(ErrInvalidArgument, "query pkey: index %d: port %d's P_Key table has %d entries", index, port, len(t))
	}
	return t[index], nil
}
