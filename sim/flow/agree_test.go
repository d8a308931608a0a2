package flow

import (
	"math"
	"testing"
	"time"

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

// TestAgreement sweeps cases both engines can run and requires the flow
// engine's time within 5% of the packet engine's: collectives by several
// algorithms on a SuperPOD (NCCL's channels and PXN), the same without
// PXN (traffic between rails crosses the spines), and point-to-point
// patterns on a fat tree, where flows share links.
//
// Known exception, not in the sweep: pipelined chains (broadcast and
// reduce by ring with pipeline > 1) and recursive doubling over several
// channels differ by 5-50%, because a GPU's NVLink egress serves the
// channels message by message in sim/packet (the order depends on when
// each connection's slots come back) and fluidly here, and a chain's
// time is the order in which pieces reach the next rank. With one
// channel they agree exactly (TestAgreementOneChannel).
func TestAgreement(t *testing.T) {
	sp := superpod(t, 1)
	ft, err := (&topo.Spec{Kind: "fattree", FatTree: &topo.FatTree{K: 16}}).Build()
	if err != nil {
		t.Fatal(err)
	}
	zero := 0
	twoPlane, err := (&topo.Spec{Kind: "superpod", Rate: "200", SuperPOD: &topo.SuperPOD{SUs: 1, ReservedSlots: &zero, Planes: 2}}).Build()
	if err != nil {
		t.Fatal(err)
	}
	gen := func(c algo.Collective, a algo.Algorithm, n, pipe int) *algo.Schedule {
		s, err := algo.Generate(c, a, n, 0, pipe)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	pat := func(p packet.Pattern, n int) *algo.Schedule {
		s, err := packet.PatternSchedule(p, n, 3)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, c := range []struct {
		name     string
		g        *topo.Graph
		s        *algo.Schedule
		bytes    int64
		localNIC bool
		race     bool // run under the race detector too
	}{
		{"ring 16", sp, gen(algo.AllReduce, algo.Ring, 16, 1), 256 << 20, false, false},
		{"ring 64", sp, gen(algo.AllReduce, algo.Ring, 64, 1), 128 << 20, false, false},
		{"ring 32 own NIC", sp, gen(algo.AllReduce, algo.Ring, 32, 1), 64 << 20, true, true},
		{"ring all_gather 32", sp, gen(algo.AllGather, algo.Ring, 32, 1), 64 << 20, false, true},
		{"ring reduce_scatter 48 pipelined", sp, gen(algo.ReduceScatter, algo.Ring, 48, 2), 128 << 20, false, false},
		{"tree 32", sp, gen(algo.AllReduce, algo.Tree, 32, 1), 128 << 20, false, false},
		{"tree 32 pipelined", sp, gen(algo.AllReduce, algo.Tree, 32, 8), 64 << 20, false, false},
		{"rhd 32", sp, gen(algo.AllReduce, algo.RecHalvingDoubling, 32, 1), 32 << 20, false, false},
		{"broadcast ring 24", sp, gen(algo.Broadcast, algo.Ring, 24, 1), 64 << 20, false, true},
		{"reduce tree 48 pipelined", sp, gen(algo.Reduce, algo.Tree, 48, 4), 32 << 20, false, true},
		{"all_to_all 32", sp, gen(algo.AllToAll, algo.Direct, 32, 1), 16 << 20, false, false},
		{"2-plane ring 32", twoPlane, gen(algo.AllReduce, algo.Ring, 32, 1), 256 << 20, false, true},
		{"fat tree ring 64", ft, gen(algo.AllReduce, algo.Ring, 64, 1), 16 << 20, false, false},
		{"fat tree permutation 128", ft, pat(packet.Permutation, 128), 4 << 20, false, false},
		{"fat tree incast 16", ft, pat(packet.Incast, 16), 4 << 20, false, true},
		{"fat tree alltoall 24", ft, pat(packet.AllToAll, 24), 1 << 20, false, false},
	} {
		if raceEnabled && !c.race {
			// Both engines are one goroutine: the race detector has
			// nothing to check, and the sweep took 35 s under it. It keeps
			// a case of each placement (PXN, own NIC, two planes, fat
			// tree), ring and tree; .ci/run runs them all without it.
			t.Logf("%s: left to the run without the race detector", c.name)
			continue
		}
		pr, err := packet.Run(packet.Config{Graph: c.g, Schedule: c.s, Bytes: c.bytes, LocalNIC: c.localNIC})
		if err != nil {
			t.Fatal(err)
		}
		fr, err := Run(Config{Graph: c.g, Phases: []Phase{{Schedule: c.s, Bytes: c.bytes}}, LocalNIC: c.localNIC})
		if err != nil {
			t.Fatal(err)
		}
		d := (float64(fr.Time) - float64(pr.Time)) / float64(pr.Time)
		t.Logf("%-32s %10d B: packet %v (%v wall), flow %v (%v wall, %d solves, %d of %d steps reused): %+.2f%%",
			c.name, c.bytes, pr.Time, pr.Wall.Round(time.Millisecond), fr.Time, fr.Wall.Round(time.Microsecond), fr.Solves, fr.Reused, fr.Steps, 100*d)
		if math.Abs(d) > 0.05 {
			t.Errorf("%s: flow %v vs packet %v: %+.1f%%", c.name, fr.Time, pr.Time, 100*d)
		}
	}
}

// TestAgreementOneChannel: with one channel the pipelined chain and
// recursive doubling agree exactly.
func TestAgreementOneChannel(t *testing.T) {
	sp := superpod(t, 1)
	for _, c := range []struct {
		c    algo.Collective
		a    algo.Algorithm
		n, p int
	}{{algo.Broadcast, algo.Ring, 24, 4}, {algo.Reduce, algo.Ring, 16, 2}, {algo.AllGather, algo.RecDoubling, 16, 1}} {
		s, err := algo.Generate(c.c, c.a, c.n, 0, c.p)
		if err != nil {
			t.Fatal(err)
		}
		pr, err := packet.Run(packet.Config{Graph: sp, Schedule: s, Bytes: 64 << 20, Channels: 1})
		if err != nil {
			t.Fatal(err)
		}
		fr, err := Run(Config{Graph: sp, Phases: []Phase{{Schedule: s, Bytes: 64 << 20, Channels: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		if d := math.Abs(float64(fr.Time)/float64(pr.Time) - 1); d > 1e-6 {
			t.Errorf("%v, one channel: flow %v, packet %v", s, fr.Time, pr.Time)
		}
	}
}
