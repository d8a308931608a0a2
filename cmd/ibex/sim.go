package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/ibex-rdma/ibex/sim/topo"
)

// newSimCmd is `ibex sim`, the fabric simulator. Alone it prints its help.
func newSimCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Fabric simulator: topologies, packet- and flow-level runs, sweeps and cluster plans",
		Long: "The fabric simulator plans InfiniBand and RoCE clusters no one here can build. A topology is a\n" +
			"YAML file (a fat tree, a DGX SuperPOD, multi-plane, or an explicit list of nodes and links;\n" +
			"examples/ holds ready-made ones; every field: docs/sim-yaml.md). `topo` expands and checks it; `run` simulates a collective\n" +
			"or traffic pattern on it, packet by packet (credit flow control, or RoCE with PFC and DCQCN)\n" +
			"or at flow level to 100k GPUs; `sweep` runs every combination of topologies, sizes,\n" +
			"algorithms, routings and seeds; `plan` puts candidate designs' cost and power per GPU beside\n" +
			"their all-reduce time.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	cmd.AddCommand(newSimTopoCmd(), newSimRunCmd(), newSimSweepCmd(), newSimPlanCmd())
	return cmd
}

func newSimTopoCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "topo FILE [--json]",
		Short: "Expand a topology file, print its counts and check the graph",
		Long: "Read a topology file (kind: fattree, superpod or explicit; schema: docs/sim-yaml.md), expand it into its graph and\n" +
			"print hosts, GPUs, NICs, switches and ports per tier, links and capacity per tier and the\n" +
			"bisection bandwidth; then check the graph (ports used once and within each switch's\n" +
			"count, no self-links or duplicate cables, every NIC cabled, adjacent tiers only, every\n" +
			"host reaching every other) and print \"check: ok\" or the problems, each naming the\n" +
			"node, port or link. Exits non-zero on problems.",
		Example: "  ibex sim topo examples/superpod-1su.yaml\n  ibex sim topo --json examples/fattree-3tier-k16.yaml",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSimTopo(cmd.OutOrStdout(), args[0], asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the counts and the check as JSON")
	return cmd
}

// runSimTopo loads, builds, counts and checks the topology in path and
// writes the report. A spec error is returned before anything is written;
// check problems are written in the report and also returned, so that the
// exit status says the graph is bad.
func runSimTopo(w io.Writer, path string, asJSON bool) error {
	s, err := topo.Load(path)
	if err != nil {
		return err
	}
	g, err := s.Build()
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var problems *topo.CheckError
	if err := g.Check(); err != nil && !errors.As(err, &problems) {
		return err
	}
	c := g.Counts()
	if asJSON {
		err = writeSimTopoJSON(w, path, c, problems)
	} else {
		err = writeSimTopo(w, path, c, problems)
	}
	if err != nil {
		return err
	}
	if problems != nil {
		return fmt.Errorf("%s: check found %d problem%s", path, problems.Total, plural(problems.Total))
	}
	return nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// writeSimTopo prints the counts, two small tables and the check's
// verdict. Tiers with nothing in them are left out.
func writeSimTopo(w io.Writer, path string, c topo.Counts, problems *topo.CheckError) error {
	ew := &errWriter{w: w}
	name := c.Name
	if name == "" {
		name = path
	}
	ew.printf("topology  %s (%s)\n", name, c.Shape())
	ew.printf("hosts     %d\n", c.Hosts)
	if c.Planes > 1 {
		ew.printf("planes    %d (independent fabrics, every GPU's NIC a port in each)\n", c.Planes)
		ew.printf("GPUs      %d (one NIC port per plane each)\n", c.GPUs)
	} else {
		ew.printf("GPUs      %d (one NIC each)\n", c.GPUs)
	}
	ew.printf("NICs      %d\n\n", c.NICs)

	// Fixed widths rather than a tabwriter, so that the two tables line
	// up with each other (8 digits hold maxPorts).
	const row = "%-12s%8v   %s\n"
	ew.printf(row, "switches", "count", "ports used")
	for _, r := range []struct {
		tier         string
		n, used, all int
	}{
		{"leaf", c.Switches.Leaf, c.PortsUsed.Leaf, c.SwitchPorts.Leaf},
		{"spine", c.Switches.Spine, c.PortsUsed.Spine, c.SwitchPorts.Spine},
		{"core", c.Switches.Core, c.PortsUsed.Core, c.SwitchPorts.Core},
		{"untiered", c.Switches.Untiered, c.PortsUsed.Untiered, c.SwitchPorts.Untiered},
		{"total", c.Switches.Total, c.PortsUsed.Total, c.SwitchPorts.Total},
	} {
		if r.n > 0 || r.tier == "total" {
			ew.printf(row, r.tier, r.n, fmt.Sprintf("%d of %d", r.used, r.all))
		}
	}
	ew.printf("\n")
	ew.printf(row, "links", "count", "capacity")
	var capacity topo.Rate
	for t := topo.LinkHostLeaf; t <= topo.LinkOther; t++ {
		capacity += c.Capacity.Of(t)
		if n := c.Links.Of(t); n > 0 {
			ew.printf(row, t, n, c.Capacity.Of(t))
		}
	}
	ew.printf(row, "total", c.Links.Total, capacity)
	ew.printf("\n")
	if c.Tiers > 0 {
		ew.printf("bisection %v per direction\n", c.Bisection)
	} else {
		ew.printf("bisection not computed for explicit topologies\n")
	}
	ew.printf("MTU %d, switch latency %dns\n", c.MTU, c.SwitchLatencyNS)
	if problems == nil {
		ew.printf("check: ok\n")
		return ew.err
	}
	ew.printf("check: %d problem%s\n", problems.Total, plural(problems.Total))
	for _, p := range problems.Problems {
		ew.printf("  %s\n", p)
	}
	if more := problems.Total - len(problems.Problems); more > 0 {
		ew.printf("  ... and %d more\n", more)
	}
	return ew.err
}

// simTopoReport is the --json form: the counts, the file and the check.
type simTopoReport struct {
	File string `json:"file"`
	topo.Counts
	Check         string   `json:"check"` // "ok" or "failed"
	Problems      []string `json:"problems,omitempty"`
	ProblemsTotal int      `json:"problems_total,omitempty"`
}

func writeSimTopoJSON(w io.Writer, path string, c topo.Counts, problems *topo.CheckError) error {
	r := simTopoReport{File: path, Counts: c, Check: "ok"}
	if problems != nil {
		r.Check, r.Problems, r.ProblemsTotal = "failed", problems.Problems, problems.Total
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
