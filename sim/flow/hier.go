package flow

import (
	"fmt"

	"github.com/ibex-rdma/ibex/coll/algo"
)

// Hierarchical returns the phases of an all-reduce of bytes over hosts
// hosts of gpn GPUs each (hosts 0..hosts-1, every GPU), done as NCCL does
// across nodes: a ring reduce-scatter inside every host (NVLink), then an
// all-reduce of each GPU's 1/gpn share among the GPUs of one rail (one per
// host, over that rail's NIC) with algorithm inter, then a ring
// all-gather inside every host. pipeline is the inter-host schedule's
// (coll/algo's): pieces per slot, so that a tree's levels overlap.
func Hierarchical(inter algo.Algorithm, hosts, gpn int, bytes int64, pipeline int) ([]Phase, error) {
	if hosts < 1 || gpn < 1 {
		return nil, fmt.Errorf("flow: %w: hierarchical over %d hosts of %d GPUs", ErrConfig, hosts, gpn)
	}
	var phases []Phase
	intra := make([][]int32, hosts)
	for h := range intra {
		for i := range gpn {
			intra[h] = append(intra[h], int32(h*gpn+i))
		}
	}
	if gpn > 1 {
		rs, err := algo.Generate(algo.ReduceScatter, algo.Ring, gpn, 0, 1)
		if err != nil {
			return nil, err
		}
		phases = append(phases, Phase{Name: "intra-host reduce_scatter", Schedule: rs, Groups: intra, Bytes: bytes, Channels: 1})
	}
	if hosts > 1 {
		ar, err := algo.Generate(algo.AllReduce, inter, hosts, 0, pipeline)
		if err != nil {
			return nil, err
		}
		rails := make([][]int32, gpn)
		for i := range rails {
			for h := range hosts {
				rails[i] = append(rails[i], int32(h*gpn+i))
			}
		}
		phases = append(phases, Phase{Name: "inter-host all_reduce per rail", Schedule: ar, Groups: rails, Bytes: bytes / int64(gpn), Channels: 1})
	}
	if gpn > 1 {
		ag, err := algo.Generate(algo.AllGather, algo.Ring, gpn, 0, 1)
		if err != nil {
			return nil, err
		}
		phases = append(phases, Phase{Name: "intra-host all_gather", Schedule: ag, Groups: intra, Bytes: bytes, Channels: 1})
	}
	return phases, nil
}
