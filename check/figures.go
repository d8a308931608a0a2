package check

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"
)

// Format and FormatVersion head every baseline file. A file of a later
// version is refused (it may hold figures this ibex would misread); a
// later ibex reads every earlier version.
const (
	Format        = "ibex-check"
	FormatVersion = 1
)

// ErrShape is wrapped by the error of a comparison with a baseline that
// was measured on another shape: other ranks, transport, topology or
// sizes. Such figures are not comparable.
var ErrShape = errors.New("check: the baseline has another shape")

// ErrFormat is wrapped by the errors of Load about the file itself.
var ErrFormat = errors.New("check: not a baseline file")

// Figures is what one run measured, and what a baseline file holds.
// Bandwidths are GB/s (10^9 bytes per second, as nccl-tests and
// perftest print), latencies microseconds.
type Figures struct {
	Format  string    `json:"format"`
	Version int       `json:"version"`
	Created time.Time `json:"created"`
	Ibex    Build     `json:"ibex"`

	Shape
	// Hosts is each rank's host name, in rank order.
	Hosts []string `json:"hosts"`
	// Sim describes a simulated run (nil for a real one).
	Sim *SimInfo `json:"sim,omitempty"`

	// Pairs are every pair's figures, A < B, in (A, B) order.
	Pairs     []Pair    `json:"pairs"`
	AllReduce AllReduce `json:"allreduce"`
}

// Shape is what a baseline and a run must share to be compared.
type Shape struct {
	Ranks int `json:"ranks"`
	// Transport is the devices the pairs used, sorted and joined by
	// commas ("shm0", "udp0", "shm0,udp0"), or "sim" for a simulation.
	Transport string `json:"transport"`
	// Topology is the simulated graph's name ("" for a real run).
	Topology string `json:"topology,omitempty"`
	Config   Config `json:"config"`
}

// Build is the ibex that measured: the module version and the VCS
// revision from the binary's build information, when it has them.
type Build struct {
	Version string `json:"version"`
	Commit  string `json:"commit,omitempty"`
	Dirty   bool   `json:"dirty,omitempty"`
}

// Pair is one pair of ranks' figures.
type Pair struct {
	A         int     `json:"a"`
	B         int     `json:"b"`
	Transport string  `json:"transport"`
	BWAB      float64 `json:"bw_ab_gbs"` // A to B, GB/s
	BWBA      float64 `json:"bw_ba_gbs"` // B to A, GB/s
	LatUs     float64 `json:"lat_us"`    // half the median round trip
	// Err, if set, is why the pair could not be measured (a simulated
	// flapping cable that outlasted RC's retries); its figures are 0.
	Err string `json:"error,omitempty"`
}

// BW is the pair's bandwidth: the slower direction's.
func (p Pair) BW() float64 { return min(p.BWAB, p.BWBA) }

// Name is "A<->B".
func (p Pair) Name() string { return fmt.Sprintf("%d<->%d", p.A, p.B) }

// AllReduce is the all-reduce's figures (float32 sum, nccl-tests' busbw
// factor 2(N-1)/N): the mean of the out-of-place and in-place runs.
type AllReduce struct {
	Bytes  int64   `json:"bytes"`
	TimeUs float64 `json:"time_us"`
	AlgBW  float64 `json:"algbw_gbs"`
	BusBW  float64 `json:"busbw_gbs"`
	Wrong  int64   `json:"wrong"` // elements with a wrong result
	// Err, if set, is why it did not complete (simulated: a flapping
	// cable outlasted RC's retries); its figures are 0.
	Err string `json:"error,omitempty"`
}

// SimInfo is how a simulated run's fabric differed from its topology
// file.
type SimInfo struct {
	File    string   `json:"file"`
	Degrade []string `json:"degrade,omitempty"` // LINK=FACTOR, as given
	Flap    []string `json:"flap,omitempty"`    // LINK=PERIOD, as given
}

// newFigures starts the figures of a run of shape s.
func newFigures(s Shape) *Figures {
	return &Figures{Format: Format, Version: FormatVersion, Created: time.Now().UTC().Truncate(time.Second), Ibex: ThisBuild(), Shape: s}
}

// ThisBuild reads this binary's build information.
func ThisBuild() Build {
	b := Build{Version: "devel"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		b.Version = v
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.modified":
			b.Dirty = s.Value == "true"
		}
	}
	return b
}

func (b Build) String() string {
	s := b.Version
	if b.Commit != "" {
		s += " " + b.Commit[:min(len(b.Commit), 12)]
		if b.Dirty {
			s += "+dirty"
		}
	}
	return s
}

// Pair returns the figures of pair {a, b} (either order), if measured.
func (f *Figures) Pair(a, b int) (Pair, bool) {
	a, b = min(a, b), max(a, b)
	i, ok := slices.BinarySearchFunc(f.Pairs, [2]int{a, b}, func(p Pair, k [2]int) int {
		if p.A != k[0] {
			return p.A - k[0]
		}
		return p.B - k[1]
	})
	if !ok {
		return Pair{}, false
	}
	return f.Pairs[i], true
}

// Save writes f as indented JSON to path, through a temporary file and a
// rename, so that a reader never sees half a baseline.
func (f *Figures) Save(path string) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("check: save %s: %w", path, err)
	}
	_, err = tmp.Write(append(b, '\n'))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("check: save %s: %w", path, err)
	}
	return nil
}

// Load reads a baseline file and checks that it is one: the format
// name, a version this ibex reads, a consistent pair list.
func Load(path string) (*Figures, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("check: baseline: %w", err)
	}
	f, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Parse is Load's decoding and checks, on the file's bytes.
func Parse(b []byte) (*Figures, error) {
	var head struct {
		Format  string `json:"format"`
		Version int    `json:"version"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	switch {
	case head.Format != Format:
		return nil, fmt.Errorf("%w: format %q, want %q (written by ibex check --save)", ErrFormat, head.Format, Format)
	case head.Version < 1 || head.Version > FormatVersion:
		return nil, fmt.Errorf("%w: version %d: this ibex reads versions 1 to %d (a newer ibex wrote it?)", ErrFormat, head.Version, FormatVersion)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	var f Figures
	if err := d.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	if err := f.validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	return &f, nil
}

// validate checks that the pairs are every pair of Ranks once, in order.
func (f *Figures) validate() error {
	n := f.Ranks
	if n < 2 {
		return fmt.Errorf("ranks %d: want at least 2", n)
	}
	if want := n * (n - 1) / 2; len(f.Pairs) != want {
		return fmt.Errorf("%d pairs for %d ranks, want %d", len(f.Pairs), n, want)
	}
	k := 0
	for a := range n {
		for b := a + 1; b < n; b++ {
			if p := f.Pairs[k]; p.A != a || p.B != b {
				return fmt.Errorf("pairs[%d] is %d<->%d, want %d<->%d", k, p.A, p.B, a, b)
			}
			k++
		}
	}
	if len(f.Hosts) != 0 && len(f.Hosts) != n {
		return fmt.Errorf("%d hosts for %d ranks", len(f.Hosts), n)
	}
	return nil
}

// CheckShape returns an error wrapping ErrShape, naming every difference,
// when run and base were measured on different shapes.
func CheckShape(base, run Shape) error {
	var diff []string
	if base.Ranks != run.Ranks {
		diff = append(diff, fmt.Sprintf("ranks %d, this run %d", base.Ranks, run.Ranks))
	}
	if base.Transport != run.Transport {
		diff = append(diff, fmt.Sprintf("transport %s, this run %s", base.Transport, run.Transport))
	}
	if base.Topology != run.Topology {
		diff = append(diff, fmt.Sprintf("topology %q, this run %q", base.Topology, run.Topology))
	}
	bc, rc := base.Config, run.Config
	for _, d := range []struct {
		flag     string
		base, rn int64
	}{
		{"--size", bc.Bytes, rc.Bytes}, {"--iters", int64(bc.Iters), int64(rc.Iters)},
		{"--repeats", int64(bc.Repeats), int64(rc.Repeats)},
		{"--lat-iters", int64(bc.LatIters), int64(rc.LatIters)},
		{"--allreduce-size", bc.AllReduceBytes, rc.AllReduceBytes},
		{"--allreduce-iters", int64(bc.AllReduceIters), int64(rc.AllReduceIters)},
	} {
		if d.base != d.rn {
			diff = append(diff, fmt.Sprintf("%s %d, this run %d", d.flag, d.base, d.rn))
		}
	}
	if len(diff) == 0 {
		return nil
	}
	return fmt.Errorf("%w: baseline %s: measure a new baseline with --save, or run with the baseline's settings", ErrShape, strings.Join(diff, "; "))
}
