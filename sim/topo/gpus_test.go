package topo

import (
	"fmt"
	"testing"
)

// TestFatTreeGPUsPerHost checks ToR-style hosts of several GPUs: a leaf
// takes ⌊down/gpus⌋ whole hosts, a host's NICs sit on consecutive ports of
// one leaf, the down ports left over stay uncabled, the uplinks keep their
// ports, and the counts follow (GPUs = NICs = hosts × gpus).
func TestFatTreeGPUsPerHost(t *testing.T) {
	for _, c := range []struct {
		tiers, k, r, gpus, hosts          int // hosts 0: the most the tree holds
		perLeaf, spare, wantHosts, leaves int
		spines, cores                     int
	}{
		{2, 64, 1, 8, 0, 4, 0, 256, 64, 32, 0},        // 32 down: 4 hosts, no spare
		{2, 64, 2, 8, 0, 5, 2, 320, 64, 21, 0},        // 42 down: 5 hosts, 2 spare
		{2, 64, 3, 8, 0, 6, 0, 384, 64, 16, 0},        // 48 down: 6 hosts
		{2, 8, 1, 3, 0, 1, 1, 8, 8, 4, 0},             // 4 down: 1 host of 3, 1 spare
		{2, 8, 1, 2, 13, 2, 0, 13, 7, 4, 0},           // partial: the last leaf holds 1 host
		{3, 8, 1, 2, 10, 2, 0, 10, 5, 8, 16},          // partial: 5 edges in 2 pods
		{3, 16, 1, 3, 0, 2, 2, 256, 128, 128, 64},     // 8 down: 2 hosts of 3, 2 spare
		{2, 64, 1, 32, 0, 1, 0, 64, 64, 32, 0},        // one host fills a leaf
		{2, 64, 1, 1, 0, 32, 0, 2048, 64, 32, 0},      // the default
		{3, 64, 1, 8, 512, 4, 0, 512, 128, 128, 1024}, // 4,096 GPUs in 3 tiers: 4 pods
	} {
		name := fmt.Sprintf("%dtier-k%d-%dto1-%dgpu-%dhosts", c.tiers, c.k, c.r, c.gpus, c.hosts)
		t.Run(name, func(t *testing.T) {
			g := build(t, fmt.Sprintf("kind: fattree\nfattree: {tiers: %d, k: %d, oversubscription: %d, gpus_per_host: %d, hosts: %d}\n",
				c.tiers, c.k, c.r, c.gpus, c.hosts))
			mustCheck(t, g)
			cnt := g.Counts()
			got := []int{cnt.Hosts, cnt.GPUs, cnt.NICs, cnt.GPUsPerHost, cnt.Planes, cnt.Switches.Leaf, cnt.Switches.Spine, cnt.Switches.Core, cnt.Links.HostLeaf}
			n := c.wantHosts * c.gpus
			want := []int{c.wantHosts, n, n, c.gpus, 1, c.leaves, c.spines, c.cores, n}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("hosts gpus nics gpus/host planes leaf spine core host-leaf = %v, want %v", got, want)
			}
			if g.GPUsPerHost != c.gpus || g.Planes != 1 {
				t.Errorf("graph: %d GPUs per host, %d planes", g.GPUsPerHost, g.Planes)
			}
			up := c.k / (c.r + 1)
			down := c.r * up
			for h := range g.NumHosts {
				host := &g.Nodes[h]
				if int(host.NumNICs) != c.gpus {
					t.Fatalf("host %d: %d NICs", h, host.NumNICs)
				}
				leaf := NodeID(-1)
				for gpu := range c.gpus {
					nic := g.NIC(h, gpu)
					n := &g.Nodes[nic]
					if n.Host != NodeID(h) || int(n.Rail) != gpu || n.Plane != 0 || int(nic) != g.NumHosts+h*c.gpus+gpu {
						t.Fatalf("%s: node %d, host %d rail %d plane %d", g.NodeName(nic), nic, n.Host, n.Rail, n.Plane)
					}
					q := g.Ports[n.FirstPort].Peer
					l := g.Ports[q].Node
					if leaf < 0 {
						leaf = l
					}
					if l != leaf {
						t.Fatalf("host %d straddles %s and %s", h, g.NodeName(leaf), g.NodeName(l))
					}
					if int(g.Nodes[l].Index) != h/c.perLeaf || int(q-g.Nodes[l].FirstPort) != h%c.perLeaf*c.gpus+gpu {
						t.Fatalf("%s on %s, want leaf%d:%d", g.NodeName(nic), g.PortName(q), h/c.perLeaf, h%c.perLeaf*c.gpus+gpu)
					}
				}
			}
			// The first leaf is full: its hosts' ports, then the spare
			// ones uncabled, then the uplinks (and any port r:1 leaves over).
			leaf := &g.Nodes[g.NumHosts+g.NumNICs]
			spare, ups := 0, 0
			for i := range int(leaf.NumPorts) {
				p := leaf.FirstPort + PortID(i)
				peer := g.PeerNode(p)
				switch {
				case i < c.perLeaf*c.gpus:
					if peer < 0 || g.Nodes[peer].Kind != KindNIC {
						t.Fatalf("%s: not a NIC", g.PortName(p))
					}
				case i < down:
					if peer >= 0 {
						t.Fatalf("%s: a spare port cabled to %s", g.PortName(p), g.NodeName(peer))
					}
					spare++
				case i < down+up:
					if peer < 0 || g.Nodes[peer].Tier != TierSpine {
						t.Fatalf("%s: not an uplink", g.PortName(p))
					}
					ups++
				default: // k not a multiple of r+1: unused, as with one GPU
					if peer >= 0 {
						t.Fatalf("%s: past the uplinks, cabled to %s", g.PortName(p), g.NodeName(peer))
					}
				}
			}
			if spare != c.spare || ups != up {
				t.Errorf("leaf0: %d spare ports, %d uplinks; want %d, %d", spare, ups, c.spare, up)
			}
		})
	}
}

// TestFatTree2TierK64GPUs is the planning question of a ToR cluster of
// 8-GPU hosts on 64-port switches: two tiers at 1:1 hold 4 hosts a leaf,
// 256 hosts (2,048 GPUs, as many as single-GPU hosts), so 512 hosts (4,096
// GPUs) need 128-port switches or three tiers; the error says the limit.
func TestFatTree2TierK64GPUs(t *testing.T) {
	g := build(t, "kind: fattree\nfattree: {k: 64, gpus_per_host: 8}\n")
	mustCheck(t, g)
	if c := g.Counts(); c.Hosts != 256 || c.GPUs != 2048 || c.Switches.Total != 96 || c.PortsUsed != c.SwitchPorts {
		t.Errorf("2-tier k=64, 8 GPUs: %d hosts, %d GPUs, %d switches, ports used %+v of %+v",
			c.Hosts, c.GPUs, c.Switches.Total, c.PortsUsed, c.SwitchPorts)
	}
	wantContains(t, specErr(t, "kind: fattree\nfattree: {k: 64, gpus_per_host: 8, hosts: 512}\n").Error(),
		"fattree.hosts: 512: want 1 to 256: a 2-tier fat tree of 64-port switches at 1:1 holds at most 256 hosts of 8 GPUs, 4 a leaf")
	g = build(t, "kind: fattree\nfattree: {k: 128, gpus_per_host: 8, hosts: 512}\n")
	mustCheck(t, g)
	if c := g.Counts(); c.GPUs != 4096 || c.Switches.Leaf != 64 || c.Switches.Spine != 64 {
		t.Errorf("2-tier k=128, 512 hosts of 8 GPUs: %+v", c)
	}
}

func TestFatTreeGPUsErrors(t *testing.T) {
	for _, c := range []struct{ yml, want string }{
		{"kind: fattree\nfattree: {k: 64, gpus_per_host: 33}\n",
			"fattree.gpus_per_host: 33: want 1 to 32: a host's NICs go to one leaf, which has 32 host ports (64-port switches at 1:1)"},
		{"kind: fattree\nfattree: {k: 64, oversubscription: 3, gpus_per_host: 49}\n", "fattree.gpus_per_host: 49: want 1 to 48"},
		{"kind: fattree\nfattree: {k: 8, gpus_per_host: -2}\n", "fattree.gpus_per_host: -2: want 1 to 4"},
		{"kind: fattree\nfattree: {k: 8, tiers: 3, gpus_per_host: 3, hosts: 33}\n",
			"fattree.hosts: 33: want 1 to 32: a 3-tier fat tree of 8-port switches at 1:1 holds at most 32 hosts of 3 GPUs, 1 a leaf"},
	} {
		wantContains(t, specErr(t, c.yml).Error(), c.want)
	}
}
