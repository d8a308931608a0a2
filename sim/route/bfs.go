package route

import (
	"fmt"
	"slices"

	"github.com/ibex-rdma/ibex/sim/topo"
)

// buildExplicit computes shortest-path next hops on an explicit graph, one
// BFS per destination NIC over the alive links. NICs do not forward: the
// walk enters a NIC but goes on only from the destination and from
// switches. A node's eligible ports for d are those to a neighbour one hop
// closer to d. Each NIC is its own class, so a node's segments are its
// next-hop list per NIC, merged where consecutive NICs share one.
func (r *Router) buildExplicit() error {
	g := r.g
	nodes := len(r.info)
	if e := int64(nodes) * int64(r.nics); e > maxExplicitEntries {
		return fmt.Errorf("route: explicit topology %q: %d NICs × %d NICs and switches = %d next-hop entries; the limit is %d (describe a large fabric as a fattree or superpod, which route by structure): %w",
			g.Name, r.nics, nodes, e, maxExplicitEntries, ErrTopology)
	}
	r.classes = int32(r.nics)
	for i := range r.nics {
		r.class[i], r.key[i], r.nicOut[i] = int32(i), uint32(i), topo.NoPort
		n := &g.Nodes[r.nic0+topo.NodeID(i)]
		for p := n.FirstPort; p < n.FirstPort+topo.PortID(n.NumPorts); p++ {
			if r.aliveExplicit(p) >= 0 {
				r.nicOut[i] = p
				break
			}
		}
	}

	per := make([][]segment, nodes)
	dist := make([]int32, len(g.Nodes))
	queue := make([]topo.NodeID, 0, len(g.Nodes))
	var cur []topo.PortID
	for di := range r.nics {
		d := r.nic0 + topo.NodeID(di)
		for i := range dist {
			dist[i] = -1
		}
		dist[d] = 0
		queue = append(queue[:0], d)
		for qi := 0; qi < len(queue); qi++ {
			n := &g.Nodes[queue[qi]]
			for p := n.FirstPort; p < n.FirstPort+topo.PortID(n.NumPorts); p++ {
				if m := r.aliveExplicit(p); m >= 0 && dist[m] < 0 {
					dist[m] = dist[queue[qi]] + 1
					if g.Nodes[m].Kind == topo.KindSwitch {
						queue = append(queue, m)
					}
				}
			}
		}
		for ni := range nodes {
			id := r.nic0 + topo.NodeID(ni)
			cur = cur[:0]
			h := uint8(hNone)
			if id != d && dist[id] > 0 {
				n := &g.Nodes[id]
				for p := n.FirstPort; p < n.FirstPort+topo.PortID(n.NumPorts); p++ {
					m := r.aliveExplicit(p)
					if m >= 0 && dist[m] == dist[id]-1 && (m == d || g.Nodes[m].Kind == topo.KindSwitch) {
						cur = append(cur, p)
					}
				}
				if len(cur) > 0 {
					h = 1
				}
			}
			s := per[ni]
			if k := len(s) - 1; k >= 0 && s[k].h == h && slices.Equal(r.pool[s[k].off:s[k].off+s[k].n], cur) {
				continue
			}
			per[ni] = append(s, segment{lo: int32(di), off: int32(len(r.pool)), n: int32(len(cur)), h: h})
			r.pool = append(r.pool, cur...)
		}
	}
	for ni, s := range per {
		r.info[ni] = nodeInfo{seg0: int32(len(r.segs)), nseg: int32(len(s)), leaf: -1}
		if len(s) == 0 { // no NICs at all: one empty segment keeps find in range
			s = []segment{{h: hNone}}
			r.info[ni].nseg = 1
		}
		r.segs = append(r.segs, s...)
	}
	return nil
}

// aliveExplicit returns the node at the other end of port p if its cable
// is up, else -1.
func (r *Router) aliveExplicit(p topo.PortID) topo.NodeID {
	g := r.g
	pt := &g.Ports[p]
	if pt.Link == topo.NoLink || pt.Peer == topo.NoPort || int(pt.Link) >= len(r.dead) || r.dead[pt.Link] ||
		pt.Peer < 0 || int(pt.Peer) >= len(g.Ports) {
		return -1
	}
	return g.Ports[pt.Peer].Node
}
