package topo

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"time"

	"github.com/ibex-rdma/ibex/internal/yamlfield"
)

// Spec is a topology as a YAML file declares it. Zero fields take the
// documented defaults; Build validates the spec, naming the field and the
// value of the first thing wrong, and expands it into a Graph.
//
//	name: superpod-4su           # optional, for reports
//	kind: superpod               # fattree | superpod | explicit
//	rate: NDR                    # EDR, HDR, NDR, XDR or Gb/s; default NDR
//	cable_m: {host_leaf: 3, leaf_spine: 20, spine_core: 50}   # metres, the defaults
//	switch_latency: 250ns        # port to port; default 250ns
//	mtu: 4096                    # default 4096
//	superpod: {sus: 4}           # the block named by kind, and only that one
//
// Fattree and superpod take planes: P (default 1) for a multi-plane
// fabric: P copies of the switch fabric with no cable between them, every
// GPU's NIC split into P ports (P NIC nodes), one cabled into each plane.
// rate is then the rate of one plane's links.
type Spec struct {
	Name          string        `yaml:"name"`
	Kind          string        `yaml:"kind"`
	Rate          string        `yaml:"rate"`
	CableM        CableLengths  `yaml:"cable_m"`
	SwitchLatency time.Duration `yaml:"switch_latency"`
	MTU           int           `yaml:"mtu"`

	FatTree  *FatTree  `yaml:"fattree"`
	SuperPOD *SuperPOD `yaml:"superpod"`
	Explicit *Explicit `yaml:"explicit"`

	// lines maps a field's path ("fattree.k") to its line in the file, so
	// that Build's errors can point into the file. Nil for a Spec built in Go.
	lines map[string]int
}

// CableLengths are the default cable lengths per tier, in metres. They set
// each link's length, which a later layer turns into propagation delay.
type CableLengths struct {
	HostLeaf  float64 `yaml:"host_leaf"`  // default 3 (copper or short optics in the rack row)
	LeafSpine float64 `yaml:"leaf_spine"` // default 20
	SpineCore float64 `yaml:"spine_core"` // default 50
}

// FatTree is a folded Clos of k-port switches (fabric-sim.md §4.1).
type FatTree struct {
	Tiers int `yaml:"tiers"` // 2 (leaf-spine) or 3 (edge-aggregation-core, Al-Fares); default 2
	K     int `yaml:"k"`     // ports per switch, even, >= 4; required
	// Hosts defaults to the most the tree holds (k²/2 or k³/4 at full
	// bisection). Fewer fill leaves in order; the spines (and cores) are
	// all built, as a fabric is cabled for its final size.
	Hosts int `yaml:"hosts"`
	// Oversubscription r means r:1 at the leaf: r·⌊k/(r+1)⌋ ports down,
	// ⌊k/(r+1)⌋ up (k·r/(r+1) and k/(r+1) when r+1 divides k; otherwise
	// the spare ports stay unused so the ratio stays exact). Default 1,
	// full bisection. Levels above the leaf are always non-blocking.
	Oversubscription int `yaml:"oversubscription"`
	// GPUsPerHost is the GPUs of a host, each with its own NIC; default 1.
	// This is a ToR (not rail-optimized) cluster: all of a host's NICs go
	// to consecutive ports of one leaf, its rack's switch, and a host never
	// straddles two leaves. A leaf takes ⌊down/gpus_per_host⌋ hosts and
	// leaves the down ports left over unused (k=64 at 1:1 with 8 GPUs: 4
	// hosts a leaf, no spare; at 2:1, 42 down ports: 5 hosts, 2 spare).
	// Hosts still counts hosts, not GPUs.
	GPUsPerHost int `yaml:"gpus_per_host"`
	// Compact builds only the top-tier switches the hosts need: for fewer
	// hosts than the tree holds, ⌈up·leaves/k⌉ spines (2 tiers) or
	// ⌈(k/2)·pods/k⌉ cores per core group (3 tiers), the uplinks dealt
	// round robin over them (parallel cables where there are fewer), instead of the full tree's k/2
	// spines or (k/2)² cores with most ports empty. That is how a cluster
	// smaller than its switches' maximum is bought; it cannot then grow
	// to the maximum without recabling. Default false.
	Compact bool `yaml:"compact"`
	// Planes builds the switch fabric that many times, independent (no
	// cable between planes), with every GPU's NIC split into one port per
	// plane (Alibaba HPN's dual plane is 2); default 1. Rate is the rate
	// of one plane's links: a 400G NIC split over 2 planes is rate: 200.
	Planes int `yaml:"planes"`
}

// SuperPOD is NVIDIA's DGX SuperPOD rail-optimized compute fabric, built
// from scalable units (fabric-sim.md §4.2): every node has one NIC per GPU,
// and NIC i of every node in an SU goes to the SU's leaf i (rail i).
type SuperPOD struct {
	SUs       int `yaml:"sus"`        // scalable units, >= 1; required
	NodeSlots int `yaml:"node_slots"` // node slots per SU; default 32
	// ReservedSlots are node slots of the whole SuperPOD kept for UFM, taken
	// from the last SU; default 1, as in the H100 RA (4 SUs = 127 nodes).
	// Set 0 for every slot a compute node (4 SUs = 128 nodes, 1,024 GPUs).
	ReservedSlots *int `yaml:"reserved_slots"`
	GPUsPerNode   int  `yaml:"gpus_per_node"` // = NICs per node per plane = rails = leaves per SU per plane; default 8
	SwitchPorts   int  `yaml:"switch_ports"`  // default 64 (Quantum-2 NDR)
	// Planes builds the rail-optimized fabric that many times, independent,
	// with every GPU's NIC split into one port per plane; default 1. Rate
	// is one plane's link rate (a 400G NIC over 2 planes: rate: 200).
	Planes int `yaml:"planes"`
}

// Explicit is a topology given node by node and link by link.
type Explicit struct {
	Nodes []ExplicitNode `yaml:"nodes"`
	Links []ExplicitLink `yaml:"links"`
}

// ExplicitNode is a host or a switch. A host's ports are its NICs (default
// 1); a switch's ports must be given. Names may not contain ':'.
type ExplicitNode struct {
	Name  string `yaml:"name"`
	Kind  string `yaml:"kind"`  // host | switch
	Ports int    `yaml:"ports"` // host: NICs (default 1); switch: ports (required)
	Tier  string `yaml:"tier"`  // switch: leaf | spine | core, or empty for untiered
}

// ExplicitLink is one cable. An end is "node" (the node's first free port,
// or for a host its first NIC without a cable) or "node:i" (port i, or NIC
// i of a host).
type ExplicitLink struct {
	A      string  `yaml:"a"`
	B      string  `yaml:"b"`
	Rate   string  `yaml:"rate"`   // default: the spec's rate
	Length float64 `yaml:"length"` // metres; default: cable_m of the tier the link joins
}

// Defaults.
const (
	DefaultPlanes        = 1
	DefaultRate          = NDR
	DefaultSwitchLatency = 250 * time.Nanosecond
	DefaultMTU           = 4096
	defaultHostLeafM     = 3
	defaultLeafSpineM    = 20
	defaultSpineCoreM    = 50
)

// maxPlanes bounds a fabric's planes: Alibaba HPN has 2, multi-plane
// NICs of the 800G generation 4.
const maxPlanes = 16

// maxPorts bounds the graphs Build makes (switch and NIC ports, 16 Mi:
// a 3-tier tree of 144-port switches has 4.5 Mi), so that a typo in k
// fails with an error instead of exhausting memory.
const maxPorts = 1 << 24

// ErrSpec is wrapped by every error about a spec's content.
var ErrSpec = errors.New("bad topology spec")

// FieldError is a spec field with a value Build or Parse cannot use.
type FieldError struct {
	Field string // the path in the file: "fattree.k", "explicit.links[3].rate"
	Value string // the value as written; empty when missing or not scalar
	Want  string // what would be accepted
	Line  int    // line in the file, when known
}

func (e *FieldError) Error() string {
	return yamlfield.Problem{Field: e.Field, Value: e.Value, Want: e.Want, Line: e.Line}.String()
}

func (e *FieldError) Unwrap() error { return ErrSpec }

// bad makes a FieldError for field, with its line if the spec came from a
// file.
func (s *Spec) bad(field string, value any, format string, args ...any) error {
	v := ""
	if value != nil {
		v = fmt.Sprint(value)
	}
	return &FieldError{Field: field, Value: v, Want: fmt.Sprintf(format, args...), Line: s.lines[field]}
}

// Load reads and parses a spec file. Errors start with the file's name.
func Load(path string) (*Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Parse reads a spec from YAML. Unknown fields and values of the wrong type
// are errors naming the field's path and line.
func Parse(data []byte) (*Spec, error) {
	var s Spec
	lines, err := specSchema.Decode(data, &s)
	if errors.Is(err, yamlfield.ErrEmpty) {
		return nil, fmt.Errorf("%w: empty file: want at least kind: fattree, superpod or explicit", ErrSpec)
	}
	if err != nil {
		return nil, err
	}
	s.lines = lines
	return &s, nil
}

// specSchema is how a spec file decodes and how its errors read.
var specSchema = yamlfield.Schema{
	What: "spec",
	Err:  ErrSpec,
	Field: func(p yamlfield.Problem) error {
		return &FieldError{Field: p.Field, Value: p.Value, Want: p.Want, Line: p.Line}
	},
	Types: []reflect.Type{
		reflect.TypeFor[Spec](), reflect.TypeFor[CableLengths](), reflect.TypeFor[FatTree](),
		reflect.TypeFor[SuperPOD](), reflect.TypeFor[Explicit](), reflect.TypeFor[ExplicitNode](),
		reflect.TypeFor[ExplicitLink](),
	},
	Words:    map[string]string{"time.Duration": "a duration such as 250ns"},
	Mappings: []string{"topo."},
}
