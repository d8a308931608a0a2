package packet

import (
	"errors"
	"fmt"

	"github.com/ibex-rdma/ibex/sim/des"
	"github.com/ibex-rdma/ibex/sim/fabric"
	"github.com/ibex-rdma/ibex/sim/route"
	"github.com/ibex-rdma/ibex/sim/topo"
)

// Event kinds. The fabric's come first; the workload's follow.
const (
	evPort     uint16 = iota + 1 // A: port. The port finished a packet, or credit or a packet became ready.
	evArrive                     // A: packet, B: input port. Head (switch) or tail (NIC) of a packet arrives.
	evChunk                      // A: chunk. All of a message is in the receiver's memory.
	evSlot                       // A: connection. A consumed message's slot is back at the sender.
	evSendDone                   // A: proc. A send is acknowledged.
	evFail                       // A: link. The link goes down.
	evNVLink                     // A: chunk. A message over NVLink is in the receiver's memory.
	evResend                     // A: QP, B: chunk, C: payload. A lost packet's retry timeout expired.
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

// Net is the packet-level fabric of one run: ports with per-VL credits
// and queues, output-queued switches, NICs injecting from their QPs.
type Net struct {
	g   *topo.Graph
	r   *route.Router
	p   fabric.Params
	sim *des.Sim
	w   *work

	nv      int      // VLs
	cap     int32    // buffer per input port per VL, credits
	lat     des.Time // switch port to port
	nic0    topo.NodeID
	weights []uint8

	ports []oport
	q     []fifo    // per port × VL: switch output queues (packet IDs)
	cred  []int32   // per port × VL: credits in hand at the sending side
	ret   []credits // per port × VL: credits on their way back
	occ   []int32   // per port × VL: receive buffer in use at the receiving side, credits

	pkts []packet
	free []int32

	nics []nicState // by NIC index
	qps  []qp

	load func(topo.PortID) int64

	// RoCE (roce.go). Slices per port × priority unless said otherwise.
	roce       bool
	dcqcn      bool
	pcap       []int32    // per port: ingress buffer per priority, bytes (Xoff + headroom)
	xoff       []bool     // the ingress has sent PAUSE and not RESUME
	paused     []bool     // the sending side is paused by its peer
	pauseSince []des.Time // paused with packets to send since; -1: not
	qbytes     []int64    // bytes queued at the output (ECN's measure)
	nicWork    []int32    // NIC ports: active QPs on the priority
	rps        []rpState  // per QP: DCQCN's reaction point
	discards   int64      // packets the receivers discarded out of sequence
	checkBuf   []int64    // invariantsRoCE's scratch
	dropP      float64    // tests' fault injection: switches drop this share of arriving packets

	// Conservation counters.
	injected, delivered         int64 // payload bytes (injected: first sends)
	injectedPkts, deliveredPkts int64
	resent, resentPkts          int64 // sent again after a loss
	lost, lostPkts              int64 // stranded by a link failure
	lostWire                    int64 // their bytes on the wire
	maxOcc                      int32
	err                         error

	// check makes Handle verify the credit invariants after every event
	// (tests; O(ports) an event).
	check bool
}

type nicState struct {
	port   topo.PortID
	active fifo // QPs with messages to send, round-robin
}

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
	retx    []retx   // lost packets to send again, before new ones
	lat     des.Time // one way to the peer without serialisation: CNPs and NAKs take it

	// RoCE go-back-N. The sender: PSNs logBase .. sndNxt-1 are in log,
	// and it sends PSN rp next (rp < sndNxt: it is going back). The
	// receiver: it expects epsn, and has NAKed it (nakd).
	log     sentLog
	logBase int32
	sndNxt  int32
	rp      int32
	epsn    int32
	nakd    bool
	cnpAt   des.Time // the receiver's last CNP for this QP; -1: none
}

type retx struct{ chunk, payload int32 }

// newNet builds the fabric state for g.
func newNet(g *topo.Graph, r *route.Router, p fabric.Params, sim *des.Sim) (*Net, error) {
	n := &Net{g: g, r: r, p: p, sim: sim, nv: p.VLs, lat: des.Time(g.SwitchLatency.Nanoseconds()) * des.Nanosecond,
		nic0: topo.NodeID(g.NumHosts)}
	pkt := g.MTU + p.HeaderBytes + p.FirstBytes
	n.cap = int32(p.Buffer / p.CreditUnit)
	if p.LinkLayer == fabric.LinkIB && int(n.cap)*p.CreditUnit < pkt {
		return nil, fmt.Errorf("packet: %w: buffer %d bytes per VL holds %d credits of %d bytes, less than one %d-byte packet (MTU %d and headers): the link could never send",
			ErrConfig, p.Buffer, n.cap, p.CreditUnit, pkt, g.MTU)
	}
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
	n.cred = make([]int32, np*n.nv)
	n.ret = make([]credits, np*n.nv)
	n.occ = make([]int32, np*n.nv)
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
		for v := range n.nv {
			n.cred[i*n.nv+v] = n.cap
		}
	}
	n.nics = make([]nicState, g.NumNICs)
	for i := range n.nics {
		n.nics[i].port = g.Nodes[n.nic0+topo.NodeID(i)].FirstPort
	}
	n.load = n.portLoad
	if p.LinkLayer == fabric.LinkRoCE {
		if err := n.initRoCE(); err != nil {
			return nil, err
		}
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

// haveCredit says whether port×VL i has units of credit, taking in the
// returns that are due.
func (n *Net) haveCredit(i int, units int32) bool {
	if n.cred[i] >= units {
		return true
	}
	if !n.ret[i].empty() {
		n.cred[i] += n.ret[i].take(n.sim.Now())
	}
	return n.cred[i] >= units
}

// returnCredit sends units of VL vl's credit back from the receiving side
// of a link to port up, arriving at at.
func (n *Net) returnCredit(up topo.PortID, vl uint8, at des.Time, units int32) {
	n.ret[int(up)*n.nv+int(vl)].add(at, units)
	op := &n.ports[up]
	if op.stallSince >= 0 {
		n.schedPort(up, at)
	}
}

// units is the credits a packet of wire bytes takes.
func (n *Net) units(wire int32) int32 {
	return (wire + int32(n.p.CreditUnit) - 1) / int32(n.p.CreditUnit)
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
		var u int32
		if n.roce {
			if n.paused[base+vl] {
				continue // the RESUME kicks the port
			}
			n.dequeuedRoCE(op, base+vl, pk)
		} else {
			u = n.units(pk.wire)
			if !n.haveCredit(base+vl, u) {
				blocked = true
				if r := &n.ret[base+vl]; !r.empty() {
					wake = earliest(wake, r.next())
				}
				continue
			}
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

// transmit puts packet id on port p's wire now.
func (n *Net) transmit(p topo.PortID, op *oport, id int32, pk *packet, u int32) {
	now := n.sim.Now()
	vl := int(pk.vl)
	if !n.roce {
		i := int(p)*n.nv + vl
		n.cred[i] -= u
		if n.cred[i] < 0 {
			panic(fmt.Sprintf("packet: port %s VL %d: credits %d below zero", n.g.PortName(p), vl, n.cred[i]))
		}
	}
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
	if op.sw {
		// The packet leaves the input buffer it was in as it is sent; its
		// credit goes back over that input's cable when it has left.
		in := pk.in
		if n.roce {
			n.release(in, pk.vl, pk.wire)
		} else {
			n.occ[int(in)*n.nv+vl] -= u
			up := n.ports[in].peer
			n.returnCredit(up, pk.vl, end+n.ports[in].prop, u)
		}
	}
	peer := op.peer
	if !n.roce {
		// With RoCE the receiving switch takes the packet into its buffer
		// when it has looked at its head (admit), and a NIC not at all.
		j := int(peer)*n.nv + vl
		n.occ[j] += u
		if n.occ[j] > n.maxOcc {
			n.maxOcc = n.occ[j]
			if n.occ[j] > n.cap {
				panic(fmt.Sprintf("packet: port %s VL %d: buffer %d credits over its %d", n.g.PortName(peer), vl, n.occ[j], n.cap))
			}
		}
	}
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
		if n.roce {
			n.deliverRoCE(id, pk, in)
			return
		}
		n.deliver(id, pk, in)
		return
	}
	if n.roce && !n.admit(id, pk, in) {
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
// destination (after a link failure): its buffer is freed and its QP
// sends it again after the retry timeout. If the source itself can no
// longer reach the destination, the run ends with an error.
func (n *Net) strand(id int32, pk *packet, node topo.NodeID) {
	q := &n.qps[pk.qp]
	if !n.r.Reachable(q.src, pk.dst) {
		n.abort(fmt.Errorf("packet: at %v %s cannot reach %s any more (failed links: %d): %w",
			n.sim.Now(), n.g.NodeName(q.src), n.g.NodeName(pk.dst), len(n.r.Failed()), route.ErrUnreachable))
		return
	}
	if n.roce {
		n.release(pk.in, pk.vl, pk.wire)
		n.lose(id, pk)
		return
	}
	u := n.units(pk.wire)
	in := pk.in
	n.occ[int(in)*n.nv+int(pk.vl)] -= u
	n.returnCredit(n.ports[in].peer, pk.vl, n.sim.Now()+n.ports[in].prop, u)
	n.lost += int64(pk.payload)
	n.lostPkts++
	n.lostWire += int64(pk.wire)
	n.sim.After(n.p.RetryTimeout, evResend, pk.qp, pk.chunk, int64(pk.payload))
	n.free = append(n.free, id)
}

// resend queues a lost packet's payload on its QP again.
func (n *Net) resend(qi, chunk int32, payload int32) {
	q := &n.qps[qi]
	q.retx = append(q.retx, retx{chunk, payload})
	if !q.active {
		q.active = true
		n.nics[q.nic].active.push(qi)
		n.kick(q.port)
	}
}

// enqueue queues packet id at switch output port out.
func (n *Net) enqueue(out topo.PortID, id int32, pk *packet) {
	op := &n.ports[out]
	// Cut-through: the packet may start once its head is here, but may not
	// finish before its tail has arrived.
	pk.ready = pk.tail + n.lat - op.ser(pk.wire)
	i := int(out)*n.nv + int(pk.vl)
	if n.roce {
		n.queuedRoCE(i, pk)
	}
	n.q[i].push(id)
	op.npk++
	op.queued += int64(pk.wire)
	op.maxQueued = max(op.maxQueued, op.queued)
	n.kick(out)
}

// deliver takes a packet's tail at a NIC: the NIC drains at line rate, so
// the credit goes straight back.
func (n *Net) deliver(id int32, pk *packet, in topo.PortID) {
	u := n.units(pk.wire)
	n.occ[int(in)*n.nv+int(pk.vl)] -= u
	up := n.ports[in].peer
	n.returnCredit(up, pk.vl, n.sim.Now()+n.ports[in].prop, u)
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
		if n.roce {
			n.workOn(qq)
		}
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
	if n.roce {
		n.kickNICRoCE(p, op, ns)
		return
	}
	now := n.sim.Now()
	var wake des.Time
	blocked := false
	for range ns.active.len() {
		qi := ns.active.pop()
		q := &n.qps[qi]
		if q.readyAt > now {
			wake = earliest(wake, q.readyAt)
			ns.active.push(qi)
			continue
		}
		again := len(q.retx) > 0
		var chunk, payload int32
		if again {
			// A resent packet goes as its own RDMA WRITE (with RETH).
			chunk, payload = q.retx[0].chunk, q.retx[0].payload
		} else {
			chunk = q.msgs.front()
			payload = min(int32(n.g.MTU), n.w.chunks[chunk].bytes-q.off)
		}
		wire := payload + int32(n.p.HeaderBytes)
		if again || q.off == 0 {
			wire += int32(n.p.FirstBytes)
		}
		u := n.units(wire)
		i := int(p)*n.nv + int(q.vl)
		if !n.haveCredit(i, u) {
			blocked = true
			if r := &n.ret[i]; !r.empty() {
				wake = earliest(wake, r.next())
			}
			ns.active.push(qi)
			continue
		}
		id := n.newPacket()
		pk := &n.pkts[id]
		*pk = packet{chunk: chunk, qp: qi, dst: q.dst, in: topo.NoPort, wire: wire, payload: payload, vl: q.vl}
		if again {
			n.resent += int64(payload)
			n.resentPkts++
			q.retx = q.retx[1:]
			if len(q.retx) == 0 {
				q.retx = nil
			}
		} else {
			n.injected += int64(payload)
			n.injectedPkts++
			q.off += payload
			if q.off == n.w.chunks[chunk].bytes {
				q.msgs.pop()
				q.off = 0
				q.readyAt = now + op.ser(wire) + n.p.MsgOverhead
			}
		}
		if q.msgs.empty() && len(q.retx) == 0 {
			q.active = false
		}
		if q.active {
			ns.active.push(qi)
		}
		n.transmit(p, op, id, pk, u)
		return
	}
	n.idle(p, op, blocked, wake)
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
		if n.roce {
			n.linkDown(p)
		}
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
				if n.roce {
					n.qbytes[int(p)*n.nv+v] -= int64(pk.wire)
				}
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
	case evResend:
		n.resend(e.A, e.B, int32(e.C))
	case evPause:
		n.onPause(topo.PortID(e.A), int(e.B), e.C != 0)
	case evCNP:
		n.onCNP(e.A)
	case evNAK:
		n.goBack(e.A, int32(e.C))
	case evTimeout:
		n.onTimeout(e.A, int32(e.C))
	default:
		n.w.handle(e)
	}
	if n.check {
		if err := n.invariants(); err != nil {
			n.abort(fmt.Errorf("after event kind %d at %v: %w", e.Kind(), s.Now(), err))
		}
	}
}

// invariants checks, on every link and VL: credits in hand are never
// negative, the receive buffer never holds more than its capacity, and
// credits in hand + credits on their way back + buffer in use (packets on
// the wire count from when they start) = capacity.
func (n *Net) invariants() error {
	if n.roce {
		return n.invariantsRoCE()
	}
	for i := range n.ports {
		op := &n.ports[i]
		if !op.cabled {
			continue
		}
		for v := range n.nv {
			j := i*n.nv + v
			occ := n.occ[int(op.peer)*n.nv+v]
			switch {
			case n.cred[j] < 0:
				return fmt.Errorf("port %s VL %d: %d credits", n.g.PortName(topo.PortID(i)), v, n.cred[j])
			case occ < 0 || occ > n.cap:
				return fmt.Errorf("port %s VL %d: buffer holds %d credits of %d", n.g.PortName(op.peer), v, occ, n.cap)
			case int64(n.cred[j])+n.ret[j].pending()+int64(occ) != int64(n.cap):
				return fmt.Errorf("port %s VL %d: %d in hand + %d returning + %d buffered != %d",
					n.g.PortName(topo.PortID(i)), v, n.cred[j], n.ret[j].pending(), occ, n.cap)
			}
		}
	}
	return nil
}
