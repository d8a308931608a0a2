package cost

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

func TestWriteText(t *testing.T) {
	g := graph(t, "name: k4\n"+fatTreeK4)
	r := compute(t, g, mustTable(t, testTable), InfiniBand)
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	const want = `cost of k4: infiniband, 8 GPUs

links          count  copper  optical  xcvr switch  xcvr NIC
host-leaf          8       8        0            0         0
leaf-spine         8       0        8            8         0
spine-core         0       0        0            0         0
total             16       8        8            8         0

switches       count       power W      cost USD
leaf               4           400         4,000
spine              2           200         2,000
core               0             0             0
total              6           600         6,000

parts                      count    unit W    unit USD     power W      cost USD
sw4                            6       100       1,000         600         6,000
nic400                         8         1          10           8            80
sr2                            8         3           7          24            56
copper-cable                   8         0           2           0            16
fibre-cable                    8         0          15           0           120

                   power W      cost USD
switches               600         6,000
optics                  24            56
NICs                     8            80
cables                   0           136
total                  632         6,272
per GPU               79.0           784
`
	if got := b.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}

	// An explicit topology's other tiers appear only when they have
	// something, and fractions of a watt are kept.
	r = compute(t, graph(t, mixedExplicit), mustTable(t, testTable), InfiniBand)
	b.Reset()
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	wantContains(t, b.String(), "cost: infiniband, 3 GPUs\n", "\noptics                24.5            60\n", "\ntotal                277.5         3,227\n")
	for _, no := range []string{"other", "untiered"} {
		if bytes.Contains(b.Bytes(), []byte(no)) {
			t.Errorf("text shows an empty %q row:\n%s", no, b.String())
		}
	}

	if err := r.WriteText(failWriter{}); err == nil {
		t.Error("WriteText hid a write error")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestUntieredAndOther(t *testing.T) {
	// Untiered switches: an "other" link tier and an "untiered" switch row.
	g := graph(t, `
kind: explicit
explicit:
  nodes:
    - {name: h0, kind: host}
    - {name: s0, kind: switch, ports: 4}
    - {name: s1, kind: switch, ports: 4}
  links:
    - {a: h0, b: s0, length: 1}
    - {a: s0, b: s1, length: 30}
`)
	r := compute(t, g, mustTable(t, testTable), InfiniBand)
	if got, want := tier(t, r, "other"), (TierLinks{Tier: "other", Links: 1, Optical: 1, SwitchTransceivers: 2}); got != want {
		t.Errorf("other %+v, want %+v", got, want)
	}
	if got := switchTier(t, r, "untiered"); got.Count != 2 || got.PowerW != 200 {
		t.Errorf("untiered %+v", got)
	}
}

func TestReportJSON(t *testing.T) {
	r := compute(t, graph(t, fatTreeK4), mustTable(t, testTable), InfiniBand)
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		LinkLayer string `json:"link_layer"`
		GPUs      int    `json:"gpus"`
		Links     []struct {
			Tier               string `json:"tier"`
			SwitchTransceivers int    `json:"switch_transceivers"`
		} `json:"links"`
		Parts []struct {
			Name  string `json:"name"`
			Count int    `json:"count"`
		} `json:"parts"`
		PowerW  map[string]float64 `json:"power_w"`
		CostUSD map[string]float64 `json:"cost_usd"`
		PerGPU  map[string]float64 `json:"per_gpu"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if m.LinkLayer != "infiniband" || m.GPUs != 8 || m.Links[1].Tier != "leaf-spine" || m.Links[1].SwitchTransceivers != 8 ||
		m.Parts[0].Name != "sw4" || m.Parts[0].Count != 6 ||
		m.PowerW["total"] != 632 || m.PowerW["optics"] != 24 || m.CostUSD["cables"] != 136 || m.PerGPU["cost_usd"] != 784 {
		t.Errorf("JSON %s", data)
	}
}
