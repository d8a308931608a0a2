package cost

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A 2-tier k=4 fat tree: 8 hosts of one NIC, 4 leaves (2 down, 2 up), 2
// spines (4 down). Host cables of 2 m are copper; leaf-spine cables of
// 20 m are optical, multimode (sr2, 50 m reach) at both ends.
const fatTreeK4 = `
kind: fattree
rate: NDR
cable_m: {host_leaf: 2, leaf_spine: 20}
fattree: {tiers: 2, k: 4}
`

func TestFatTreeK4ByHand(t *testing.T) {
	r := compute(t, graph(t, fatTreeK4), mustTable(t, testTable), InfiniBand)

	if r.GPUs != 8 || r.LinkLayer != InfiniBand {
		t.Errorf("GPUs %d, layer %s; want 8, infiniband", r.GPUs, r.LinkLayer)
	}
	// Each leaf has 2 optical uplinks: ceil(2/2) = 1 twin-port module; each
	// spine has 4: 2 modules. 4·1 + 2·2 = 8, all in the leaf-spine tier.
	wantLinks := []TierLinks{
		{Tier: "host-leaf", Links: 8, Copper: 8},
		{Tier: "leaf-spine", Links: 8, Optical: 8, SwitchTransceivers: 8},
		{Tier: "spine-core"},
	}
	if !slices.Equal(r.Links, wantLinks) {
		t.Errorf("links\n got %+v\nwant %+v", r.Links, wantLinks)
	}
	wantSwitches := []TierSwitches{
		{Tier: "leaf", Count: 4, PowerW: 400, CostUSD: 4000},
		{Tier: "spine", Count: 2, PowerW: 200, CostUSD: 2000},
		{Tier: "core"},
	}
	if !slices.Equal(r.Switches, wantSwitches) {
		t.Errorf("switches\n got %+v\nwant %+v", r.Switches, wantSwitches)
	}
	// Power: 6 switches · 100 W + 8 modules · 3 W + 8 NICs · 1 W.
	// Cost: 6 · $1000 + 8 · $7 + 8 · $10 + cables: 8 copper · $2 and
	// 8 fibre · ($5 + 20 m · $0.5).
	wantPower := Split{Switches: 600, Optics: 24, NICs: 8, Total: 632}
	wantCost := Split{Switches: 6000, Optics: 56, NICs: 80, Cables: 16 + 120, Total: 6272}
	if r.PowerW != wantPower {
		t.Errorf("power %+v, want %+v", r.PowerW, wantPower)
	}
	if r.CostUSD != wantCost {
		t.Errorf("cost %+v, want %+v", r.CostUSD, wantCost)
	}
	if r.PerGPU != (PerGPU{CostUSD: 784, PowerW: 79}) {
		t.Errorf("per GPU %+v, want $784, 79 W", r.PerGPU)
	}
	wantParts := []Part{
		{Name: "sw4", Kind: "switch", Model: "four-port", Count: 6, UnitPowerW: 100, UnitCostUSD: 1000, PowerW: 600, CostUSD: 6000},
		{Name: "nic400", Kind: "nic", Model: "nic", Count: 8, UnitPowerW: 1, UnitCostUSD: 10, PowerW: 8, CostUSD: 80},
		{Name: "sr2", Kind: "transceiver", Model: "twin sr", Count: 8, UnitPowerW: 3, UnitCostUSD: 7, PowerW: 24, CostUSD: 56},
		{Name: "copper-cable", Kind: "cable", Model: "passive copper (DAC)", Count: 8, UnitCostUSD: 2, CostUSD: 16},
		{Name: "fibre-cable", Kind: "cable", Model: "fibre patch cable", Count: 8, UnitCostUSD: 15, CostUSD: 120},
	}
	if !slices.Equal(r.Parts, wantParts) {
		t.Errorf("parts\n got %+v\nwant %+v", r.Parts, wantParts)
	}
}

// An explicit graph that mixes copper, multimode and single-mode links on
// one switch, with an odd number of ports of each optics type per tier.
const mixedExplicit = `
kind: explicit
rate: NDR
explicit:
  nodes:
    - {name: h0, kind: host, ports: 2}
    - {name: h1, kind: host}
    - {name: leaf0, kind: switch, ports: 8, tier: leaf}
    - {name: spine0, kind: switch, ports: 4, tier: spine}
  links:
    - {a: h0:0, b: leaf0, length: 2}    # leaf0:0 copper
    - {a: h0:1, b: leaf0, length: 10}   # leaf0:1 multimode
    - {a: h1,   b: leaf0, length: 60}   # leaf0:2 single-mode
    - {a: leaf0, b: spine0, length: 20} # leaf0:3 spine0:0 multimode
    - {a: leaf0, b: spine0, length: 20} # leaf0:4 spine0:1 multimode
    - {a: leaf0, b: spine0, length: 20} # leaf0:5 spine0:2 multimode
    - {a: leaf0, b: spine0, length: 80} # leaf0:6 spine0:3 single-mode
`

func TestMixedOpticsByHand(t *testing.T) {
	r := compute(t, graph(t, mixedExplicit), mustTable(t, testTable), InfiniBand)

	// leaf0 (sw8): multimode ports 1, 3, 4, 5 pack into modules [1 3] and
	// [4 5]; single-mode ports 2, 6 into [2 6]. ceil(4/2) + ceil(2/2) = 3,
	// counted in the tier of each module's first port: host-leaf 2
	// (ports 1, 2), leaf-spine 1 (port 4). spine0 (sw4): multimode ports
	// 0, 1, 2 -> 2 modules, single-mode port 3 -> 1, all leaf-spine.
	hl, ls := tier(t, r, "host-leaf"), tier(t, r, "leaf-spine")
	if want := (TierLinks{Tier: "host-leaf", Links: 3, Copper: 1, Optical: 2, SwitchTransceivers: 2, NICTransceivers: 2}); hl != want {
		t.Errorf("host-leaf %+v, want %+v", hl, want)
	}
	if want := (TierLinks{Tier: "leaf-spine", Links: 4, Optical: 4, SwitchTransceivers: 4}); ls != want {
		t.Errorf("leaf-spine %+v, want %+v", ls, want)
	}
	for _, c := range []struct {
		name  string
		count int
	}{{"sr2", 4}, {"dr2", 2}, {"sr1", 1}, {"dr1", 1}, {"sw8", 1}, {"sw4", 1}, {"nic400", 3}} {
		var got int
		for _, p := range r.Parts {
			if p.Name == c.name {
				got = p.Count
			}
		}
		if got != c.count {
			t.Errorf("%s: %d, want %d", c.name, got, c.count)
		}
	}
	// Power: 150 + 100 W switches; 4·3 + 2·4 + 2 + 2.5 W optics; 3 NICs.
	// Cost: cables 1·$2 + 6·$5 + (10+60+20+20+20+80) m · $0.5.
	wantPower := Split{Switches: 250, Optics: 24.5, NICs: 3, Total: 277.5}
	wantCost := Split{Switches: 3000, Optics: 4*7 + 2*11 + 4 + 6, NICs: 30, Cables: 2 + 30 + 105, Total: 3227}
	if r.PowerW != wantPower {
		t.Errorf("power %+v, want %+v", r.PowerW, wantPower)
	}
	if r.CostUSD != wantCost {
		t.Errorf("cost %+v, want %+v", r.CostUSD, wantCost)
	}
	if math.Abs(r.PerGPU.CostUSD-3227.0/3) > 1e-9 || r.PerGPU.PowerW != 92.5 {
		t.Errorf("per GPU %+v, want $%.2f, 92.5 W", r.PerGPU, 3227.0/3)
	}
}

// TestSuperPOD1SU prices examples/superpod-1su.yaml with the default table:
// the RA's 8 leaves, 4 spines and 256 leaf-spine cables (fabric-sim.md
// §4.2), host cables at the spec's default 3 m (copper), leaf-spine at
// 20 m (multimode twin-port modules).
func TestSuperPOD1SU(t *testing.T) {
	tab := Default()
	r := compute(t, loadGraph(t, "../../examples/superpod-1su.yaml"), tab, InfiniBand)

	if r.GPUs != 248 || r.Name != "superpod-1su" {
		t.Errorf("GPUs %d, name %q; want 248, superpod-1su", r.GPUs, r.Name)
	}
	if got, want := tier(t, r, "host-leaf"), (TierLinks{Tier: "host-leaf", Links: 248, Copper: 248}); got != want {
		t.Errorf("host-leaf %+v, want %+v", got, want)
	}
	// 32 uplinks per leaf -> 16 modules, 64 ports per spine -> 32:
	// 8·16 + 4·32 = 256.
	if got, want := tier(t, r, "leaf-spine"), (TierLinks{Tier: "leaf-spine", Links: 256, Optical: 256, SwitchTransceivers: 256}); got != want {
		t.Errorf("leaf-spine %+v, want %+v", got, want)
	}
	if l, s := switchTier(t, r, "leaf"), switchTier(t, r, "spine"); l.Count != 8 || s.Count != 4 {
		t.Errorf("switches: %d leaves, %d spines; want 8, 4", l.Count, s.Count)
	}
	sw, nic, x := tab.Switches["ib-ndr-64"], tab.NICs["ib-ndr"], tab.Transceivers["ndr-2x400g-sr8"]
	for _, c := range []struct {
		kind, name string
		count      int
	}{{"switch", "ib-ndr-64", 12}, {"nic", "ib-ndr", 248}, {"transceiver", "ndr-2x400g-sr8", 256},
		{"cable", "copper-cable", 248}, {"cable", "fibre-cable", 256}} {
		if got := part(r, c.kind, c.name).Count; got != c.count {
			t.Errorf("%s %s: %d, want %d", c.kind, c.name, got, c.count)
		}
	}
	if len(r.Parts) != 5 {
		t.Errorf("%d parts, want 5: %+v", len(r.Parts), r.Parts)
	}
	wantPower := Split{
		Switches: 12 * sw.PowerW.Value,
		Optics:   256 * x.PowerW.Value,
		NICs:     248 * nic.PowerW.Value,
	}
	wantPower.Total = wantPower.Switches + wantPower.Optics + wantPower.NICs
	if r.PowerW != wantPower {
		t.Errorf("power %+v, want %+v", r.PowerW, wantPower)
	}
	fibre := 256 * (tab.FibreCableUSD.Value + 20*tab.FibreCableUSDPerM.Value)
	wantCost := Split{
		Switches: 12 * sw.CostUSD.Value,
		Optics:   256 * x.CostUSD.Value,
		NICs:     248 * nic.CostUSD.Value,
		Cables:   248*tab.CopperCableUSD.Value + fibre,
	}
	wantCost.Total = wantCost.Switches + wantCost.Optics + wantCost.NICs + wantCost.Cables
	if r.CostUSD != wantCost {
		t.Errorf("cost %+v, want %+v", r.CostUSD, wantCost)
	}
	if r.PerGPU.PowerW != wantPower.Total/248 || r.PerGPU.CostUSD != wantCost.Total/248 {
		t.Errorf("per GPU %+v", r.PerGPU)
	}
}

// TestSuperPOD1SUOptical puts the nodes beyond copper reach, as in a real
// SuperPOD, and finds the optics count of fabric-sim.md §4.2's worked
// example: 384 switch-side twin-port modules (128 leaf-down, 128 leaf-up,
// 128 spine) and one NIC-side module per NIC (248 here; the RA's 256
// counts the UFM slot too).
func TestSuperPOD1SUOptical(t *testing.T) {
	g := graph(t, "kind: superpod\ncable_m: {host_leaf: 30}\nsuperpod: {sus: 1}\n")
	r := compute(t, g, Default(), InfiniBand)
	if got, want := tier(t, r, "host-leaf"), (TierLinks{Tier: "host-leaf", Links: 248, Optical: 248, SwitchTransceivers: 128, NICTransceivers: 248}); got != want {
		t.Errorf("host-leaf %+v, want %+v", got, want)
	}
	if got := part(r, "transceiver", "ndr-2x400g-sr8").Count; got != 384 {
		t.Errorf("switch-side modules %d, want 384", got)
	}
	if got := part(r, "transceiver", "400g-sr4").Count; got != 248 {
		t.Errorf("NIC-side modules %d, want 248", got)
	}
}

// TestReachPicksOptics checks that the shortest reach covering a link wins
// and that a link beyond every reach is an error naming the port and the
// optics there are.
func TestReachPicksOptics(t *testing.T) {
	for _, c := range []struct {
		lengthM float64
		want    string
	}{{50, "ndr-2x400g-sr8"}, {50.5, "ndr-2x400g-dr8"}, {100, "ndr-2x400g-dr8"}, {300, "ndr-2x400g-dr8-500m"}} {
		g := graph(t, "kind: superpod\nsuperpod: {sus: 1}\ncable_m: {leaf_spine: "+ftoa(c.lengthM)+"}\n")
		r := compute(t, g, Default(), InfiniBand)
		if got := part(r, "transceiver", c.want).Count; got != 256 {
			t.Errorf("%g m: %d of %s, want 256; parts %+v", c.lengthM, got, c.want, r.Parts)
		}
	}
	g := graph(t, "kind: superpod\nsuperpod: {sus: 1}\ncable_m: {leaf_spine: 600}\n")
	_, err := Compute(g, Default(), InfiniBand)
	var npe *NoPartError
	if !errors.As(err, &npe) || !errors.Is(err, ErrNoPart) || npe.Kind != "transceiver" {
		t.Fatalf("600 m leaf-spine: err %v, want a transceiver NoPartError", err)
	}
	wantContains(t, err.Error(), "no transceiver reaches 600 m", "leaf0:32", "ndr-2x400g-dr8-500m (up to 500 m)")
}

func TestMissingSwitch(t *testing.T) {
	// k=6: 6-port switches, which the test table does not have.
	g := graph(t, "kind: fattree\ncable_m: {host_leaf: 2}\nfattree: {k: 6}\n")
	_, err := Compute(g, mustTable(t, testTable), InfiniBand)
	var npe *NoPartError
	if !errors.As(err, &npe) || !errors.Is(err, ErrNoPart) {
		t.Fatalf("err %v, want a NoPartError", err)
	}
	if npe.Kind != "switch" || npe.Ports != 6 || npe.Rate != 400e9 || npe.Where != "leaf0" {
		t.Errorf("%+v", npe)
	}
	wantContains(t, err.Error(), "no infiniband switch entry for 400 Gb/s with 6 ports (leaf0)",
		"eth4 (ethernet, 400 Gb/s, 4 ports)", "sw4 (infiniband, 400 Gb/s, 4 ports)", "sw8 (infiniband, 400 Gb/s, 8 ports)")

	// The default table has no HDR 64-port switch.
	g = graph(t, "kind: superpod\nrate: HDR\nsuperpod: {sus: 1}\n")
	_, err = Compute(g, Default(), InfiniBand)
	wantContains(t, errString(err), "no infiniband switch entry for 200 Gb/s with 64 ports", "ib-hdr-40 (infiniband, 200 Gb/s, 40 ports)")
}

func TestMissingNIC(t *testing.T) {
	g := graph(t, "kind: fattree\nrate: HDR\nfattree: {k: 4}\n")
	_, err := Compute(g, mustTable(t, testTable), InfiniBand)
	var npe *NoPartError
	if !errors.As(err, &npe) || npe.Kind != "nic" {
		t.Fatalf("err %v, want a NIC NoPartError", err)
	}
	wantContains(t, err.Error(), "no infiniband NIC entry for 200 Gb/s (host0.nic0)", "nic400 (infiniband, 400 Gb/s)")
}

func TestEthernetParts(t *testing.T) {
	r := compute(t, graph(t, fatTreeK4), mustTable(t, testTable), Ethernet)
	if p := part(r, "switch", "eth4"); p.Count != 6 {
		t.Errorf("eth4: %d, want 6; parts %+v", p.Count, r.Parts)
	}
	if p := part(r, "nic", "enic400"); p.Count != 8 {
		t.Errorf("enic400: %d, want 8", p.Count)
	}
	if want := (Split{Switches: 1800, Optics: 24, NICs: 16, Total: 1840}); r.PowerW != want {
		t.Errorf("power %+v, want %+v", r.PowerW, want)
	}
	// The default table prices a 1-SU SuperPOD as RoCE too: 64-port 400G
	// Ethernet switches and 400GbE NICs.
	r = compute(t, loadGraph(t, "../../examples/superpod-1su.yaml"), Default(), Ethernet)
	if part(r, "switch", "eth-400g-64").Count != 12 || part(r, "nic", "eth-400g").Count != 248 {
		t.Errorf("ethernet superpod parts %+v", r.Parts)
	}
}

func TestLinkLayer(t *testing.T) {
	if _, err := Compute(graph(t, fatTreeK4), mustTable(t, testTable), "fibrechannel"); err == nil ||
		!strings.Contains(err.Error(), "want infiniband or ethernet") {
		t.Errorf("bad link layer: err %v", err)
	}
	for in, want := range map[string]LinkLayer{"ib": InfiniBand, "InfiniBand": InfiniBand, "roce": Ethernet, " eth ": Ethernet, "ethernet": Ethernet} {
		if got, err := ParseLinkLayer(in); err != nil || got != want {
			t.Errorf("ParseLinkLayer(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	// A table built in Go is validated too.
	if _, err := Compute(graph(t, fatTreeK4), &Table{}, InfiniBand); !errors.Is(err, ErrTable) {
		t.Errorf("empty table: err %v, want ErrTable", err)
	}
	if _, err := ParseLinkLayer("opa"); err == nil {
		t.Error("ParseLinkLayer(opa): no error")
	}
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
