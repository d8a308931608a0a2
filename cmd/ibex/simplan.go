package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ibex-rdma/ibex/internal/units"
	"github.com/ibex-rdma/ibex/sim/cost"
	"github.com/ibex-rdma/ibex/sim/plan"
	"github.com/ibex-rdma/ibex/sim/topo"
)

type simPlanOptions struct {
	gpus     int
	size     string
	designs  []string
	costs    string
	routing  string
	asJSON   bool
	plotFile string
}

func newSimPlanCmd() *cobra.Command {
	var o simPlanOptions
	cmd := &cobra.Command{
		Use:   "plan [flags]",
		Short: "Compare cluster fabric designs: switches, optics, power and cost per GPU beside the all-reduce time",
		Long: "For each candidate design: build the topology for --gpus GPUs, count switches, cables and\n" +
			"transceivers and price them with the cost table (sim/cost: every value carries its source;\n" +
			"--costs FILE overrides it with your quotes), and simulate a --size all-reduce at flow level\n" +
			"the two ways NCCL runs it: the ring over all GPUs and the tree across hosts. One row per\n" +
			"design. Without --design, three built-in designs sized for --gpus: InfiniBand NDR\n" +
			"rail-optimized (DGX SuperPOD), RoCE 400G two-tier and RoCE 400G three-tier (ToR clusters).\n" +
			"A --design file must have exactly --gpus GPUs.",
		Example: "  ibex sim plan --gpus 4096\n" +
			"  ibex sim plan --gpus 4096 --design 'two-tier=examples/fattree-2tier-k128-8gpu.yaml:roce' --design 'three-tier=examples/fattree-3tier-k64-8gpu-compact.yaml:roce' --plot plan.png",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSimPlan(cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.gpus, "gpus", 4096, "GPUs (8 per host)")
	f.StringVar(&o.size, "size", "1G", "all-reduce size")
	f.StringArrayVar(&o.designs, "design", nil, "a design: NAME=TOPOLOGY.yaml:ib|roce (repeatable; replaces the built-in designs; schema: docs/sim-yaml.md)")
	f.StringVar(&o.costs, "costs", "", "a cost table overriding the default's entries (YAML; schema: docs/sim-yaml.md)")
	f.StringVar(&o.routing, "routing", "dmodk", "dmodk, ecmp or adaptive")
	f.BoolVar(&o.asJSON, "json", false, "print the rows as JSON")
	f.StringVar(&o.plotFile, "plot", "", "draw cost and power per GPU and the all-reduce times, design by design, into this PNG file")
	return cmd
}

func runSimPlan(out io.Writer, o simPlanOptions) error {
	if o.gpus < 1 {
		return fmt.Errorf("sim plan: --gpus %d: want 1 or more", o.gpus)
	}
	if err := checkOutputFile("sim plan: --plot", o.plotFile, []string{"png"}); err != nil {
		return err
	}
	size, err := units.ParseBytes(o.size)
	if err != nil || size <= 0 {
		return fmt.Errorf("sim plan: --size %q: want a size like 1G", o.size)
	}
	table := cost.Default()
	if o.costs != "" {
		if table, err = cost.Load(o.costs); err != nil {
			return fmt.Errorf("sim plan: --costs: %w", err)
		}
	}
	var designs []plan.Design
	if len(o.designs) == 0 {
		if designs, err = plan.Defaults(o.gpus); err != nil {
			return fmt.Errorf("sim plan: --gpus: %w", err)
		}
	}
	for _, d := range o.designs {
		name, rest, ok1 := strings.Cut(d, "=")
		file, layer, ok2 := strings.Cut(rest, ":")
		if !ok1 || !ok2 || name == "" {
			return fmt.Errorf("sim plan: --design %q: want NAME=TOPOLOGY.yaml:ib or NAME=TOPOLOGY.yaml:roce", d)
		}
		ll, err := cost.ParseLinkLayer(layer)
		if err != nil {
			return fmt.Errorf("sim plan: --design %q: %w", d, err)
		}
		spec, err := topo.Load(file)
		if err != nil {
			return err
		}
		// Each file is checked against --gpus before the first design runs.
		g, err := spec.Build()
		if err != nil {
			return fmt.Errorf("sim plan: --design %q: %s: %w", d, file, err)
		}
		if o.gpus > g.NumGPUs() {
			return fmt.Errorf("sim plan: --design %q: %s has %d GPUs, not the %d asked for by --gpus", d, file, g.NumGPUs(), o.gpus)
		}
		designs = append(designs, plan.Design{Name: name, Spec: spec, LinkLayer: ll})
	}
	ro := defaultSimRunOptions()
	ro.routing = o.routing
	p, err := simParams(ro)
	if err != nil {
		return err
	}
	var rows []*plan.Row
	for _, d := range designs {
		row, err := plan.Evaluate(d, plan.Options{GPUs: o.gpus, Bytes: size, Params: p, Table: table})
		if err != nil {
			return fmt.Errorf("sim plan: %w", err)
		}
		rows = append(rows, row)
	}
	if o.plotFile != "" {
		if err := plotPlan(o.plotFile, o.gpus, size, fmt.Sprint(p.Routing), rows); err != nil {
			return err
		}
	}
	if o.asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"gpus": o.gpus, "bytes": size, "designs": rows})
	}
	ew := &errWriter{w: out}
	ew.printf("# ibex sim plan: %d GPUs, %s all-reduce (flow engine, %v routing); costs from %s\n", o.gpus, units.FormatBytes(size), p.Routing, costSource(o.costs))
	ew.printf("# prices and most powers in the default table are estimates (see its provenance fields): use --costs with your quotes\n#\n")
	ew.printf("# %-24s %-10s %5s %8s %7s %7s %8s %7s %8s %7s", "design", "fabric", "tiers", "switches", "links", "optics", "power kW", "W/GPU", "cost $M", "$/GPU")
	if len(rows) > 0 {
		for _, r := range rows[0].Results {
			ew.printf(" %14s %7s", r.AllReduce+" ms", "busbw")
		}
	}
	ew.printf("\n")
	for _, r := range rows {
		ew.printf("  %-24s %-10s %5d %8d %7d %7d %8.1f %7.1f %8.2f %7.0f", r.Design, r.LinkLayer, r.Tiers, r.Switches, r.Links, r.Optics,
			r.Cost.PowerW.Total/1e3, r.Cost.PerGPU.PowerW, r.Cost.CostUSD.Total/1e6, r.Cost.PerGPU.CostUSD)
		for _, a := range r.Results {
			ew.printf(" %14.2f %7.1f", a.TimeUS/1e3, a.BusBW)
		}
		ew.printf("\n")
	}
	ew.printf("#\n# busbw in GB/s per GPU (nccl-tests' all_reduce factor 2(n-1)/n); power: switches, optics and NICs\n")
	return ew.err
}

func costSource(file string) string {
	if file == "" {
		return "sim/cost's default table"
	}
	return file + " over the default table"
}
