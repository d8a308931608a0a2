package topo

import (
	"strconv"
	"time"
)

// NodeID, PortID and LinkID are dense indices into Graph.Nodes, Graph.Ports
// and Graph.Links, so that the layers built on the graph (routing tables,
// credit counters, event queues) can keep per-node, per-port and per-link
// state in plain slices indexed the same way.
type (
	NodeID int32
	PortID int32
	LinkID int32
)

// NoPort and NoLink mark a port that is not cabled.
const (
	NoPort PortID = -1
	NoLink LinkID = -1
)

// Kind is what a node is. Hosts are not network endpoints: a host owns NICs
// (one per GPU and plane, GPU i using NIC i of each plane), and the NICs
// are what links plug into.
// Keeping them apart lets a later layer model the host's internal path
// (NVLink, PCIe) between its NICs separately from the fabric.
type Kind uint8

const (
	KindHost Kind = iota
	KindNIC
	KindSwitch
)

func (k Kind) String() string {
	switch k {
	case KindHost:
		return "host"
	case KindNIC:
		return "nic"
	case KindSwitch:
		return "switch"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Tier is a switch's level in a tree. Generated topologies give every
// switch a tier; in an explicit topology a switch without a tier is
// TierNone and the tier rules do not apply to its links.
type Tier uint8

const (
	TierNone Tier = iota
	TierLeaf
	TierSpine
	TierCore
)

func (t Tier) String() string {
	switch t {
	case TierNone:
		return "untiered"
	case TierLeaf:
		return "leaf"
	case TierSpine:
		return "spine"
	case TierCore:
		return "core"
	}
	return "tier(" + strconv.Itoa(int(t)) + ")"
}

// LinkTier says which pair of levels a link joins.
type LinkTier uint8

const (
	LinkHostLeaf LinkTier = iota
	LinkLeafSpine
	LinkSpineCore
	LinkOther // explicit topologies: switch to untiered switch, or NIC to NIC
	numLinkTiers
)

func (t LinkTier) String() string {
	switch t {
	case LinkHostLeaf:
		return "host-leaf"
	case LinkLeafSpine:
		return "leaf-spine"
	case LinkSpineCore:
		return "spine-core"
	case LinkOther:
		return "other"
	}
	return "linktier(" + strconv.Itoa(int(t)) + ")"
}

// Node is a host, a NIC or a switch. A node's ports are the contiguous
// range FirstPort .. FirstPort+NumPorts-1 of Graph.Ports.
type Node struct {
	Kind  Kind
	Tier  Tier  // switches; TierNone for hosts and NICs
	Index int32 // position among the nodes of its kind (hosts, NICs) or of its tier in its plane (switches); names use it
	// Group is the scalable unit (SuperPOD hosts, NICs and leaves), the
	// spine group (3-tier SuperPOD spines) or the pod (3-tier fat-tree
	// hosts, NICs, edge and aggregation switches); -1 where there is none.
	Group int32

	FirstPort PortID
	// NumPorts is how many ports the graph holds for the node. It equals
	// Radix unless an explicit spec cabled more links to the node than it
	// has ports: the extra ones are kept so that Check can report them.
	NumPorts int32
	Radix    int32 // ports the device has: a switch's port count, 1 for a NIC, 0 for a host

	Host NodeID // NIC: the host it sits in; host: itself; switch: -1
	Rail int32  // NIC: its GPU's index in the host, which is its rail; -1 for hosts and switches

	FirstNIC NodeID // host: its NICs are FirstNIC .. FirstNIC+NumNICs-1
	NumNICs  int32  // host: GPUs × planes

	// Plane is the fabric plane of a NIC or switch, 0 to Graph.Planes-1;
	// always 0 in a single-plane graph, and 0 for hosts, which have NICs
	// in every plane.
	Plane int32
}

// Port is one switch or NIC port.
type Port struct {
	Node NodeID
	Peer PortID // the port at the other end of the cable, or NoPort
	Link LinkID // the cable, or NoLink
}

// Link is one cable. In generated topologies A is the lower end: the NIC of
// a host-leaf link, the leaf of a leaf-spine link.
type Link struct {
	Rate   Rate // data rate, bits/s, the same both ways
	A, B   PortID
	Length float32 // metres
	Tier   LinkTier
	// 24 bytes in this order; a 65,536-host tree has 196,608 links.
}

// Graph is a topology expanded into explicit nodes, ports and links. Nodes
// are ordered hosts, then NICs, then switches (in a generated topology
// plane by plane, each plane's leaves, spines, cores): host h is node h
// and NIC n is node NumHosts+n, so a walk over hosts or NICs is a loop
// over a range.
//
// NICs are numbered host by host, GPU by GPU, plane by plane: NIC index
// (h·GPUsPerHost + gpu)·Planes + plane. So NIC n serves GPU n/Planes,
// numbering GPUs host by host, and is in plane n%Planes; in a
// single-plane graph NIC n is GPU n's. A host's NICs are the range
// FirstNIC .. FirstNIC+GPUsPerHost·Planes-1.
//
// In a multi-plane graph (Planes > 1) the planes are independent fabrics
// that meet only in the hosts: every NIC and switch has its Plane, and no
// cable joins two planes.
//
// The slices are the graph; the layers built on it read them directly and
// must not change them. Check validates a graph, including one changed by
// hand.
type Graph struct {
	Name string
	Kind string // the spec's kind: fattree, superpod or explicit
	// Tiers is the number of switch levels of a generated topology (1 to
	// 3); 0 for an explicit one, whose tiers are whatever its file says.
	Tiers int

	Nodes []Node
	Ports []Port
	Links []Link

	NumHosts int
	NumNICs  int // NumHosts × GPUsPerHost × Planes where the hosts are alike

	// Planes is the number of independent switch fabrics, >= 1: 1 unless a
	// fattree or superpod spec sets planes. GPUsPerHost is the GPUs of every
	// host (NICs per host = GPUsPerHost × Planes); 0 in an explicit
	// topology whose hosts have different NIC counts.
	Planes      int
	GPUsPerHost int

	MTU           int           // bytes of payload per packet
	SwitchLatency time.Duration // port to port, for the packet model

	names []string // explicit topologies: the names from the file, by NodeID
}

// Host returns the node ID of host h.
func (g *Graph) Host(h int) NodeID { return NodeID(h) }

// NIC returns the node ID of the NIC of GPU rail of host h, in plane 0
// (the only plane of a single-plane graph; PlaneNIC names the others).
func (g *Graph) NIC(h, rail int) NodeID {
	return g.PlaneNIC(h, rail, 0)
}

// PlaneNIC returns the node ID of the NIC of GPU rail of host h in plane.
func (g *Graph) PlaneNIC(h, rail, plane int) NodeID {
	return g.Nodes[h].FirstNIC + NodeID(rail*g.planes()+plane)
}

// GPUNIC returns the node ID of the NIC of GPU gpu, GPUs numbered host by
// host (NumNICs/Planes of them), in plane.
func (g *Graph) GPUNIC(gpu, plane int) NodeID {
	return NodeID(g.NumHosts + gpu*g.planes() + plane)
}

// NumGPUs is the number of GPUs: NICs over planes (each GPU has a NIC
// port in every plane).
func (g *Graph) NumGPUs() int { return g.NumNICs / g.planes() }

// GPUsOnHost is the GPUs per host of a generated topology, or of an
// explicit one whose hosts all have the same number; 0 otherwise.
func (g *Graph) GPUsOnHost() int {
	if g.GPUsPerHost > 0 {
		return g.GPUsPerHost
	}
	if g.NumHosts == 0 {
		return 0
	}
	n := int(g.Nodes[0].NumNICs)
	for h := 1; h < g.NumHosts; h++ {
		if int(g.Nodes[h].NumNICs) != n {
			return 0
		}
	}
	return n / g.planes()
}

// planes is Planes, or 1 for a graph that does not say.
func (g *Graph) planes() int { return max(g.Planes, 1) }

// NodeName is a node's name: the one from the file for an explicit topology,
// otherwise its kind or tier and index ("host12", "host12.nic3", "leaf5",
// "spine0", "core7"). In a multi-plane graph NICs and switches end in
// their plane, and switches are numbered within it ("host12.nic3.p1",
// "leaf5.p1").
func (g *Graph) NodeName(id NodeID) string {
	if id < 0 || int(id) >= len(g.Nodes) {
		return "node(" + strconv.Itoa(int(id)) + ")"
	}
	n := &g.Nodes[id]
	if g.names != nil {
		return g.names[id]
	}
	var name string
	switch {
	case n.Kind == KindHost:
		return "host" + strconv.Itoa(int(n.Index))
	case n.Kind == KindNIC:
		name = g.NodeName(n.Host) + ".nic" + strconv.Itoa(int(n.Rail))
	case n.Tier == TierNone:
		name = "switch" + strconv.Itoa(int(n.Index))
	default:
		name = n.Tier.String() + strconv.Itoa(int(n.Index))
	}
	if g.Planes > 1 {
		name += ".p" + strconv.Itoa(int(n.Plane))
	}
	return name
}

// PortName names a port: a NIC's port by the NIC's name, a switch port as
// "switch:index".
func (g *Graph) PortName(p PortID) string {
	if p < 0 || int(p) >= len(g.Ports) {
		return "port(" + strconv.Itoa(int(p)) + ")"
	}
	id := g.Ports[p].Node
	if id < 0 || int(id) >= len(g.Nodes) {
		return "port(" + strconv.Itoa(int(p)) + ")"
	}
	n := &g.Nodes[id]
	if n.Kind == KindNIC && p == n.FirstPort {
		return g.NodeName(id)
	}
	return g.NodeName(id) + ":" + strconv.Itoa(int(p-n.FirstPort))
}

// LinkName names a link by its two ports, "leaf3:40 - spine1:3".
func (g *Graph) LinkName(l LinkID) string {
	if l < 0 || int(l) >= len(g.Links) {
		return "link(" + strconv.Itoa(int(l)) + ")"
	}
	return g.PortName(g.Links[l].A) + " - " + g.PortName(g.Links[l].B)
}

// PeerNode returns the node at the other end of port p's cable, or -1.
func (g *Graph) PeerNode(p PortID) NodeID {
	q := g.Ports[p].Peer
	if q == NoPort {
		return -1
	}
	return g.Ports[q].Node
}
