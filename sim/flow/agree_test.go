package flow

import (
	"math"
	"testing"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/sim/packet"
	"github.com/ibex-rdma/ibex/sim/topo"
)

func superpod(t testing.TB, sus int) *topo.Graph {
	t.Helper()
	zero := 0
	g, err := (&topo.Spec{Kind: "superpod", SuperPOD: &topo.SuperPOD{SUs: sus, ReservedSlots: &zero}}).Build()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestAgreeQuick(t *testing.T) {
	g := superpod(t, 1)
	for _, c := range []struct {
		c     algo.Collective
		a     algo.Algorithm
		n     int
		bytes int64
	}{
		{algo.AllReduce, algo.Ring, 16, 1 << 30},
		{algo.AllReduce, algo.Ring, 64, 256 << 20},
		{algo.AllGather, algo.Ring, 32, 256 << 20},
		{algo.AllReduce, algo.Tree, 32, 256 << 20},
		{algo.AllReduce, algo.RecHalvingDoubling, 32, 256 << 20},
		{algo.AllToAll, algo.Direct, 32, 64 << 20},
	} {
		s, err := algo.Generate(c.c, c.a, c.n, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		pr, err := packet.Run(packet.Config{Graph: g, Schedule: s, Bytes: c.bytes})
		if err != nil {
			t.Fatal(err)
		}
		fr, err := Run(Config{Graph: g, Phases: []Phase{{Schedule: s, Bytes: c.bytes}}})
		if err != nil {
			t.Fatal(err)
		}
		d := (float64(fr.Time) - float64(pr.Time)) / float64(pr.Time)
		t.Logf("%v n=%d %d B: packet %v (wall %v), flow %v (wall %v, %d solves, %d reused of %d steps): %+.2f%%",
			s, c.n, c.bytes, pr.Time, pr.Wall, fr.Time, fr.Wall, fr.Solves, fr.Reused, fr.Steps, 100*d)
		if math.Abs(d) > 0.05 {
			t.Errorf("%v: flow %v vs packet %v: %+.1f%%", s, fr.Time, pr.Time, 100*d)
		}
	}
}
