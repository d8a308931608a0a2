package packet

import (
	"errors"
	"fmt"

	"github.com/ibex-rdma/ibex/sim/des"
	"github.com/ibex-rdma/ibex/sim/fabric"
	"github.com/ibex-rdma/ibex/sim/route"
	"github.com/ibex-rdma/ibex/sim/topo"
)

// Event kinds: the fabric's (evPort, evArrive, evFail: Net.Handle), the
// workload's (evChunk, evSlot, evSendDone, evNVLink: work.go; evSample:
// trace.go) and the link layers' (evResend: ib.go; evPause, evCNP, evNAK,
// evTimeout: roce.go).
const (
	evPort     uint16 = iota + 1 // A: port. The port finished a packet, or credit or a packet became ready.
	evArrive                     // A: packet, B: input port. Head (switch) or tail (NIC) of a packet arrives.
	evChunk                      // A: chunk. All of a message is in the receiver's memory.
	evSlot                       // A: connection. A consumed message's slot is back at the sender.
	evSendDone                   // A: proc. A send is acknowledged.
	evFail                       // A: link. The link goes down.
	evNVLink                     // A: chunk. A message over NVLink is in the receiver's memory.
	evResend                     // A: QP, B: chunk, C: payload. An InfiniBand QP's retry timeout for a lost packet expired.
	evPause                      // A: port, B: priority, C: 1 PAUSE, 0 RESUME. A PFC frame reaches the sending side of port A.
	evCNP                        // A: QP. A CNP reaches the QP's sender (DCQCN).
	evNAK                        // A: QP, C: PSN. The receiver's NAK reaches the sender: go back to C.
	evTimeout                    // A: QP, C: PSN. A RoCE QP's retry timer, started when packet C was lost, expires.
)

// ErrDrop is what a packet unaccounted for reports. InfiniBand's link
// layer never drops: a port sends only with credit, and the engine has no
// code path that drops a packet for want of buffer. There the one way a
// packet is lost is a link failure that leaves the switch holding it
// without a route to its destination (real switches discard such
// packets): it is counted, and its QP resends it after the retry timeout,
// as RC does. With RoCE a packet is also lost when it arrives to a full
// buffer, or when the receiver discards it out of sequence, and the QP
// goes back to it (go-back-N). Verify checks that every packet sent was
// delivered or lost in one of these ways, and this error is what it wraps
// if not.
var ErrDrop = errors.New("packet lost in a lossless fabric")

// oport is the sending side of one port: what it is cabled to, and its
// state and counters.
type oport struct {
	peer   topo.PortID
	link   topo.LinkID
	rate   int64    // bits/s
	prop   des.Time // cable delay
	sw     bool     // a switch port: forwarded packets free an input buffer
	toSw   bool     // the peer is a switch port
	dead   bool
	cabled bool
	nic    int32 // the NIC's index for a NIC port; -1 for a switch port

	busyUntil  des.Time
	evAt       des.Time // earliest evPort scheduled and not yet handled; 0: none
	queued     int64    // bytes queued (adaptive routing's load)
	npk        int32    // packets queued, all VLs
	rr         uint8    // VL whose turn it is
	left       uint8    // packets left in its turn
	stallSince des.Time // -1: not waiting for credit

	// Counters, as a port's PortXmitData, PortXmitPkts, busy time and
	// PortXmitWait (time with data to send and no credit).
	txBytes   int64
	txPkts    int64
	busy      des.Time
	stall     des.Time
	maxQueued int64

	// RoCE counters: time paused by the peer with packets to send (all
	// priorities), PAUSE frames sent, packets dropped at this port's
	// ingress, packets marked CE at its egress, CNPs sent (a NIC port).
	pauseTime   des.Time
	pauseFrames int64
	drops       int64
	marks       int64
	cnps        int64
}

// packet is one packet in flight. Packets live in a pool and are named by
// index, so that queues and events carry an int32.
type packet struct {
	tail    des.Time // when its tail reaches the input port it is at
	ready   des.Time // earliest start at the output port it is queued on (cut-through)
	chunk   int32    // the message it belongs to
	qp      int32
	dst     topo.NodeID
	in      topo.PortID // the input port whose buffer holds it
	wire    int32       // bytes on the wire, headers included
	payload int32
	psn     int32 // RoCE: its sequence number in its QP
	vl      uint8
	ce      bool // RoCE: marked Congestion Experienced
}

// Net is the packet-level fabric of one run: ports with per-VL queues,
// output-queued switches, NICs injecting from their QPs, and the link
// layer's flow control and loss recovery (ll).
type Net struct {
	g   *topo.Graph
	r   *route.Router
	p   fabric.Params
	sim *des.Sim
	w   *work
	ll  linkLayer // InfiniBand (ib.go) or RoCE (roce.go)

	nv      int      // VLs
	lat     des.Time // switch port to port
	nic0    topo.NodeID
	weights []uint8

	ports []oport
	q     []fifo // per port × VL: switch output queues (packet IDs)

	pkts []packet
	free []int32

	nics []nicState // by NIC index
	qps  []qp

	load func(topo.PortID) int64

	// Conservation counters.
	injected, delivered         int64 // payload bytes (injected: first sends)
	injectedPkts, deliveredPkts int64
	resent, resentPkts          int64 // sent again after a loss
	lost, lostPkts              int64 // lost in the fabric (stranded, with RoCE also dropped) or discarded by the receiver
	lostWire                    int64 // the wire bytes of those lost in the fabric
	discards                    int64 // RoCE: packets the receivers discarded out of sequence
	err                         error

	// check makes Handle verify the link layer's invariants after every
	// event (tests; O(ports) an event).
	check bool
}

type nicState struct {
	port   topo.PortID
	active fifo // QPs with messages to send, round-robin
}

// qp is one QP: its NIC, ends, VL and the messages it has to send. What a
// link layer keeps per QP besides (InfiniBand's resends, RoCE's go-back-N
// state at both ends) is in ib.go and roce.go.
type qp struct {
	nic     int32
	port    topo.PortID
	src     topo.NodeID
	dst     topo.NodeID
	hash    uint64
	vl      uint8
	active  bool
	msgs    fifo // chunk IDs
	off     int32
	readyAt des.Time
	lat     des.Time // one way to the peer without serialisation: CNPs and NAKs take it
}

// newNet builds the fabric state for g.
func newNet(g *topo.Graph, r *route.Router, p fabric.Params, sim *des.Sim) (*Net, error) {
	n := &Net{g: g, r: r, p: p, sim: sim, nv: p.VLs, lat: des.Time(g.SwitchLatency.Nanoseconds()) * des.Nanosecond,
		nic0: topo.NodeID(g.NumHosts)}
	n.weights = make([]uint8, n.nv)
	for i := range n.weights {
		n.weights[i] = 1
		if p.VLWeights != nil {
			n.weights[i] = uint8(p.VLWeights[i])
		}
	}
	np := len(g.Ports)
	n.ports = make([]oport, np)
	n.q = make([]fifo, np*n.nv)
	for i := range n.ports {
		gp := &g.Ports[i]
		op := &n.ports[i]
		op.peer, op.link, op.stallSince = gp.Peer, gp.Link, -1
		op.sw = g.Nodes[gp.Node].Kind == topo.KindSwitch
		op.nic = -1
		if g.Nodes[gp.Node].Kind == topo.KindNIC {
			op.nic = g.Nodes[gp.Node].Index
		}
		op.left = n.weights[0]
		if gp.Link == topo.NoLink || gp.Peer == topo.NoPort {
			continue
		}
		l := &g.Links[gp.Link]
		op.cabled = true
		op.rate = int64(l.Rate)
		op.prop = des.Time(float64(l.Length) * p.PropNsPerM * float64(des.Nanosecond))
		op.toSw = g.Nodes[g.Ports[gp.Peer].Node].Kind == topo.KindSwitch
		op.dead = r.Dead(gp.Link)
	}
	n.nics = make([]nicState, g.NumNICs)
	for i := range n.nics {
		n.nics[i].port = g.Nodes[n.nic0+topo.NodeID(i)].FirstPort
	}
	n.load = n.portLoad
	var err error
	if p.LinkLayer == fabric.LinkRoCE {
		n.ll, err = newRoCE(n)
	} else {
		n.ll, err = newIB(n)
	}
	if err != nil {
		return nil, err
	}
	return n, nil
}

// ser is how long port op takes to send wire bytes.
func (op *oport) ser(wire int32) des.Time {
	return des.Time(int64(wire) * 8 * int64(des.Second) / op.rate)
}

// portLoad is adaptive routing's measure: bytes queued plus what is left
// of the packet on the wire.
func (n *Net) portLoad(p topo.PortID) int64 {
	op := &n.ports[p]
	l := op.queued
	if now := n.sim.Now(); op.busyUntil > now {
		l += int64(op.busyUntil-now) * op.rate / (8 * int64(des.Second))
	}
	return l
}

// abort stops the run with err (the first one wins).
func (n *Net) abort(err error) {
	if n.err == nil {
		n.err = err
	}
}

// schedPort makes sure port p is looked at no later than t.
func (n *Net) schedPort(p topo.PortID, t des.Time) {
	op := &n.ports[p]
	if op.evAt != 0 && op.evAt <= t {
		return
	}
	op.evAt = t
	n.sim.After(t-n.sim.Now(), evPort, int32(p), 0, 0)
}

func (n *Net) onPort(p topo.PortID) {
	op := &n.ports[p]
	if op.evAt == n.sim.Now() {
		op.evAt = 0
	}
	n.kick(p)
}

// kick starts the next packet at port p if it is idle and something can
// go; otherwise it makes sure the port is looked at again when it could.
func (n *Net) kick(p topo.PortID) {
	op := &n.ports[p]
	now := n.sim.Now()
	if op.busyUntil > now {
		if n.hasWork(op) {
			n.schedPort(p, op.busyUntil)
		}
		return
	}
	if op.nic >= 0 {
		n.kickNIC(p, op)
		return
	}
	if op.npk == 0 {
		return
	}
	var wake des.Time
	blocked := false
	base := int(p) * n.nv
	for k := range n.nv {
		vl := (int(op.rr) + k) % n.nv
		q := &n.q[base+vl]
		if q.empty() {
			continue
		}
		id := q.front()
		pk := &n.pkts[id]
		if pk.ready > now {
			wake = earliest(wake, pk.ready)
			continue
		}
		u, w, stalled, ok := n.ll.sendable(base+vl, pk)
		if !ok {
			blocked = blocked || stalled
			if w > 0 {
				wake = earliest(wake, w)
			}
			continue
		}
		q.pop()
		op.npk--
		op.queued -= int64(pk.wire)
		n.turn(op, vl)
		n.transmit(p, op, id, pk, u)
		return
	}
	n.idle(p, op, blocked, wake)
}

// idle records why port p could not send and when to look again.
func (n *Net) idle(p topo.PortID, op *oport, blocked bool, wake des.Time) {
	if blocked && op.stallSince < 0 {
		op.stallSince = n.sim.Now()
	}
	if wake > 0 {
		n.schedPort(p, wake)
	}
}

func earliest(a, b des.Time) des.Time {
	if a == 0 || b < a {
		return b
	}
	return a
}

// turn charges a packet sent on vl to the VL arbitration: a VL keeps the
// port for its weight in packets while it has traffic, then the next VL
// with traffic gets its turn.
func (n *Net) turn(op *oport, vl int) {
	if n.nv == 1 {
		return
	}
	if int(op.rr) != vl {
		op.rr, op.left = uint8(vl), n.weights[vl]
	}
	op.left--
	if op.left == 0 {
		op.rr = uint8((vl + 1) % n.nv)
		op.left = n.weights[op.rr]
	}
}

// transmit puts packet id on port p's wire now; u is what the link layer's
// sendable (or its NIC's choice) said it takes of flow control.
func (n *Net) transmit(p topo.PortID, op *oport, id int32, pk *packet, u int32) {
	now := n.sim.Now()
	ser := op.ser(pk.wire)
	end := now + ser
	op.busyUntil = end
	op.busy += ser
	op.txBytes += int64(pk.wire)
	op.txPkts++
	if op.stallSince >= 0 {
		op.stall += now - op.stallSince
		op.stallSince = -1
	}
	n.ll.transmitted(p, op, pk, u, end)
	peer := op.peer
	pk.in = peer
	pk.tail = end + op.prop
	if op.toSw {
		n.sim.After(op.prop+n.lat, evArrive, id, int32(peer), 0)
	} else {
		n.sim.After(ser+op.prop, evArrive, id, int32(peer), 0)
	}
	if n.hasWork(op) {
		n.schedPort(p, end)
	}
}

// hasWork says whether port op has packets queued (a switch port) or QPs
// with messages (a NIC port).
func (n *Net) hasWork(op *oport) bool {
	if op.nic >= 0 {
		return !n.nics[op.nic].active.empty()
	}
	return op.npk > 0
}

// arrive handles a packet reaching input port in: at a switch its head
// (after the port-to-port latency), at a NIC its tail.
func (n *Net) arrive(id int32, in topo.PortID) {
	pk := &n.pkts[id]
	node := n.g.Ports[in].Node
	if n.g.Nodes[node].Kind != topo.KindSwitch {
		n.ll.deliver(id, pk, in)
		return
	}
	if !n.ll.admit(id, pk, in) {
		return
	}
	out := n.route(node, pk)
	if out == topo.NoPort || n.ports[out].dead {
		n.strand(id, pk, node)
		return
	}
	n.enqueue(out, id, pk)
}

// route is the output port switch node gives packet pk under the run's
// routing policy, or NoPort.
func (n *Net) route(node topo.NodeID, pk *packet) topo.PortID {
	switch n.p.Routing {
	case fabric.RouteDModK:
		return n.r.DModK(node, pk.dst)
	case fabric.RouteECMP:
		return n.r.ECMP(node, pk.dst, n.qps[pk.qp].hash)
	}
	return n.r.Adaptive(node, pk.dst, n.load)
}

// strand loses a packet that switch node holds with no route left to its
// destination (after a link failure): the link layer frees its buffer and
// has its QP send it again. If the source itself can no longer reach the
// destination, the run ends with an error.
func (n *Net) strand(id int32, pk *packet, node topo.NodeID) {
	q := &n.qps[pk.qp]
	if !n.r.Reachable(q.src, pk.dst) {
		n.abort(fmt.Errorf("packet: at %v %s cannot reach %s any more (failed links: %d): %w",
			n.sim.Now(), n.g.NodeName(q.src), n.g.NodeName(pk.dst), len(n.r.Failed()), route.ErrUnreachable))
		return
	}
	n.ll.strand(id, pk)
}

// lose counts packet id as lost in the fabric (dropped, or stranded by a
// link failure) and frees it; the link layer repairs the loss.
func (n *Net) lose(id int32, pk *packet) {
	n.lost += int64(pk.payload)
	n.lostPkts++
	n.lostWire += int64(pk.wire)
	n.free = append(n.free, id)
}

// enqueue queues packet id at switch output port out.
func (n *Net) enqueue(out topo.PortID, id int32, pk *packet) {
	op := &n.ports[out]
	// Cut-through: the packet may start once its head is here, but may not
	// finish before its tail has arrived.
	pk.ready = pk.tail + n.lat - op.ser(pk.wire)
	i := int(out)*n.nv + int(pk.vl)
	n.ll.queued(i, pk)
	n.q[i].push(id)
	op.npk++
	op.queued += int64(pk.wire)
	op.maxQueued = max(op.maxQueued, op.queued)
	n.kick(out)
}

// take hands packet id's payload to the workload at its receiving NIC and
// frees it.
func (n *Net) take(id int32, pk *packet) {
	n.delivered += int64(pk.payload)
	n.deliveredPkts++
	chunk, payload := pk.chunk, pk.payload
	n.free = append(n.free, id)
	n.w.packetIn(chunk, payload)
}

// post queues message chunk on QP q; its first packet may leave after the
// QP's message overhead.
func (n *Net) post(q int32, chunk int32) {
	qq := &n.qps[q]
	qq.msgs.push(chunk)
	if !qq.active {
		qq.active = true
		qq.readyAt = max(qq.readyAt, n.sim.Now()+n.p.MsgOverhead)
		n.ll.activated(qq)
		n.nics[qq.nic].active.push(q)
		n.kick(qq.port)
	}
}

// kickNIC sends the next packet of the NIC whose port is p: its QPs take
// turns a packet each.
func (n *Net) kickNIC(p topo.PortID, op *oport) {
	ns := &n.nics[op.nic]
	if ns.active.empty() {
		return
	}
	if op.dead {
		q := &n.qps[ns.active.front()]
		n.abort(fmt.Errorf("packet: at %v the link of %s is down and it has messages for %s: %w",
			n.sim.Now(), n.g.NodeName(q.src), n.g.NodeName(q.dst), route.ErrUnreachable))
		return
	}
	n.ll.kickNIC(p, op, ns)
}

func (n *Net) newPacket() int32 {
	if k := len(n.free); k > 0 {
		id := n.free[k-1]
		n.free = n.free[:k-1]
		return id
	}
	n.pkts = append(n.pkts, packet{})
	return int32(len(n.pkts) - 1)
}

// fail takes link l down now: routes are recomputed without it, and the
// packets queued for it are routed again at their switch. Packets already
// on its wire arrive.
func (n *Net) fail(l topo.LinkID) {
	r, err := n.r.WithFailed(l)
	var unreachable *route.UnreachableError
	if err != nil && !errors.As(err, &unreachable) {
		n.abort(fmt.Errorf("packet: failing %s: %w", n.g.LinkName(l), err))
		return
	}
	n.r = r
	lk := &n.g.Links[l]
	for _, p := range []topo.PortID{lk.A, lk.B} {
		op := &n.ports[p]
		op.dead = true
		n.ll.linkDown(p)
		if !op.sw {
			continue
		}
		node := n.g.Ports[p].Node
		for v := range n.nv {
			q := &n.q[int(p)*n.nv+v]
			for !q.empty() {
				id := q.pop()
				pk := &n.pkts[id]
				op.npk--
				op.queued -= int64(pk.wire)
				n.ll.unqueued(int(p)*n.nv+v, pk)
				out := n.route(node, pk)
				if out == topo.NoPort {
					n.strand(id, pk, node)
					continue
				}
				n.enqueue(out, id, pk)
			}
		}
		op.stallSince = -1
	}
}

// Handle dispatches one event.
func (n *Net) Handle(s *des.Sim, e des.Event) {
	switch e.Kind() {
	case evPort:
		n.onPort(topo.PortID(e.A))
	case evArrive:
		n.arrive(e.A, topo.PortID(e.B))
	case evFail:
		n.fail(topo.LinkID(e.A))
	case evResend, evPause, evCNP, evNAK, evTimeout:
		n.ll.handle(e)
	default:
		n.w.handle(e)
	}
	if n.check {
		if err := n.ll.invariants(); err != nil {
			n.abort(fmt.Errorf("after event kind %d at %v: %w", e.Kind(), s.Now(), err))
		}
	}
}
