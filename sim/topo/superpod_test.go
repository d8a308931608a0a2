package topo

import (
	"fmt"
	"testing"
)

// TestSuperPODH100RA checks the scalable-unit counts against NVIDIA's DGX
// SuperPOD H100 reference architecture (fabric-sim.md §4.2, RA Table 4).
// The RA's node/UFM-leaf cable column also counts UFM's own 4 cables
// (252 = 31·8 + 4); the graph does not model UFM, so its node-leaf links
// are nodes×8.
func TestSuperPODH100RA(t *testing.T) {
	for _, ra := range []struct {
		sus, nodes, gpus, leaf, spine, raNodeLeaf, leafSpine int
	}{
		{1, 31, 248, 8, 4, 252, 256},
		{2, 63, 504, 16, 8, 508, 512},
		{3, 95, 760, 24, 16, 764, 768},
		{4, 127, 1016, 32, 16, 1020, 1024},
	} {
		t.Run(fmt.Sprintf("%dSU", ra.sus), func(t *testing.T) {
			g := build(t, fmt.Sprintf("kind: superpod\nsuperpod: {sus: %d}\n", ra.sus))
			mustCheck(t, g)
			c := g.Counts()
			got := []int{c.Hosts, c.GPUs, c.NICs, c.Switches.Leaf, c.Switches.Spine, c.Switches.Core,
				c.Links.HostLeaf, c.Links.LeafSpine, c.Links.SpineCore, c.Tiers}
			want := []int{ra.nodes, ra.gpus, ra.gpus, ra.leaf, ra.spine, 0,
				ra.nodes * 8, ra.leafSpine, 0, 2}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("hosts gpus nics leaf spine core node-leaf leaf-spine spine-core tiers = %v, want %v", got, want)
			}
			if ra.raNodeLeaf != c.Links.HostLeaf+4 {
				t.Errorf("RA node/UFM-leaf cables %d != %d node-leaf links + 4 UFM cables", ra.raNodeLeaf, c.Links.HostLeaf)
			}
			// Non-blocking above the leaves: bisection is half the NICs' rate.
			if want := Rate(ra.gpus) * NDR / 2; c.Bisection != want {
				t.Errorf("bisection %v, want %v", c.Bisection, want)
			}
		})
	}
}

// TestSuperPODSpineRule checks the rule the spine counts follow: the
// leaves' uplinks over the switch ports, rounded up to a power of two.
func TestSuperPODSpineRule(t *testing.T) {
	for sus := 1; sus <= 8; sus++ {
		g := build(t, fmt.Sprintf("kind: superpod\nsuperpod: {sus: %d}\n", sus))
		mustCheck(t, g)
		uplinks := sus * 8 * 32
		if got, want := g.Counts().Switches.Spine, nextPow2(ceilDiv(uplinks, 64)); got != want {
			t.Errorf("%d SUs: %d spines, want %d", sus, got, want)
		}
	}
}

// TestSuperPODB200RA checks the larger SuperPODs of the B200 RA table
// (fabric-sim.md §4.2), which count every slot as a node: up to 8 SUs in
// two tiers, a core tier from 16.
func TestSuperPODB200RA(t *testing.T) {
	for _, ra := range []struct {
		sus, nodes, gpus, leaf, spine, core, nodeLeaf, leafSpine, spineCore int
	}{
		{2, 64, 512, 16, 8, 0, 512, 512, 0},
		{4, 128, 1024, 32, 16, 0, 1024, 1024, 0},
		{8, 256, 2048, 64, 32, 0, 2048, 2048, 0},
		{16, 512, 4096, 128, 128, 64, 4096, 4096, 4096},
		{32, 1024, 8192, 256, 256, 128, 8192, 8192, 8192},
		{64, 2048, 16384, 512, 512, 256, 16384, 16384, 16384},
	} {
		t.Run(fmt.Sprintf("%dSU", ra.sus), func(t *testing.T) {
			g := build(t, fmt.Sprintf("kind: superpod\nsuperpod: {sus: %d, reserved_slots: 0}\n", ra.sus))
			mustCheck(t, g)
			c := g.Counts()
			got := []int{c.Hosts, c.GPUs, c.Switches.Leaf, c.Switches.Spine, c.Switches.Core,
				c.Links.HostLeaf, c.Links.LeafSpine, c.Links.SpineCore}
			want := []int{ra.nodes, ra.gpus, ra.leaf, ra.spine, ra.core, ra.nodeLeaf, ra.leafSpine, ra.spineCore}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("nodes gpus leaf spine core node-leaf leaf-spine spine-core = %v, want %v", got, want)
			}
			if want := Rate(ra.gpus) * NDR / 2; c.Bisection != want {
				t.Errorf("bisection %v, want %v", c.Bisection, want)
			}
		})
	}
}

// TestSuperPOD1024GPUs is the 1,024-GPU cluster: 4 SUs hold 128 node
// slots, one of which the RA keeps for UFM (127 nodes, 1,016 GPUs);
// reserved_slots: 0 gives all 128.
func TestSuperPOD1024GPUs(t *testing.T) {
	g := build(t, "kind: superpod\nsuperpod: {sus: 4}\n")
	if c := g.Counts(); c.GPUs != 1016 {
		t.Errorf("4 SUs with the UFM slot: %d GPUs, want 1016", c.GPUs)
	}
	g = build(t, "kind: superpod\nsuperpod: {sus: 4, reserved_slots: 0}\n")
	mustCheck(t, g)
	if c := g.Counts(); c.Hosts != 128 || c.GPUs != 1024 {
		t.Errorf("4 SUs, no reserved slot: %d hosts, %d GPUs, want 128, 1024", c.Hosts, c.GPUs)
	}
}

// TestSuperPODRails checks the rail layout: GPU i of every node uses NIC i,
// which is cabled to leaf i of the node's SU at the node's slot, so
// same-rail traffic inside an SU crosses one switch; and every leaf
// reaches every spine (2 tiers) or every spine of its group (3 tiers).
func TestSuperPODRails(t *testing.T) {
	for _, sus := range []int{1, 3, 16} {
		g := build(t, fmt.Sprintf("kind: superpod\nsuperpod: {sus: %d}\n", sus))
		for h := range g.NumHosts {
			host := &g.Nodes[h]
			if host.NumNICs != 8 || int(host.Group) != h/32 {
				t.Fatalf("%d SUs: host %d: %d NICs, SU %d", sus, h, host.NumNICs, host.Group)
			}
			for r := range 8 {
				nic := g.NIC(h, r)
				if n := &g.Nodes[nic]; n.Rail != int32(r) || n.Host != NodeID(h) {
					t.Fatalf("%d SUs: %s: rail %d host %d", sus, g.NodeName(nic), n.Rail, n.Host)
				}
				p := g.Nodes[nic].FirstPort
				leaf := g.PeerNode(p)
				ln := &g.Nodes[leaf]
				if ln.Tier != TierLeaf || ln.Group != host.Group || int(ln.Index)%8 != r || int(g.Ports[p].Peer-ln.FirstPort) != h%32 {
					t.Fatalf("%d SUs: %s goes to %s (SU %d), want rail %d leaf of SU %d at port %d",
						sus, g.NodeName(nic), g.PortName(g.Ports[p].Peer), ln.Group, r, host.Group, h%32)
				}
			}
		}
		spines := map[NodeID]map[NodeID]bool{} // leaf -> spines it reaches
		groupSpines := map[int32]int{}
		for i := range g.Nodes {
			n := &g.Nodes[i]
			if n.Tier == TierSpine {
				groupSpines[n.Group]++
			}
			if n.Tier != TierLeaf {
				continue
			}
			spines[NodeID(i)] = map[NodeID]bool{}
			for p := n.FirstPort; p < n.FirstPort+PortID(n.NumPorts); p++ {
				if q := g.PeerNode(p); q >= 0 && g.Nodes[q].Tier == TierSpine {
					spines[NodeID(i)][q] = true
				}
			}
		}
		for leaf, s := range spines {
			want := groupSpines[-1]
			if g.Tiers == 3 {
				want = groupSpines[int32(g.Nodes[leaf].Index)/32]
			}
			if len(s) != want {
				t.Errorf("%d SUs: %s reaches %d spines, want %d", sus, g.NodeName(leaf), len(s), want)
			}
		}
	}
}

func TestSuperPODErrors(t *testing.T) {
	for _, c := range []struct{ yml, want string }{
		{"kind: superpod\nsuperpod: {}\n", "superpod.sus: missing"},
		{"kind: superpod\nsuperpod: {sus: -1}\n", "superpod.sus: -1: want"},
		{"kind: superpod\nsuperpod: {sus: 300}\n", "superpod.sus: 300: at most 256 SUs of 8 rails fit three tiers of 64-port switches"},
		{"kind: superpod\nsuperpod: {sus: 1, node_slots: 40}\n", "superpod.node_slots: 40: want 1 to 32"},
		{"kind: superpod\nsuperpod: {sus: 1, reserved_slots: 32}\n", "superpod.reserved_slots: 32: want 0 to 31"},
		{"kind: superpod\nsuperpod: {sus: 1, switch_ports: 63}\n", "superpod.switch_ports: 63: want an even number"},
		{"kind: superpod\nsuperpod: {sus: 1, gpus_per_node: -8}\n", "superpod.gpus_per_node: -8"},
		{"kind: superpod\n", "superpod: missing"},
		{"kind: superpod\nsuperpod: {sus: 1}\nfattree: {k: 4}\n", `fattree: block given, but kind is "superpod"`},
	} {
		wantContains(t, specErr(t, c.yml).Error(), c.want)
	}
	// The largest SuperPOD three tiers hold builds and checks.
	g := build(t, "kind: superpod\nsuperpod: {sus: 256, reserved_slots: 0}\n")
	mustCheck(t, g)
	if c := g.Counts(); c.Hosts != 8192 || c.Switches.Core != 1024 || c.PortsUsed.Total != c.SwitchPorts.Total {
		t.Errorf("256 SUs: %+v", c)
	}
}
