package topo

import (
	"fmt"
	"testing"
)

var planeSpecs = []struct{ name, yml string }{
	{"fattree2-k8", "kind: fattree\nfattree: {k: 8%s}\n"},
	{"fattree3-k8", "kind: fattree\nfattree: {tiers: 3, k: 8%s}\n"},
	{"fattree2-k8-3to1-2gpu-partial", "kind: fattree\nfattree: {k: 8, oversubscription: 3, gpus_per_host: 2, hosts: 11%s}\n"},
	{"fattree3-k8-2gpu", "kind: fattree\nfattree: {tiers: 3, k: 8, gpus_per_host: 2%s}\n"},
	{"superpod-1su", "kind: superpod\nrate: 200\nsuperpod: {sus: 1%s}\n"},
	{"superpod-16su", "kind: superpod\nsuperpod: {sus: 16%s}\n"},
	{"superpod-small-core", "kind: superpod\nsuperpod: {sus: 6, node_slots: 2, gpus_per_node: 2, switch_ports: 8, reserved_slots: 0%s}\n"},
}

// TestPlanes builds every spec with 1, 2 and 3 planes and checks that a
// P-plane graph is P copies of the single-plane fabric sharing the hosts:
// the same hosts and GPUs, P times the NICs, switches, ports, links and
// capacity; NICs numbered host, GPU, plane; every plane, node for node,
// port for port and link for link, the single-plane graph; and no cable
// between two planes.
func TestPlanes(t *testing.T) {
	for _, sp := range planeSpecs {
		one := build(t, fmt.Sprintf(sp.yml, ""))
		for _, planes := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/%dplanes", sp.name, planes), func(t *testing.T) {
				g := build(t, fmt.Sprintf(sp.yml, fmt.Sprintf(", planes: %d", planes)))
				mustCheck(t, g)
				c, c1 := g.Counts(), one.Counts()
				p := planes
				got := []int{c.Planes, c.Hosts, c.GPUs, c.GPUsPerHost, c.NICs, c.Tiers}
				want := []int{p, c1.Hosts, c1.GPUs, c1.GPUsPerHost, p * c1.NICs, c1.Tiers}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("planes hosts gpus gpus/host nics tiers = %v, want %v", got, want)
				}
				times := func(tc TierCounts) TierCounts {
					return TierCounts{p * tc.Leaf, p * tc.Spine, p * tc.Core, p * tc.Untiered, p * tc.Total}
				}
				if c.Switches != times(c1.Switches) || c.SwitchPorts != times(c1.SwitchPorts) || c.PortsUsed != times(c1.PortsUsed) {
					t.Errorf("switches %+v ports %+v used %+v; single plane %+v %+v %+v",
						c.Switches, c.SwitchPorts, c.PortsUsed, c1.Switches, c1.SwitchPorts, c1.PortsUsed)
				}
				l1 := c1.Links
				if c.Links != (LinkCounts{p * l1.HostLeaf, p * l1.LeafSpine, p * l1.SpineCore, p * l1.Other, p * l1.Total}) {
					t.Errorf("links %+v, single plane %+v", c.Links, l1)
				}
				r := Rate(p)
				if c.Capacity != (LinkRates{r * c1.Capacity.HostLeaf, r * c1.Capacity.LeafSpine, r * c1.Capacity.SpineCore, 0}) ||
					c.Bisection != r*c1.Bisection {
					t.Errorf("capacity %+v bisection %v; single plane %+v %v", c.Capacity, c.Bisection, c1.Capacity, c1.Bisection)
				}

				gpus := one.GPUsPerHost
				if g.Planes != p || g.GPUsPerHost != gpus || int(g.Nodes[0].NumNICs) != gpus*p {
					t.Fatalf("graph: %d planes, %d GPUs per host, host0 %d NICs", g.Planes, g.GPUsPerHost, g.Nodes[0].NumNICs)
				}
				for i := range g.NumNICs {
					id := NodeID(g.NumHosts + i)
					n := &g.Nodes[id]
					h, gpu, plane := i/(gpus*p), i/p%gpus, i%p
					if n.Kind != KindNIC || int(n.Index) != i || int(n.Host) != h || int(n.Rail) != gpu || int(n.Plane) != plane {
						t.Fatalf("NIC %d: %v index %d host %d rail %d plane %d, want host %d rail %d plane %d",
							i, n.Kind, n.Index, n.Host, n.Rail, n.Plane, h, gpu, plane)
					}
					if g.PlaneNIC(h, gpu, plane) != id || g.GPUNIC(i/p, plane) != id || plane == 0 && g.NIC(h, gpu) != id {
						t.Fatalf("NIC %d: PlaneNIC %d, GPUNIC %d, NIC %d", id, g.PlaneNIC(h, gpu, plane), g.GPUNIC(i/p, plane), g.NIC(h, gpu))
					}
				}
				for l := range g.Links {
					a, b := g.Ports[g.Links[l].A].Node, g.Ports[g.Links[l].B].Node
					if g.Nodes[a].Plane != g.Nodes[b].Plane {
						t.Fatalf("link %s joins planes %d and %d", g.LinkName(LinkID(l)), g.Nodes[a].Plane, g.Nodes[b].Plane)
					}
				}
				for plane := range p {
					planeIsCopy(t, one, g, plane)
				}
			})
		}
	}
}

// planeIsCopy checks that plane of the multi-plane graph g is the
// single-plane graph one: g's NIC (h, gpu, plane) is one's NIC (h, gpu),
// g's plane's switches are one's switches in order, and the plane's links,
// in order, join the same ports with the same rate, length and tier.
func planeIsCopy(t *testing.T, one, g *Graph, plane int) {
	t.Helper()
	p := g.Planes
	sw1 := NodeID(one.NumHosts + one.NumNICs)
	perPlane := len(one.Nodes) - int(sw1)
	sw := NodeID(g.NumHosts + g.NumNICs)
	if len(g.Nodes)-int(sw) != p*perPlane || len(g.Links) != p*len(one.Links) {
		t.Fatalf("%d switches, %d links; single plane %d, %d", len(g.Nodes)-int(sw), len(g.Links), perPlane, len(one.Links))
	}
	node := func(id NodeID) NodeID { // g's node in one
		switch n := &g.Nodes[id]; n.Kind {
		case KindHost:
			return id
		case KindNIC:
			if int(n.Plane) != plane {
				t.Fatalf("%s: plane %d, in a link of plane %d", g.NodeName(id), n.Plane, plane)
			}
			return one.NIC(int(n.Host), int(n.Rail))
		}
		j := int(id - sw)
		if j/perPlane != plane || int(g.Nodes[id].Plane) != plane {
			t.Fatalf("%s (switch %d of %d a plane): plane %d, in a link of plane %d", g.NodeName(id), j, perPlane, g.Nodes[id].Plane, plane)
		}
		return sw1 + NodeID(j%perPlane)
	}
	port := func(q PortID) PortID {
		m := g.Ports[q].Node
		return one.Nodes[node(m)].FirstPort + (q - g.Nodes[m].FirstPort)
	}
	for j := range perPlane {
		a, b := &g.Nodes[sw+NodeID(plane*perPlane+j)], &one.Nodes[sw1+NodeID(j)]
		if a.Kind != b.Kind || a.Tier != b.Tier || a.Index != b.Index || a.Group != b.Group || a.Radix != b.Radix ||
			a.NumPorts != b.NumPorts || int(a.Plane) != plane || b.Plane != 0 {
			t.Fatalf("plane %d switch %d: %+v, single plane %+v", plane, j, *a, *b)
		}
	}
	for l := range one.Links {
		a, b := &g.Links[plane*len(one.Links)+l], &one.Links[l]
		if port(a.A) != b.A || port(a.B) != b.B || a.Rate != b.Rate || a.Length != b.Length || a.Tier != b.Tier {
			t.Fatalf("plane %d link %d: %s %+v, single plane %s %+v", plane, l,
				g.LinkName(LinkID(plane*len(one.Links)+l)), *a, one.LinkName(LinkID(l)), *b)
		}
	}
}

// TestPlaneNames: in a multi-plane graph NICs and switches carry their
// plane, switches numbered within it; single-plane names do not change.
func TestPlaneNames(t *testing.T) {
	g := build(t, "kind: fattree\nfattree: {k: 4, gpus_per_host: 2, planes: 2}\n")
	sw := NodeID(g.NumHosts + g.NumNICs)
	for id, want := range map[NodeID]string{
		g.PlaneNIC(1, 1, 0): "host1.nic1.p0",
		g.PlaneNIC(1, 1, 1): "host1.nic1.p1",
		sw:                  "leaf0.p0",
		sw + 6:              "leaf0.p1", // 4 leaves, 2 spines a plane
		sw + 11:             "spine1.p1",
	} {
		if got := g.NodeName(id); got != want {
			t.Errorf("node %d: %s, want %s", id, got, want)
		}
	}
	if got := g.LinkName(LinkID(len(g.Links) - 1)); got != "leaf3.p1:3 - spine1.p1:3" {
		t.Errorf("last link: %s", got)
	}
	g = build(t, "kind: fattree\nfattree: {k: 4, gpus_per_host: 2}\n")
	if got := g.NodeName(g.NIC(1, 1)) + " " + g.NodeName(NodeID(len(g.Nodes)-1)); got != "host1.nic1 spine1" {
		t.Errorf("single plane: %s", got)
	}
}

// TestPlanesCheck: Check rejects what a multi-plane graph must not have:
// a cable between planes, NICs out of the numbering, planes out of range,
// and a host that reaches the others in one plane only (which a walk
// crossing the hosts between planes would miss).
func TestPlanesCheck(t *testing.T) {
	const spec = "kind: fattree\nfattree: {k: 4, planes: 2}\n"
	// k=4: 8 hosts, 16 NICs (host h's plane-p NIC is node 8+2h+p), then
	// per plane 4 leaves (2 hosts each) and 2 spines.
	for _, c := range []struct {
		name  string
		edit  func(g *Graph)
		wants []string
	}{
		{"switch in the other plane", func(g *Graph) { g.Nodes[8+16+6+1].Plane = 0 }, []string{
			"link host2.nic0.p1 - leaf1.p0:0: joins plane 1 to plane 0; planes are independent fabrics",
			"host host2: cannot reach host host0 in plane 1",
		}},
		{"NIC numbering", func(g *Graph) { g.Nodes[8+2*3+1].Plane = 0 }, []string{
			"node 3: NIC 15 says host 3 rail 0 plane 0, want host 3 rail 0 plane 1",
		}},
		{"plane out of range", func(g *Graph) { g.Nodes[len(g.Nodes)-1].Plane = 5 }, []string{
			"node 35: plane 5, but the graph has 2 planes",
		}},
		{"planes", func(g *Graph) { g.Planes = 0 }, []string{"graph: 0 planes, want 1 to 16"}},
		{"GPUs per host", func(g *Graph) { g.GPUsPerHost = 2 }, []string{"node 0: a host with 2 NICs, want 2 GPUs × 2 planes"}},
		{"cut in one plane", func(g *Graph) {
			// host5's plane-1 NIC loses its cable; its plane-0 NIC still
			// joins it to the others.
			p := g.Nodes[g.PlaneNIC(5, 0, 1)].FirstPort
			q := g.Ports[p].Peer
			g.Ports[p].Peer, g.Ports[p].Link, g.Ports[q].Peer, g.Ports[q].Link = NoPort, NoLink, NoPort, NoLink
		}, []string{"host host5: cannot reach host host0 in plane 1", "nic host5.nic0.p1: not cabled"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := build(t, spec)
			mustCheck(t, g)
			c.edit(g)
			err := g.Check()
			if err == nil {
				t.Fatal("check passed")
			}
			wantContains(t, err.Error(), c.wants...)
		})
	}
}

func TestPlanesErrors(t *testing.T) {
	for _, c := range []struct{ yml, want string }{
		{"kind: fattree\nfattree: {k: 8, planes: -1}\n", "fattree.planes: -1: want 1 to 16 independent planes"},
		{"kind: fattree\nfattree: {k: 8, planes: 17}\n", "fattree.planes: 17: want 1 to 16"},
		{"kind: superpod\nsuperpod: {sus: 1, planes: 32}\n", "superpod.planes: 32: want 1 to 16"},
		// 3,145,728 ports a plane fit; 8 planes do not.
		{"kind: fattree\nfattree: {k: 128, tiers: 3, planes: 8}\n", "fattree.k: 128: the graph would have 25,165,824 ports; the limit is 16,777,216"},
	} {
		wantContains(t, specErr(t, c.yml).Error(), c.want)
	}
}
