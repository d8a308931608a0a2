package flow

import (
	"fmt"
	"testing"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/sim/topo"
)

// BenchmarkScale is issue 9's scale points: a 1 GiB all-reduce over the
// 16,384-GPU and 131,072-GPU examples by NCCL's ring over all GPUs and by
// the hierarchical ring and tree (topology build included).
//
//	go test -run XXX -bench Scale -benchtime 1x ./sim/flow
func BenchmarkScale(b *testing.B) {
	for _, f := range []string{"superpod-16k", "superpod-128k-xdr"} {
		for _, c := range []struct {
			name string
			a    algo.Algorithm
			hier bool
			pipe int
		}{{"ring", algo.Ring, false, 1}, {"hier-ring", algo.Ring, true, 1}, {"hier-tree", algo.Tree, true, 16}} {
			b.Run(fmt.Sprintf("%s/%s", f, c.name), func(b *testing.B) {
				b.SetBytes(1 << 30)
				for b.Loop() {
					s, err := topo.Load("../../examples/" + f + ".yaml")
					if err != nil {
						b.Fatal(err)
					}
					g, err := s.Build()
					if err != nil {
						b.Fatal(err)
					}
					n := g.NumGPUs()
					cfg := Config{Graph: g, Name: c.name, Collective: algo.AllReduce, Ranks: n, Bytes: 1 << 30}
					if c.hier {
						cfg.Phases, err = Hierarchical(c.a, n/g.GPUsOnHost(), g.GPUsOnHost(), 1<<30, c.pipe)
					} else {
						var sch *algo.Schedule
						sch, err = algo.Generate(algo.AllReduce, c.a, n, 0, c.pipe)
						cfg.Phases = []Phase{{Schedule: sch, Bytes: 1 << 30}}
					}
					if err != nil {
						b.Fatal(err)
					}
					res, err := Run(cfg)
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(res.Time.Seconds()*1e3, "sim-ms")
					b.ReportMetric(float64(res.Solves), "solves")
				}
			})
		}
	}
}
