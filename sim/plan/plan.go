// Package plan compares candidate cluster fabrics side by side: for each
// design it counts the switches, cables and optics and prices them
// (sim/cost), and simulates an all-reduce on it at flow level (sim/flow),
// so that time, cost per GPU and watts per GPU sit in one row.
package plan

import (
	"errors"
	"fmt"
	"time"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/sim/cost"
	"github.com/ibex-rdma/ibex/sim/fabric"
	"github.com/ibex-rdma/ibex/sim/flow"
	"github.com/ibex-rdma/ibex/sim/topo"
)

// Design is one candidate fabric: a topology and what it is built of.
type Design struct {
	Name      string
	Spec      *topo.Spec
	LinkLayer cost.LinkLayer
}

// ErrPlan is wrapped by errors about the plan's inputs.
var ErrPlan = errors.New("bad plan")

// Defaults are the three designs issue 9 compares, for gpus GPUs in hosts
// of 8 (gpus a multiple of 8):
//
//   - InfiniBand NDR rail-optimized: DGX SuperPOD scalable units of 32
//     nodes (every slot a compute node), 64-port Quantum-2 switches; the
//     node-to-leaf cables run to the SU's network racks (20 m, optical),
//     as in NVIDIA's RA.
//   - RoCE 400G two-tier: a ToR cluster of 128-port 51.2 Tb/s switches run
//     at 400G, a host's 8 NICs on its rack's leaf over 3 m copper, compact
//     (only the spines the leaves need).
//   - RoCE 400G three-tier: the same hosts under 64-port 25.6 Tb/s
//     switches in pods, compact cores.
//
// Cable lengths are the topology defaults otherwise (20 m leaf-spine, 50 m
// spine-core).
func Defaults(gpus int) ([]Design, error) {
	if gpus < 8 || gpus%8 != 0 {
		return nil, fmt.Errorf("plan: %w: %d GPUs: want a multiple of 8 (hosts of 8 GPUs)", ErrPlan, gpus)
	}
	zero, hosts := 0, gpus/8
	sus := (gpus + 255) / 256
	return []Design{
		{Name: "IB NDR rail-optimized", LinkLayer: cost.InfiniBand, Spec: &topo.Spec{
			Name: "ib-ndr-superpod", Kind: "superpod", Rate: "NDR",
			CableM:   topo.CableLengths{HostLeaf: 20},
			SuperPOD: &topo.SuperPOD{SUs: sus, ReservedSlots: &zero}}},
		{Name: "RoCE 400G 2-tier", LinkLayer: cost.Ethernet, Spec: &topo.Spec{
			Name: "roce-400g-2tier", Kind: "fattree", Rate: "400",
			FatTree: &topo.FatTree{Tiers: 2, K: 128, Hosts: hosts, GPUsPerHost: 8, Compact: true}}},
		{Name: "RoCE 400G 3-tier", LinkLayer: cost.Ethernet, Spec: &topo.Spec{
			Name: "roce-400g-3tier", Kind: "fattree", Rate: "400",
			FatTree: &topo.FatTree{Tiers: 3, K: 64, Hosts: hosts, GPUsPerHost: 8, Compact: true}}},
	}, nil
}

// Options say what to simulate on every design.
type Options struct {
	GPUs  int   // ranks: the first GPUs of each design's topology
	Bytes int64 // the all-reduce's size
	// AllReduces are the ways to run it; nil: NCCL's two, the ring over
	// all GPUs (channels, PXN) and the tree across hosts (hierarchical).
	AllReduces []AllReduce
	Params     fabric.Params // routing, message size, ...; the link layer's framing is set per design
	Table      *cost.Table   // nil: cost.Default()
}

// AllReduce is one way to run the all-reduce: an algorithm over all GPUs,
// or (Hierarchical) NCCL's way across hosts: ring reduce-scatter inside
// each host, the algorithm per rail across hosts, ring all-gather inside.
type AllReduce struct {
	Algorithm    algo.Algorithm
	Hierarchical bool
	Pipeline     int // coll/algo's; 0: 1
}

// Name is "ring" or "hier tree".
func (a AllReduce) Name() string {
	if a.Hierarchical {
		return "hier " + a.Algorithm.String()
	}
	return a.Algorithm.String()
}

// NCCL are the default AllReduces: NCCL's ring, and its tree across
// hosts with the data in 16 pieces so that the tree's levels overlap.
var NCCL = []AllReduce{{Algorithm: algo.Ring}, {Algorithm: algo.Tree, Hierarchical: true, Pipeline: 16}}

// Result is one all-reduce on one design.
type Result struct {
	AllReduce string  `json:"allreduce"`
	TimeUS    float64 `json:"time_us"`
	BusBW     float64 `json:"busbw_GBps"`
}

// Row is one design's figures.
type Row struct {
	Design    string         `json:"design"`
	Topology  string         `json:"topology"`
	LinkLayer cost.LinkLayer `json:"link_layer"`
	GPUs      int            `json:"gpus"`
	Tiers     int            `json:"tiers"`
	Switches  int            `json:"switches"`
	Links     int            `json:"links"`
	Optics    int            `json:"transceivers"`
	Cost      *cost.Report   `json:"cost"`
	Results   []Result       `json:"allreduce"`
	Wall      time.Duration  `json:"-"`
}

// Evaluate builds design d, prices it and simulates the all-reduce.
func Evaluate(d Design, o Options) (*Row, error) {
	g, err := d.Spec.Build()
	if err != nil {
		return nil, fmt.Errorf("plan: %s: %w", d.Name, err)
	}
	if err := g.Check(); err != nil {
		return nil, fmt.Errorf("plan: %s: %w", d.Name, err)
	}
	if o.GPUs < 1 || o.GPUs > g.NumGPUs() {
		return nil, fmt.Errorf("plan: %w: %s has %d GPUs, not the %d asked for", ErrPlan, d.Name, g.NumGPUs(), o.GPUs)
	}
	t := o.Table
	if t == nil {
		t = cost.Default()
	}
	rep, err := cost.Compute(g, t, d.LinkLayer)
	if err != nil {
		return nil, fmt.Errorf("plan: %s: %w", d.Name, err)
	}
	c := g.Counts()
	row := &Row{Design: d.Name, Topology: d.Spec.Name, LinkLayer: d.LinkLayer, GPUs: o.GPUs, Tiers: c.Tiers,
		Switches: c.Switches.Total, Links: c.Links.Total, Cost: rep}
	for _, tl := range rep.Links {
		row.Optics += tl.SwitchTransceivers + tl.NICTransceivers
	}
	p := o.Params
	if d.LinkLayer == cost.Ethernet {
		// RoCEv2 framing (the flow engine reads the link layer's header
		// bytes; PFC and DCQCN are packet-level).
		p.LinkLayer = fabric.LinkRoCE
	}
	ars := o.AllReduces
	if ars == nil {
		ars = NCCL
	}
	for _, a := range ars {
		res, err := allReduce(g, p, a, o)
		if err != nil {
			return nil, fmt.Errorf("plan: %s, %s: %w", d.Name, a.Name(), err)
		}
		row.Results = append(row.Results, Result{AllReduce: a.Name(), TimeUS: res.Time.Seconds() * 1e6, BusBW: res.BusBW / 1e9})
		row.Wall += res.Wall
	}
	return row, nil
}

func allReduce(g *topo.Graph, p fabric.Params, a AllReduce, o Options) (*flow.Result, error) {
	cfg := flow.Config{Graph: g, Params: p, Name: "all_reduce", Collective: algo.AllReduce, Ranks: o.GPUs, Bytes: o.Bytes}
	pipe := max(a.Pipeline, 1)
	if a.Hierarchical {
		gpn := g.GPUsOnHost()
		if gpn == 0 || o.GPUs%gpn != 0 {
			return nil, fmt.Errorf("%w: a hierarchical all-reduce needs whole hosts", ErrPlan)
		}
		ph, err := flow.Hierarchical(a.Algorithm, o.GPUs/gpn, gpn, o.Bytes, pipe)
		if err != nil {
			return nil, err
		}
		cfg.Phases = ph
	} else {
		s, err := algo.Generate(algo.AllReduce, a.Algorithm, o.GPUs, 0, pipe)
		if err != nil {
			return nil, err
		}
		cfg.Phases = []flow.Phase{{Schedule: s, Bytes: o.Bytes}}
	}
	return flow.Run(cfg)
}
