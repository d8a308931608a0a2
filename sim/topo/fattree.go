package topo

import "fmt"

// maxK bounds a fat tree's switch radix so that the size arithmetic below
// cannot overflow; maxPorts stops far smaller trees anyway.
const maxK = 1 << 16

// buildFatTree expands a 2- or 3-tier folded Clos (fabric-sim.md §4.1).
//
// 2 tiers: leaves have down = r·⌊k/(r+1)⌋ host ports and up = ⌊k/(r+1)⌋
// uplinks, one to each of the up spines; a spine's port l goes to leaf l,
// so there are at most k leaves and k·down NICs (k²/2 at 1:1).
//
// 3 tiers (Al-Fares et al.): a pod has k/2 edge (leaf) switches and up
// aggregation (spine) switches, every edge cabled once to every aggregation
// switch of its pod. Aggregation switch j of a pod sends its k/2 uplinks to
// the k/2 core switches of core group j (Al-Fares's "core plane", not a
// fabric plane), one each; core port p goes to pod p, so there are at most
// k pods, k·(k/2)·down NICs (k³/4 at 1:1) and up·k/2 cores (k²/4 at 1:1).
//
// Hosts are in racks, ToR style: host h's gpus_per_host NICs take
// consecutive ports of one leaf, perLeaf = ⌊down/gpus_per_host⌋ hosts a
// leaf, the leaf's down ports past perLeaf·gpus_per_host left unused. A
// host split over two leaves would put its own GPUs' traffic on two
// switches and across racks; no ToR cluster is cabled so. (A rail-optimized
// cluster, NIC i of every host on leaf i, is the superpod kind.)
//
// With planes > 1 the switches and their cables are built once per plane,
// plane by plane, and NIC (h, gpu, plane) takes in its plane the port NIC
// (h, gpu) takes in a single-plane tree.
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
	gpus := ft.GPUsPerHost
	if gpus == 0 {
		gpus = 1
	}
	if gpus < 1 || gpus > down {
		return nil, s.bad("fattree.gpus_per_host", ft.GPUsPerHost,
			"want 1 to %d: a host's NICs go to one leaf, which has %d host ports (%d-port switches at %d:1) (absent: 1)", down, down, k, r)
	}
	planes, err := s.planes("fattree.planes", ft.Planes)
	if err != nil {
		return nil, err
	}
	perLeaf := down / gpus
	maxLeaves := k
	if tiers == 3 {
		maxLeaves = k * half
	}
	maxHosts := maxLeaves * perLeaf
	hosts := ft.Hosts
	sizeField, sizeValue := "fattree.hosts", hosts
	if hosts == 0 {
		hosts = maxHosts
		sizeField, sizeValue = "fattree.k", k
	}
	if hosts < 1 || hosts > maxHosts {
		of := ""
		if gpus > 1 {
			of = fmt.Sprintf(" of %d GPUs, %d a leaf", gpus, perLeaf)
		}
		return nil, s.bad("fattree.hosts", ft.Hosts,
			"want 1 to %s: a %d-tier fat tree of %d-port switches at %d:1 holds at most %s hosts%s (absent: that maximum)",
			commas(maxHosts), tiers, k, r, commas(maxHosts), of)
	}

	leaves := ceilDiv(hosts, perLeaf)
	var spines, cores, pods int
	perGroup := half // cores in a core group
	if tiers == 2 {
		spines = up
		if ft.Compact {
			spines = ceilDiv(up*leaves, k)
		}
	} else {
		pods = ceilDiv(leaves, half)
		spines = pods * up
		if ft.Compact {
			perGroup = ceilDiv(half*pods, k)
		}
		cores = up * perGroup
	}
	switches := leaves + spines + cores
	nics := hosts * gpus * planes
	ports := nics + planes*switches*k
	if err := s.checkSize(sizeField, sizeValue, ports); err != nil {
		return nil, err
	}
	links := hosts*gpus + leaves*up
	if tiers == 3 {
		links += spines * half
	}

	b := newBuilder(c, hosts+nics+planes*switches, ports, planes*links)
	podOfHost := func(int) int32 { return -1 }
	var podOfLeaf, podOfSpine func(int) int32
	if tiers == 3 {
		podOfHost = func(h int) int32 { return int32(h / (half * perLeaf)) }
		podOfLeaf = func(e int) int32 { return int32(e / half) }
		podOfSpine = func(a int) int32 { return int32(a / up) }
	}
	b.hosts(hosts, gpus, planes, podOfHost)
	for plane := range planes {
		b.plane = int32(plane)
		leaf0 := b.switches(leaves, TierLeaf, k, podOfLeaf)
		spine0 := b.switches(spines, TierSpine, k, podOfSpine)
		core0 := b.switches(cores, TierCore, k, nil)

		for h := range hosts {
			leaf, first := leaf0+NodeID(h/perLeaf), h%perLeaf*gpus
			for gpu := range gpus {
				b.link(b.nicPort(h, gpu, plane), b.port(leaf, first+gpu), LinkHostLeaf)
			}
		}
		for e := range leaves {
			if tiers == 2 {
				for j := range up {
					if ft.Compact {
						// Uplinks are dealt round robin over the spines, all
						// leaves' in turn: no spine gets more than its ports,
						// a leaf's spread evenly, parallel where spines < up.
						sp := spine0 + NodeID((e*up+j)%spines)
						b.link(b.port(leaf0+NodeID(e), down+j), b.nextPort(sp), LinkLeafSpine)
						continue
					}
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
				pod, group := a/up, a%up
				for m := range half {
					if ft.Compact {
						// The group's uplinks (one per pod's switch of the
						// group) dealt round robin over its cores.
						co := core0 + NodeID(group*perGroup+(pod*half+m)%perGroup)
						b.link(b.port(spine0+NodeID(a), half+m), b.nextPort(co), LinkSpineCore)
						continue
					}
					b.link(b.port(spine0+NodeID(a), half+m), b.port(core0+NodeID(group*half+m), pod), LinkSpineCore)
				}
			}
		}
	}
	b.g.Tiers = tiers
	return b.g, nil
}
