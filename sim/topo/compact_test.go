package topo

import "testing"

// TestCompact: a compact tree builds only the top-tier switches its hosts
// need, every port of them used, and the graph checks.
func TestCompact(t *testing.T) {
	for _, c := range []struct {
		name                     string
		ft                       FatTree
		leaves, spines, cores    int
		switchToSwitch, topPorts int // links between switch tiers; ports used on each top switch
	}{
		// 4,096 GPUs as 512 hosts × 8 under 64 leaves of 128 ports: 32
		// spines instead of 64, two cables from every leaf to each.
		{"2-tier k=128", FatTree{Tiers: 2, K: 128, Hosts: 512, GPUsPerHost: 8, Compact: true}, 64, 32, 0, 64 * 64, 128},
		// The same on 64-port switches in 3 tiers: 4 pods of 32 edges and 32
		// aggregation switches, 64 cores (2 per group) instead of 1,024.
		{"3-tier k=64", FatTree{Tiers: 3, K: 64, Hosts: 512, GPUsPerHost: 8, Compact: true}, 128, 128, 64, 128*32 + 128*32, 64},
		// A full tree is the same compact or not.
		{"3-tier k=8 full", FatTree{Tiers: 3, K: 8, Compact: true}, 32, 32, 16, 32*4 + 32*4, 8},
	} {
		g, err := (&Spec{Kind: "fattree", FatTree: &c.ft}).Build()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if err := g.Check(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		n := g.Counts()
		if n.Switches.Leaf != c.leaves || n.Switches.Spine != c.spines || n.Switches.Core != c.cores {
			t.Errorf("%s: %d leaves, %d spines, %d cores; want %d, %d, %d", c.name, n.Switches.Leaf, n.Switches.Spine, n.Switches.Core, c.leaves, c.spines, c.cores)
		}
		if got := n.Links.Of(LinkLeafSpine) + n.Links.Of(LinkSpineCore); got != c.switchToSwitch {
			t.Errorf("%s: %d switch-to-switch links, want %d", c.name, got, c.switchToSwitch)
		}
		top := TierSpine
		if c.cores > 0 {
			top = TierCore
		}
		for id := range g.Nodes {
			nd := &g.Nodes[id]
			if nd.Kind != KindSwitch || nd.Tier != top {
				continue
			}
			used := 0
			for p := nd.FirstPort; p < nd.FirstPort+PortID(nd.NumPorts); p++ {
				if g.Ports[p].Link != NoLink {
					used++
				}
			}
			if used != c.topPorts {
				t.Errorf("%s: %s uses %d ports, want %d", c.name, g.NodeName(NodeID(id)), used, c.topPorts)
			}
		}
		full := c.ft
		full.Compact = false
		gf, err := (&Spec{Kind: "fattree", FatTree: &full}).Build()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d switches compact, %d full", c.name, n.Switches.Total, gf.Counts().Switches.Total)
	}
}
