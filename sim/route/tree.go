package route

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/ibex-rdma/ibex/sim/topo"
)

// span is a half-open range of leaf indices.
type span struct{ lo, hi int32 }

// source is a neighbour of the switch being built: a child (its down set,
// spans tb.down[a:a+n]) or a parent (its heights, tb.heights[a:a+n]), with
// the alive cables to it, tb.pbuf[p0:p1].
type source struct {
	peer   topo.NodeID
	p0, p1 int32
	a, n   int32
	cur    int32 // sweep cursor into the spans or segments
	h      uint8 // the parent's h at the sweep's position
}

type peerPort struct {
	peer topo.NodeID
	port topo.PortID
}

// treeBuilder holds the scratch of buildTree, reused from switch to switch
// so that New allocates per tier, not per switch.
type treeBuilder struct {
	r      *Router
	sw0    topo.NodeID
	byTier [4][]topo.NodeID
	// down sets: switch i's leaves below are down[dOff[i]:dOff[i]+dN[i]],
	// sorted and disjoint.
	down     []span
	dOff, dN []int32
	// heights: switch i's segments with the ports left out and equal
	// neighbours merged, heights[hOff[i]:hOff[i]+hN[i]]: all a child needs
	// of a parent, and a few entries where a spine has one segment per
	// leaf below it.
	heights  []segment
	hOff, hN []int32
	spans    []span
	pairs    []peerPort
	pbuf     []topo.PortID
	downs    []source
	ups      []source
	bps      []int32
	cur      []topo.PortID
	lists    [][2]int32 // the switch's distinct port lists so far (off, n)
}

// buildTree computes the up/down routes of a generated tree. Down sets
// go bottom-up: a leaf holds itself, a switch the union of its alive
// children's sets. Routes go top-down, so that a switch's parents are done
// when it sweeps their segments: for each leaf range the down ports whose
// child holds it, else the up ports to the parents that turn down soonest.
func (r *Router) buildTree() error {
	g := r.g
	tb := &treeBuilder{r: r, sw0: r.nic0 + topo.NodeID(r.nics)}
	planes := int32(max(g.Planes, 1))
	r.planeLeaf0 = make([]int32, planes+1)
	plane := int32(0)
	for id := tb.sw0; int(id) < len(g.Nodes); id++ {
		n := &g.Nodes[id]
		inf := &r.info[id-r.nic0]
		inf.leaf = -1
		if n.Kind != topo.KindSwitch || n.Tier < topo.TierLeaf || n.Tier > topo.TierCore {
			return fmt.Errorf("route: %s: a %v (tier %v) where a %s tree has switches of tiers leaf, spine, core: %w",
				g.NodeName(id), n.Kind, n.Tier, g.Kind, ErrTopology)
		}
		if n.Plane < 0 || n.Plane >= planes {
			return fmt.Errorf("route: %s: plane %d of a graph of %d: %w", g.NodeName(id), n.Plane, planes, ErrTopology)
		}
		inf.tier = uint8(n.Tier)
		if n.Tier == topo.TierLeaf {
			// Leaves come plane by plane, so that a plane is a range of
			// classes and its NICs' keys count from its first leaf.
			if n.Plane < plane {
				return fmt.Errorf("route: %s: a leaf of plane %d after leaves of plane %d; a plane's leaves must be consecutive: %w",
					g.NodeName(id), n.Plane, plane, ErrTopology)
			}
			for ; plane < n.Plane; plane++ {
				r.planeLeaf0[plane+1] = int32(len(r.leaves))
			}
			inf.leaf = int32(len(r.leaves))
			r.leaves = append(r.leaves, id)
		}
		tb.byTier[n.Tier] = append(tb.byTier[n.Tier], id)
	}
	r.classes = int32(len(r.leaves))
	for ; plane < planes; plane++ {
		r.planeLeaf0[plane+1] = r.classes
	}
	if err := r.checkTreeLinks(); err != nil {
		return err
	}
	if err := r.treeNICs(); err != nil {
		return err
	}

	// D-mod-k divisors: the up-port counts of the healthy tree, so that a
	// failure changes the choice only where the eligible set shrinks.
	var up [4]uint32
	for t := topo.TierLeaf; t < topo.TierCore; t++ {
		for _, id := range tb.byTier[t] {
			n := &g.Nodes[id]
			c := uint32(0)
			for p := n.FirstPort; p < n.FirstPort+topo.PortID(n.NumPorts); p++ {
				if m := g.PeerNode(p); m >= 0 && g.Nodes[m].Kind == topo.KindSwitch && g.Nodes[m].Tier == t+1 {
					c++
				}
			}
			up[t] = max(up[t], c)
		}
	}
	r.div[0], r.div[1] = 1, 1
	r.div[2] = max(up[1], 1)
	r.div[3] = r.div[2] * max(up[2], 1)

	nsw := len(g.Nodes) - int(tb.sw0)
	tb.dOff = make([]int32, nsw)
	tb.dN = make([]int32, nsw)
	tb.hOff = make([]int32, nsw)
	tb.hN = make([]int32, nsw)
	for t := topo.TierLeaf; t <= topo.TierCore; t++ {
		for _, id := range tb.byTier[t] {
			tb.downSet(id, t)
		}
	}
	for t := topo.TierCore; t >= topo.TierLeaf; t-- {
		for _, id := range tb.byTier[t] {
			tb.routes(id, t)
		}
	}
	return nil
}

// checkTreeLinks makes sure every link joins a NIC to a leaf or two
// switches of adjacent tiers, in one plane: up/down routing means nothing
// otherwise, and a packet that changed plane would leave the NICs it may
// reach.
func (r *Router) checkTreeLinks() error {
	g := r.g
	for l := range g.Links {
		lk := &g.Links[l]
		if lk.A < 0 || int(lk.A) >= len(g.Ports) || lk.B < 0 || int(lk.B) >= len(g.Ports) {
			return fmt.Errorf("route: link %d: ports %d and %d out of range: %w", l, lk.A, lk.B, ErrTopology)
		}
		a, b := &g.Nodes[g.Ports[lk.A].Node], &g.Nodes[g.Ports[lk.B].Node]
		if a.Kind == topo.KindNIC {
			a, b = b, a
		}
		ok := false
		switch {
		case b.Kind == topo.KindNIC:
			ok = a.Kind == topo.KindSwitch && a.Tier == topo.TierLeaf
		case a.Kind == topo.KindSwitch && b.Kind == topo.KindSwitch:
			ok = a.Tier == b.Tier+1 || b.Tier == a.Tier+1
		}
		if !ok {
			return fmt.Errorf("route: link %s: joins a %v to a %v; a tree joins NICs to leaves and switches of adjacent tiers: %w",
				g.LinkName(topo.LinkID(l)), tierWord(a), tierWord(b), ErrTopology)
		}
		if a.Plane != b.Plane {
			return fmt.Errorf("route: link %s: joins plane %d to plane %d; planes are independent fabrics: %w",
				g.LinkName(topo.LinkID(l)), a.Plane, b.Plane, ErrTopology)
		}
	}
	return nil
}

func tierWord(n *topo.Node) string {
	if n.Kind == topo.KindSwitch {
		return n.Tier.String()
	}
	return n.Kind.String()
}

// treeNICs finds each NIC's leaf and port there, and its D-mod-k key.
func (r *Router) treeNICs() error {
	g := r.g
	r.leafIn = make([]topo.PortID, r.nics)
	slot := make([]int32, r.nics)
	slots := int32(1)
	for i := range r.nics {
		id := r.nic0 + topo.NodeID(i)
		n := &g.Nodes[id]
		r.class[i], r.nicOut[i], r.leafIn[i] = -1, topo.NoPort, topo.NoPort
		if n.Kind != topo.KindNIC || n.NumPorts != 1 {
			return fmt.Errorf("route: node %d (%s): a %v with %d ports where the layout has NICs of one port: %w",
				id, g.NodeName(id), n.Kind, n.NumPorts, ErrTopology)
		}
		if n.Plane < 0 || int(n.Plane) >= len(r.planeLeaf0)-1 {
			return fmt.Errorf("route: %s: plane %d of a graph of %d: %w", g.NodeName(id), n.Plane, len(r.planeLeaf0)-1, ErrTopology)
		}
		p := n.FirstPort
		q := g.Ports[p].Peer
		if q == topo.NoPort || g.Ports[p].Link == topo.NoLink {
			continue // not cabled: cut off, which the unreachable report says
		}
		leaf := g.Ports[q].Node
		r.class[i] = r.info[leaf-r.nic0].leaf
		r.leafIn[i] = q
		slot[i] = int32(q - g.Nodes[leaf].FirstPort)
		slots = max(slots, slot[i]+1)
		if !r.dead[g.Ports[p].Link] {
			r.nicOut[i] = p
		}
	}
	// The key orders a plane's NICs by leaf, then by leaf port: the NIC
	// index of a single-GPU, single-plane fat tree, whose leaves fill in
	// order; in a SuperPOD, whose NICs are numbered host by host across
	// the rails, the leaf's own order. Counting from the plane's first
	// leaf gives every plane the keys, and so the spread, of one fabric.
	for i := range r.nics {
		if c := r.class[i]; c >= 0 {
			first := r.planeLeaf0[g.Nodes[r.leaves[c]].Plane]
			r.key[i] = uint32(c-first)*uint32(slots) + uint32(slot[i])
		}
	}
	return nil
}

// alive returns the peer of port p if its cable is up, else -1.
func (tb *treeBuilder) alive(p topo.PortID) topo.NodeID {
	g := tb.r.g
	pt := &g.Ports[p]
	if pt.Link == topo.NoLink || pt.Peer == topo.NoPort || tb.r.dead[pt.Link] {
		return -1
	}
	return g.Ports[pt.Peer].Node
}

func (tb *treeBuilder) downSet(id topo.NodeID, t topo.Tier) {
	r, g := tb.r, tb.r.g
	i := id - tb.sw0
	tb.spans = tb.spans[:0]
	if t == topo.TierLeaf {
		l := r.info[id-r.nic0].leaf
		tb.spans = append(tb.spans, span{l, l + 1})
	} else {
		n := &g.Nodes[id]
		for p := n.FirstPort; p < n.FirstPort+topo.PortID(n.NumPorts); p++ {
			if m := tb.alive(p); m >= 0 && g.Nodes[m].Kind == topo.KindSwitch && g.Nodes[m].Tier == t-1 {
				j := m - tb.sw0
				tb.spans = append(tb.spans, tb.down[tb.dOff[j]:tb.dOff[j]+tb.dN[j]]...)
			}
		}
		slices.SortFunc(tb.spans, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
	}
	tb.dOff[i] = int32(len(tb.down))
	for _, s := range tb.spans {
		if k := len(tb.down) - 1; k >= int(tb.dOff[i]) && tb.down[k].hi >= s.lo {
			tb.down[k].hi = max(tb.down[k].hi, s.hi)
			continue
		}
		tb.down = append(tb.down, s)
	}
	tb.dN[i] = int32(len(tb.down)) - tb.dOff[i]
}

// routes sweeps the leaf indices of switch id at the points where a
// child's down set or a parent's routes change, and appends its segments.
func (tb *treeBuilder) routes(id topo.NodeID, t topo.Tier) {
	r, g := tb.r, tb.r.g
	n := &g.Nodes[id]
	inf := &r.info[id-r.nic0]

	tb.pairs = tb.pairs[:0]
	for p := n.FirstPort; p < n.FirstPort+topo.PortID(n.NumPorts); p++ {
		if m := tb.alive(p); m >= 0 && g.Nodes[m].Kind == topo.KindSwitch {
			tb.pairs = append(tb.pairs, peerPort{m, p})
		}
	}
	// Parallel cables to one neighbour sit together, so that D-mod-k's
	// digit picks the neighbour and the next digit the cable.
	slices.SortFunc(tb.pairs, func(a, b peerPort) int {
		if c := cmp.Compare(a.peer, b.peer); c != 0 {
			return c
		}
		return cmp.Compare(a.port, b.port)
	})
	tb.downs, tb.ups, tb.pbuf = tb.downs[:0], tb.ups[:0], tb.pbuf[:0]
	tb.bps = append(tb.bps[:0], 0)
	for i := 0; i < len(tb.pairs); {
		m := tb.pairs[i].peer
		s := source{peer: m, p0: int32(len(tb.pbuf))}
		for ; i < len(tb.pairs) && tb.pairs[i].peer == m; i++ {
			tb.pbuf = append(tb.pbuf, tb.pairs[i].port)
		}
		s.p1 = int32(len(tb.pbuf))
		switch g.Nodes[m].Tier {
		case t + 1:
			j := m - tb.sw0
			s.a, s.n = tb.hOff[j], tb.hN[j]
			for _, sg := range tb.heights[s.a : s.a+s.n] {
				tb.bps = append(tb.bps, sg.lo)
			}
			tb.ups = append(tb.ups, s)
		case t - 1:
			j := m - tb.sw0
			s.a, s.n = tb.dOff[j], tb.dN[j]
			for _, sp := range tb.down[s.a : s.a+s.n] {
				tb.bps = append(tb.bps, sp.lo, sp.hi)
			}
			tb.downs = append(tb.downs, s)
		}
	}
	if inf.leaf >= 0 {
		tb.bps = append(tb.bps, inf.leaf, inf.leaf+1)
	}
	slices.Sort(tb.bps)
	tb.bps = slices.Compact(tb.bps)
	for len(tb.bps) > 1 && tb.bps[len(tb.bps)-1] >= r.classes {
		tb.bps = tb.bps[:len(tb.bps)-1]
	}

	seg0 := int32(len(r.segs))
	tb.lists = tb.lists[:0]
	for _, lo := range tb.bps {
		cur, h := tb.cur[:0], uint8(hNone)
		if lo == inf.leaf {
			h = 0 // the destination's own leaf: lookup delivers by leafIn
		} else {
			for k := range tb.downs {
				s := &tb.downs[k]
				for s.cur < s.n && tb.down[s.a+s.cur].hi <= lo {
					s.cur++
				}
				if s.cur < s.n && tb.down[s.a+s.cur].lo <= lo {
					cur = append(cur, tb.pbuf[s.p0:s.p1]...)
				}
			}
			if len(cur) > 0 {
				h = 0
			} else {
				best := uint8(hNone)
				for k := range tb.ups {
					s := &tb.ups[k]
					for s.cur+1 < s.n && tb.heights[s.a+s.cur+1].lo <= lo {
						s.cur++
					}
					s.h = tb.heights[s.a+s.cur].h
					best = min(best, s.h)
				}
				if best != hNone {
					h = best + 1
					for k := range tb.ups {
						if s := &tb.ups[k]; s.h == best {
							cur = append(cur, tb.pbuf[s.p0:s.p1]...)
						}
					}
				}
			}
		}
		tb.cur = cur
		tb.add(seg0, lo, h, cur)
	}
	inf.seg0, inf.nseg = seg0, int32(len(r.segs))-seg0
	i := id - tb.sw0
	tb.hOff[i] = int32(len(tb.heights))
	for _, sg := range r.segs[seg0:] {
		if k := len(tb.heights) - 1; k >= int(tb.hOff[i]) && tb.heights[k].h == sg.h {
			continue
		}
		tb.heights = append(tb.heights, segment{lo: sg.lo, h: sg.h})
	}
	tb.hN[i] = int32(len(tb.heights)) - tb.hOff[i]
}

// add appends a segment to the switch's list (which began at seg0),
// extending the last one instead if it routes the same way, and stores
// its ports once per switch.
func (tb *treeBuilder) add(seg0, lo int32, h uint8, ports []topo.PortID) {
	r := tb.r
	if k := len(r.segs) - 1; k >= int(seg0) {
		if last := &r.segs[k]; last.h == h && slices.Equal(r.pool[last.off:last.off+last.n], ports) {
			return
		}
	}
	off := int32(-1)
	for _, l := range tb.lists {
		if slices.Equal(r.pool[l[0]:l[0]+l[1]], ports) {
			off = l[0]
			break
		}
	}
	if off < 0 {
		off = int32(len(r.pool))
		r.pool = append(r.pool, ports...)
		tb.lists = append(tb.lists, [2]int32{off, int32(len(ports))})
	}
	r.segs = append(r.segs, segment{lo: lo, off: off, n: int32(len(ports)), h: h})
}
