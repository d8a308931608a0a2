package cost

import (
	_ "embed"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/ibex-rdma/ibex/sim/topo"
)

//go:embed default.yaml
var defaultYAML []byte

// LinkLayer is the kind of fabric: which switch and NIC entries apply.
type LinkLayer string

const (
	InfiniBand LinkLayer = "infiniband"
	Ethernet   LinkLayer = "ethernet" // RoCE
)

// ParseLinkLayer reads a link layer as a flag gives it: infiniband (ib) or
// ethernet (eth, roce), in any case.
func ParseLinkLayer(s string) (LinkLayer, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "infiniband", "ib":
		return InfiniBand, nil
	case "ethernet", "eth", "roce":
		return Ethernet, nil
	}
	return "", fmt.Errorf("link layer %q: want infiniband or ethernet", s)
}

func (l LinkLayer) valid() bool { return l == InfiniBand || l == Ethernet }

// Confidence says how far a Value can be trusted.
type Confidence string

const (
	Measured  Confidence = "measured"  // measured on hardware (ours or a cited measurement)
	Primary   Confidence = "primary"   // the vendor's datasheet or manual
	Secondary Confidence = "secondary" // third parties: resellers, blogs, press
	Estimate  Confidence = "estimate"  // a guess; the source says how it was made
)

func (c Confidence) valid() bool {
	return c == Measured || c == Primary || c == Secondary || c == Estimate
}

// Value is one number of the table with its provenance. The unit is in the
// field's name (cost_usd, power_w, reach_m).
//
//	power_w: {value: 15, confidence: primary, source: "NVIDIA MMA4Z00-NS doc"}
type Value struct {
	Value      float64    `yaml:"value" json:"value"`
	Confidence Confidence `yaml:"confidence" json:"confidence"`
	Source     string     `yaml:"source" json:"source"`
}

// Table is the parameter table: global cable rules and the parts, each
// part under its name. A YAML file declares it:
//
//	copper_max_m:          {value: 3, confidence: ..., source: ...}
//	copper_cable_usd:      {...}   # per link
//	fibre_cable_usd:       {...}   # per link
//	fibre_cable_usd_per_m: {...}
//	switches:
//	  ib-ndr-64: {model: ..., link_layer: infiniband, rate_gbps: 400, ports: 64,
//	              cost_usd: {...}, power_w: {...}, optics: [ndr-2x400g-sr8, ...]}
//	nics:
//	  ib-ndr:    {model: ..., link_layer: infiniband, rate_gbps: 400,
//	              cost_usd: {...}, power_w: {...}, optics: [ndr-400g-sr4, ...]}
//	transceivers:
//	  ndr-2x400g-sr8: {model: ..., ports: {...}, reach_m: {...}, cost_usd: {...}, power_w: {...}}
type Table struct {
	CopperMaxM        Value `yaml:"copper_max_m" json:"copper_max_m"`
	CopperCableUSD    Value `yaml:"copper_cable_usd" json:"copper_cable_usd"`
	FibreCableUSD     Value `yaml:"fibre_cable_usd" json:"fibre_cable_usd"`
	FibreCableUSDPerM Value `yaml:"fibre_cable_usd_per_m" json:"fibre_cable_usd_per_m"`

	Switches     map[string]*Switch      `yaml:"switches" json:"switches"`
	NICs         map[string]*NIC         `yaml:"nics" json:"nics"`
	Transceivers map[string]*Transceiver `yaml:"transceivers" json:"transceivers"`

	// lines maps a field's path ("switches.ib-ndr-64.cost_usd") to its
	// line in the file it came from, for errors.
	lines map[string]int
}

// Switch is a switch model. LinkLayer, RateGbps and Ports are what a
// graph's switch is matched by; no two entries may share them.
type Switch struct {
	Model     string    `yaml:"model" json:"model"`
	LinkLayer LinkLayer `yaml:"link_layer" json:"link_layer"`
	RateGbps  float64   `yaml:"rate_gbps" json:"rate_gbps"` // per port
	Ports     int       `yaml:"ports" json:"ports"`
	CostUSD   Value     `yaml:"cost_usd" json:"cost_usd"`
	PowerW    Value     `yaml:"power_w" json:"power_w"` // without pluggable optics
	Optics    []string  `yaml:"optics" json:"optics"`   // transceiver names for its ports
}

// NIC is a NIC model, matched by LinkLayer and RateGbps.
type NIC struct {
	Model     string    `yaml:"model" json:"model"`
	LinkLayer LinkLayer `yaml:"link_layer" json:"link_layer"`
	RateGbps  float64   `yaml:"rate_gbps" json:"rate_gbps"`
	CostUSD   Value     `yaml:"cost_usd" json:"cost_usd"`
	PowerW    Value     `yaml:"power_w" json:"power_w"` // without its pluggable optics
	Optics    []string  `yaml:"optics" json:"optics"`
}

// Transceiver is a pluggable optical module.
type Transceiver struct {
	Model   string `yaml:"model" json:"model"`
	Ports   Value  `yaml:"ports" json:"ports"`     // ports one module serves, >= 1
	ReachM  Value  `yaml:"reach_m" json:"reach_m"` // longest link it drives
	CostUSD Value  `yaml:"cost_usd" json:"cost_usd"`
	PowerW  Value  `yaml:"power_w" json:"power_w"`
}

func gbps(g float64) topo.Rate { return topo.Rate(math.Round(g * 1e9)) }

// Default returns a fresh copy of the embedded default table.
func Default() *Table {
	t, err := Parse(defaultYAML)
	if err != nil {
		panic("sim/cost: default.yaml: " + err.Error())
	}
	return t
}

// Parse reads a complete table from YAML and validates it. Errors are
// *FieldError (wrapping ErrTable) naming the field's path and line.
func Parse(data []byte) (*Table, error) {
	t, given, err := decode(data)
	if err != nil {
		return nil, err
	}
	if t.Switches == nil {
		t.Switches = map[string]*Switch{}
	}
	if t.NICs == nil {
		t.NICs = map[string]*NIC{}
	}
	if t.Transceivers == nil {
		t.Transceivers = map[string]*Transceiver{}
	}
	if err := checkValuesGiven(t, given); err != nil {
		return nil, err
	}
	if err := t.validate(); err != nil {
		return nil, err
	}
	return t, nil
}

// Override returns a copy of t with the entries of the YAML data in place
// of its own: a global value, a whole Value (value, confidence and source
// together), a field of a part, or a new part. The result is validated as
// a whole; t is not changed.
func (t *Table) Override(data []byte) (*Table, error) {
	o, given, err := decode(data)
	if err != nil {
		return nil, err
	}
	if err := checkValuesGiven(o, given); err != nil {
		return nil, err
	}
	out := t.clone()
	merge(out, o, given)
	if err := out.validate(); err != nil {
		return nil, err
	}
	return out, nil
}

// Load returns the default table overridden by the file at path. Errors
// start with the path.
func Load(path string) (*Table, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := Default().Override(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// clone copies t deeply enough that merging into the copy leaves t as it
// was.
func (t *Table) clone() *Table {
	c := *t
	c.Switches = make(map[string]*Switch, len(t.Switches))
	for k, v := range t.Switches {
		s := *v
		s.Optics = slices.Clone(v.Optics)
		c.Switches[k] = &s
	}
	c.NICs = make(map[string]*NIC, len(t.NICs))
	for k, v := range t.NICs {
		n := *v
		n.Optics = slices.Clone(v.Optics)
		c.NICs[k] = &n
	}
	c.Transceivers = make(map[string]*Transceiver, len(t.Transceivers))
	for k, v := range t.Transceivers {
		x := *v
		c.Transceivers[k] = &x
	}
	c.lines = maps.Clone(t.lines)
	if c.lines == nil {
		c.lines = map[string]int{}
	}
	return &c
}
