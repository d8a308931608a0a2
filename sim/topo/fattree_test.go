package topo

import (
	"fmt"
	"testing"
)

// TestFatTreeFullBisection checks the formulas of fabric-sim.md §4.1:
// 2 tiers hold N = k²/2 hosts on 3k/2 switches (k leaves, k/2 spines),
// 3 tiers N = k³/4 on 5k²/4 (k²/2 edge, k²/2 aggregation, k²/4 core), with
// N links per tier and a bisection of N·B/2.
func TestFatTreeFullBisection(t *testing.T) {
	for _, k := range []int{4, 8, 16, 64} {
		for _, tiers := range []int{2, 3} {
			t.Run(fmt.Sprintf("k%d/%dtier", k, tiers), func(t *testing.T) {
				g := build(t, fmt.Sprintf("kind: fattree\nrate: HDR\nfattree: {tiers: %d, k: %d}\n", tiers, k))
				mustCheck(t, g)
				c := g.Counts()
				n, leaf, spine, core := k*k/2, k, k/2, 0
				if tiers == 3 {
					n, leaf, spine, core = k*k*k/4, k*k/2, k*k/2, k*k/4
				}
				got := []int{c.Hosts, c.NICs, c.Switches.Leaf, c.Switches.Spine, c.Switches.Core, c.Switches.Total,
					c.Links.HostLeaf, c.Links.LeafSpine, c.Links.SpineCore}
				want := []int{n, n, leaf, spine, core, leaf + spine + core, n, n, 0}
				if tiers == 3 {
					want[8] = n
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("hosts nics leaf spine core switches host-leaf leaf-spine spine-core = %v, want %v", got, want)
				}
				if tiers == 2 && c.Switches.Total != 3*k/2 || tiers == 3 && c.Switches.Total != 5*k*k/4 {
					t.Errorf("%d switches", c.Switches.Total)
				}
				if want := Rate(n) * HDR / 2; c.Bisection != want {
					t.Errorf("bisection %v, want %v", c.Bisection, want)
				}
				// A full tree uses every switch port.
				if c.PortsUsed != c.SwitchPorts {
					t.Errorf("ports used %+v of %+v", c.PortsUsed, c.SwitchPorts)
				}
			})
		}
	}
}

// TestFatTreeOversubscribed checks the leaf split r:1: k·r/(r+1) ports
// down and k/(r+1) up when r+1 divides k, r·⌊k/(r+1)⌋ and ⌊k/(r+1)⌋
// (spare ports unused) when it does not, and a bisection of N·B/(2r).
func TestFatTreeOversubscribed(t *testing.T) {
	for _, c := range []struct{ k, r, tiers, down, up int }{
		{64, 3, 2, 48, 16},
		{64, 2, 2, 42, 21},
		{16, 3, 3, 12, 4},
		{8, 1, 2, 4, 4},
	} {
		g := build(t, fmt.Sprintf("kind: fattree\nfattree: {tiers: %d, k: %d, oversubscription: %d}\n", c.tiers, c.k, c.r))
		mustCheck(t, g)
		cnt := g.Counts()
		leaf := &g.Nodes[g.NumHosts+g.NumNICs]
		down, up := 0, 0
		for p := leaf.FirstPort; p < leaf.FirstPort+PortID(leaf.NumPorts); p++ {
			switch q := g.PeerNode(p); {
			case q < 0:
			case g.Nodes[q].Kind == KindNIC:
				down++
			default:
				up++
			}
		}
		if down != c.down || up != c.up {
			t.Errorf("k=%d %d:1: leaf %d down %d up, want %d %d", c.k, c.r, down, up, c.down, c.up)
		}
		maxHosts := c.k * c.down
		if c.tiers == 3 {
			maxHosts = c.k * c.k / 2 * c.down
		}
		if cnt.Hosts != maxHosts || cnt.Links.LeafSpine != cnt.Switches.Leaf*c.up {
			t.Errorf("k=%d %d:1: %d hosts (want %d), %d leaf-spine links", c.k, c.r, cnt.Hosts, maxHosts, cnt.Links.LeafSpine)
		}
		if want := Rate(cnt.Hosts) * NDR / Rate(2*c.r); cnt.Bisection != want {
			t.Errorf("k=%d %d:1: bisection %v, want %v", c.k, c.r, cnt.Bisection, want)
		}
	}
}

// TestFatTreePartial checks trees with fewer hosts than the maximum: hosts
// fill leaves in order, and every spine (and core) is still built.
func TestFatTreePartial(t *testing.T) {
	for _, c := range []struct {
		tiers, k, hosts, leaf, spine, core, leafSpine, spineCore int
	}{
		{2, 8, 13, 4, 4, 0, 16, 0}, // 4 leaves of 4 hosts, the last with 1
		{2, 64, 1000, 32, 32, 0, 1024, 0},
		{3, 8, 40, 10, 12, 16, 40, 48}, // 10 edges in 3 pods; 4 aggregation switches a pod
		{3, 16, 1, 1, 8, 64, 8, 64},
	} {
		g := build(t, fmt.Sprintf("kind: fattree\nfattree: {tiers: %d, k: %d, hosts: %d}\n", c.tiers, c.k, c.hosts))
		mustCheck(t, g)
		cnt := g.Counts()
		got := []int{cnt.Hosts, cnt.Switches.Leaf, cnt.Switches.Spine, cnt.Switches.Core, cnt.Links.HostLeaf, cnt.Links.LeafSpine, cnt.Links.SpineCore}
		want := []int{c.hosts, c.leaf, c.spine, c.core, c.hosts, c.leafSpine, c.spineCore}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%d tiers k=%d %d hosts: hosts leaf spine core host-leaf leaf-spine spine-core = %v, want %v",
				c.tiers, c.k, c.hosts, got, want)
		}
	}
}

func TestFatTreeErrors(t *testing.T) {
	for _, c := range []struct{ yml, want string }{
		{"kind: fattree\nfattree: {k: 63}\n", "fattree.k: 63: want an even number of ports >= 4"},
		{"kind: fattree\nfattree: {k: 2}\n", "fattree.k: 2: want"},
		{"kind: fattree\nfattree: {}\n", "fattree.k: missing"},
		{"kind: fattree\nfattree: {k: 8, tiers: 4}\n", "fattree.tiers: 4: want 2 or 3"},
		{"kind: fattree\nfattree: {k: 8, hosts: 33}\n", "fattree.hosts: 33: want 1 to 32: a 2-tier fat tree of 8-port switches at 1:1 holds at most 32 hosts"},
		{"kind: fattree\nfattree: {k: 8, hosts: -1}\n", "fattree.hosts: -1"},
		{"kind: fattree\nfattree: {k: 8, oversubscription: 8}\n", "fattree.oversubscription: 8: want r for r:1 at the leaf, 1 <= r <= 7"},
		{"kind: fattree\nfattree: {k: 512, tiers: 3}\n", "fattree.k: 512: the graph would have 201,326,592 ports; the limit is 16,777,216"},
	} {
		wantContains(t, specErr(t, c.yml).Error(), c.want)
	}
}

// TestFatTreeStructure checks the wiring of a 3-tier tree: an edge switch
// reaches every aggregation switch of its pod and no other, and an
// aggregation switch j reaches exactly the cores of plane j.
func TestFatTreeStructure(t *testing.T) {
	const k = 8
	g := build(t, fmt.Sprintf("kind: fattree\nfattree: {tiers: 3, k: %d}\n", k))
	for i := range g.Nodes {
		n := &g.Nodes[i]
		if n.Kind != KindSwitch || n.Tier == TierCore {
			continue
		}
		ups := map[NodeID]bool{}
		for p := n.FirstPort; p < n.FirstPort+PortID(n.NumPorts); p++ {
			if q := g.PeerNode(p); q >= 0 && g.Nodes[q].Tier == n.Tier+1 {
				ups[q] = true
				u := &g.Nodes[q]
				switch {
				case n.Tier == TierLeaf && u.Group != n.Group:
					t.Errorf("%s (pod %d) cabled to %s (pod %d)", g.NodeName(NodeID(i)), n.Group, g.NodeName(q), u.Group)
				case n.Tier == TierSpine && int(u.Index)/(k/2) != int(n.Index)%(k/2):
					t.Errorf("%s (plane %d) cabled to %s", g.NodeName(NodeID(i)), int(n.Index)%(k/2), g.NodeName(q))
				}
			}
		}
		if len(ups) != k/2 {
			t.Errorf("%s reaches %d switches above, want %d", g.NodeName(NodeID(i)), len(ups), k/2)
		}
	}
}
