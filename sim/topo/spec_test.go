package topo

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestParseErrorsNameTheField checks that YAML mistakes come back naming
// the field's path (and line), not a Go type.
func TestParseErrorsNameTheField(t *testing.T) {
	for _, c := range []struct{ yml, want string }{
		{"kind: fattree\nrat: NDR\n",
			"rat: unknown field; known fields are name, kind, rate, cable_m, switch_latency, mtu, fattree, superpod, explicit (line 2)"},
		{"kind: fattree\nfattree:\n  k: 8\n  host: 3\n",
			"fattree.host: unknown field; known fields are tiers, k, hosts, oversubscription, gpus_per_host, compact, planes (line 4)"},
		{"kind: explicit\nexplicit:\n  nodes:\n    - {name: a, kind: host}\n    - {name: b, kind: host, prots: 2}\n",
			"explicit.nodes[1].prots: unknown field; known fields are name, kind, ports, tier (line 5)"},
		{"kind: fattree\nfattree: {k: abc}\n", "fattree.k: abc: want an integer (line 2)"},
		{"kind: fattree\nfattree: {k: 8, hosts: manymanymany}\n", "fattree.hosts: manymanymany: want an integer (line 2)"},
		{"kind: fattree\nswitch_latency: 250\nfattree: {k: 8}\n", "switch_latency: 250: want a duration such as 250ns (line 2)"},
		{"kind: fattree\nfattree: [8]\n", "fattree: a list: want a mapping (line 2)"},
		{"kind: fattree\ncable_m: {leaf_spine: far}\n", "cable_m.leaf_spine: far: want a number (line 2)"},
		{"kind: [a]\n", "kind: a list: want a string (line 1)"},
		{"kind: fattree\nfattree: {k: 8\n", "did not find expected"},
		{"", "empty file"},
		{"kind: fattree\nfattree: {k: 8}\n---\nkind: fattree\n", "more than one YAML document"},
	} {
		_, err := Parse([]byte(c.yml))
		if err == nil {
			t.Errorf("no error for %q", c.yml)
			continue
		}
		if !errors.Is(err, ErrSpec) {
			t.Errorf("%q: error %q does not wrap ErrSpec", c.yml, err)
		}
		wantContains(t, err.Error(), c.want)
	}
	// Every type error is reported, one line each.
	_, err := Parse([]byte("kind: fattree\nfattree: {k: x, tiers: y}\n"))
	if err == nil || strings.Count(err.Error(), "\n") != 1 {
		t.Errorf("two type errors: %v", err)
	}
}

func TestSpecErrors(t *testing.T) {
	for _, c := range []struct{ yml, want string }{
		{"kind: torus\n", "kind: torus: want fattree, superpod or explicit (line 1)"},
		{"name: x\n", "kind: missing: want fattree, superpod or explicit"},
		{"kind: fattree\nmtu: 9000\nfattree: {k: 8}\n", "mtu: 9000: want an InfiniBand MTU: 256, 512, 1024, 2048 or 4096 (line 2)"},
		{"kind: fattree\ncable_m: {leaf_spine: -1}\nfattree: {k: 8}\n", "cable_m.leaf_spine: -1: want a cable length in metres"},
		{"kind: fattree\nswitch_latency: -1ns\nfattree: {k: 8}\n", "switch_latency: -1ns: want a duration >= 0"},
		{"kind: fattree\nrate: 0\nfattree: {k: 8}\n", "rate: 0: want EDR"},
	} {
		wantContains(t, specErr(t, c.yml).Error(), c.want)
	}
}

func TestSpecDefaultsAndParameters(t *testing.T) {
	g := build(t, "kind: fattree\nfattree: {k: 4}\n")
	if g.MTU != 4096 || g.SwitchLatency != 250*time.Nanosecond || g.Tiers != 2 {
		t.Errorf("defaults: mtu %d, latency %v, tiers %d", g.MTU, g.SwitchLatency, g.Tiers)
	}
	for _, l := range g.Links {
		want := map[LinkTier]float32{LinkHostLeaf: 3, LinkLeafSpine: 20}[l.Tier]
		if l.Rate != NDR || l.Length != want {
			t.Fatalf("link %+v: want NDR, %g m", l, want)
		}
	}
	g = build(t, "name: t\nkind: fattree\nrate: XDR\nmtu: 2048\nswitch_latency: 130ns\n"+
		"cable_m: {host_leaf: 2, leaf_spine: 30, spine_core: 100}\nfattree: {tiers: 3, k: 4}\n")
	if g.Name != "t" || g.MTU != 2048 || g.SwitchLatency != 130*time.Nanosecond {
		t.Errorf("name %q, mtu %d, latency %v", g.Name, g.MTU, g.SwitchLatency)
	}
	for _, l := range g.Links {
		want := map[LinkTier]float32{LinkHostLeaf: 2, LinkLeafSpine: 30, LinkSpineCore: 100}[l.Tier]
		if l.Rate != XDR || l.Length != want {
			t.Fatalf("link %+v: want XDR, %g m", l, want)
		}
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]Rate{
		"EDR": 100e9, "HDR": 200e9, "ndr": 400e9, " XDR ": 800e9, "400": 400e9, "12.5": 12.5e9, "0.001": 1e6,
	} {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-400", "fast", "NaN", "Inf", "400G", "1e300"} {
		if got, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) = %v, want an error", in, got)
		}
	}
	for r, want := range map[Rate]string{NDR: "400 Gb/s", 102_400e9: "102.4 Tb/s", 12_500e6: "12.5 Gb/s", 0: "0 b/s", 1.6384e15: "1.64 Pb/s"} {
		if got := r.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int64(r), got, want)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(path, []byte("kind: fattree\nfattree: {k: 8, tier: 3}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	wantContains(t, err.Error(), path+": fattree.tier: unknown field")
	if _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}
