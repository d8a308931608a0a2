package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ibex-rdma/ibex/internal/units"
	"github.com/ibex-rdma/ibex/sim/fabric"
	"github.com/ibex-rdma/ibex/sim/packet"
	"github.com/ibex-rdma/ibex/sim/topo"
)

type simSweepOptions struct {
	run      simRunOptions
	topos    string
	sizes    string
	algos    string
	routings string
	seeds    string
	csvFile  string
	jsonFile string
	plotFile string
}

func newSimSweepCmd() *cobra.Command {
	o := simSweepOptions{run: defaultSimRunOptions()}
	cmd := &cobra.Command{
		Use:   "sweep [COLLECTIVE|PATTERN] --topos FILES [flags]",
		Short: "Run a collective over every combination of topologies, sizes, algorithms, routings and seeds",
		Long: "Sweep the simulator: every combination of --topos, --sizes, --algos, --routing and --seeds\n" +
			"runs once (flow engine by default: it is the one fast enough for sweeps). Each run is a\n" +
			"line of the table on stdout and a row of --csv and --json; --plot draws busbw against size,\n" +
			"one line per topology, algorithm and routing (the median over seeds).",
		Example: "  ibex sim sweep all_reduce --topos examples/superpod-1su.yaml,examples/fattree-2tier-k64.yaml --gpus 128 \\\n" +
			"      --sizes 1M,16M,256M,1G --algos ring,tree --csv sweep.csv --plot sweep.png\n" +
			"  ibex sim sweep permutation --topos examples/fattree-2tier-k64-2to1.yaml --gpus 512 --sizes 16M --routing ecmp,adaptive --seeds 1-20",
		Args: cobra.RangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			what := "all_reduce"
			if len(args) == 1 {
				what = args[0]
			}
			return runSimSweep(cmd.OutOrStdout(), what, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.topos, "topos", "", "topology files, comma-separated (required; schema: docs/sim-yaml.md)")
	f.StringVar(&o.sizes, "sizes", "1M,16M,256M", "sizes, comma-separated (K, M, G suffixes)")
	f.StringVar(&o.algos, "algos", "", "algorithms, comma-separated (default ring; direct for all_to_all; none for patterns)")
	f.StringVar(&o.routings, "routing", "dmodk", "routings, comma-separated: dmodk, ecmp, adaptive")
	f.StringVar(&o.seeds, "seeds", "1", "seeds: a list and ranges, 1-20,33")
	f.IntVar(&o.run.gpus, "gpus", 0, "ranks: the first N GPUs of each topology (default all)")
	f.StringVar(&o.run.engine, "engine", "flow", "packet or flow")
	f.BoolVar(&o.run.hier, "hier", false, "hierarchical all_reduce (flow engine), see ibex sim run")
	f.IntVar(&o.run.pipeline, "pipeline", 1, "coll/algo's pipeline")
	f.IntVar(&o.run.channels, "channels", 0, "channels (default: NICs per host)")
	f.StringVar(&o.csvFile, "csv", "", "write the rows as CSV to this file")
	f.StringVar(&o.jsonFile, "json", "", "write the rows as JSON to this file")
	f.StringVar(&o.plotFile, "plot", "", "draw busbw against size into this PNG/SVG/PDF file")
	return cmd
}

// sweepRow is one run of a sweep.
type sweepRow struct {
	Topology string  `json:"topology"`
	What     string  `json:"what"`
	Algo     string  `json:"algo"`
	Routing  string  `json:"routing"`
	Seed     uint64  `json:"seed"`
	Bytes    int64   `json:"bytes"`
	Ranks    int     `json:"ranks"`
	TimeUS   float64 `json:"time_us"`
	AlgBW    float64 `json:"algbw_GBps"`
	BusBW    float64 `json:"busbw_GBps"`
	WallS    float64 `json:"wall_s"`
}

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// parseSeeds reads "1-20,33".
func parseSeeds(s string) ([]uint64, error) {
	var out []uint64
	for _, part := range splitList(s) {
		a, b, isRange := strings.Cut(part, "-")
		lo, err1 := strconv.ParseUint(a, 10, 64)
		hi, err2 := lo, error(nil)
		if isRange {
			hi, err2 = strconv.ParseUint(b, 10, 64)
		}
		if err1 != nil || err2 != nil || hi < lo || hi-lo > 1e5 {
			return nil, fmt.Errorf("sim sweep: --seeds %q: %q: want numbers and ranges a-b", s, part)
		}
		for x := lo; x <= hi; x++ {
			out = append(out, x)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("sim sweep: --seeds %q: no seeds", s)
	}
	return out, nil
}

func runSimSweep(out io.Writer, what string, o simSweepOptions) error {
	topos := splitList(o.topos)
	if len(topos) == 0 {
		return fmt.Errorf("sim sweep: --topos: give at least one topology file")
	}
	var sizes []int64
	for _, s := range splitList(o.sizes) {
		n, err := units.ParseBytes(s)
		if err != nil {
			return fmt.Errorf("sim sweep: --sizes: %q: %w", s, err)
		}
		sizes = append(sizes, n)
	}
	if len(sizes) == 0 {
		return fmt.Errorf("sim sweep: --sizes: no sizes")
	}
	seeds, err := parseSeeds(o.seeds)
	if err != nil {
		return err
	}
	algos := splitList(o.algos)
	if len(algos) == 0 {
		algos = []string{""}
	}
	routings := splitList(o.routings)
	if len(routings) == 0 {
		return fmt.Errorf("sim sweep: --routing: none given")
	}
	if err := checkSweepFlags(o); err != nil {
		return err
	}
	// Every topology, algorithm and routing is checked before the first
	// run.
	type sweepTopo struct {
		path  string
		g     *topo.Graph
		ranks int
	}
	var tops []sweepTopo
	for _, path := range topos {
		spec, err := topo.Load(path)
		if err != nil {
			return fmt.Errorf("sim sweep: --topos: %w", err)
		}
		g, err := spec.Build()
		if err != nil {
			return fmt.Errorf("sim sweep: --topos: %s: %w", path, err)
		}
		ranks := o.run.gpus
		if ranks == 0 {
			ranks = g.NumGPUs()
		}
		if ranks < 1 || ranks > g.NumGPUs() {
			return fmt.Errorf("sim sweep: --gpus %d: %s has %d GPUs", o.run.gpus, path, g.NumGPUs())
		}
		if g.GPUsOnHost() == 0 {
			return fmt.Errorf("sim sweep: --topos: %s: hosts with different numbers of NICs; the workload needs the same number on every host", path)
		}
		for _, a := range algos {
			if _, _, err := simSchedule(what, a, ranks, o.run.pipeline, seeds[0]); err != nil {
				return fmt.Errorf("%w (%s)", err, path)
			}
		}
		tops = append(tops, sweepTopo{path, g, ranks})
	}
	params := map[string]fabric.Params{}
	for _, r := range routings {
		ro := o.run
		ro.routing = r
		p, err := simParams(ro)
		if err != nil {
			return err
		}
		params[r] = p
	}
	ew := &errWriter{w: out}
	ew.printf("# ibex sim sweep %s: %d topologies x %d sizes x %d algorithms x %d routings x %d seeds, engine %s\n",
		what, len(topos), len(sizes), len(algos), len(routings), len(seeds), o.run.engine)
	ew.printf("# %-28s %-8s %-8s %5s %12s %12s %12s %12s\n", "topology", "algo", "routing", "seed", "size(B)", "time(us)", "algbw(GB/s)", "busbw(GB/s)")
	var rows []sweepRow
	for _, t := range tops {
		path, g, ranks := t.path, t.g, t.ranks
		for _, a := range algos {
			for _, r := range routings {
				ro := o.run
				ro.routing, ro.algo, ro.iters, ro.seeds = r, a, 1, 1
				p := params[r]
				for _, seed := range seeds {
					sched, name, err := simSchedule(what, a, ranks, ro.pipeline, seed)
					if err != nil {
						return err
					}
					for _, size := range sizes {
						cfg := packet.Config{Graph: g, Params: p, Seed: seed, Schedule: sched, Name: name, Bytes: size, Channels: ro.channels}
						row, _, err := simOne(cfg, ro, false, nil)
						if err != nil {
							return fmt.Errorf("sim sweep: %s %s %s seed %d %d bytes: %w", path, name, r, seed, size, err)
						}
						sr := sweepRow{Topology: path, What: what, Algo: a, Routing: r, Seed: seed, Bytes: size, Ranks: ranks,
							TimeUS: row.TimeUS, AlgBW: row.AlgBW, BusBW: row.BusBW, WallS: row.WallS}
						rows = append(rows, sr)
						ew.printf("  %-28s %-8s %-8s %5d %12d %12.1f %12.2f %12.2f\n", shortName(path), a, r, seed, size, sr.TimeUS, sr.AlgBW, sr.BusBW)
					}
				}
			}
		}
	}
	if ew.err != nil {
		return ew.err
	}
	if o.csvFile != "" {
		if err := writeSweepCSV(o.csvFile, rows); err != nil {
			return err
		}
	}
	if o.jsonFile != "" {
		data, err := json.MarshalIndent(rows, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.jsonFile, append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("sim sweep: --json: %w", err)
		}
	}
	if o.plotFile != "" {
		return plotSweep(o.plotFile, what, o.run.engine, rows)
	}
	return nil
}

// plotExts are the formats gonum/plot's Save writes.
var plotExts = []string{"png", "svg", "pdf", "eps", "jpg", "jpeg", "tif", "tiff"}

// checkSweepFlags checks the flags of sweep that are not lists, and the
// output files, before anything is loaded or run.
func checkSweepFlags(o simSweepOptions) error {
	switch {
	case o.run.engine != "packet" && o.run.engine != "flow":
		return fmt.Errorf("sim sweep: --engine %q: want packet or flow", o.run.engine)
	case o.run.hier && o.run.engine != "flow":
		return fmt.Errorf("sim sweep: --hier needs --engine flow")
	case o.run.gpus < 0:
		return fmt.Errorf("sim sweep: --gpus %d: want 1 or more (0: all)", o.run.gpus)
	case o.run.channels < 0 || o.run.channels > 64:
		return fmt.Errorf("sim sweep: --channels %d: want 1 to 64 (0: NICs per host)", o.run.channels)
	case o.run.pipeline < 1 || o.run.pipeline > 1024:
		return fmt.Errorf("sim sweep: --pipeline %d: want 1 to 1024", o.run.pipeline)
	}
	for _, f := range []struct {
		flag, path string
		exts       []string
	}{{"--csv", o.csvFile, nil}, {"--json", o.jsonFile, nil}, {"--plot", o.plotFile, plotExts}} {
		if err := checkOutputFile("sim sweep: "+f.flag, f.path, f.exts); err != nil {
			return err
		}
	}
	return nil
}

func shortName(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		path = path[i+1:]
	}
	return strings.TrimSuffix(path, ".yaml")
}

func writeSweepCSV(file string, rows []sweepRow) error {
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("sim sweep: --csv: %w", err)
	}
	w := csv.NewWriter(f)
	w.Write([]string{"topology", "what", "algo", "routing", "seed", "bytes", "ranks", "time_us", "algbw_GBps", "busbw_GBps", "wall_s"})
	for _, r := range rows {
		w.Write([]string{r.Topology, r.What, r.Algo, r.Routing, strconv.FormatUint(r.Seed, 10), strconv.FormatInt(r.Bytes, 10),
			strconv.Itoa(r.Ranks), strconv.FormatFloat(r.TimeUS, 'f', 3, 64), strconv.FormatFloat(r.AlgBW, 'f', 3, 64),
			strconv.FormatFloat(r.BusBW, 'f', 3, 64), strconv.FormatFloat(r.WallS, 'f', 4, 64)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return fmt.Errorf("sim sweep: --csv: %w", err)
	}
	return f.Close()
}
