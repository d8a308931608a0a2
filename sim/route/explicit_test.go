package route

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/ibex-rdma/ibex/sim/topo"
)

// ring is six untiered switches in a ring, two hosts on each, and one
// chord: no tree, so only shortest paths make sense.
const ring = `name: ring
kind: explicit
explicit:
  nodes:
    - {name: s0, kind: switch, ports: 8}
    - {name: s1, kind: switch, ports: 8}
    - {name: s2, kind: switch, ports: 8}
    - {name: s3, kind: switch, ports: 8}
    - {name: s4, kind: switch, ports: 8}
    - {name: s5, kind: switch, ports: 8}
    - {name: a0, kind: host}
    - {name: a1, kind: host}
    - {name: b0, kind: host}
    - {name: b1, kind: host}
    - {name: c0, kind: host}
    - {name: c1, kind: host, ports: 2}
    - {name: d0, kind: host}
    - {name: e0, kind: host}
    - {name: f0, kind: host}
  links:
    - {a: s0, b: s1}
    - {a: s1, b: s2}
    - {a: s2, b: s3}
    - {a: s3, b: s4}
    - {a: s4, b: s5}
    - {a: s5, b: s0}
    - {a: s0, b: s3}
    - {a: a0, b: s0}
    - {a: a1, b: s0}
    - {a: b0, b: s1}
    - {a: b1, b: s1}
    - {a: c0, b: s2}
    - {a: c1:0, b: s2}
    - {a: c1:1, b: s5}
    - {a: d0, b: s3}
    - {a: e0, b: s4}
    - {a: f0, b: s5}
`

// TestExplicit routes explicit graphs by shortest paths: every pair checked
// against a plain BFS, also with links failed; the example file's parallel
// cables all eligible.
func TestExplicit(t *testing.T) {
	small, err := os.ReadFile("../../examples/explicit-small.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, yml string }{
		{"explicit-small", string(small)},
		{"ring", ring},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := build(t, tc.yml)
			rnd := rng(t)
			r := mustNew(t, g)
			if r.tree {
				t.Fatal("an explicit graph routed as a tree")
			}
			lengths := allPairs(t, r, false, 0, rnd)
			t.Logf("lengths %v", lengths)
			for round := range 8 {
				var failed []topo.LinkID
				for l := range g.Links {
					if rnd.Float64() < 0.15 {
						failed = append(failed, topo.LinkID(l))
					}
				}
				r, err := New(g, failed...)
				if r == nil || err != nil && !errors.Is(err, ErrUnreachable) {
					t.Fatalf("round %d: %v", round, err)
				}
				allPairs(t, r, false, 0, rnd)
			}
		})
	}
	// explicit-small: gpu0's NIC 0 to gpu1's NIC 1 crosses leaf0, a spine,
	// leaf1; leaf0 has four cables up, all eligible.
	g := build(t, string(small))
	r := mustNew(t, g)
	src, dst := g.NIC(0, 0), g.NIC(1, 1)
	leaf0 := leafOf(g, src)
	if e := r.Eligible(leaf0, dst, nil); len(e) != 4 {
		t.Errorf("eligible at leaf0: %v, want its 4 uplinks", names(g, e))
	}
}

// TestExplicitCut: a host whose cables all fail is named as cut off.
func TestExplicitCut(t *testing.T) {
	g := build(t, ring)
	var failed []topo.LinkID
	var e0 topo.NodeID
	for l := range g.Links {
		a := g.Ports[g.Links[l].A].Node
		if g.NodeName(a) == "e0.nic0" {
			e0 = a
		}
		if n := g.NodeName(a) + " " + g.NodeName(g.Ports[g.Links[l].B].Node); n == "s3 s4" || n == "s4 s5" {
			failed = append(failed, topo.LinkID(l))
		}
	}
	_, err := New(g, failed...)
	var ue *UnreachableError
	if !errors.As(err, &ue) {
		t.Fatalf("New: %v, want *UnreachableError", err)
	}
	if len(ue.CutOff) != 1 || ue.CutOff[0] != e0 || !strings.Contains(err.Error(), "e0.nic0: cut off: reaches no other NIC") {
		t.Errorf("CutOff %v, error:\n%v", ue.CutOff, err)
	}
}

// TestExplicitLimit: a large explicit graph is refused, naming the limit.
func TestExplicitLimit(t *testing.T) {
	var b strings.Builder
	const hosts = 2100
	fmt.Fprintf(&b, "name: big\nkind: explicit\nexplicit:\n  nodes:\n    - {name: s, kind: switch, ports: %d}\n", hosts)
	for i := range hosts {
		fmt.Fprintf(&b, "    - {name: h%d, kind: host}\n", i)
	}
	b.WriteString("  links:\n")
	for i := range hosts {
		fmt.Fprintf(&b, "    - {a: h%d, b: s}\n", i)
	}
	g := build(t, b.String())
	_, err := New(g)
	if !errors.Is(err, ErrTopology) {
		t.Fatalf("New: %v, want ErrTopology", err)
	}
	wantContains(t, err.Error(), `"big"`, "2100 NICs", "4194304", "fattree or superpod")
}
