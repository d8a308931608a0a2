package topo

// maxK bounds a fat tree's switch radix so that the size arithmetic below
// cannot overflow; maxPorts stops far smaller trees anyway.
const maxK = 1 << 16

// buildFatTree expands a 2- or 3-tier folded Clos (fabric-sim.md §4.1).
//
// 2 tiers: leaves have down = r·⌊k/(r+1)⌋ host ports and up = ⌊k/(r+1)⌋
// uplinks, one to each of the up spines; a spine's port l goes to leaf l,
// so there are at most k leaves and k·down hosts (k²/2 at 1:1).
//
// 3 tiers (Al-Fares et al.): a pod has k/2 edge (leaf) switches and up
// aggregation (spine) switches, every edge cabled once to every aggregation
// switch of its pod. Aggregation switch j of a pod sends its k/2 uplinks to
// the k/2 core switches of plane j, one each; core port p goes to pod p, so
// there are at most k pods, k·(k/2)·down hosts (k³/4 at 1:1) and up·k/2
// cores (k²/4 at 1:1).
func (s *Spec) buildFatTree(c linkParams) (*Graph, error) {
	ft := s.FatTree
	tiers := ft.Tiers
	if tiers == 0 {
		tiers = 2
	}
	if tiers != 2 && tiers != 3 {
		return nil, s.bad("fattree.tiers", ft.Tiers, "want 2 or 3 (absent: 2)")
	}
	k := ft.K
	const kWant = "want an even number of ports >= 4"
	if k == 0 {
		return nil, s.bad("fattree.k", nil, "missing: "+kWant)
	}
	if k < 4 || k%2 != 0 || k > maxK {
		return nil, s.bad("fattree.k", k, kWant+" and <= %d", maxK)
	}
	r := ft.Oversubscription
	if r == 0 {
		r = 1
	}
	if r < 1 || r > k-1 {
		return nil, s.bad("fattree.oversubscription", ft.Oversubscription,
			"want r for r:1 at the leaf, 1 <= r <= %d for %d-port leaves (absent: 1, full bisection)", k-1, k)
	}
	up := k / (r + 1)
	down := r * up
	half := k / 2
	maxHosts := k * down
	if tiers == 3 {
		maxHosts = k * half * down
	}
	hosts := ft.Hosts
	sizeField, sizeValue := "fattree.hosts", hosts
	if hosts == 0 {
		hosts = maxHosts
		sizeField, sizeValue = "fattree.k", k
	}
	if hosts < 1 || hosts > maxHosts {
		return nil, s.bad("fattree.hosts", ft.Hosts,
			"want 1 to %s: a %d-tier fat tree of %d-port switches at %d:1 holds at most %s hosts (absent: that maximum)",
			commas(maxHosts), tiers, k, r, commas(maxHosts))
	}

	leaves := ceilDiv(hosts, down)
	var spines, cores, pods int
	if tiers == 2 {
		spines = up
	} else {
		pods = ceilDiv(leaves, half)
		spines = pods * up
		cores = up * half
	}
	switches := leaves + spines + cores
	ports := hosts + switches*k
	if err := s.checkSize(sizeField, sizeValue, ports); err != nil {
		return nil, err
	}
	links := hosts + leaves*up
	if tiers == 3 {
		links += spines * half
	}

	b := newBuilder(c, 2*hosts+switches, ports, links)
	podOfHost := func(int) int32 { return -1 }
	var podOfLeaf, podOfSpine func(int) int32
	if tiers == 3 {
		podOfHost = func(h int) int32 { return int32(h / (half * down)) }
		podOfLeaf = func(e int) int32 { return int32(e / half) }
		podOfSpine = func(a int) int32 { return int32(a / up) }
	}
	b.hosts(hosts, 1, podOfHost)
	leaf0 := b.switches(leaves, TierLeaf, k, podOfLeaf)
	spine0 := b.switches(spines, TierSpine, k, podOfSpine)
	core0 := b.switches(cores, TierCore, k, nil)

	for h := range hosts {
		b.link(b.nicPort(h, 0), b.port(leaf0+NodeID(h/down), h%down), LinkHostLeaf)
	}
	for e := range leaves {
		if tiers == 2 {
			for j := range up {
				b.link(b.port(leaf0+NodeID(e), down+j), b.port(spine0+NodeID(j), e), LinkLeafSpine)
			}
			continue
		}
		pod, pos := e/half, e%half
		for j := range up {
			b.link(b.port(leaf0+NodeID(e), down+j), b.port(spine0+NodeID(pod*up+j), pos), LinkLeafSpine)
		}
	}
	if tiers == 3 {
		for a := range spines {
			pod, plane := a/up, a%up
			for m := range half {
				b.link(b.port(spine0+NodeID(a), half+m), b.port(core0+NodeID(plane*half+m), pod), LinkSpineCore)
			}
		}
	}
	b.g.Tiers = tiers
	return b.g, nil
}

// nicPort is the port of NIC rail of host h.
func (b *builder) nicPort(h, rail int) PortID {
	return b.g.Nodes[b.g.Nodes[h].FirstNIC+NodeID(rail)].FirstPort
}
