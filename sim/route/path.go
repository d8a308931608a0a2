package route

import (
	"fmt"
	"strconv"

	"github.com/ibex-rdma/ibex/sim/topo"
)

// Policy is how Path chooses among the eligible ports. Adaptive routing
// is not one: it depends on the engine's loads at the moment a packet
// passes, so the engine calls Adaptive hop by hop.
type Policy uint8

const (
	PolicyDModK Policy = iota // Router.DModK
	PolicyECMP                // Router.ECMP with Path's hash
)

func (p Policy) String() string {
	switch p {
	case PolicyDModK:
		return "dmodk"
	case PolicyECMP:
		return "ecmp"
	}
	return "policy(" + strconv.Itoa(int(p)) + ")"
}

// Path appends to buf the output ports a packet from NIC src to NIC dst
// leaves by, hop by hop under the policy (hash is ECMP's flow hash), the
// first being src's port and the last the port into dst, and returns it.
// It fails, wrapping ErrUnreachable, where a node has no eligible port or
// the NICs are in different planes, and wrapping ErrTopology if the walk
// does not end (a routing loop, which the tests rule out).
func (r *Router) Path(src, dst topo.NodeID, pol Policy, hash uint64, buf []topo.PortID) ([]topo.PortID, error) {
	g := r.g
	if src < r.nic0 || int(src-r.nic0) >= r.nics || dst < r.nic0 || int(dst-r.nic0) >= r.nics {
		return buf, fmt.Errorf("route: path %s -> %s: both ends must be NICs: %w", g.NodeName(src), g.NodeName(dst), ErrTopology)
	}
	if pol > PolicyECMP {
		return buf, fmt.Errorf("route: path %s -> %s: unknown %v: %w", g.NodeName(src), g.NodeName(dst), pol, ErrTopology)
	}
	if src == dst {
		return buf, nil
	}
	if a, b := g.Nodes[src].Plane, g.Nodes[dst].Plane; a != b {
		return buf, fmt.Errorf("route: path %s -> %s: NICs of planes %d and %d; a packet stays in its plane: %w",
			g.NodeName(src), g.NodeName(dst), a, b, ErrUnreachable)
	}
	n := src
	for range len(g.Nodes) {
		var p topo.PortID
		if pol == PolicyECMP {
			p = r.ECMP(n, dst, hash)
		} else {
			p = r.DModK(n, dst)
		}
		if p == topo.NoPort {
			return buf, fmt.Errorf("route: path %s -> %s: no route from %s: %w", g.NodeName(src), g.NodeName(dst), g.NodeName(n), ErrUnreachable)
		}
		buf = append(buf, p)
		n = g.Ports[g.Ports[p].Peer].Node
		if n == dst {
			return buf, nil
		}
	}
	return buf, fmt.Errorf("route: path %s -> %s: no end after %d hops, a routing loop: %w", g.NodeName(src), g.NodeName(dst), len(g.Nodes), ErrTopology)
}
