package cost

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/ibex-rdma/ibex/sim/topo"
)

// Report is the bill of materials of a fabric with its power and cost.
// Powers are in watts, costs in US dollars.
type Report struct {
	Name      string    `json:"name,omitempty"`
	LinkLayer LinkLayer `json:"link_layer"`
	GPUs      int       `json:"gpus"` // the graph's NICs, one per GPU

	// Links has a row per link tier: host-leaf, leaf-spine, spine-core,
	// and other (explicit topologies) when it has links.
	Links []TierLinks `json:"links"`
	// Switches has a row per switch tier: leaf, spine, core, and untiered
	// when there are any.
	Switches []TierSwitches `json:"switches"`
	// Parts is the bill of materials, a row per table entry used: switches,
	// NICs, transceivers, then the two kinds of cable.
	Parts []Part `json:"parts"`

	PowerW  Split  `json:"power_w"` // Cables is always 0: passive copper and fibre draw none
	CostUSD Split  `json:"cost_usd"`
	PerGPU  PerGPU `json:"per_gpu"`
}

// TierLinks counts one link tier's cables and transceivers.
type TierLinks struct {
	Tier               string `json:"tier"`
	Links              int    `json:"links"`
	Copper             int    `json:"copper"`              // passive copper cables (DAC)
	Optical            int    `json:"optical"`             // fibre cables
	SwitchTransceivers int    `json:"switch_transceivers"` // modules in switch cages
	NICTransceivers    int    `json:"nic_transceivers"`
}

// TierSwitches counts one switch tier.
type TierSwitches struct {
	Tier    string  `json:"tier"`
	Count   int     `json:"count"`
	PowerW  float64 `json:"power_w"` // without optics
	CostUSD float64 `json:"cost_usd"`
}

// Part is one line of the bill of materials.
type Part struct {
	Name  string `json:"name"` // the table entry; copper-cable or fibre-cable for cables
	Kind  string `json:"kind"` // switch, nic, transceiver or cable
	Model string `json:"model,omitempty"`
	Count int    `json:"count"`
	// The unit figures are the table's; a fibre cable's unit cost is the
	// mean, as it depends on the length.
	UnitPowerW  float64 `json:"unit_power_w"`
	UnitCostUSD float64 `json:"unit_cost_usd"`
	PowerW      float64 `json:"power_w"`
	CostUSD     float64 `json:"cost_usd"`
}

// Split divides a total by what it is spent on.
type Split struct {
	Switches float64 `json:"switches"`
	Optics   float64 `json:"optics"`
	NICs     float64 `json:"nics"`
	Cables   float64 `json:"cables"`
	Total    float64 `json:"total"`
}

// PerGPU is the fabric's cost and power divided by the GPUs.
type PerGPU struct {
	CostUSD float64 `json:"cost_usd"`
	PowerW  float64 `json:"power_w"`
}

// Part kinds, in the order Report.Parts lists them.
const (
	kindSwitch      = "switch"
	kindNIC         = "nic"
	kindTransceiver = "transceiver"
	kindCable       = "cable"
)

// Compute prices graph g with table t for a fabric of the link layer,
// following the rules of the package doc. It fails with a *NoPartError
// (wrapping ErrNoPart) when the table has no entry for a switch, a NIC or
// an optical link of the graph.
func Compute(g *topo.Graph, t *Table, layer LinkLayer) (*Report, error) {
	if !layer.valid() {
		return nil, fmt.Errorf("link layer %q: want infiniband or ethernet", layer)
	}
	// Parse and Override validate; a table built in Go has not been.
	if err := t.validate(); err != nil {
		return nil, err
	}
	b := newBill(g, t, layer)
	b.cables()
	for id := g.NumHosts; id < len(g.Nodes); id++ {
		if err := b.node(topo.NodeID(id)); err != nil {
			return nil, err
		}
	}
	return b.report(), nil
}

type switchKey struct {
	rate  topo.Rate
	ports int
}

// bill accumulates a Report.
type bill struct {
	g     *topo.Graph
	t     *Table
	layer LinkLayer

	switches map[switchKey]string // entry names of the link layer
	nics     map[topo.Rate]string
	maxRate  topo.Rate // the fallback rate of a node without links
	copperM  float32

	links    [4]TierLinks    // by topo.LinkTier, Other last
	switchTs [4]TierSwitches // by topo.Tier: untiered, leaf, spine, core
	parts    map[[2]string]*Part
	power    Split
	cost     Split

	groups []opticsGroup // per node, reused
}

// opticsGroup counts a node's optical ports that take one kind of
// transceiver.
type opticsGroup struct {
	name  string
	x     *Transceiver
	per   int // ports per module
	ports int
}

func newBill(g *topo.Graph, t *Table, layer LinkLayer) *bill {
	b := &bill{
		g: g, t: t, layer: layer,
		switches: map[switchKey]string{},
		nics:     map[topo.Rate]string{},
		copperM:  float32(t.CopperMaxM.Value),
		parts:    map[[2]string]*Part{},
	}
	for name, s := range t.Switches {
		if s.LinkLayer == layer {
			b.switches[switchKey{gbps(s.RateGbps), s.Ports}] = name
		}
	}
	for name, n := range t.NICs {
		if n.LinkLayer == layer {
			b.nics[gbps(n.RateGbps)] = name
		}
	}
	for i := range g.Links {
		b.maxRate = max(b.maxRate, g.Links[i].Rate)
	}
	for i, name := range []string{"host-leaf", "leaf-spine", "spine-core", "other"} {
		b.links[i].Tier = name
	}
	for i, name := range []string{"untiered", "leaf", "spine", "core"} {
		b.switchTs[i].Tier = name
	}
	return b
}

func (b *bill) copper(l *topo.Link) bool { return l.Length <= b.copperM }

// cables counts the links per tier and prices their cables.
func (b *bill) cables() {
	var copper, fibre int
	var fibreUSD float64
	for i := range b.g.Links {
		l := &b.g.Links[i]
		tl := &b.links[min(l.Tier, topo.LinkOther)]
		tl.Links++
		if b.copper(l) {
			tl.Copper++
			copper++
			continue
		}
		tl.Optical++
		fibre++
		fibreUSD += b.t.FibreCableUSD.Value + b.t.FibreCableUSDPerM.Value*float64(l.Length)
	}
	if copper > 0 {
		unit := b.t.CopperCableUSD.Value
		b.parts[[2]string{kindCable, "copper-cable"}] = &Part{Name: "copper-cable", Kind: kindCable,
			Model: "passive copper (DAC)", Count: copper, UnitCostUSD: unit, CostUSD: unit * float64(copper)}
		b.cost.Cables += unit * float64(copper)
	}
	if fibre > 0 {
		b.parts[[2]string{kindCable, "fibre-cable"}] = &Part{Name: "fibre-cable", Kind: kindCable,
			Model: "fibre patch cable", Count: fibre, UnitCostUSD: fibreUSD / float64(fibre), CostUSD: fibreUSD}
		b.cost.Cables += fibreUSD
	}
}

// node prices a switch or a NIC and the transceivers in its cages.
func (b *bill) node(id topo.NodeID) error {
	g := b.g
	n := &g.Nodes[id]
	if n.Kind != topo.KindSwitch && n.Kind != topo.KindNIC {
		return nil
	}
	rate := topo.Rate(0)
	for p := n.FirstPort; p < n.FirstPort+topo.PortID(n.NumPorts); p++ {
		if l := g.Ports[p].Link; l != topo.NoLink {
			rate = max(rate, g.Links[l].Rate)
		}
	}
	if rate == 0 {
		rate = b.maxRate
	}
	if rate == 0 {
		return fmt.Errorf("%w: %s: the graph has no links, so no rate to choose its part by", ErrNoPart, g.NodeName(id))
	}

	var optics []string
	if n.Kind == topo.KindSwitch {
		name, ok := b.switches[switchKey{rate, int(n.Radix)}]
		if !ok {
			return &NoPartError{Kind: kindSwitch, LinkLayer: b.layer, Rate: rate, Ports: int(n.Radix),
				Where: g.NodeName(id), Have: b.switchEntries()}
		}
		s := b.t.Switches[name]
		b.add(kindSwitch, name, s.Model, 1, s.CostUSD.Value, s.PowerW.Value)
		st := &b.switchTs[min(n.Tier, topo.TierCore)]
		st.Count++
		st.PowerW += s.PowerW.Value
		st.CostUSD += s.CostUSD.Value
		b.power.Switches += s.PowerW.Value
		b.cost.Switches += s.CostUSD.Value
		optics = s.Optics
	} else {
		name, ok := b.nics[rate]
		if !ok {
			return &NoPartError{Kind: kindNIC, LinkLayer: b.layer, Rate: rate, Where: g.NodeName(id), Have: b.nicEntries()}
		}
		x := b.t.NICs[name]
		b.add(kindNIC, name, x.Model, 1, x.CostUSD.Value, x.PowerW.Value)
		b.power.NICs += x.PowerW.Value
		b.cost.NICs += x.CostUSD.Value
		optics = x.Optics
	}

	// The optical ports of each transceiver type are packed, in port
	// order, into modules of x.Ports ports; a module counts in the link
	// tier of its first port.
	b.groups = b.groups[:0]
	for p := n.FirstPort; p < n.FirstPort+topo.PortID(n.NumPorts); p++ {
		lid := g.Ports[p].Link
		if lid == topo.NoLink {
			continue
		}
		l := &g.Links[lid]
		if b.copper(l) {
			continue
		}
		name := b.choose(optics, l.Length)
		if name == "" {
			return &NoPartError{Kind: kindTransceiver, LinkLayer: b.layer, Rate: l.Rate, LengthM: float64(l.Length),
				Where: g.PortName(p), Have: b.opticsEntries(optics)}
		}
		i := slices.IndexFunc(b.groups, func(o opticsGroup) bool { return o.name == name })
		if i < 0 {
			x := b.t.Transceivers[name]
			b.groups = append(b.groups, opticsGroup{name: name, x: x, per: int(x.Ports.Value)})
			i = len(b.groups) - 1
		}
		o := &b.groups[i]
		if o.ports%o.per == 0 {
			tier := min(l.Tier, topo.LinkOther)
			if n.Kind == topo.KindSwitch {
				b.links[tier].SwitchTransceivers++
			} else {
				b.links[tier].NICTransceivers++
			}
			b.add(kindTransceiver, name, o.x.Model, 1, o.x.CostUSD.Value, o.x.PowerW.Value)
			b.power.Optics += o.x.PowerW.Value
			b.cost.Optics += o.x.CostUSD.Value
		}
		o.ports++
	}
	return nil
}

// choose returns the optics with the shortest reach that covers length,
// the first listed on a tie, or "" if none does.
func (b *bill) choose(optics []string, length float32) string {
	best := ""
	var bestReach float32
	for _, name := range optics {
		r := float32(b.t.Transceivers[name].ReachM.Value)
		if r >= length && (best == "" || r < bestReach) {
			best, bestReach = name, r
		}
	}
	return best
}

func (b *bill) add(kind, name, model string, n int, unitUSD, unitW float64) {
	k := [2]string{kind, name}
	p := b.parts[k]
	if p == nil {
		p = &Part{Name: name, Kind: kind, Model: model, UnitCostUSD: unitUSD, UnitPowerW: unitW}
		b.parts[k] = p
	}
	p.Count += n
	p.CostUSD += float64(n) * unitUSD
	p.PowerW += float64(n) * unitW
}

func (b *bill) switchEntries() []string {
	var have []string
	for _, name := range slices.Sorted(maps.Keys(b.t.Switches)) {
		s := b.t.Switches[name]
		have = append(have, fmt.Sprintf("%s (%s, %v, %d ports)", name, s.LinkLayer, gbps(s.RateGbps), s.Ports))
	}
	return have
}

func (b *bill) nicEntries() []string {
	var have []string
	for _, name := range slices.Sorted(maps.Keys(b.t.NICs)) {
		n := b.t.NICs[name]
		have = append(have, fmt.Sprintf("%s (%s, %v)", name, n.LinkLayer, gbps(n.RateGbps)))
	}
	return have
}

func (b *bill) opticsEntries(optics []string) []string {
	var have []string
	for _, name := range optics {
		have = append(have, fmt.Sprintf("%s (up to %g m)", name, b.t.Transceivers[name].ReachM.Value))
	}
	return have
}

func (b *bill) report() *Report {
	r := &Report{Name: b.g.Name, LinkLayer: b.layer, GPUs: b.g.NumGPUs(), PowerW: b.power, CostUSD: b.cost}
	for i, tl := range b.links {
		if tl.Links > 0 || topo.LinkTier(i) < topo.LinkOther {
			r.Links = append(r.Links, tl)
		}
	}
	for _, tier := range []topo.Tier{topo.TierLeaf, topo.TierSpine, topo.TierCore, topo.TierNone} {
		if st := b.switchTs[tier]; st.Count > 0 || tier != topo.TierNone {
			r.Switches = append(r.Switches, st)
		}
	}
	order := map[string]int{kindSwitch: 0, kindNIC: 1, kindTransceiver: 2, kindCable: 3}
	for _, p := range b.parts {
		r.Parts = append(r.Parts, *p)
	}
	slices.SortFunc(r.Parts, func(x, y Part) int {
		return cmp.Or(cmp.Compare(order[x.Kind], order[y.Kind]), cmp.Compare(x.Name, y.Name))
	})
	r.PowerW.Total = r.PowerW.Switches + r.PowerW.Optics + r.PowerW.NICs + r.PowerW.Cables
	r.CostUSD.Total = r.CostUSD.Switches + r.CostUSD.Optics + r.CostUSD.NICs + r.CostUSD.Cables
	if r.GPUs > 0 {
		r.PerGPU = PerGPU{CostUSD: r.CostUSD.Total / float64(r.GPUs), PowerW: r.PowerW.Total / float64(r.GPUs)}
	}
	return r
}
