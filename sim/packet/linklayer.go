package packet

import (
	"github.com/ibex-rdma/ibex/sim/des"
	"github.com/ibex-rdma/ibex/sim/topo"
)

// linkLayer is what InfiniBand (ib.go) and RoCE (roce.go) do differently:
// flow control, what a NIC sends next, how a lost packet is repaired, and
// the invariants that follow. newNet picks one for the run; routing,
// queues, VL arbitration, cut-through and the workload are the same for
// both and call it at each point of a packet's life. Its methods must not
// allocate once queues have grown (TestAllocs, TestRoCEAllocs).
type linkLayer interface {
	// initQPs sets up the per-QP state, once the workload has made the
	// QPs and before the first event.
	initQPs()
	// activated is QP q getting a message to send when it had none.
	activated(q *qp)
	// kickNIC sends the next packet, if any can go, from the NIC whose
	// port is p (not idle, its link up, some QP active), or makes sure
	// the port is looked at again when one could.
	kickNIC(p topo.PortID, op *oport, ns *nicState)

	// sendable says whether switch output port × VL i may start its head
	// packet pk now, and if so the flow-control units transmitted takes.
	// If not, blocked says that the port waits for flow control (counted
	// as PortXmitWait), and wake, if not 0, when it could go.
	sendable(i int, pk *packet) (units int32, wake des.Time, blocked, ok bool)
	// transmitted is pk starting on port p's wire now, its tail leaving at
	// end, with the units sendable gave. pk.in is still the input port
	// whose buffer held it (a switch port's) or NoPort (a NIC's).
	transmitted(p topo.PortID, op *oport, pk *packet, units int32, end des.Time)
	// admit is pk's head reaching switch input port in, after the
	// port-to-port latency: false if the switch drops it.
	admit(id int32, pk *packet, in topo.PortID) bool
	// queued and unqueued are pk joining and leaving (other than by being
	// sent: a link failure re-routes it) the queue of output port × VL i.
	queued(i int, pk *packet)
	unqueued(i int, pk *packet)
	// deliver is pk's tail reaching the receiving NIC at input port in.
	deliver(id int32, pk *packet, in topo.PortID)
	// strand is a switch left holding pk with no route to its destination
	// (its source still has one): the packet is lost, and its QP must
	// send it again.
	strand(id int32, pk *packet)
	// linkDown is port p's link failing.
	linkDown(p topo.PortID)
	// handle dispatches the link layer's own events (evResend, evPause,
	// evCNP, evNAK, evTimeout).
	handle(e des.Event)

	// maxBuffer is the fullest any input buffer got, bytes.
	maxBuffer() int64
	// invariants checks the flow-control state after an event (tests).
	invariants() error
	// verify checks the end of a run: nothing left queued or buffered.
	verify() error
}
