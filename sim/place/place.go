// Package place maps a collective's ranks onto a topology's GPUs and NICs
// the way NCCL does on rail-optimized fabrics, for both of ibex's fabric
// engines (sim/packet, sim/flow): ranks of a host are contiguous; channel
// c rotates each host's ranks by c; traffic between hosts leaves by the
// NIC on the receiving GPU's rail (PXN), so that channel c stays on rail c.
package place

import (
	"errors"
	"fmt"
	"github.com/ibex-rdma/ibex/coll/algo"

	"github.com/ibex-rdma/ibex/sim/topo"
)

// ErrPlacement is wrapped by New's errors.
var ErrPlacement = errors.New("bad rank placement")

// Placement says where ranks run. GPUs are numbered host × GPUs per host
// + index; GPU i uses NIC i of the graph (NIC rail i%GPUsPerHost of host
// i/GPUsPerHost).
type Placement struct {
	GPUs        []int32 // rank → GPU, channel 0
	GPUsPerHost int
	hostStart   []int32 // rank → first rank on its host
	hostCount   []int32 // rank → ranks on its host
}

// New checks gpus (rank r on gpus[r]) or, if nil, places ranks on the
// first GPUs in order. total is the GPUs of the topology, gpn per host.
func New(gpus []int32, ranks, total, gpn int) (*Placement, error) {
	if gpn < 1 {
		return nil, fmt.Errorf("place: %w: %d GPUs per host", ErrPlacement, gpn)
	}
	if gpus == nil {
		if ranks > total {
			return nil, fmt.Errorf("place: %w: %d ranks but the topology has %d GPUs", ErrPlacement, ranks, total)
		}
		gpus = make([]int32, ranks)
		for i := range gpus {
			gpus[i] = int32(i)
		}
	}
	if len(gpus) != ranks {
		return nil, fmt.Errorf("place: %w: %d GPUs given for %d ranks", ErrPlacement, len(gpus), ranks)
	}
	pl := &Placement{GPUs: gpus, GPUsPerHost: gpn, hostStart: make([]int32, ranks), hostCount: make([]int32, ranks)}
	seen := make(map[int32]bool, len(gpus))
	hostSeen := map[int]bool{}
	for r, g := range gpus {
		if g < 0 || int(g) >= total {
			return nil, fmt.Errorf("place: %w: rank %d on GPU %d: the topology has %d", ErrPlacement, r, g, total)
		}
		if seen[g] {
			return nil, fmt.Errorf("place: %w: GPU %d holds two ranks", ErrPlacement, g)
		}
		seen[g] = true
		h := int(g) / gpn
		if r > 0 && h == int(gpus[r-1])/gpn {
			pl.hostStart[r] = pl.hostStart[r-1]
			continue
		}
		if hostSeen[h] {
			return nil, fmt.Errorf("place: %w: rank %d on GPU %d: the ranks of a host must be contiguous", ErrPlacement, r, g)
		}
		hostSeen[h] = true
		pl.hostStart[r] = int32(r)
	}
	for r := ranks - 1; r >= 0; r-- {
		s := pl.hostStart[r]
		if r == ranks-1 || pl.hostStart[r+1] != s {
			pl.hostCount[r] = int32(r) - s + 1
		} else {
			pl.hostCount[r] = pl.hostCount[r+1]
		}
	}
	return pl, nil
}

// GPU is the GPU rank r runs on in channel ch.
func (pl *Placement) GPU(ch, r int) int32 {
	s, k := int(pl.hostStart[r]), int(pl.hostCount[r])
	return pl.GPUs[s+(r-s+ch)%k]
}

// MaxPerHost is the most ranks on one host.
func (pl *Placement) MaxPerHost() int {
	m := 0
	for _, c := range pl.hostCount {
		m = max(m, int(c))
	}
	return m
}

// Endpoints are the NICs a transfer from GPU a to GPU b crosses the fabric
// between, or intra if both are on one host (NVLink). With pxn the data
// leaves a's host by the NIC on b's rail (it crosses to that GPU over
// NVLink first); without, by a's own NIC.
func Endpoints(g *topo.Graph, gpn int, a, b int32, pxn bool) (src, dst topo.NodeID, intra bool) {
	return EndpointsIn(g, gpn, a, b, pxn, 0)
}

// Plane is the plane channel ch uses in a multi-plane fabric: channels
// 0..gpn-1 (one per rail) use plane 0, the next gpn plane 1, and so on
// round, so that GPUs-per-host × planes channels use every NIC port.
func Plane(g *topo.Graph, gpn, ch int) int {
	return (ch / gpn) % max(g.Planes, 1)
}

// EndpointsIn is Endpoints in one plane of a multi-plane fabric (a GPU
// has a NIC port in every plane; a transfer uses one).
func EndpointsIn(g *topo.Graph, gpn int, a, b int32, pxn bool, plane int) (src, dst topo.NodeID, intra bool) {
	ha, ga, hb, gb := int(a)/gpn, int(a)%gpn, int(b)/gpn, int(b)%gpn
	if ha == hb {
		return -1, -1, true
	}
	src = g.PlaneNIC(ha, ga, plane)
	if pxn {
		src = g.PlaneNIC(ha, gb, plane)
	}
	return src, g.PlaneNIC(hb, gb, plane), false
}

// SlotOffsets are each channel's byte offsets of schedule s's slots (Slots+1
// per channel) for a call of bytes in elements of esize bytes split over
// nch channels: the count (elements per block, as SlotRange takes it) is
// bytes/esize over the schedule's blocks, split evenly over the channels.
func SlotOffsets(s *algo.Schedule, bytes int64, esize, nch int) [][]int64 {
	count := bytes / int64(esize)
	switch s.Collective {
	case algo.ReduceScatter, algo.AllGather, algo.AllToAll:
		count /= int64(s.Ranks)
	}
	off := make([][]int64, nch)
	for c := range nch {
		cc := int(count*int64(c+1)/int64(nch) - count*int64(c)/int64(nch))
		o := make([]int64, s.Slots+1)
		for i := range s.Slots {
			lo, hi := s.SlotRange(cc, i)
			o[i], o[i+1] = int64(lo)*int64(esize), int64(hi)*int64(esize)
		}
		off[c] = o
	}
	return off
}
