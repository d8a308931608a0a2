package topo

import (
	"fmt"
	"strconv"
	"strings"
)

// An explicit end resolves to a slot of a file node: a host's NIC or a
// switch's port. auto marks an end that takes the node's first free slot.
type explicitEnd struct {
	node int // index in Explicit.Nodes
	slot int
	auto bool
}

// buildExplicit lays out the file's hosts, their NICs and its switches in
// file order and cables the links. Spec errors (unknown names, bad rates,
// port indices out of range) fail the build; cabling mistakes (a port used
// twice, more cables than ports, self-links, a host left out) are built
// into the graph as written, so that Check reports all of them together.
// Cables beyond a node's ports go to extra ports past its radix (a host's
// on its last NIC), which Check counts.
func (s *Spec) buildExplicit(c linkParams) (*Graph, error) {
	ex := s.Explicit
	if len(ex.Nodes) == 0 {
		return nil, s.bad("explicit.nodes", nil, "missing: want a list of nodes (name, kind, ports)")
	}
	kinds := make([]Kind, len(ex.Nodes))
	tiers := make([]Tier, len(ex.Nodes))
	radix := make([]int, len(ex.Nodes))
	byName := make(map[string]int, len(ex.Nodes))
	hosts, nics, switches, switchPorts := 0, 0, 0, 0
	for i, n := range ex.Nodes {
		f := fmt.Sprintf("explicit.nodes[%d].", i)
		switch {
		case n.Name == "":
			return nil, s.bad(f+"name", nil, "missing: want a name")
		case strings.ContainsAny(n.Name, ": \t"):
			return nil, s.bad(f+"name", n.Name, "want a name without ':' or spaces (links write node:port)")
		}
		if j, dup := byName[n.Name]; dup {
			return nil, s.bad(f+"name", n.Name, "already the name of explicit.nodes[%d]", j)
		}
		byName[n.Name] = i
		switch n.Kind {
		case "host":
			kinds[i] = KindHost
			radix[i] = n.Ports
			if radix[i] == 0 {
				radix[i] = 1
			}
			if radix[i] < 0 || radix[i] > 1024 {
				return nil, s.bad(f+"ports", n.Ports, "want a host's NICs, 1 to 1024 (absent: 1)")
			}
			if n.Tier != "" {
				return nil, s.bad(f+"tier", n.Tier, "hosts have no tier; only switches do")
			}
			hosts++
			nics += radix[i]
		case "switch":
			kinds[i] = KindSwitch
			if n.Ports == 0 {
				return nil, s.bad(f+"ports", nil, "missing: want the switch's port count, 1 to 65536")
			}
			if n.Ports < 0 || n.Ports > 1<<16 {
				return nil, s.bad(f+"ports", n.Ports, "want the switch's port count, 1 to 65536")
			}
			radix[i] = n.Ports
			switch n.Tier {
			case "":
			case "leaf":
				tiers[i] = TierLeaf
			case "spine":
				tiers[i] = TierSpine
			case "core":
				tiers[i] = TierCore
			default:
				return nil, s.bad(f+"tier", n.Tier, "want leaf, spine or core (or none)")
			}
			switches++
			switchPorts += radix[i]
		case "":
			return nil, s.bad(f+"kind", nil, "missing: want host or switch")
		default:
			return nil, s.bad(f+"kind", n.Kind, "want host or switch")
		}
	}
	if err := s.checkSize("explicit.nodes", len(ex.Nodes), nics+switchPorts+2*len(ex.Links)); err != nil {
		return nil, err
	}

	// Resolve the ends and mark the slots named by index, so that an end
	// without an index takes a slot no other link names.
	ends := make([][2]explicitEnd, len(ex.Links))
	rates := make([]Rate, len(ex.Links))
	slotAt := make([]int, len(ex.Nodes)) // offset of a node's slots in used
	total := 0
	for i, r := range radix {
		slotAt[i] = total
		total += r
	}
	used := make([]bool, total)
	for i, l := range ex.Links {
		f := fmt.Sprintf("explicit.links[%d].", i)
		for e, v := range [2]string{l.A, l.B} {
			field := f + [2]string{"a", "b"}[e]
			end, err := s.resolveEnd(field, v, byName, kinds, radix)
			if err != nil {
				return nil, err
			}
			if !end.auto {
				used[slotAt[end.node]+end.slot] = true
			}
			ends[i][e] = end
		}
		rates[i] = c.rate
		if l.Rate != "" {
			r, err := ParseRate(l.Rate)
			if err != nil {
				return nil, s.bad(f+"rate", l.Rate, rateWant)
			}
			rates[i] = r
		}
		if l.Length < 0 || l.Length > 1e5 {
			return nil, s.bad(f+"length", l.Length, "want a cable length in metres, 0 < length <= 100000 (absent: cable_m of the link's tier)")
		}
	}
	cursor := make([]int, len(ex.Nodes))
	extra := make([]int, len(ex.Nodes))
	for i := range ends {
		for e := range ends[i] {
			end := &ends[i][e]
			if !end.auto {
				continue
			}
			n := end.node
			for cursor[n] < radix[n] && used[slotAt[n]+cursor[n]] {
				cursor[n]++
			}
			if cursor[n] < radix[n] {
				end.slot = cursor[n]
				used[slotAt[n]+cursor[n]] = true
				continue
			}
			end.slot = radix[n] + extra[n]
			extra[n]++
		}
	}

	// Lay out hosts, NICs, switches; id[i] is file node i's NodeID (a
	// host's), nicAt[i] its first NIC.
	allExtra := 0
	for _, x := range extra {
		allExtra += x
	}
	b := newBuilder(c, hosts+nics+switches, nics+switchPorts+allExtra, len(ex.Links))
	g := b.g
	g.names = make([]string, 0, hosts+nics+switches)
	id := make([]NodeID, len(ex.Nodes))
	hostIdx := 0
	nicNext := NodeID(hosts)
	for i, n := range ex.Nodes {
		if kinds[i] != KindHost {
			continue
		}
		id[i] = NodeID(len(g.Nodes))
		g.Nodes = append(g.Nodes, Node{
			Kind: KindHost, Index: int32(hostIdx), Group: -1, Host: id[i], Rail: -1,
			FirstNIC: nicNext, NumNICs: int32(radix[i]),
		})
		g.names = append(g.names, n.Name)
		hostIdx++
		nicNext += NodeID(radix[i])
	}
	g.NumHosts, g.NumNICs = hosts, nics
	g.Planes = 1
	for i := range ex.Nodes {
		if kinds[i] != KindHost {
			continue
		}
		switch {
		case g.GPUsPerHost == 0:
			g.GPUsPerHost = radix[i]
		case g.GPUsPerHost != radix[i]:
			g.GPUsPerHost = -1
		}
	}
	g.GPUsPerHost = max(g.GPUsPerHost, 0) // hosts differ: none
	for i, n := range ex.Nodes {
		if kinds[i] != KindHost {
			continue
		}
		for r := range radix[i] {
			nid := NodeID(len(g.Nodes))
			np := 1
			if r == radix[i]-1 {
				np += extra[i]
			}
			g.Nodes = append(g.Nodes, Node{
				Kind: KindNIC, Index: int32(nid) - int32(hosts), Group: -1,
				FirstPort: PortID(len(g.Ports)), NumPorts: int32(np), Radix: 1,
				Host: id[i], Rail: int32(r), FirstNIC: -1,
			})
			g.names = append(g.names, n.Name+".nic"+strconv.Itoa(r))
			for range np {
				g.Ports = append(g.Ports, Port{Node: nid, Peer: NoPort, Link: NoLink})
			}
		}
	}
	swIdx := 0
	for i, n := range ex.Nodes {
		if kinds[i] != KindSwitch {
			continue
		}
		id[i] = NodeID(len(g.Nodes))
		np := radix[i] + extra[i]
		g.Nodes = append(g.Nodes, Node{
			Kind: KindSwitch, Tier: tiers[i], Index: int32(swIdx), Group: -1,
			FirstPort: PortID(len(g.Ports)), NumPorts: int32(np), Radix: int32(radix[i]),
			Host: -1, Rail: -1, FirstNIC: -1,
		})
		g.names = append(g.names, n.Name)
		for range np {
			g.Ports = append(g.Ports, Port{Node: id[i], Peer: NoPort, Link: NoLink})
		}
		swIdx++
	}

	port := func(e explicitEnd) PortID {
		n := &g.Nodes[id[e.node]]
		if n.Kind == KindHost {
			rail := min(e.slot, int(n.NumNICs)-1) // slots past the NICs are extra ports of the last NIC
			nic := &g.Nodes[n.FirstNIC+NodeID(rail)]
			return nic.FirstPort + PortID(e.slot-rail)
		}
		return n.FirstPort + PortID(e.slot)
	}
	for i, l := range ex.Links {
		a, p := port(ends[i][0]), port(ends[i][1])
		tier, _ := linkTierOf(&g.Nodes[g.Ports[a].Node], &g.Nodes[g.Ports[p].Node])
		length := float32(l.Length)
		if length == 0 {
			length = c.length[tier]
		}
		b.linkWith(a, p, tier, rates[i], length)
	}
	return g, nil
}

// resolveEnd reads "node" or "node:i".
func (s *Spec) resolveEnd(field, v string, byName map[string]int, kinds []Kind, radix []int) (explicitEnd, error) {
	if v == "" {
		return explicitEnd{}, s.bad(field, nil, "missing: want node or node:port")
	}
	name, idx, hasIdx := strings.Cut(v, ":")
	n, ok := byName[name]
	if !ok {
		return explicitEnd{}, s.bad(field, v, "no node named %q in explicit.nodes", name)
	}
	if !hasIdx {
		return explicitEnd{node: n, auto: true}, nil
	}
	what := "ports"
	if kinds[n] == KindHost {
		what = "NICs"
	}
	i, err := strconv.Atoi(idx)
	if err != nil || i < 0 || i >= radix[n] {
		return explicitEnd{}, s.bad(field, v, "%s has %s 0 to %d", name, what, radix[n]-1)
	}
	return explicitEnd{node: n, slot: i}, nil
}

// linkTierOf is the tier of a link between nodes a and b, and whether
// their tiers may be cabled together: a NIC to a leaf (or an untiered
// switch), a leaf to a spine, a spine to a core. An untiered switch may be
// cabled to any switch (LinkOther), and two NICs back to back (LinkOther).
func linkTierOf(a, b *Node) (LinkTier, bool) {
	if a.Kind == KindNIC && b.Kind == KindNIC {
		return LinkOther, true
	}
	if b.Kind == KindNIC {
		a, b = b, a
	}
	if a.Kind != KindNIC && a.Kind != KindSwitch || b.Kind != KindSwitch {
		return LinkOther, false // hosts have no ports
	}
	if a.Kind == KindNIC {
		switch b.Tier {
		case TierNone, TierLeaf:
			return LinkHostLeaf, true
		}
		return LinkOther, false
	}
	if a.Tier == TierNone || b.Tier == TierNone {
		return LinkOther, true
	}
	if a.Tier > b.Tier {
		a, b = b, a
	}
	switch {
	case a.Tier == TierLeaf && b.Tier == TierSpine:
		return LinkLeafSpine, true
	case a.Tier == TierSpine && b.Tier == TierCore:
		return LinkSpineCore, true
	}
	return LinkOther, false
}
