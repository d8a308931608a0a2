package prom

import "testing"

// TestPSPCounterNames: provider/udp's encryption drops reach /metrics as
// ibex_port_psp_*_total (the names README and ARCHITECTURE.md give).
func TestPSPCounterNames(t *testing.T) {
	for in, want := range map[string]string{
		"PSPAuthErrors": "psp_auth_errors", "PSPReplayDrops": "psp_replay_drops",
		"PSPUnknownSPI": "psp_unknown_spi", "PSPPlaintextDrops": "psp_plaintext_drops",
	} {
		if got := metricName(in); got != want {
			t.Errorf("metricName(%q) = %q, want %q", in, got, want)
		}
	}
}
