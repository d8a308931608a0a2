package topo

import (
	"fmt"
	"strings"
)

// Counts summarises a graph: what a cluster plan is priced and sized by.
type Counts struct {
	Name  string `json:"name,omitempty"`
	Kind  string `json:"kind"`
	Tiers int    `json:"tiers"` // switch levels of a generated topology; 0 for explicit
	Hosts int    `json:"hosts"`
	GPUs  int    `json:"gpus"` // NICs / planes: GPU i of a host uses NIC i of each plane
	NICs  int    `json:"nics"` // NIC nodes, one per GPU and plane (a NIC's port in each plane)
	// Planes is the number of independent switch fabrics (1 unless the spec
	// sets planes); the switch and link counts are over all of them.
	Planes int `json:"planes"`
	// GPUsPerHost is the GPUs of every host; 0 for an explicit topology
	// whose hosts differ.
	GPUsPerHost int `json:"gpus_per_host"`

	Switches    TierCounts `json:"switches"`
	SwitchPorts TierCounts `json:"switch_ports"` // ports the switches have
	PortsUsed   TierCounts `json:"switch_ports_used"`

	Links    LinkCounts `json:"links"`
	Capacity LinkRates  `json:"capacity_bps"` // sum of the links' rates per tier, one direction

	// Bisection is half the smallest capacity between adjacent levels
	// (NICs-leaves, leaves-spines, spines-cores), one direction: the
	// bandwidth across a cut of the hosts into halves that each keep half
	// of every level. For the trees built here, which are symmetric, that
	// is the bisection bandwidth: N·B/2 at full bisection, N·B/(2r) at r:1
	// at the leaf, summed over the planes (N NICs of B each). 0 for
	// explicit topologies, where no such cut is implied.
	Bisection Rate `json:"bisection_bps"`

	MTU             int   `json:"mtu"`
	SwitchLatencyNS int64 `json:"switch_latency_ns"`
}

// TierCounts counts switches (or their ports) per tier.
type TierCounts struct {
	Leaf     int `json:"leaf"`
	Spine    int `json:"spine"`
	Core     int `json:"core"`
	Untiered int `json:"untiered"`
	Total    int `json:"total"`
}

func (t *TierCounts) add(tier Tier, n int) {
	switch tier {
	case TierLeaf:
		t.Leaf += n
	case TierSpine:
		t.Spine += n
	case TierCore:
		t.Core += n
	default:
		t.Untiered += n
	}
	t.Total += n
}

// LinkCounts counts links per link tier.
type LinkCounts struct {
	HostLeaf  int `json:"host_leaf"`
	LeafSpine int `json:"leaf_spine"`
	SpineCore int `json:"spine_core"`
	Other     int `json:"other"`
	Total     int `json:"total"`
}

// Of returns the count of one link tier.
func (l LinkCounts) Of(t LinkTier) int {
	return [...]int{l.HostLeaf, l.LeafSpine, l.SpineCore, l.Other}[t]
}

// LinkRates sums link rates per link tier.
type LinkRates struct {
	HostLeaf  Rate `json:"host_leaf"`
	LeafSpine Rate `json:"leaf_spine"`
	SpineCore Rate `json:"spine_core"`
	Other     Rate `json:"other"`
}

// Of returns the capacity of one link tier.
func (l LinkRates) Of(t LinkTier) Rate {
	return [...]Rate{l.HostLeaf, l.LeafSpine, l.SpineCore, l.Other}[t]
}

// Counts counts the graph's hosts, NICs, switches and links. It does not
// validate the graph; a graph that fails Check is counted as it is.
func (g *Graph) Counts() Counts {
	c := Counts{
		Name: g.Name, Kind: g.Kind, Tiers: g.Tiers,
		Hosts: g.NumHosts, NICs: g.NumNICs, GPUs: g.NumNICs / g.planes(),
		Planes: g.planes(), GPUsPerHost: g.GPUsPerHost,
		MTU: g.MTU, SwitchLatencyNS: g.SwitchLatency.Nanoseconds(),
	}
	for i := g.NumHosts + g.NumNICs; i < len(g.Nodes); i++ {
		n := &g.Nodes[i]
		c.Switches.add(n.Tier, 1)
		c.SwitchPorts.add(n.Tier, int(n.Radix))
		used := 0
		for p := n.FirstPort; p < n.FirstPort+PortID(n.NumPorts); p++ {
			if g.Ports[p].Link != NoLink {
				used++
			}
		}
		c.PortsUsed.add(n.Tier, used)
	}
	var links [numLinkTiers]int
	var capacity [numLinkTiers]Rate
	for i := range g.Links {
		l := &g.Links[i]
		t := min(l.Tier, LinkOther)
		links[t]++
		capacity[t] += l.Rate
	}
	c.Links = LinkCounts{HostLeaf: links[LinkHostLeaf], LeafSpine: links[LinkLeafSpine],
		SpineCore: links[LinkSpineCore], Other: links[LinkOther], Total: len(g.Links)}
	c.Capacity = LinkRates{HostLeaf: capacity[LinkHostLeaf], LeafSpine: capacity[LinkLeafSpine],
		SpineCore: capacity[LinkSpineCore], Other: capacity[LinkOther]}
	if g.Tiers > 0 {
		cut := capacity[LinkHostLeaf]
		for t := LinkLeafSpine; t < LinkTier(g.Tiers); t++ {
			cut = min(cut, capacity[t])
		}
		c.Bisection = cut / 2
	}
	return c
}

// Shape is the kind and switch tiers of the topology, as reports name it:
// "fattree, 3 switch tiers", or for an explicit one the tiers its
// switches declare, "explicit, 2 switch tiers: leaf, spine" (untiered
// switches are listed but not counted as a tier).
func (c Counts) Shape() string {
	if c.Tiers > 0 {
		return fmt.Sprintf("%s, %d switch tiers", c.Kind, c.Tiers)
	}
	var tiers []string
	for _, t := range []struct {
		name string
		n    int
	}{{"leaf", c.Switches.Leaf}, {"spine", c.Switches.Spine}, {"core", c.Switches.Core}, {"untiered", c.Switches.Untiered}} {
		if t.n > 0 {
			tiers = append(tiers, t.name)
		}
	}
	if len(tiers) == 0 {
		return c.Kind + ", no switches"
	}
	n := len(tiers)
	if c.Switches.Untiered > 0 {
		n--
	}
	s := "s"
	if n == 1 {
		s = ""
	}
	return fmt.Sprintf("%s, %d switch tier%s: %s", c.Kind, n, s, strings.Join(tiers, ", "))
}
