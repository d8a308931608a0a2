package topo

// SuperPOD defaults (DGX H100 SuperPOD RA: 32 DGX per SU, 8 GPUs and 8
// ConnectX-7 per DGX, 64-port Quantum-2 switches, one slot for UFM).
const (
	DefaultNodeSlots     = 32
	DefaultReservedSlots = 1
	DefaultGPUsPerNode   = 8
	DefaultSwitchPorts   = 64
)

// buildSuperPOD expands a rail-optimized SuperPOD (fabric-sim.md §4.2).
//
// Each SU has one leaf per rail; NIC i of the node in slot s of the SU goes
// to port s of the SU's leaf i. A leaf has as many uplinks as node slots
// (ports node_slots .. 2·node_slots-1), so the fabric is non-blocking above
// the leaves.
//
// Two tiers while the spines fit: spines = (all leaf uplinks / switch
// ports) rounded up to a power of two, as in the RA table (1-4 SUs: 4, 8,
// 16, 16 spines), and no more than a leaf has uplinks, so every leaf
// reaches every spine. Uplinks are dealt to the spines round robin over all
// leaves, which spreads each leaf evenly (1 SU: 8 cables from every leaf to
// each of 4 spines) and fills no spine beyond its ports.
//
// Past that (more than 8 SUs of 8 rails at 64 ports) a core tier is added,
// as in the B200 RA (16 SUs: 128 leaves, 128 spines, 64 cores): leaves form
// groups of switch_ports/2; a group has one spine per leaf uplink, every
// leaf cabled once to every spine of its group; a spine has switch_ports/2
// uplinks dealt round robin to the cores of its core group (spine j of
// every group is in core group j), a core group having (all its spines'
// uplinks / switch ports) cores rounded up to a power of two. Beyond
// switch_ports groups a fourth tier would be needed; that is rejected.
//
// With planes > 1 the switches and their cables are built once per plane,
// plane by plane, and NIC (node, gpu, plane) takes in its plane the port
// NIC (node, gpu) takes in a single-plane SuperPOD.
func (s *Spec) buildSuperPOD(c linkParams) (*Graph, error) {
	sp := s.SuperPOD
	if sp.SUs == 0 {
		return nil, s.bad("superpod.sus", nil, "missing: want the number of scalable units, >= 1")
	}
	if sp.SUs < 0 {
		return nil, s.bad("superpod.sus", sp.SUs, "want the number of scalable units, >= 1")
	}
	ports := sp.SwitchPorts
	if ports == 0 {
		ports = DefaultSwitchPorts
	}
	if ports < 4 || ports%2 != 0 || ports > 4096 {
		return nil, s.bad("superpod.switch_ports", sp.SwitchPorts, "want an even number of ports, 4 to 4096 (absent: %d)", DefaultSwitchPorts)
	}
	rails := sp.GPUsPerNode
	if rails == 0 {
		rails = DefaultGPUsPerNode
	}
	if rails < 1 || rails > 1024 {
		return nil, s.bad("superpod.gpus_per_node", sp.GPUsPerNode, "want 1 to 1024 GPUs per node, each with its NIC (absent: %d)", DefaultGPUsPerNode)
	}
	slots := sp.NodeSlots
	if slots == 0 {
		slots = DefaultNodeSlots
	}
	if slots < 1 || 2*slots > ports {
		return nil, s.bad("superpod.node_slots", sp.NodeSlots,
			"want 1 to %d: a %d-port leaf has a port down and a port up per node slot (absent: %d)", ports/2, ports, DefaultNodeSlots)
	}
	half := ports / 2
	// Three tiers hold half·ports leaves (groups of half leaves under
	// ports-port cores). The bound also keeps the arithmetic below from
	// overflowing.
	if maxSUs := half * ports / rails; sp.SUs > maxSUs {
		return nil, s.bad("superpod.sus", sp.SUs,
			"at most %s SUs of %d rails fit three tiers of %d-port switches (%s leaves); a fourth tier is not modelled",
			commas(maxSUs), rails, ports, commas(half*ports))
	}
	planes, err := s.planes("superpod.planes", sp.Planes)
	if err != nil {
		return nil, err
	}
	leaves := sp.SUs * rails
	reserved := DefaultReservedSlots
	if sp.ReservedSlots != nil {
		reserved = *sp.ReservedSlots
	}
	if reserved < 0 || reserved >= sp.SUs*slots {
		return nil, s.bad("superpod.reserved_slots", reserved,
			"want 0 to %d: slots kept free (for UFM) out of the %d SUs' %d (absent: %d)",
			sp.SUs*slots-1, sp.SUs, sp.SUs*slots, DefaultReservedSlots)
	}
	nodes := sp.SUs*slots - reserved

	up := slots // leaf uplinks
	need := ceilDiv(leaves*up, ports)
	tiers, spines, cores, groupLeaves, groupCores := 2, 0, 0, 0, 0
	if need <= up {
		spines = min(nextPow2(need), up)
	} else {
		tiers = 3
		groupLeaves = half
		groups := ceilDiv(leaves, groupLeaves)
		spines = groups * up
		groupNeed := ceilDiv(groups*half, ports)
		// leaves <= half·ports above keeps groupNeed <= half: every spine
		// reaches every core of its core group.
		groupCores = min(nextPow2(groupNeed), half)
		cores = up * groupCores
	}
	switches := leaves + spines + cores
	nics := nodes * rails * planes
	portCount := nics + planes*switches*ports
	if err := s.checkSize("superpod.sus", sp.SUs, portCount); err != nil {
		return nil, err
	}
	links := nodes*rails + leaves*up + spines*half*(tiers-2)

	b := newBuilder(c, nodes+nics+planes*switches, portCount, planes*links)
	b.hosts(nodes, rails, planes, func(h int) int32 { return int32(h / slots) })
	var spineGroup func(int) int32
	if tiers == 3 {
		spineGroup = func(i int) int32 { return int32(i / up) }
	}
	for plane := range planes {
		b.plane = int32(plane)
		leaf0 := b.switches(leaves, TierLeaf, ports, func(l int) int32 { return int32(l / rails) })
		spine0 := b.switches(spines, TierSpine, ports, spineGroup)
		core0 := b.switches(cores, TierCore, ports, nil)

		for h := range nodes {
			su, slot := h/slots, h%slots
			for r := range rails {
				b.link(b.nicPort(h, r, plane), b.port(leaf0+NodeID(su*rails+r), slot), LinkHostLeaf)
			}
		}
		for l := range leaves {
			leaf := leaf0 + NodeID(l)
			for j := range up {
				var spine NodeID
				if tiers == 2 {
					spine = spine0 + NodeID((l*up+j)%spines)
				} else {
					spine = spine0 + NodeID(l/groupLeaves*up+j)
				}
				b.link(b.port(leaf, slots+j), b.nextPort(spine), LinkLeafSpine)
			}
		}
		if tiers == 3 {
			for i := range spines {
				spine := spine0 + NodeID(i)
				g, group := i/up, i%up
				for m := range half {
					core := core0 + NodeID(group*groupCores+(g*half+m)%groupCores)
					b.link(b.port(spine, half+m), b.nextPort(core), LinkSpineCore)
				}
			}
		}
	}
	b.g.Tiers = tiers
	return b.g, nil
}
