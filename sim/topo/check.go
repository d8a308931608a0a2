package topo

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// ErrCheck is wrapped by the error Check returns.
var ErrCheck = errors.New("topology check failed")

// maxProblems is how many problems a CheckError lists; it counts them all.
const maxProblems = 20

// CheckError lists what Check found wrong, each problem naming the node,
// port or link.
type CheckError struct {
	Problems []string // the first maxProblems
	Total    int      // all problems found
}

func (e *CheckError) Error() string {
	s := strings.Join(e.Problems, "\n")
	if more := e.Total - len(e.Problems); more > 0 {
		s += fmt.Sprintf("\n... and %d more", more)
	}
	return s
}

func (e *CheckError) Unwrap() error { return ErrCheck }

type checker struct {
	g   *Graph
	err CheckError
}

func (c *checker) add(format string, args ...any) {
	c.err.Total++
	if len(c.err.Problems) < maxProblems {
		c.err.Problems = append(c.err.Problems, fmt.Sprintf(format, args...))
	}
}

// Check validates the graph and returns a *CheckError listing what is
// wrong, or nil. It checks that the node layout and the port and link
// records agree; that no port carries two cables (a duplicate cable between
// the same two ports is named as such), no node more cables than it has
// ports, no cable loops back to its own node; that every NIC is cabled and
// every host has a NIC; that links join adjacent tiers (NIC-leaf,
// leaf-spine, spine-core; untiered switches in explicit topologies are
// exempt); and that every host reaches every other. A host joins its own
// NICs, as traffic can cross a host between rails (PXN over NVLink).
//
// A multi-plane graph (Planes > 1) must also keep its planes apart: every
// NIC and switch in a plane 0 to Planes-1, host h's NIC i in plane
// i%Planes, no cable between two planes; and every host must reach every
// other within each plane (a host joining only its NICs of that plane),
// since a packet never changes plane.
//
// Check is linear in the graph's size and allocates only its walk state.
func (g *Graph) Check() error {
	c := &checker{g: g}
	if !c.layout() {
		return &c.err
	}
	c.links()
	c.ports()
	c.nodes()
	c.connected()
	if c.err.Total == 0 {
		return nil
	}
	return &c.err
}

// describe names a node with its kind: "switch leaf3", "nic host4.nic0".
func (g *Graph) describe(id NodeID) string {
	return g.Nodes[id].Kind.String() + " " + g.NodeName(id)
}

// layout checks the invariants every other check indexes by. It returns
// false if they do not hold; the other checks would index out of range.
func (c *checker) layout() bool {
	g := c.g
	before := c.err.Total
	if g.NumHosts < 0 || g.NumNICs < 0 || g.NumHosts+g.NumNICs > len(g.Nodes) {
		c.add("graph: %d hosts and %d NICs, but %d nodes", g.NumHosts, g.NumNICs, len(g.Nodes))
		return false
	}
	if g.Planes < 1 || g.Planes > maxPlanes {
		c.add("graph: %d planes, want 1 to %d", g.Planes, maxPlanes)
		return false
	}
	planes := int32(g.Planes)
	for i := range g.Nodes {
		n := &g.Nodes[i]
		id := NodeID(i)
		want := KindSwitch
		switch {
		case i < g.NumHosts:
			want = KindHost
		case i < g.NumHosts+g.NumNICs:
			want = KindNIC
		}
		if n.Kind != want {
			c.add("node %d: a %v where the layout has %vs", i, n.Kind, want)
			continue
		}
		if n.NumPorts < 0 || n.FirstPort < 0 || int(n.FirstPort)+int(n.NumPorts) > len(g.Ports) {
			c.add("node %d: ports %d+%d out of range (%d ports)", i, n.FirstPort, n.NumPorts, len(g.Ports))
			continue
		}
		for p := n.FirstPort; p < n.FirstPort+PortID(n.NumPorts); p++ {
			if g.Ports[p].Node != id {
				c.add("node %d: port %d belongs to node %d", i, p, g.Ports[p].Node)
				break
			}
		}
		switch n.Kind {
		case KindHost:
			if n.NumPorts != 0 {
				c.add("node %d: a host with %d ports; its NICs have the ports", i, n.NumPorts)
			}
			if n.NumNICs < 0 || int(n.FirstNIC) < g.NumHosts || int(n.FirstNIC)+int(n.NumNICs) > g.NumHosts+g.NumNICs {
				c.add("node %d: NICs %d+%d outside the NIC range", i, n.FirstNIC, n.NumNICs)
				continue
			}
			if g.GPUsPerHost > 0 && int(n.NumNICs) != g.GPUsPerHost*g.Planes {
				c.add("node %d: a host with %d NICs, want %d GPUs × %d planes", i, n.NumNICs, g.GPUsPerHost, g.Planes)
			}
			for r := range n.NumNICs {
				nic := &g.Nodes[n.FirstNIC+NodeID(r)]
				switch rail, plane := r/planes, r%planes; {
				case planes == 1:
					if nic.Host != id || nic.Rail != r {
						c.add("node %d: NIC %d says host %d rail %d, want host %d rail %d", i, n.FirstNIC+NodeID(r), nic.Host, nic.Rail, i, r)
					}
				case nic.Host != id || nic.Rail != rail || nic.Plane != plane:
					c.add("node %d: NIC %d says host %d rail %d plane %d, want host %d rail %d plane %d",
						i, n.FirstNIC+NodeID(r), nic.Host, nic.Rail, nic.Plane, i, rail, plane)
				}
			}
		case KindNIC:
			if n.Host < 0 || int(n.Host) >= g.NumHosts {
				c.add("node %d: a NIC of host %d, which is not a host", i, n.Host)
			}
		}
		if n.Kind != KindHost && (n.Plane < 0 || n.Plane >= planes) {
			c.add("node %d: plane %d, but the graph has %d plane%s", i, n.Plane, planes, plural(int(planes)))
		}
	}
	for p := range g.Ports {
		if id := g.Ports[p].Node; id < 0 || int(id) >= len(g.Nodes) {
			c.add("port %d: node %d out of range", p, id)
		}
	}
	return c.err.Total == before
}

func (c *checker) validPort(p PortID) bool { return p >= 0 && int(p) < len(c.g.Ports) }

func (c *checker) links() {
	g := c.g
	for i := range g.Links {
		l := &g.Links[i]
		id := LinkID(i)
		if !c.validPort(l.A) || !c.validPort(l.B) {
			c.add("link %d: ports %d and %d, out of range (%d ports)", i, l.A, l.B, len(g.Ports))
			continue
		}
		// Names are made only for problems: Check of a clean graph
		// allocates nothing per element.
		name := func() string { return g.LinkName(id) }
		na, nb := g.Ports[l.A].Node, g.Ports[l.B].Node
		switch {
		case l.A == l.B:
			c.add("link %s: a self-link, both ends on one port", name())
		case na == nb:
			c.add("link %s: a self-link, from %s back to itself", name(), g.describe(na))
		}
		// A later cable on the same port overwrote the port's record, so
		// an end that does not point back at this link is shared.
		dupReported := false
		for _, p := range [2]PortID{l.A, l.B} {
			other := g.Ports[p].Link
			if other == id {
				continue
			}
			if other >= 0 && int(other) < len(g.Links) {
				o := &g.Links[other]
				if o.A == l.A && o.B == l.B || o.A == l.B && o.B == l.A {
					if !dupReported {
						c.add("link %s: a duplicate cable between the same two ports (links %d and %d)", name(), i, other)
						dupReported = true
					}
					continue
				}
			}
			c.add("port %s: cabled twice, by links %d (%s) and %d (%s)", g.PortName(p), i, name(), other, g.LinkName(other))
		}
		if !(l.Rate > 0) {
			c.add("link %s: rate %d b/s, want > 0", name(), int64(l.Rate))
		}
		if !(l.Length >= 0) || math.IsInf(float64(l.Length), 0) {
			c.add("link %s: length %g m, want >= 0", name(), l.Length)
		}
		a, b := &g.Nodes[na], &g.Nodes[nb]
		if a.Plane != b.Plane {
			c.add("link %s: joins plane %d to plane %d; planes are independent fabrics", name(), a.Plane, b.Plane)
		}
		tier, ok := linkTierOf(a, b)
		switch {
		case !ok:
			c.add("link %s: joins %s to %s; cables join adjacent tiers only (nic-leaf, leaf-spine, spine-core)",
				name(), tierWord(a), tierWord(b))
		case tier != l.Tier:
			c.add("link %s: recorded as %v, but it joins %s to %s", name(), l.Tier, tierWord(a), tierWord(b))
		}
	}
}

func tierWord(n *Node) string {
	if n.Kind == KindSwitch {
		if n.Tier == TierNone {
			return "an untiered switch"
		}
		return n.Tier.String()
	}
	return n.Kind.String()
}

func (c *checker) ports() {
	g := c.g
	for i := range g.Ports {
		p := &g.Ports[i]
		id := PortID(i)
		switch {
		case p.Link == NoLink:
			if p.Peer != NoPort {
				c.add("port %s: peer %d but no link", g.PortName(id), p.Peer)
			}
		case p.Link < 0 || int(p.Link) >= len(g.Links):
			c.add("port %s: link %d out of range", g.PortName(id), p.Link)
		default:
			l := &g.Links[p.Link]
			switch id {
			case l.A:
				if p.Peer != l.B {
					c.add("port %s: peer %d, but its link %d ends at %d", g.PortName(id), p.Peer, p.Link, l.B)
				}
			case l.B:
				if p.Peer != l.A {
					c.add("port %s: peer %d, but its link %d ends at %d", g.PortName(id), p.Peer, p.Link, l.A)
				}
			default:
				c.add("port %s: records link %d (%s), which does not end at it", g.PortName(id), p.Link, g.LinkName(p.Link))
			}
		}
	}
}

func (c *checker) nodes() {
	g := c.g
	if g.NumHosts == 0 {
		c.add("graph: no hosts")
	}
	for i := range g.Nodes {
		n := &g.Nodes[i]
		id := NodeID(i)
		if n.Kind == KindHost {
			if n.NumNICs == 0 {
				c.add("%s: has no NICs", g.describe(id))
			}
			continue
		}
		cabled, beyond := 0, 0
		for j := range n.NumPorts {
			if g.Ports[n.FirstPort+PortID(j)].Link != NoLink {
				cabled++
				if j >= n.Radix {
					beyond++
				}
			}
		}
		switch {
		case beyond > 0:
			c.add("%s: %d cables on %d port%s", g.describe(id), cabled, n.Radix, plural(int(n.Radix)))
		case n.Kind == KindNIC && cabled == 0:
			c.add("%s: not cabled", g.describe(id))
		}
	}
}

// connected walks the graph from host 0 and reports the hosts it misses:
// once, or in a multi-plane graph once per plane, entering only the NICs
// and switches of that plane.
func (c *checker) connected() {
	g := c.g
	if g.NumHosts == 0 {
		return
	}
	seen := make([]bool, len(g.Nodes))
	stack := make([]NodeID, 0, len(g.Nodes))
	for plane := range int32(g.Planes) {
		clear(seen)
		seen[0] = true
		stack = append(stack[:0], 0)
		visit := func(id NodeID) {
			if id >= 0 && !seen[id] && (g.Nodes[id].Kind == KindHost || g.Nodes[id].Plane == plane) {
				seen[id] = true
				stack = append(stack, id)
			}
		}
		for len(stack) > 0 {
			id := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			n := &g.Nodes[id]
			switch n.Kind {
			case KindHost:
				for r := range n.NumNICs {
					visit(n.FirstNIC + NodeID(r))
				}
			case KindNIC:
				visit(n.Host)
			}
			for p := n.FirstPort; p < n.FirstPort+PortID(n.NumPorts); p++ {
				if q := g.Ports[p].Peer; c.validPort(q) {
					visit(g.Ports[q].Node)
				}
			}
		}
		for h := 1; h < g.NumHosts; h++ {
			switch {
			case seen[h]:
			case g.Planes == 1:
				c.add("%s: cannot reach %s", g.describe(NodeID(h)), g.describe(0))
			default:
				c.add("%s: cannot reach %s in plane %d", g.describe(NodeID(h)), g.describe(0), plane)
			}
		}
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
