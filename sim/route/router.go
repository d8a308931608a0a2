package route

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"

	"github.com/ibex-rdma/ibex/sim/topo"
)

// Router holds the eligible output ports of every switch and NIC for every
// destination NIC of one graph with one set of failed links.
//
// Destinations are grouped into classes that every switch treats alike: in
// a tree, the leaf a NIC hangs under (above the leaf, only the leaf
// matters); in an explicit graph, the NIC itself. A node's routes are a
// short sorted list of segments over the class numbers, each naming its
// eligible ports in a shared pool, because leaves, pods and spine groups
// are numbered in order and a port leads to a few ranges of them: a 3-tier
// k=64 tree needs about 80,000 segments where a switch × NIC table would
// hold 335 million entries.
type Router struct {
	g      *topo.Graph
	failed []topo.LinkID // sorted, unique
	dead   []bool        // by LinkID
	tree   bool          // up/down on a generated tree; false: shortest paths (explicit)
	nic0   topo.NodeID   // first NIC node
	nics   int

	// Per NIC, by NIC index (node - nic0).
	class  []int32       // tree: the leaf index; explicit: the NIC index; -1 if uncabled
	key    []uint32      // the D-mod-k key: the NIC's position in leaf order
	nicOut []topo.PortID // the NIC's own port if its link is alive, else NoPort
	leafIn []topo.PortID // tree: the leaf port facing the NIC

	info    []nodeInfo // by node - nic0: NICs, then switches
	segs    []segment
	pool    []topo.PortID
	div     [4]uint32     // D-mod-k divisor of a choice made going up from a tier
	leaves  []topo.NodeID // tree: leaf index -> node
	classes int32
	// planeLeaf0[p] is plane p's first leaf index (tree): a plane's leaves
	// are consecutive; planeLeaf0[planes] is the number of leaves.
	planeLeaf0 []int32
}

type nodeInfo struct {
	seg0, nseg int32
	leaf       int32 // tree: a leaf switch's leaf index, else -1
	tier       uint8
}

// segment runs from class lo to the next segment's lo (the last to the
// end), with the eligible ports pool[off:off+n].
type segment struct {
	lo, off, n int32
	// h is how many levels above this node the route turns down: 0 when
	// the destination is below it (or, on a leaf, on it), hNone when there
	// is no route. Explicit graphs use 1 for every route.
	h uint8
}

const hNone = 255

// ErrTopology is wrapped by New's errors about a graph it cannot route.
var ErrTopology = errors.New("topology not routable")

// maxExplicitEntries bounds the next-hop tables of an explicit graph:
// (NICs + switches) × NICs entries, each a BFS step and at worst a
// segment. 4 Mi is about a thousand NICs; larger fabrics are what the
// fattree and superpod kinds are for, and route by structure.
const maxExplicitEntries = 1 << 22

// New precomputes the routes of g with the given links failed. It returns
// an error wrapping ErrTopology (and no Router) for a graph it cannot
// route or a link ID out of range. If some NICs cannot reach others it
// returns the Router and an *UnreachableError (wrapping ErrUnreachable)
// listing them: the reachable pairs route normally, the others have no
// eligible port.
//
// A multi-plane graph's planes are separate fabrics, and a packet never
// leaves its plane: a NIC of plane p reaches the NICs of plane p only.
// Pairs in different planes have no route (Reachable is false, Path fails
// with ErrUnreachable), and are not counted as unreachable: the error
// lists only same-plane pairs without a route. Choosing a plane for a
// flow (per QP, say) is the caller's: the source NIC names it.
//
// Generated topologies (fattree, superpod) route up/down: a packet climbs
// until it is at a switch with the destination below it, then descends.
// At a switch with the destination below, the eligible ports are the down
// ports leading to it (several where there are parallel cables); otherwise
// the alive up ports whose upper switch can still reach it by the fewest
// hops. The graph must be a tiered tree as Build makes it: NICs on
// leaves, switch links between adjacent tiers of one plane, each plane's
// leaves consecutive.
//
// Explicit topologies route by shortest paths (BFS per destination, NICs
// not forwarding), up to (NICs + switches) × NICs = 4,194,304.
func New(g *topo.Graph, failed ...topo.LinkID) (*Router, error) {
	if g == nil {
		return nil, fmt.Errorf("route: no graph: %w", ErrTopology)
	}
	r := &Router{g: g, nic0: topo.NodeID(g.NumHosts), nics: g.NumNICs, tree: g.Tiers > 0}
	if g.NumHosts < 0 || g.NumNICs < 0 || g.NumHosts+g.NumNICs > len(g.Nodes) {
		return nil, fmt.Errorf("route: graph %q: %d hosts and %d NICs but %d nodes: %w", g.Name, g.NumHosts, g.NumNICs, len(g.Nodes), ErrTopology)
	}
	r.dead = make([]bool, len(g.Links))
	for _, l := range failed {
		if l < 0 || int(l) >= len(g.Links) {
			return nil, fmt.Errorf("route: failed link %d: out of range, the graph has %d links: %w", l, len(g.Links), ErrTopology)
		}
		r.dead[l] = true
	}
	r.failed = slices.Clone(failed)
	slices.Sort(r.failed)
	r.failed = slices.Compact(r.failed)

	r.class = make([]int32, r.nics)
	r.key = make([]uint32, r.nics)
	r.nicOut = make([]topo.PortID, r.nics)
	r.info = make([]nodeInfo, len(g.Nodes)-int(r.nic0))
	for i := range r.div {
		r.div[i] = 1
	}
	var err error
	if r.tree {
		err = r.buildTree()
	} else {
		err = r.buildExplicit()
	}
	if err != nil {
		return nil, err
	}
	if u := r.unreachable(); u != nil {
		return r, u
	}
	return r, nil
}

// WithFailed returns a new Router for the same graph with links failed in
// addition to r's, as New does.
func (r *Router) WithFailed(links ...topo.LinkID) (*Router, error) {
	all := make([]topo.LinkID, 0, len(r.failed)+len(links))
	all = append(all, r.failed...)
	all = append(all, links...)
	return New(r.g, all...)
}

// Graph returns the graph r routes.
func (r *Router) Graph() *topo.Graph { return r.g }

// Failed returns the failed links, sorted.
func (r *Router) Failed() []topo.LinkID { return slices.Clone(r.failed) }

// Dead says whether link l is failed.
func (r *Router) Dead(l topo.LinkID) bool { return l >= 0 && int(l) < len(r.dead) && r.dead[l] }

// lookup returns the eligible ports at node n for destination NIC d (a
// slice of r's own memory, not to be changed) and the D-mod-k divisor of
// the choice there. Nil means no route: d is not a NIC, n is d, a host or
// not a node, or d cannot be reached from n.
func (r *Router) lookup(n, d topo.NodeID) ([]topo.PortID, uint32) {
	di := int(d - r.nic0)
	ni := int(n - r.nic0)
	if d < r.nic0 || di >= r.nics || n == d || n < r.nic0 || ni >= len(r.info) {
		return nil, 1
	}
	if r.nicOut[di] == topo.NoPort {
		return nil, 1
	}
	c := r.class[di]
	if r.tree {
		if ni < r.nics {
			// A NIC's first hop is its one port, if the route goes on.
			if r.nicOut[ni] == topo.NoPort {
				return nil, 1
			}
			if sc := r.class[ni]; sc != c && r.find(r.leaves[sc], c).n == 0 {
				return nil, 1
			}
			return r.nicOut[ni : ni+1], 1
		}
		inf := &r.info[ni]
		if inf.leaf == c {
			return r.leafIn[di : di+1], 1
		}
		s := r.find(n, c)
		if s.h == 0 {
			// Down: the parallel cables to one child. The child's up
			// choice (one tier lower) spread d by the same digit of the
			// key, so using it again spreads the cables.
			return r.pool[s.off : s.off+s.n], r.div[inf.tier-1]
		}
		return r.pool[s.off : s.off+s.n], r.div[inf.tier]
	}
	s := r.find(n, c)
	return r.pool[s.off : s.off+s.n], 1
}

// find returns node n's segment holding class c.
func (r *Router) find(n topo.NodeID, c int32) *segment {
	inf := &r.info[n-r.nic0]
	s := r.segs[inf.seg0 : inf.seg0+inf.nseg]
	lo, hi := 0, len(s)
	for hi-lo > 1 {
		m := int(uint(lo+hi) >> 1)
		if s[m].lo <= c {
			lo = m
		} else {
			hi = m
		}
	}
	return &s[lo]
}

// Eligible appends to buf the ports a packet at node sw (a switch, or the
// source NIC) for destination NIC d may leave by, and returns it; none if
// d is unreachable from sw. The order is fixed: grouped by the neighbour
// they lead to (by node ID), then by port. It allocates only if buf is too
// small.
func (r *Router) Eligible(sw, d topo.NodeID, buf []topo.PortID) []topo.PortID {
	ports, _ := r.lookup(sw, d)
	return append(buf, ports...)
}

// DModK is OpenSM ftree's deterministic choice: the eligible port number
// (key / div) mod n, where key is d's position in leaf order in its plane
// (leaf·slots + slot: a single-plane fat tree's NIC index, a SuperPOD
// leaf's own order), n the number of eligible ports and div the product
// of the up-port counts of the tiers below sw. A leaf thus spreads
// destinations evenly over its uplinks, the next tier spreads each
// uplink's share over its own uplinks by the next digit, and a shift
// permutation on a full tree crosses no link twice. It returns NoPort if
// d is unreachable.
func (r *Router) DModK(sw, d topo.NodeID) topo.PortID {
	ports, div := r.lookup(sw, d)
	switch len(ports) {
	case 0:
		return topo.NoPort
	case 1:
		return ports[0]
	}
	return ports[(r.key[d-r.nic0]/div)%uint32(len(ports))]
}

// ECMP chooses among the eligible ports by flowHash (FlowHash: the same
// flow, the same path), mixed with the switch's ID so that the tiers do
// not all make the same choice (hash polarization). It returns NoPort if d
// is unreachable.
func (r *Router) ECMP(sw, d topo.NodeID, flowHash uint64) topo.PortID {
	ports, _ := r.lookup(sw, d)
	switch len(ports) {
	case 0:
		return topo.NoPort
	case 1:
		return ports[0]
	}
	h := mix64(flowHash ^ uint64(uint32(sw))*0x9e3779b97f4a7c15)
	i, _ := bits.Mul64(h, uint64(len(ports)))
	return ports[i]
}

// Adaptive chooses the eligible port with the least load (the engine's
// queued bytes or packets, say), the first in Eligible's order among
// equals, so that a run stays a function of its seed. It returns NoPort if
// d is unreachable.
func (r *Router) Adaptive(sw, d topo.NodeID, load func(topo.PortID) int64) topo.PortID {
	ports, _ := r.lookup(sw, d)
	best := topo.NoPort
	var least int64
	for i, p := range ports {
		if l := load(p); i == 0 || l < least {
			best, least = p, l
		}
	}
	return best
}

// Reachable says whether NIC src has a route to NIC dst; never across
// planes.
func (r *Router) Reachable(src, dst topo.NodeID) bool {
	ports, _ := r.lookup(src, dst)
	return len(ports) > 0
}

// FlowHash hashes a flow (per QP: source NIC, destination NIC, QP number)
// for ECMP. It is a fixed function, part of what makes a run replayable:
// the same flow takes the same path in every run.
func FlowHash(src, dst topo.NodeID, qp uint32) uint64 {
	return mix64(mix64(uint64(uint32(src))<<32|uint64(uint32(dst))) ^ uint64(qp))
}

// mix64 is SplitMix64's finalizer: every input bit moves every output bit,
// so that nearby QP numbers land on unrelated ports.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
