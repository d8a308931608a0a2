package coll

import (
	"context"
	"encoding/json"
	"fmt"
	"math/bits"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/coll/reduce"
	"github.com/ibex-rdma/ibex/verbs"
)

// Model is the alpha-beta cost model a communicator picks algorithms by:
// per transport, the time of a message of n bytes between two ranks
// through the executor (α + n·β), and the time to reduce a byte (γ).
// Calibrate measures one; DefaultModel was measured on a 2-core VM.
//
// Entries are keyed by device name. A link costs what its device's entry
// says; a device with no entry of its own takes the entry of a device
// with the same capabilities (LinkModel.Caps; the first such entry by
// name), so a second udp device costs what udp0 does; any other device
// costs like the slowest entry. An entry saved without capabilities
// (files from before they were recorded) has those of DefaultModel's
// entry of the same name, or none.
type Model struct {
	Transports map[string]LinkModel `json:"transports"`
	// GammaNs is nanoseconds per byte reduced (float32 sum).
	GammaNs float64 `json:"gamma_ns_per_byte"`
	// Source says where the numbers come from.
	Source string `json:"source"`
}

// LinkModel is one transport's α and β, and the capabilities of the
// device they were measured on.
type LinkModel struct {
	AlphaUs float64 `json:"alpha_us"`         // one-way time of an empty message, µs
	BetaNs  float64 `json:"beta_ns_per_byte"` // ns per byte (1/bandwidth)
	// Caps is the device's verbs.DeviceCap, in JSON as its String
	// ("SAME_HOST|ONE_SIDED|..."), omitted when unknown (0).
	Caps verbs.DeviceCap `json:"-"`
}

// linkModelJSON is LinkModel's JSON form: its fields, and caps by name.
type linkModelJSON struct {
	AlphaUs float64 `json:"alpha_us"`
	BetaNs  float64 `json:"beta_ns_per_byte"`
	Caps    string  `json:"caps,omitempty"`
}

// MarshalJSON writes the capabilities by name.
func (l LinkModel) MarshalJSON() ([]byte, error) {
	j := linkModelJSON{AlphaUs: l.AlphaUs, BetaNs: l.BetaNs}
	if l.Caps != 0 {
		j.Caps = l.Caps.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads MarshalJSON's form; caps may be absent.
func (l *LinkModel) UnmarshalJSON(b []byte) error {
	var j linkModelJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	caps, err := parseCaps(j.Caps)
	if err != nil {
		return err
	}
	*l = LinkModel{AlphaUs: j.AlphaUs, BetaNs: j.BetaNs, Caps: caps}
	return nil
}

// parseCaps reads verbs.DeviceCap's String form ("" and "none": 0).
func parseCaps(s string) (verbs.DeviceCap, error) {
	if s == "" || s == "none" {
		return 0, nil
	}
	var caps verbs.DeviceCap
	for _, name := range strings.Split(s, "|") {
		found := false
		for i := range 32 {
			if c := verbs.DeviceCap(1) << i; c.String() == name {
				caps, found = caps|c, true
				break
			}
		}
		if !found {
			return 0, fmt.Errorf("caps %q: unknown capability %q", s, name)
		}
	}
	return caps, nil
}

// DefaultModel is the model a communicator uses when none is given:
// medians of three runs of `ibex coll calibrate --np 2` (shm0; α is the
// LL path's) and `ibex coll calibrate --np 2 --transport udp0` (udp0 over
// loopback) on a 2-core VM with the AVX2 kernels (γ), and TestCalibrate's
// log for loop0 (the in-process provider). Each entry records the
// capabilities its device advertised, so a device with the same ones
// (udp1 added with udp.AddDevice) takes its figures.
func DefaultModel() Model {
	return Model{
		Transports: map[string]LinkModel{
			"shm0":  {AlphaUs: 2.55, BetaNs: 0.217, Caps: verbs.CapSameHost | verbs.CapOneSided | verbs.CapOrderedPlacement | verbs.CapCompleteAtPost},
			"udp0":  {AlphaUs: 268, BetaNs: 1.05, Caps: verbs.CapSameHost | verbs.CapOtherHosts | verbs.CapOrderedPlacement},
			"loop0": {AlphaUs: 10, BetaNs: 0.24, Caps: verbs.CapOneSided | verbs.CapCompleteAtPost},
		},
		GammaNs: 0.0335,
		Source:  "default: ibex coll calibrate --np 2 on a 2-core VM (shm0: median of 3; udp0: 2 network namespaces), 2026-11-30, LL and flagged paths",
	}
}

// ModelEnv names a file holding a Model as JSON (what ibex coll calibrate
// writes); rank 0 reads it at NewComm and every rank uses rank 0's model.
const ModelEnv = "IBEX_COLL_MODEL"

// LoadModel reads a model written as JSON.
func LoadModel(path string) (Model, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Model{}, fmt.Errorf("coll: cost model: %w", err)
	}
	return parseModel(b, path)
}

func parseModel(b []byte, what string) (Model, error) {
	var m Model
	if err := json.Unmarshal(b, &m); err != nil {
		return Model{}, fmt.Errorf("coll: cost model %s: %w", what, err)
	}
	if err := m.check(); err != nil {
		return Model{}, fmt.Errorf("coll: cost model %s: %w", what, err)
	}
	return m, nil
}

func (m Model) check() error {
	if len(m.Transports) == 0 {
		return fmt.Errorf("no transports")
	}
	for name, l := range m.Transports {
		if !(l.AlphaUs >= 0 && l.AlphaUs < 1e7 && l.BetaNs >= 0 && l.BetaNs < 1e7) {
			return fmt.Errorf("transport %q: alpha %g µs, beta %g ns/B: want non-negative, finite", name, l.AlphaUs, l.BetaNs)
		}
	}
	if !(m.GammaNs >= 0 && m.GammaNs < 1e7) {
		return fmt.Errorf("gamma %g ns/B: want non-negative, finite", m.GammaNs)
	}
	return nil
}

// Save writes the model as JSON.
func (m Model) Save(path string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// String is one line per transport.
func (m Model) String() string {
	names := make([]string, 0, len(m.Transports))
	for n := range m.Transports {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		l := m.Transports[n]
		gbs := 0.0
		if l.BetaNs > 0 {
			gbs = 1 / l.BetaNs
		}
		fmt.Fprintf(&b, "%-6s alpha %8.2f us   beta %7.4f ns/B (%6.2f GB/s)\n", n, l.AlphaUs, l.BetaNs, gbs)
	}
	fmt.Fprintf(&b, "reduce gamma %.4f ns/B; %s\n", m.GammaNs, m.Source)
	return b.String()
}

// link is the model's cost between ranks a and b of c: the entry for
// the device that joins them (entry).
func (m Model) link(c *Comm) func(a, b int) algo.LinkCost {
	entry := m.entries()
	return func(a, b int) algo.LinkCost {
		l := entry(c.transportBetween(a, b), c.linkCaps(a, b))
		return algo.LinkCost{Alpha: l.AlphaUs * 1e-6, Beta: l.BetaNs * 1e-9}
	}
}

// entries returns the lookup of Model's rule: a device's own entry, else
// the first entry by name whose capabilities equal the device's, else the
// slowest α and β of all.
func (m Model) entries() func(dev string, caps verbs.DeviceCap) LinkModel {
	var worst LinkModel
	names := make([]string, 0, len(m.Transports))
	for n, l := range m.Transports {
		worst.AlphaUs, worst.BetaNs = max(worst.AlphaUs, l.AlphaUs), max(worst.BetaNs, l.BetaNs)
		names = append(names, n)
	}
	sort.Strings(names)
	defaults := DefaultModel().Transports
	byCaps := map[verbs.DeviceCap]LinkModel{}
	for _, n := range names {
		l := m.Transports[n]
		caps := l.Caps
		if caps == 0 {
			caps = defaults[n].Caps
		}
		if _, dup := byCaps[caps]; caps != 0 && !dup {
			byCaps[caps] = l
		}
	}
	return func(dev string, caps verbs.DeviceCap) LinkModel {
		if l, ok := m.Transports[dev]; ok {
			return l
		}
		if l, ok := byCaps[caps]; ok && caps != 0 {
			return l
		}
		return worst
	}
}

// choiceKey caches a choice: the collective and the size class of a call
// (calls whose byte counts have the same bit length share a choice).
type choiceKey struct {
	kind  algo.Collective
	class int
}

// choose picks the cheapest algorithm for kind on count elements of esize
// bytes by the model. Every rank computes the same choice: the model is
// rank 0's, the transports between every pair are known to all, and the
// cost is evaluated at the size class's lower bound, not the count.
func (c *Comm) choose(kind algo.Collective, count, esize int) algo.Algorithm {
	class := bits.Len(uint(count * esize))
	k := choiceKey{kind, class}
	if a, ok := c.choices[k]; ok {
		return a
	}
	rep := 0
	if class > 0 {
		rep = (1 << (class - 1)) / esize
	}
	cm := algo.CostModel{Link: c.model.link(c), Gamma: c.model.GammaNs * 1e-9}
	best, bestCost := algo.Algorithm(0), 0.0
	for _, a := range algo.Supported(kind) {
		s, err := algo.Generate(kind, a, c.size, 0, 1)
		if err != nil {
			continue
		}
		if cost := s.Cost(rep, esize, cm); best == 0 || cost < bestCost {
			best, bestCost = a, cost
		}
	}
	c.choices[k] = best
	return best
}

// The devices a communicator opens when Options.Transport names none:
// one that reaches the ranks of this host, one that reaches other hosts.
// Which paths and costs a link gets follows from the device's
// capabilities, never from these names.
const (
	sameHostDevice  = "shm0"
	otherHostDevice = "udp0"
)

// transportBetween is the device ranks a and b use between them: the
// same rule as deviceFor, for any pair.
func (c *Comm) transportBetween(a, b int) string {
	if c.opt.Transport != "" {
		return c.opt.Transport
	}
	if c.peers[a].Host == c.peers[b].Host {
		return sameHostDevice
	}
	return otherHostDevice
}

// Model is the cost model the communicator picks algorithms by.
func (c *Comm) Model() Model { return c.model }

// setModel installs m and forgets earlier choices.
func (c *Comm) setModel(m Model) {
	c.model = m
	c.choices = map[choiceKey]algo.Algorithm{}
}

// Calibrate measures the model on this communicator and installs it on
// every rank; every rank must call it. For each transport in use, rank 0
// and the lowest rank it reaches over that transport time ping-pongs of
// send/recv through the executor: α is half the round trip of 8 bytes, β
// the extra half round trip per byte of 1 MiB. γ is rank 0's float32 sum
// of 1 MiB. Each entry records its device's capabilities (LinkModel.Caps).
// The other ranks wait in a barrier.
func (c *Comm) Calibrate(ctx context.Context) (Model, error) {
	m := Model{Transports: map[string]LinkModel{}}
	partners := map[string]int{}
	for q := c.size - 1; q > 0; q-- {
		partners[c.transportBetween(0, q)] = q
	}
	names := make([]string, 0, len(partners))
	for t := range partners {
		names = append(names, t)
	}
	sort.Strings(names)
	const small, large = 8, 1 << 20
	buf := make([]byte, large)
	pingpong := func(peer, n, iters int) (time.Duration, error) {
		var start time.Time
		for i := range iters + iters/4 {
			if i == iters/4 {
				start = time.Now()
			}
			if c.rank == 0 {
				if err := c.Send(ctx, buf, n, reduce.Uint8, peer); err != nil {
					return 0, err
				}
				if err := c.Recv(ctx, buf, n, reduce.Uint8, peer); err != nil {
					return 0, err
				}
			} else {
				if err := c.Recv(ctx, buf, n, reduce.Uint8, 0); err != nil {
					return 0, err
				}
				if err := c.Send(ctx, buf, n, reduce.Uint8, 0); err != nil {
					return 0, err
				}
			}
		}
		return time.Since(start) / time.Duration(2*iters), nil
	}
	for _, t := range names {
		p := partners[t]
		if c.rank != 0 && c.rank != p {
			continue
		}
		ts, err := pingpong(p, small, 400)
		if err != nil {
			return m, fmt.Errorf("coll: calibrate %s: %w", t, err)
		}
		tl, err := pingpong(p, large, 40)
		if err != nil {
			return m, fmt.Errorf("coll: calibrate %s: %w", t, err)
		}
		beta := float64(tl-ts) / float64(large-small)
		m.Transports[t] = LinkModel{AlphaUs: float64(ts) / 1e3, BetaNs: max(beta, 0), Caps: c.linkCaps(0, p)}
	}
	if c.rank == 0 {
		a, b := make([]byte, large), make([]byte, large)
		if err := reduce.Reduce(a, b, reduce.Float32, reduce.Sum); err != nil { // fault the pages in
			return m, err
		}
		start := time.Now()
		const rounds = 20
		for range rounds {
			if err := reduce.Reduce(a, b, reduce.Float32, reduce.Sum); err != nil {
				return m, err
			}
		}
		m.GammaNs = float64(time.Since(start)) / rounds / large
		host, _ := os.Hostname()
		m.Source = fmt.Sprintf("calibrated on %s at %s, %d ranks", host, time.Now().UTC().Format(time.RFC3339), c.size)
	}
	// Rank 0's model for everyone.
	var enc [4096]byte
	if c.rank == 0 {
		b, err := json.Marshal(m)
		if err != nil || len(b) > len(enc)-4 {
			return m, fmt.Errorf("coll: calibrate: model of %d bytes: %v", len(b), err)
		}
		enc[0], enc[1] = byte(len(b)>>8), byte(len(b))
		copy(enc[2:], b)
	}
	if err := c.Broadcast(ctx, enc[:], enc[:], len(enc), reduce.Uint8, 0); err != nil {
		return m, fmt.Errorf("coll: calibrate: %w", err)
	}
	n := int(enc[0])<<8 | int(enc[1])
	got, err := parseModel(enc[2:2+n], "from rank 0")
	if err != nil {
		return m, err
	}
	c.setModel(got)
	return got, nil
}
