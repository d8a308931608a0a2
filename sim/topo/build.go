package topo

import (
	"math/bits"
	"strconv"
	"time"
)

// Build validates the spec and expands it into a graph. Spec errors are
// *FieldError (wrapping ErrSpec) naming the first bad field. Build does not
// run Check: an explicit spec may describe a graph with cabling mistakes,
// and Check is what lists them.
func (s *Spec) Build() (*Graph, error) {
	c, err := s.common()
	if err != nil {
		return nil, err
	}
	blocks := []struct {
		kind  string
		given bool
	}{{"fattree", s.FatTree != nil}, {"superpod", s.SuperPOD != nil}, {"explicit", s.Explicit != nil}}
	for _, b := range blocks {
		if b.given && b.kind != s.Kind {
			return nil, s.bad(b.kind, nil, "block given, but kind is %q; give only the block of the kind", s.Kind)
		}
	}
	var g *Graph
	switch s.Kind {
	case "fattree":
		if s.FatTree == nil {
			return nil, s.bad("fattree", nil, "missing: kind fattree needs a fattree block (at least k)")
		}
		g, err = s.buildFatTree(c)
	case "superpod":
		if s.SuperPOD == nil {
			return nil, s.bad("superpod", nil, "missing: kind superpod needs a superpod block (at least sus)")
		}
		g, err = s.buildSuperPOD(c)
	case "explicit":
		if s.Explicit == nil {
			return nil, s.bad("explicit", nil, "missing: kind explicit needs an explicit block (nodes and links)")
		}
		g, err = s.buildExplicit(c)
	case "":
		return nil, s.bad("kind", nil, "missing: want fattree, superpod or explicit")
	default:
		return nil, s.bad("kind", s.Kind, "want fattree, superpod or explicit")
	}
	if err != nil {
		return nil, err
	}
	g.Name, g.Kind = s.Name, s.Kind
	g.MTU, g.SwitchLatency = c.mtu, c.latency
	return g, nil
}

// linkParams are the spec's link and switch settings with defaults applied.
type linkParams struct {
	rate    Rate
	length  [numLinkTiers]float32
	mtu     int
	latency time.Duration
}

func (s *Spec) common() (linkParams, error) {
	c := linkParams{rate: DefaultRate, mtu: DefaultMTU, latency: DefaultSwitchLatency}
	if s.Rate != "" {
		r, err := ParseRate(s.Rate)
		if err != nil {
			return c, s.bad("rate", s.Rate, rateWant)
		}
		c.rate = r
	}
	lengths := []struct {
		field string
		v     float64
		def   float32
		tier  LinkTier
	}{
		{"cable_m.host_leaf", s.CableM.HostLeaf, defaultHostLeafM, LinkHostLeaf},
		{"cable_m.leaf_spine", s.CableM.LeafSpine, defaultLeafSpineM, LinkLeafSpine},
		{"cable_m.spine_core", s.CableM.SpineCore, defaultSpineCoreM, LinkSpineCore},
	}
	for _, l := range lengths {
		switch {
		case l.v < 0 || l.v > 1e5:
			return c, s.bad(l.field, l.v, "want a cable length in metres, 0 < length <= 100000 (0 or absent: %g)", l.def)
		case l.v == 0:
			c.length[l.tier] = l.def
		default:
			c.length[l.tier] = float32(l.v)
		}
	}
	// Links between untiered switches in explicit topologies default to
	// the leaf-spine length: switch-to-switch cables run between racks.
	c.length[LinkOther] = c.length[LinkLeafSpine]
	if s.SwitchLatency < 0 {
		return c, s.bad("switch_latency", s.SwitchLatency, "want a duration >= 0 (absent: %v)", DefaultSwitchLatency)
	}
	if s.SwitchLatency > 0 {
		c.latency = s.SwitchLatency
	}
	switch s.MTU {
	case 0:
	case 256, 512, 1024, 2048, 4096:
		c.mtu = s.MTU
	default:
		return c, s.bad("mtu", s.MTU, "want an InfiniBand MTU: 256, 512, 1024, 2048 or 4096")
	}
	return c, nil
}

// builder fills a graph whose sizes are known in advance, so that every
// slice is allocated once.
type builder struct {
	g      *Graph
	p      linkParams
	next   []int32 // per node: ports handed out by nextPort
	nicsAt NodeID  // first NIC
	plane  int32   // the plane switches adds to
}

func newBuilder(p linkParams, nodes, ports, links int) *builder {
	g := &Graph{
		Nodes: make([]Node, 0, nodes),
		Ports: make([]Port, 0, ports),
		Links: make([]Link, 0, links),
	}
	return &builder{g: g, p: p, next: make([]int32, nodes)}
}

// hosts adds n hosts of gpus GPUs each, and their NICs, one per GPU and
// plane with one port each, numbered as Graph says. group(h) gives host
// h's group (its SU or pod). It must come first: hosts are nodes 0..n-1.
func (b *builder) hosts(n, gpus, planes int, group func(h int) int32) {
	g := b.g
	nics := gpus * planes
	g.NumHosts, g.NumNICs = n, n*nics
	g.GPUsPerHost, g.Planes = gpus, planes
	b.nicsAt = NodeID(n)
	for h := range n {
		g.Nodes = append(g.Nodes, Node{
			Kind: KindHost, Index: int32(h), Group: group(h),
			FirstPort: PortID(len(g.Ports)), Host: NodeID(h), Rail: -1,
			FirstNIC: b.nicsAt + NodeID(h*nics), NumNICs: int32(nics),
		})
	}
	for h := range n {
		grp := g.Nodes[h].Group
		for i := range nics {
			id := NodeID(len(g.Nodes))
			g.Nodes = append(g.Nodes, Node{
				Kind: KindNIC, Index: int32(h*nics + i), Group: grp,
				FirstPort: PortID(len(g.Ports)), NumPorts: 1, Radix: 1,
				Host: NodeID(h), Rail: int32(i / planes), FirstNIC: -1, Plane: int32(i % planes),
			})
			g.Ports = append(g.Ports, Port{Node: id, Peer: NoPort, Link: NoLink})
		}
	}
}

// switches adds n switches of the tier, in plane b.plane, with radix ports
// each and returns the first one's ID. group(i) gives switch i's group
// (nil: none).
func (b *builder) switches(n int, tier Tier, radix int, group func(i int) int32) NodeID {
	g := b.g
	first := NodeID(len(g.Nodes))
	for i := range n {
		id := NodeID(len(g.Nodes))
		grp := int32(-1)
		if group != nil {
			grp = group(i)
		}
		g.Nodes = append(g.Nodes, Node{
			Kind: KindSwitch, Tier: tier, Index: int32(i), Group: grp,
			FirstPort: PortID(len(g.Ports)), NumPorts: int32(radix), Radix: int32(radix),
			Host: -1, Rail: -1, FirstNIC: -1, Plane: b.plane,
		})
		for range radix {
			g.Ports = append(g.Ports, Port{Node: id, Peer: NoPort, Link: NoLink})
		}
	}
	return first
}

// port returns port i of node n.
func (b *builder) port(n NodeID, i int) PortID { return b.g.Nodes[n].FirstPort + PortID(i) }

// nextPort hands out node n's ports in order, for switches whose ports are
// filled as links arrive.
func (b *builder) nextPort(n NodeID) PortID {
	i := b.next[n]
	b.next[n]++
	return b.g.Nodes[n].FirstPort + PortID(i)
}

// link cables ports a and b (a the lower end) with the tier's rate and
// length.
func (b *builder) link(a, p PortID, tier LinkTier) {
	b.linkWith(a, p, tier, b.p.rate, b.p.length[tier])
}

func (b *builder) linkWith(a, p PortID, tier LinkTier, rate Rate, length float32) {
	g := b.g
	id := LinkID(len(g.Links))
	g.Links = append(g.Links, Link{A: a, B: p, Tier: tier, Rate: rate, Length: length})
	g.Ports[a].Peer, g.Ports[a].Link = p, id
	g.Ports[p].Peer, g.Ports[p].Link = a, id
}

// nicPort is the port of host h's NIC of GPU rail in plane.
func (b *builder) nicPort(h, rail, plane int) PortID {
	return b.g.Nodes[b.g.PlaneNIC(h, rail, plane)].FirstPort
}

// planes reads a spec's planes field: 1 if absent.
func (s *Spec) planes(field string, v int) (int, error) {
	if v == 0 {
		return DefaultPlanes, nil
	}
	if v < 1 || v > maxPlanes {
		return 0, s.bad(field, v, "want 1 to %d independent planes, each GPU's NIC split into one port per plane (absent: %d)", maxPlanes, DefaultPlanes)
	}
	return v, nil
}

// nextPow2 is the smallest power of two >= n (n >= 1).
func nextPow2(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// checkSize rejects graphs over maxPorts before anything is allocated.
func (s *Spec) checkSize(field string, value int, ports int) error {
	if ports > maxPorts || ports < 0 {
		return s.bad(field, value, "the graph would have %s ports; the limit is %s", commas(ports), commas(maxPorts))
	}
	return nil
}

// commas prints n with thousands separators, as the RA tables do.
func commas(n int) string {
	s := strconv.Itoa(n)
	neg := ""
	if n < 0 {
		neg, s = "-", s[1:]
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return neg + s
}
