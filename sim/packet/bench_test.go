package packet

import (
	"fmt"
	"testing"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/sim/topo"
)

// BenchmarkRingAllReduce measures the simulator (not the fabric): wall
// time per simulated ring all-reduce at packet level on a NDR SuperPOD,
// as the size and the GPU count grow. b.SetBytes is the collective's size,
// so MB/s reads as simulated bytes per wall second; events/s is reported.
//
//	go test -run XXX -bench RingAllReduce -benchtime 1x ./sim/packet
func BenchmarkRingAllReduce(b *testing.B) {
	zero := 0
	graphs := map[int]*topo.Graph{}
	graph := func(sus int) *topo.Graph {
		if g := graphs[sus]; g != nil {
			return g
		}
		g, err := (&topo.Spec{Kind: "superpod", SuperPOD: &topo.SuperPOD{SUs: sus, ReservedSlots: &zero}}).Build()
		if err != nil {
			b.Fatal(err)
		}
		graphs[sus] = g
		return g
	}
	for _, c := range []struct {
		gpus  int
		bytes int64
	}{
		// Size at 1,024 GPUs.
		{1024, 16 << 20}, {1024, 64 << 20}, {1024, 256 << 20},
		// GPU count at 64 MiB.
		{128, 64 << 20}, {256, 64 << 20}, {512, 64 << 20},
	} {
		b.Run(fmt.Sprintf("gpus=%d/size=%dM", c.gpus, c.bytes>>20), func(b *testing.B) {
			g := graph((c.gpus + 255) / 256)
			s, err := algo.Generate(algo.AllReduce, algo.Ring, c.gpus, 0, 1)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(c.bytes)
			var events uint64
			for b.Loop() {
				res, err := Run(Config{Graph: g, Schedule: s, Bytes: c.bytes})
				if err != nil {
					b.Fatal(err)
				}
				events += res.Events
			}
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(events)/float64(b.N), "events/op")
		})
	}
}
