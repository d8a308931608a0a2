package topo

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// checkErr builds yml and returns Check's problems, failing the test if
// Check passes.
func checkErr(t *testing.T, yml string) *CheckError {
	t.Helper()
	g := build(t, yml)
	err := g.Check()
	var ce *CheckError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCheck) {
		t.Fatalf("check of\n%s\nreturned %v, want a *CheckError", yml, err)
	}
	return ce
}

const explicitHead = `kind: explicit
explicit:
  nodes:
    - {name: h0, kind: host}
    - {name: h1, kind: host}
    - {name: sw0, kind: switch, ports: 4, tier: leaf}
`

func TestExplicitGood(t *testing.T) {
	g := build(t, explicitHead+`    - {name: h2, kind: host, ports: 2}
    - {name: sw1, kind: switch, ports: 4, tier: leaf}
    - {name: s0, kind: switch, ports: 4, tier: spine}
  links:
    - {a: h0, b: sw0}
    - {a: h1, b: sw0:3}
    - {a: h2, b: sw1, rate: HDR}
    - {a: h2:1, b: sw1, length: 7.5}
    - {a: sw0, b: s0}
    - {a: sw1, b: s0:3}
`)
	mustCheck(t, g)
	c := g.Counts()
	got := fmt.Sprint(c.Hosts, c.NICs, c.Switches.Leaf, c.Switches.Spine, c.Links.HostLeaf, c.Links.LeafSpine, c.Bisection)
	if want := "3 4 2 1 4 2 0 b/s"; got != want {
		t.Errorf("hosts nics leaf spine host-leaf leaf-spine bisection = %s, want %s", got, want)
	}
	// Ends without an index take the first port no link names: h1 named
	// sw0:3, so sw0's uplink (the next auto end) is port 1.
	for l, want := range []string{"h0.nic0 - sw0:0", "h1.nic0 - sw0:3", "h2.nic0 - sw1:0", "h2.nic1 - sw1:1", "sw0:1 - s0:0", "sw1:2 - s0:3"} {
		if got := g.LinkName(LinkID(l)); got != want {
			t.Errorf("link %d: %s, want %s", l, got, want)
		}
	}
	if l := g.Links[2]; l.Rate != HDR || l.Length != defaultHostLeafM || l.Tier != LinkHostLeaf {
		t.Errorf("link 2: %+v, want HDR, 3 m, host-leaf", l)
	}
	if l := g.Links[3]; l.Rate != NDR || l.Length != 7.5 {
		t.Errorf("link 3: %+v, want NDR, 7.5 m", l)
	}
	if l := g.Links[4]; l.Length != defaultLeafSpineM || l.Tier != LinkLeafSpine {
		t.Errorf("link 4: %+v, want 20 m, leaf-spine", l)
	}
}

// TestCheckFindsProblems builds broken explicit topologies and checks that
// Check names the element in each problem.
func TestCheckFindsProblems(t *testing.T) {
	for _, c := range []struct {
		name, links string
		extraNodes  string
		want        []string
	}{
		{name: "over-subscribed ports",
			extraNodes: "    - {name: h2, kind: host}\n    - {name: sw1, kind: switch, ports: 2}\n",
			links:      "    - {a: h0, b: sw1}\n    - {a: h1, b: sw1}\n    - {a: h2, b: sw1}\n    - {a: sw0, b: h0}\n",
			want:       []string{"switch sw1: 3 cables on 2 ports", "nic h0.nic0: 2 cables on 1 port"}},
		{name: "duplicate link",
			links: "    - {a: h0:0, b: sw0:0}\n    - {a: h1, b: sw0}\n    - {a: h0:0, b: sw0:0}\n",
			want:  []string{"link h0.nic0 - sw0:0: a duplicate cable between the same two ports (links 0 and 2)"}},
		{name: "port cabled twice",
			links: "    - {a: h0, b: sw0:2}\n    - {a: h1, b: sw0:2}\n",
			want:  []string{"port sw0:2: cabled twice, by links 0 (h0.nic0 - sw0:2) and 1 (h1.nic0 - sw0:2)"}},
		{name: "disconnected host",
			extraNodes: "    - {name: h2, kind: host}\n    - {name: sw1, kind: switch, ports: 4}\n",
			links:      "    - {a: h0, b: sw0}\n    - {a: h1, b: sw0}\n    - {a: h2, b: sw1}\n",
			want:       []string{"host h2: cannot reach host h0"}},
		{name: "NIC not cabled",
			extraNodes: "    - {name: h2, kind: host, ports: 2}\n",
			links:      "    - {a: h0, b: sw0}\n    - {a: h1, b: sw0}\n    - {a: h2, b: sw0}\n",
			want:       []string{"nic h2.nic1: not cabled"}},
		{name: "self-link",
			links: "    - {a: h0, b: sw0}\n    - {a: h1, b: sw0}\n    - {a: sw0, b: sw0}\n",
			want:  []string{"link sw0:2 - sw0:3: a self-link, from switch sw0 back to itself"}},
		{name: "tiers",
			extraNodes: "    - {name: sw1, kind: switch, ports: 4, tier: leaf}\n    - {name: c0, kind: switch, ports: 4, tier: core}\n",
			links:      "    - {a: h0, b: sw0}\n    - {a: h1, b: c0}\n    - {a: sw0, b: sw1}\n",
			want: []string{
				"link h1.nic0 - c0:0: joins nic to core; cables join adjacent tiers only",
				"link sw0:1 - sw1:0: joins leaf to leaf",
				"host h1: cannot reach host h0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ce := checkErr(t, explicitHead+c.extraNodes+"  links:\n"+c.links)
			got := ce.Error()
			wantContains(t, got, c.want...)
			if ce.Total != len(ce.Problems) || ce.Total < len(c.want) {
				t.Errorf("total %d, %d problems listed: %s", ce.Total, len(ce.Problems), got)
			}
		})
	}
}

// TestCheckBuildErrors are the mistakes Build rejects before a graph
// exists: names, port indices and rates.
func TestCheckBuildErrors(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{"  links:\n    - {a: h0, b: sw9}\n", `explicit.links[0].b: sw9: no node named "sw9" in explicit.nodes`},
		{"  links:\n    - {a: h0, b: sw0, rate: fast}\n", "explicit.links[0].rate: fast: want EDR, HDR, NDR, XDR or a number of Gb/s"},
		{"  links:\n    - {a: h0, b: sw0:4}\n", "explicit.links[0].b: sw0:4: sw0 has ports 0 to 3"},
		{"  links:\n    - {a: h0:1, b: sw0}\n", "explicit.links[0].a: h0:1: h0 has NICs 0 to 0"},
		{"  links:\n    - {a: h0:x, b: sw0}\n", "explicit.links[0].a: h0:x: h0 has NICs 0 to 0"},
		{"  links:\n    - {b: sw0}\n", "explicit.links[0].a: missing"},
		{"  links:\n    - {a: h0, b: sw0, length: -2}\n", "explicit.links[0].length: -2: want a cable length"},
		{"    - {name: h0, kind: host}\n", "explicit.nodes[3].name: h0: already the name of explicit.nodes[0]"},
		{"    - {name: 'a:b', kind: host}\n", "explicit.nodes[3].name: a:b: want a name without ':'"},
		{"    - {name: x, kind: router}\n", "explicit.nodes[3].kind: router: want host or switch"},
		{"    - {name: x, kind: switch}\n", "explicit.nodes[3].ports: missing: want the switch's port count"},
		{"    - {name: x, kind: switch, ports: 4, tier: top}\n", "explicit.nodes[3].tier: top: want leaf, spine or core"},
		{"    - {name: x, kind: host, tier: leaf}\n", "explicit.nodes[3].tier: leaf: hosts have no tier"},
	} {
		wantContains(t, specErr(t, explicitHead+c.body).Error(), c.want)
	}
	wantContains(t, specErr(t, "kind: explicit\nrate: NDRR\nexplicit: {nodes: [{name: a, kind: host}]}\n").Error(),
		"rate: NDRR: want EDR, HDR, NDR, XDR or a number of Gb/s (line 2)")
	wantContains(t, specErr(t, "kind: explicit\nexplicit: {}\n").Error(), "explicit.nodes: missing")
}

// TestCheckLimitsProblems checks that a graph with many problems lists the
// first maxProblems and counts the rest.
func TestCheckLimitsProblems(t *testing.T) {
	var b strings.Builder
	b.WriteString("kind: explicit\nexplicit:\n  nodes:\n")
	for i := range 30 {
		fmt.Fprintf(&b, "    - {name: h%d, kind: host}\n", i)
	}
	ce := checkErr(t, b.String())
	// 30 NICs not cabled, 29 hosts that cannot reach h0.
	if ce.Total != 59 || len(ce.Problems) != maxProblems {
		t.Errorf("total %d, listed %d; want 59, %d", ce.Total, len(ce.Problems), maxProblems)
	}
	wantContains(t, ce.Error(), "nic h0.nic0: not cabled", "... and 39 more")
}

// TestCheckHandEdited checks that Check catches records changed after
// Build, which no spec can produce: the graph's own invariants.
func TestCheckHandEdited(t *testing.T) {
	const spec = "kind: superpod\nsuperpod: {sus: 1}\n"
	for _, c := range []struct {
		name string
		edit func(g *Graph)
		want string
	}{
		{"peer", func(g *Graph) { g.Ports[0].Peer = 5 }, "port host0.nic0: peer 5, but its link 0 ends at"},
		{"link tier", func(g *Graph) { g.Links[300].Tier = LinkSpineCore }, "recorded as spine-core, but it joins leaf to spine"},
		{"rate", func(g *Graph) { g.Links[1].Rate = 0 }, "link host0.nic1 - leaf1:0: rate 0 b/s, want > 0"},
		{"stale port", func(g *Graph) { g.Ports[1].Link = 7 }, "port host0.nic1: records link 7"},
		{"layout", func(g *Graph) { g.Nodes[3].Kind = KindSwitch }, "node 3: a switch where the layout has hosts"},
		{"nic owner", func(g *Graph) { g.Nodes[g.NumHosts+9].Rail = 0 }, "node 1: NIC 40 says host 1 rail 0, want host 1 rail 1"},
		{"port range", func(g *Graph) { g.Nodes[len(g.Nodes)-1].NumPorts = 1 << 20 }, "node 290: ports 952+1048576 out of range (1016 ports)"},
	} {
		g := build(t, spec)
		c.edit(g)
		err := g.Check()
		if err == nil {
			t.Errorf("%s: check passed", c.name)
			continue
		}
		wantContains(t, err.Error(), c.want)
	}
}
