package plan

import (
	"errors"
	"testing"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/sim/cost"
	"github.com/ibex-rdma/ibex/sim/fabric"
	"github.com/ibex-rdma/ibex/sim/topo"
)

// TestDefaults4096: the three designs for 4,096 GPUs have the switch
// counts their generators promise, and every design yields a priced row
// with both of NCCL's all-reduces.
func TestDefaults4096(t *testing.T) {
	ds, err := Defaults(4096)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		tiers, switches int
		layer           cost.LinkLayer
	}{
		{3, 320, cost.InfiniBand}, // 16 SUs: 128 leaves, 128 spines, 64 cores
		{2, 96, cost.Ethernet},    // 64 leaves, 32 spines (compact)
		{3, 320, cost.Ethernet},   // 4 pods of 32 + 32, 64 cores (compact)
	}
	for i, d := range ds {
		r, err := Evaluate(d, Options{GPUs: 4096, Bytes: 256 << 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d tiers, %d switches, %d optics, $%.0f and %.1f W per GPU, %+v", r.Design, r.Tiers, r.Switches, r.Optics, r.Cost.PerGPU.CostUSD, r.Cost.PerGPU.PowerW, r.Results)
		if r.Tiers != want[i].tiers || r.Switches != want[i].switches || r.LinkLayer != want[i].layer {
			t.Errorf("%s: %d tiers, %d switches, %s; want %d, %d, %s", d.Name, r.Tiers, r.Switches, r.LinkLayer, want[i].tiers, want[i].switches, want[i].layer)
		}
		if r.Cost.GPUs != 4096 || r.Cost.PerGPU.CostUSD <= 0 || r.Cost.PerGPU.PowerW <= 0 {
			t.Errorf("%s: cost report %+v", d.Name, r.Cost.PerGPU)
		}
		if len(r.Results) != 2 || r.Results[0].AllReduce != "ring" || r.Results[1].AllReduce != "hier tree" {
			t.Fatalf("%s: results %+v", d.Name, r.Results)
		}
		for _, a := range r.Results {
			if a.TimeUS <= 0 || a.BusBW <= 0 || a.BusBW > 400 {
				t.Errorf("%s %s: %v us, busbw %v GB/s", d.Name, a.AllReduce, a.TimeUS, a.BusBW)
			}
		}
	}
	if _, err := Defaults(100); !errors.Is(err, ErrPlan) {
		t.Errorf("Defaults(100): %v, want ErrPlan", err)
	}
}

// TestRoCEFraming: the same topology run as RoCE takes longer than as
// InfiniBand by its framing (82 against 26 bytes a packet), within the
// bandwidth-bound bound of that ratio.
func TestRoCEFraming(t *testing.T) {
	zero := 0
	spec := &topo.Spec{Kind: "superpod", SuperPOD: &topo.SuperPOD{SUs: 1, ReservedSlots: &zero}}
	o := Options{GPUs: 64, Bytes: 1 << 30, AllReduces: []AllReduce{{Algorithm: algo.Ring}}}
	ib, err := Evaluate(Design{Name: "ib", Spec: spec, LinkLayer: cost.InfiniBand}, o)
	if err != nil {
		t.Fatal(err)
	}
	roce, err := Evaluate(Design{Name: "roce", Spec: spec, LinkLayer: cost.Ethernet}, o)
	if err != nil {
		t.Fatal(err)
	}
	r := roce.Results[0].TimeUS / ib.Results[0].TimeUS
	bound := float64(4096+fabric.RoCEHeaderBytes) / float64(4096+26)
	t.Logf("ring 1 GiB over 64 GPUs: IB %.1f us, RoCE %.1f us (x%.4f; framing alone x%.4f)", ib.Results[0].TimeUS, roce.Results[0].TimeUS, r, bound)
	if r <= 1 || r > bound {
		t.Errorf("RoCE/IB time %.4f, want in (1, %.4f]", r, bound)
	}
	if _, err := Evaluate(Design{Name: "too small", Spec: spec, LinkLayer: cost.InfiniBand}, Options{GPUs: 1000, Bytes: 1}); !errors.Is(err, ErrPlan) {
		t.Errorf("1000 GPUs on a 256-GPU design: %v, want ErrPlan", err)
	}
}
