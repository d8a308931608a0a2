package cost

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/ibex-rdma/ibex/sim/topo"
)

// validate checks a whole table: every value present with its provenance
// and in range, every part's key fields set, every optics name known, and
// no two parts of a kind matched by the same key.
func (t *Table) validate() error {
	v := validator{t: t}
	v.value("copper_max_m", t.CopperMaxM, nonNegative)
	v.value("copper_cable_usd", t.CopperCableUSD, nonNegative)
	v.value("fibre_cable_usd", t.FibreCableUSD, nonNegative)
	v.value("fibre_cable_usd_per_m", t.FibreCableUSDPerM, nonNegative)

	for _, name := range slices.Sorted(maps.Keys(t.Transceivers)) {
		p, x := "transceivers."+name, t.Transceivers[name]
		if x == nil {
			v.bad(p, "", "empty: want model, ports, reach_m, cost_usd, power_w")
			continue
		}
		v.value(p+".ports", x.Ports, count)
		v.value(p+".reach_m", x.ReachM, positive)
		v.value(p+".cost_usd", x.CostUSD, nonNegative)
		v.value(p+".power_w", x.PowerW, nonNegative)
	}

	type switchKey struct {
		layer LinkLayer
		rate  topo.Rate
		ports int
	}
	seenSwitch := map[switchKey]string{}
	for _, name := range slices.Sorted(maps.Keys(t.Switches)) {
		p, s := "switches."+name, t.Switches[name]
		if s == nil {
			v.bad(p, "", "empty: want model, link_layer, rate_gbps, ports, cost_usd, power_w, optics")
			continue
		}
		v.part(p, s.LinkLayer, s.RateGbps, s.CostUSD, s.PowerW, s.Optics)
		if s.Ports < 1 {
			v.bad(p+".ports", fmt.Sprint(s.Ports), "want the switch's port count, >= 1")
		}
		k := switchKey{s.LinkLayer, gbps(s.RateGbps), s.Ports}
		if other, ok := seenSwitch[k]; ok {
			v.bad(p, "", fmt.Sprintf("same link_layer, rate_gbps and ports as switches.%s; a graph's switch must match one entry", other))
		} else {
			seenSwitch[k] = name
		}
	}

	type nicKey struct {
		layer LinkLayer
		rate  topo.Rate
	}
	seenNIC := map[nicKey]string{}
	for _, name := range slices.Sorted(maps.Keys(t.NICs)) {
		p, n := "nics."+name, t.NICs[name]
		if n == nil {
			v.bad(p, "", "empty: want model, link_layer, rate_gbps, cost_usd, power_w, optics")
			continue
		}
		v.part(p, n.LinkLayer, n.RateGbps, n.CostUSD, n.PowerW, n.Optics)
		k := nicKey{n.LinkLayer, gbps(n.RateGbps)}
		if other, ok := seenNIC[k]; ok {
			v.bad(p, "", fmt.Sprintf("same link_layer and rate_gbps as nics.%s; a graph's NIC must match one entry", other))
		} else {
			seenNIC[k] = name
		}
	}
	return errors.Join(v.errs...)
}

type validator struct {
	t    *Table
	errs []error
}

// bad records a FieldError at path, with the line of the path or, for a
// field the file does not give, of the nearest enclosing one that it does.
func (v *validator) bad(path, value, want string) {
	line := 0
	for p := path; p != "" && line == 0; {
		line = v.t.lines[p]
		i := strings.LastIndexByte(p, '.')
		if i < 0 {
			break
		}
		p = p[:i]
	}
	v.errs = append(v.errs, &FieldError{Field: path, Value: value, Want: want, Line: line})
}

// valueRule is the range a Value must be in.
type valueRule uint8

const (
	nonNegative valueRule = iota // >= 0: costs, powers, lengths
	positive                     // > 0: reaches
	count                        // an integer >= 1: ports per transceiver
)

// value checks that a Value is present, has its provenance, and is a
// finite number in its range.
func (v *validator) value(path string, x Value, rule valueRule) {
	if x == (Value{}) {
		v.bad(path, "", "missing: want {value, confidence, source}")
		return
	}
	if strings.TrimSpace(x.Source) == "" {
		v.bad(path+".source", "", "missing: every value says where it comes from")
	}
	if !x.Confidence.valid() {
		v.bad(path+".confidence", string(x.Confidence), "want measured, primary, secondary or estimate")
	}
	n := x.Value
	if math.IsNaN(n) || math.IsInf(n, 0) {
		v.bad(path+".value", fmt.Sprint(n), "want a finite number")
		return
	}
	switch {
	case rule == nonNegative && n < 0:
		v.bad(path+".value", fmt.Sprint(n), "want a number >= 0")
	case rule == positive && n <= 0:
		v.bad(path+".value", fmt.Sprint(n), "want a number > 0")
	case rule == count && (n < 1 || n != math.Trunc(n)):
		v.bad(path+".value", fmt.Sprint(n), "want an integer >= 1")
	}
}

// part checks the fields switches and NICs share.
func (v *validator) part(p string, layer LinkLayer, rate float64, cost, power Value, optics []string) {
	switch {
	case layer == "":
		v.bad(p+".link_layer", "", "missing: want infiniband or ethernet")
	case !layer.valid():
		v.bad(p+".link_layer", string(layer), "want infiniband or ethernet")
	}
	if !(rate > 0) || rate > 1e7 {
		v.bad(p+".rate_gbps", fmt.Sprint(rate), "want the port rate in Gb/s, > 0")
	}
	v.value(p+".cost_usd", cost, nonNegative)
	v.value(p+".power_w", power, nonNegative)
	if len(optics) == 0 {
		v.bad(p+".optics", "", "missing: want the names of the transceivers its ports take, at least one")
	}
	for i, name := range optics {
		if _, ok := v.t.Transceivers[name]; !ok {
			v.bad(fmt.Sprintf("%s.optics[%d]", p, i), name, "no such transceiver; want one of "+strings.Join(slices.Sorted(maps.Keys(v.t.Transceivers)), ", "))
		}
	}
}
