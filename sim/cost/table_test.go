package cost

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ibex-rdma/ibex/sim/topo"
)

// TestDefaultProvenance walks every Value of the default table by
// reflection (not by the validator's own walk) and checks that it says
// where it comes from: a source, a known confidence, a rationale for an
// estimate, and "low confidence" on every price that is not primary.
func TestDefaultProvenance(t *testing.T) {
	tab := Default()
	n := 0
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		switch {
		case v.Type() == valueType:
			n++
			x := v.Interface().(Value)
			if strings.TrimSpace(x.Source) == "" {
				t.Errorf("%s: no source", path)
			}
			switch x.Confidence {
			case Measured, Primary, Secondary:
			case Estimate:
				if !strings.HasPrefix(x.Source, "estimate") {
					t.Errorf("%s: an estimate whose source does not start with \"estimate\": %q", path, x.Source)
				}
			default:
				t.Errorf("%s: confidence %q", path, x.Confidence)
			}
			if strings.HasSuffix(path, "usd") || strings.HasSuffix(path, "usd_per_m") {
				if x.Confidence != Primary && x.Confidence != Measured && !strings.Contains(x.Source, "low confidence") {
					t.Errorf("%s: a price whose source does not say \"low confidence\": %q", path, x.Source)
				}
			}
		case v.Kind() == reflect.Pointer:
			if v.IsNil() {
				t.Errorf("%s: nil", path)
				return
			}
			walk(v.Elem(), path)
		case v.Kind() == reflect.Map:
			if v.Len() == 0 {
				t.Errorf("%s: empty", path)
			}
			for _, k := range v.MapKeys() {
				walk(v.MapIndex(k), path+"."+k.String())
			}
		case v.Kind() == reflect.Struct:
			for i := range v.NumField() {
				if f := v.Type().Field(i); f.IsExported() {
					walk(v.Field(i), joinPath(path, yamlName(f)))
				}
			}
		}
	}
	walk(reflect.ValueOf(tab), "")
	// 4 globals + 2 per switch and NIC + 4 per transceiver.
	want := 4 + 2*len(tab.Switches) + 2*len(tab.NICs) + 4*len(tab.Transceivers)
	if n != want || n < 40 {
		t.Errorf("walked %d values, want %d (and at least 40)", n, want)
	}
}

// TestDefaultCatalog pins the switch and NIC entries the default table
// offers, by the keys a graph is matched with.
func TestDefaultCatalog(t *testing.T) {
	tab := Default()
	type key struct {
		layer LinkLayer
		rate  topo.Rate
		ports int
	}
	got := map[key]string{}
	for name, s := range tab.Switches {
		got[key{s.LinkLayer, gbps(s.RateGbps), s.Ports}] = name
	}
	for k, name := range map[key]string{
		{InfiniBand, topo.HDR, 40}:  "ib-hdr-40",
		{InfiniBand, topo.NDR, 64}:  "ib-ndr-64",
		{InfiniBand, topo.XDR, 144}: "ib-xdr-144",
		{Ethernet, 400e9, 64}:       "eth-400g-64",
		{Ethernet, 400e9, 128}:      "eth-400g-128",
		{Ethernet, 800e9, 64}:       "eth-800g-64",
	} {
		if got[k] != name {
			t.Errorf("switch %v: %q, want %q", k, got[k], name)
		}
	}
	for name, n := range map[string]struct {
		layer LinkLayer
		rate  topo.Rate
	}{"ib-hdr": {InfiniBand, topo.HDR}, "ib-ndr": {InfiniBand, topo.NDR}, "ib-xdr": {InfiniBand, topo.XDR},
		"eth-400g": {Ethernet, 400e9}, "eth-800g": {Ethernet, 800e9}} {
		x := tab.NICs[name]
		if x == nil || x.LinkLayer != n.layer || gbps(x.RateGbps) != n.rate {
			t.Errorf("nic %s: %+v, want %v at %v", name, x, n.layer, n.rate)
		}
	}
	// fabric-sim.md §3.2's primary figures.
	for name, w := range map[string]float64{"ndr-2x400g-sr8": 15, "ndr-2x400g-dr8": 17, "400g-sr4": 8} {
		if x := tab.Transceivers[name]; x.PowerW.Value != w || x.PowerW.Confidence != Primary {
			t.Errorf("%s power %+v, want %g W primary", name, x.PowerW, w)
		}
	}
	if tab.Transceivers["ndr-2x400g-sr8"].Ports.Value != 2 || tab.Transceivers["ndr-2x400g-sr8"].ReachM.Value != 50 {
		t.Errorf("twin-port SR8: %+v", tab.Transceivers["ndr-2x400g-sr8"])
	}
}

func TestDefaultIsFresh(t *testing.T) {
	a := Default()
	a.Switches["ib-ndr-64"].CostUSD.Value = 1
	a.Switches["ib-ndr-64"].Optics[0] = "x"
	if b := Default(); b.Switches["ib-ndr-64"].CostUSD.Value == 1 || b.Switches["ib-ndr-64"].Optics[0] == "x" {
		t.Error("Default shares state between calls")
	}
}

const override = `
copper_max_m: {value: 2, confidence: measured, source: "our DAC qualification"}
switches:
  ib-ndr-64:
    cost_usd: {value: 25000, confidence: primary, source: "quote 2026-04"}
  ib-edr-36:
    model: "Switch-IB 2 class"
    link_layer: infiniband
    rate_gbps: 100
    ports: 36
    cost_usd: {value: 9000, confidence: estimate, source: "estimate"}
    power_w: {value: 300, confidence: estimate, source: "estimate"}
    optics: [hdr-200g-sr4]
transceivers:
  ndr-2x400g-sr8:
    power_w: {value: 14, confidence: measured, source: "our meter"}
`

func TestOverrideMerges(t *testing.T) {
	base := Default()
	o, err := base.Override([]byte(override))
	if err != nil {
		t.Fatal(err)
	}
	if o.CopperMaxM != (Value{2, Measured, "our DAC qualification"}) {
		t.Errorf("copper_max_m %+v", o.CopperMaxM)
	}
	s, d := o.Switches["ib-ndr-64"], Default().Switches["ib-ndr-64"]
	if s.CostUSD != (Value{25000, Primary, "quote 2026-04"}) {
		t.Errorf("ib-ndr-64 cost %+v", s.CostUSD)
	}
	// The fields the override does not give keep the default's values.
	if s.PowerW != d.PowerW || s.Model != d.Model || s.Ports != 64 || s.RateGbps != 400 || !reflect.DeepEqual(s.Optics, d.Optics) {
		t.Errorf("ib-ndr-64 lost fields: %+v", s)
	}
	if x := o.Transceivers["ndr-2x400g-sr8"]; x.PowerW.Value != 14 || x.CostUSD != Default().Transceivers["ndr-2x400g-sr8"].CostUSD {
		t.Errorf("ndr-2x400g-sr8 %+v", x)
	}
	if e := o.Switches["ib-edr-36"]; e == nil || e.Ports != 36 || e.CostUSD.Value != 9000 {
		t.Errorf("new entry ib-edr-36: %+v", e)
	}
	if len(o.Switches) != len(base.Switches)+1 || len(o.NICs) != len(base.NICs) || len(o.Transceivers) != len(base.Transceivers) {
		t.Errorf("entries: %d switches, %d NICs, %d transceivers", len(o.Switches), len(o.NICs), len(o.Transceivers))
	}
	// The base is unchanged.
	if !reflect.DeepEqual(base, Default()) {
		t.Error("Override changed its receiver")
	}

	// The merged table prices with the new values: 2 m copper makes the
	// 3 m host cables optical; the switches cost the quote.
	r := compute(t, loadGraph(t, "../../examples/superpod-1su.yaml"), o, InfiniBand)
	if r.CostUSD.Switches != 12*25000 {
		t.Errorf("switch cost %v, want %v", r.CostUSD.Switches, 12*25000)
	}
	if hl := tier(t, r, "host-leaf"); hl.Optical != 248 || hl.NICTransceivers != 248 {
		t.Errorf("host-leaf %+v: want 248 optical links with NIC optics", hl)
	}
	if got, want := r.PowerW.Optics, 384*14+248*Default().Transceivers["400g-sr4"].PowerW.Value; got != want {
		t.Errorf("optics power %v, want %v", got, want)
	}
}

// TestOverrideExample applies the NDR200 override that default.yaml's
// header shows, so the example stays valid, and prices a k=128 fat tree of
// 200G with it: four NDR200 ports per twin-port module.
func TestOverrideExample(t *testing.T) {
	var lines []string
	for l := range strings.Lines(string(defaultYAML)) {
		if rest, ok := strings.CutPrefix(l, "#   "); ok {
			lines = append(lines, "  "+rest)
		}
	}
	if len(lines) < 20 {
		t.Fatalf("found %d lines of example in default.yaml", len(lines))
	}
	o, err := Default().Override([]byte(strings.Join(lines, "")))
	if err != nil {
		t.Fatalf("the example in default.yaml: %v\n%s", err, strings.Join(lines, ""))
	}
	g := graph(t, "kind: fattree\nrate: 200\nfattree: {k: 128}\n")
	r := compute(t, g, o, InfiniBand)
	// 8,192 hosts; 128 leaves with 64 uplinks -> 16 modules each; 64
	// spines of 128 ports -> 32 each.
	if got := tier(t, r, "leaf-spine"); got.SwitchTransceivers != 128*16+64*32 || got.Optical != 8192 {
		t.Errorf("leaf-spine %+v", got)
	}
	if p := part(r, "nic", "ib-hdr"); p.Count != 8192 || p.Model != "ConnectX-7 at NDR200" {
		t.Errorf("NICs %+v", p)
	}
}

// errField returns the FieldErrors of err, failing unless there is one and
// every error wraps ErrTable.
func errFields(t *testing.T, err error) []*FieldError {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	if !errors.Is(err, ErrTable) {
		t.Errorf("%v does not wrap ErrTable", err)
	}
	var out []*FieldError
	var collect func(e error)
	collect = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				collect(e)
			}
			return
		}
		var fe *FieldError
		if errors.As(e, &fe) {
			out = append(out, fe)
		}
	}
	collect(err)
	if len(out) == 0 {
		t.Fatalf("%v: no FieldError", err)
	}
	return out
}

func TestOverrideErrors(t *testing.T) {
	for _, c := range []struct {
		name, yml string
		field     string
		line      int
		want      []string
	}{
		{"unknown top-level field", "coper_max_m: {value: 3, confidence: primary, source: x}\n",
			"coper_max_m", 1, []string{"unknown field; known fields are copper_max_m, copper_cable_usd"}},
		{"unknown part field", "switches:\n  ib-ndr-64:\n    cost: {value: 1, confidence: primary, source: x}\n",
			"switches.ib-ndr-64.cost", 3, []string{"unknown field; known fields are model, link_layer, rate_gbps, ports, cost_usd, power_w, optics"}},
		{"unknown value field", "nics:\n  ib-ndr:\n    power_w: {value: 1, confidence: primary, sorce: x}\n",
			"nics.ib-ndr.power_w.sorce", 3, []string{"known fields are value, confidence, source"}},
		{"wrong type", "switches:\n  ib-ndr-64:\n    rate_gbps: fast\n",
			"switches.ib-ndr-64.rate_gbps", 3, []string{"fast: want a number"}},
		{"bare number", "switches:\n  ib-ndr-64:\n    cost_usd: 25000\n",
			"switches.ib-ndr-64.cost_usd", 3, []string{"want {value: N, confidence:"}},
		{"value missing", "\nswitches:\n  ib-ndr-64:\n    cost_usd: {confidence: primary, source: quote}\n",
			"switches.ib-ndr-64.cost_usd.value", 4, []string{"missing: a value is given whole"}},
		{"source missing", "switches:\n  ib-ndr-64:\n    cost_usd: {value: 1, confidence: primary}\n",
			"switches.ib-ndr-64.cost_usd.source", 3, []string{"missing: every value says where it comes from"}},
		{"bad confidence", "transceivers:\n  400g-sr4:\n    power_w:\n      value: 8\n      confidence: high\n      source: x\n",
			"transceivers.400g-sr4.power_w.confidence", 5, []string{"high: want measured, primary, secondary or estimate"}},
		{"negative", "copper_cable_usd: {value: -1, confidence: estimate, source: x}\n",
			"copper_cable_usd.value", 1, []string{"-1: want a number >= 0"}},
		{"fractional ports", "transceivers:\n  400g-sr4:\n    ports: {value: 1.5, confidence: primary, source: x}\n",
			"transceivers.400g-sr4.ports.value", 3, []string{"want an integer >= 1"}},
		{"unknown optics", "switches:\n  ib-ndr-64:\n    optics: [ndr-2x400g-sr8, sr99]\n",
			"switches.ib-ndr-64.optics[1]", 3, []string{"sr99: no such transceiver; want one of 400g-dr4"}},
		{"bad link layer", "nics:\n  ib-ndr:\n    link_layer: omnipath\n",
			"nics.ib-ndr.link_layer", 3, []string{"omnipath: want infiniband or ethernet"}},
		{"duplicate key", "switches:\n  my-ndr:\n    model: m\n    link_layer: infiniband\n    rate_gbps: 400\n    ports: 64\n" +
			"    cost_usd: {value: 1, confidence: primary, source: q}\n    power_w: {value: 1, confidence: primary, source: q}\n    optics: [400g-sr4]\n",
			"switches.my-ndr", 2, []string{"same link_layer, rate_gbps and ports as switches.ib-ndr-64"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Default().Override([]byte(c.yml))
			fes := errFields(t, err)
			if len(fes) != 1 {
				t.Errorf("%d errors, want 1: %v", len(fes), err)
			}
			fe := fes[0]
			if fe.Field != c.field || fe.Line != c.line {
				t.Errorf("error %q: field %q line %d, want %q line %d", fe, fe.Field, fe.Line, c.field, c.line)
			}
			wantContains(t, err.Error(), c.want...)
			wantContains(t, err.Error(), c.field)
		})
	}
}

// TestOverrideIncompleteEntry: a new part must give every field; each
// missing one is named, at the entry's line.
func TestOverrideIncompleteEntry(t *testing.T) {
	_, err := Default().Override([]byte("nics:\n  ib-qdr:\n    model: ConnectX-3\n"))
	fes := errFields(t, err)
	var fields []string
	for _, fe := range fes {
		fields = append(fields, fe.Field)
		if fe.Line != 2 && fe.Line != 3 {
			t.Errorf("%q: line %d, want the entry's (2 or 3)", fe, fe.Line)
		}
	}
	want := []string{"nics.ib-qdr.link_layer", "nics.ib-qdr.rate_gbps", "nics.ib-qdr.cost_usd", "nics.ib-qdr.power_w", "nics.ib-qdr.optics"}
	if !reflect.DeepEqual(fields, want) {
		t.Errorf("fields %q, want %q", fields, want)
	}
}

func TestParseErrors(t *testing.T) {
	// Syntax error.
	if _, err := Parse([]byte("switches: [\n")); !errors.Is(err, ErrTable) {
		t.Errorf("syntax error: %v", err)
	}
	// Two documents.
	_, err := Default().Override([]byte("copper_max_m: {value: 3, confidence: primary, source: x}\n---\ncopper_max_m: {value: 4, confidence: primary, source: x}\n"))
	if !errors.Is(err, ErrTable) || !strings.Contains(errString(err), "more than one YAML document") {
		t.Errorf("two documents: %v", err)
	}
	// An empty table lacks the globals; an empty override changes nothing.
	fes := errFields(t, func() error { _, err := Parse(nil); return err }())
	if len(fes) != 4 || fes[0].Field != "copper_max_m" {
		t.Errorf("empty table: %v", fes)
	}
	o, err := Default().Override([]byte("# nothing\n"))
	if err != nil || !reflect.DeepEqual(o, Default()) {
		t.Errorf("empty override: %v", err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte(override), 0o644); err != nil {
		t.Fatal(err)
	}
	tab, err := Load(good)
	if err != nil {
		t.Fatal(err)
	}
	if tab.Switches["ib-ndr-64"].CostUSD.Value != 25000 {
		t.Errorf("loaded %+v", tab.Switches["ib-ndr-64"].CostUSD)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("switches:\n  ib-ndr-64:\n    prots: 64\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(bad)
	wantContains(t, errString(err), bad+": switches.ib-ndr-64.prots: unknown field", "(line 3)")
	if _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}
