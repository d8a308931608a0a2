package topo

import "testing"

func TestCountsShape(t *testing.T) {
	for _, c := range []struct {
		c    Counts
		want string
	}{
		{Counts{Kind: "fattree", Tiers: 3}, "fattree, 3 switch tiers"},
		{Counts{Kind: "explicit", Switches: TierCounts{Leaf: 2, Spine: 2}}, "explicit, 2 switch tiers: leaf, spine"},
		{Counts{Kind: "explicit", Switches: TierCounts{Leaf: 2, Untiered: 1}}, "explicit, 1 switch tier: leaf, untiered"},
		{Counts{Kind: "explicit"}, "explicit, no switches"},
	} {
		if got := c.c.Shape(); got != c.want {
			t.Errorf("%+v: Shape() = %q, want %q", c.c, got, c.want)
		}
	}
}
