package place

import (
	"errors"
	"strings"
	"testing"

	"github.com/ibex-rdma/ibex/sim/topo"
)

func TestRotation(t *testing.T) {
	// 12 ranks on hosts of 8 GPUs: host 0 holds 8, host 1 holds 4.
	pl, err := New(nil, 12, 16, 8)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ ch, r, want int }{
		{0, 0, 0}, {1, 0, 1}, {1, 7, 0}, {3, 6, 1}, // host 0 rotates mod 8
		{0, 8, 8}, {1, 8, 9}, {1, 11, 8}, {5, 9, 10}, // host 1 rotates mod 4
	} {
		if got := pl.GPU(c.ch, c.r); int(got) != c.want {
			t.Errorf("GPU(ch %d, rank %d) = %d, want %d", c.ch, c.r, got, c.want)
		}
	}
	if pl.MaxPerHost() != 8 {
		t.Errorf("MaxPerHost %d, want 8", pl.MaxPerHost())
	}
}

func TestErrors(t *testing.T) {
	for _, c := range []struct {
		gpus  []int32
		ranks int
		want  string
	}{
		{nil, 20, "20 ranks but the topology has 16"},
		{[]int32{0, 1}, 3, "2 GPUs given for 3 ranks"},
		{[]int32{0, 16}, 2, "GPU 16: the topology has 16"},
		{[]int32{0, 0}, 2, "GPU 0 holds two ranks"},
		{[]int32{0, 8, 1}, 3, "must be contiguous"},
	} {
		_, err := New(c.gpus, c.ranks, 16, 8)
		if err == nil || !errors.Is(err, ErrPlacement) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%v, %d): %v, want an ErrPlacement containing %q", c.gpus, c.ranks, err, c.want)
		}
	}
}

func TestEndpoints(t *testing.T) {
	zero := 0
	g, err := (&topo.Spec{Kind: "superpod", SuperPOD: &topo.SuperPOD{SUs: 1, ReservedSlots: &zero}}).Build()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, intra := Endpoints(g, 8, 3, 5, true); !intra {
		t.Error("GPUs 3 and 5 share host 0: want intra")
	}
	src, dst, _ := Endpoints(g, 8, 7, 8, true) // host 0 GPU 7 -> host 1 GPU 0
	if src != g.NIC(0, 0) || dst != g.NIC(1, 0) {
		t.Errorf("PXN: %s -> %s, want host0.nic0 -> host1.nic0", g.NodeName(src), g.NodeName(dst))
	}
	src, _, _ = Endpoints(g, 8, 7, 8, false)
	if src != g.NIC(0, 7) {
		t.Errorf("own NIC: %s, want host0.nic7", g.NodeName(src))
	}
}
