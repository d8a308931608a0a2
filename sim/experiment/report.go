package experiment

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/ibex-rdma/ibex/internal/units"
	"github.com/ibex-rdma/ibex/sim/fabric"
	"github.com/ibex-rdma/ibex/sim/topo"
)

// WriteText writes the report `ibex sim run` prints: a header (the
// topology, the workload and the fabric's constants, the failures), a
// row per size and seed as nccl-tests prints them (time, algbw, busbw,
// busbw per NIC, credit wait or PFC pause time, events or solves, wall
// time), each after the failures drawn for it and its comparison with
// the run without failures, each size's spread over the seeds, the last
// run's busiest links and the peak memory. Config.Out gets the same text
// as the rows come.
func (r *Result) WriteText(w io.Writer) error {
	t := &text{w: w}
	t.head(r)
	seeds := r.Config.Seeds
	for i, row := range r.Rows {
		t.drawn(r.Graph, row.Seed, row.RandomFailures)
		t.row(r, i)
		if seeds > 1 && (i+1)%seeds == 0 && (i+1)/seeds <= len(r.Spreads) {
			t.spread(r.Spreads[(i+1)/seeds-1])
		}
	}
	t.tail(r)
	return t.err
}

// WriteJSON writes the --json report: the topology's file, the rows and
// the peak memory, indented.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(map[string]any{"topology": r.Topology, "rows": r.Rows, "peak_rss_bytes": r.PeakRSS})
}

// text writes the report's parts, remembering the first write error.
type text struct {
	w   io.Writer
	err error
}

func (t *text) printf(format string, args ...any) {
	if t.err == nil {
		_, t.err = fmt.Fprintf(t.w, format, args...)
	}
}

// waitLabel is the wait column's name: credit stalls with InfiniBand,
// PFC pause time with RoCE.
func waitLabel(p fabric.Params) string {
	if p.LinkLayer == fabric.LinkRoCE {
		return "pause(us)"
	}
	return "creditwait(us)"
}

func (t *text) head(r *Result) {
	c, g, p := r.Config, r.Graph, r.Params
	n := g.Counts()
	t.printf("# ibex sim: %s (%s): %d hosts, %d GPUs, %d switches, %v links\n",
		n.Name, n.Shape(), n.Hosts, n.GPUs, n.Switches.Total, n.Capacity.Of(topo.LinkHostLeaf)/topo.Rate(max(n.Links.Of(topo.LinkHostLeaf), 1)))
	if c.Hier {
		t.printf("# hierarchical: ring reduce-scatter in each host, %s across hosts per rail, ring all-gather in each host\n", r.Name)
	}
	lanes := fmt.Sprintf("%d VL(s), buffer %s/VL", p.VLs, units.FormatBytes(int64(p.Buffer)))
	if p.LinkLayer == fabric.LinkRoCE {
		lanes = fmt.Sprintf("RoCEv2, %d priorities, PFC Xoff %s, congestion control %v", p.VLs, units.FormatBytes(int64(p.PFCXoff)), p.CC)
	}
	nic := "PXN"
	if c.LocalNIC {
		nic = "own NIC"
	}
	t.printf("# %s over %d GPUs, %d channel(s), %s, %v routing, chunk %s, %d slots, %d QP(s)/connection, %s, seed %d\n",
		r.Name, r.Ranks, r.Channels, nic, p.Routing, units.FormatBytes(int64(p.Chunk)), p.Slots, p.QPsPerConn, lanes, c.Seed)
	for _, f := range c.Failures {
		t.printf("# link %s fails at %v\n", g.LinkName(f.Link), f.At)
	}
	for _, f := range c.SwitchFailures {
		when := f.When
		if when == "" {
			when = f.At.String()
		}
		t.printf("# switch %s fails at %s (all its links)\n", f.Switch, when)
	}
	if c.Iterations > 1 {
		t.printf("# %d iterations back to back; time and bandwidth are per iteration\n", c.Iterations)
	}
	ev, evs := "events", "Mev/s"
	if c.Engine == EngineFlow {
		ev, evs = "solves", "Msolve/s"
	}
	t.printf("# engine %s\n#\n# %12s %12s %12s %12s %12s %14s %12s %8s %8s", c.Engine, "size(B)", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "busbw/NIC", waitLabel(p), ev, "wall(s)", evs)
	if c.Seeds > 1 {
		t.printf(" %8s", "seed")
	}
	t.printf("\n")
}

// drawn writes the random failures drawn for a run (before it runs).
func (t *text) drawn(g *topo.Graph, seed uint64, fails []fabric.Failure) {
	for _, f := range fails {
		t.printf("# seed %d: link %s fails at %v\n", seed, g.LinkName(f.Link), f.At)
	}
}

// row writes r.Rows[i]: its comparison with the run without failures,
// and the row.
func (t *text) row(r *Result, i int) {
	c, row := r.Config, r.Rows[i]
	if r.Compared {
		h := "none"
		if len(row.Slowed) > 0 {
			s := make([]string, len(row.Slowed))
			for i, n := range row.Slowed {
				s[i] = strconv.Itoa(n)
			}
			h = strings.Join(s, ",")
		}
		iters := float64(c.Iterations)
		t.printf("# failures, %v routing: %.1f us without, %.1f us with (%+.2f%%); iterations slowed: %s of %d\n",
			r.Params.Routing, row.BaseTimeUS*iters, row.TimeUS*iters, 100*(row.TimeUS/row.BaseTimeUS-1), h, c.Iterations)
	}
	t.printf("  %12d %12.1f %12.2f %12.2f %12.2f %14.1f %12d %8.2f %8.2f", row.Bytes, row.TimeUS, row.AlgBW, row.BusBW,
		row.BusBWPerNIC, row.WaitUS, row.Events, row.WallS, row.EventsPerS/1e6)
	if c.Seeds > 1 {
		t.printf(" %8d", row.Seed)
	}
	t.printf("\n")
}

func (t *text) spread(s Spread) {
	t.printf("# %d seeds from %d: time min %.1f, median %.1f, max %.1f us (max %+.1f%% over min)\n",
		s.Seeds, s.FirstSeed, s.Min, s.Median, s.Max, 100*(s.Max/s.Min-1))
}

// tail writes the last run's busiest links and the peak memory.
func (t *text) tail(r *Result) {
	if r.Config.Top > 0 && len(r.Ports) > 0 && len(r.Rows) > 0 {
		t.printf("#\n# hottest links (last size; busiest first; utilisation over the whole run)\n")
		t.printf("# %-44s %-10s %12s %6s %14s\n", "port -> port", "tier", "bytes", "util", waitLabel(r.Params))
		for _, l := range r.Rows[len(r.Rows)-1].Links {
			mark := ""
			if l.Failed {
				mark = "  FAILED"
			}
			t.printf("# %-44s %-10s %12d %5.1f%% %14.1f%s\n", l.Port, l.Tier, l.Bytes, 100*l.Util, l.WaitUS, mark)
		}
	}
	t.printf("# peak memory (max RSS) %.1f MiB\n", float64(r.PeakRSS)/(1<<20))
}
