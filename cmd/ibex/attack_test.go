package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestAttack runs two cases of ibex attack as a user does and checks the
// table, the JSON report and the exit statuses. The suite itself is tested
// case by case in package attack.
func TestAttack(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("ibex attack needs root (CAP_NET_RAW) for its sniffer and raw socket")
	}
	out, errOut, code := runMain(t, "attack", "--case", "ack-spoofed", "--case", "ack-outofwindow")
	if code != 0 {
		t.Fatalf("exit %d, want 0 (every case as expected)\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"CASE", "REDMARK", "EXPECTED", "RESULT", "ack-spoofed", "ack-outofwindow", "2 cases"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	out, errOut, code = runMain(t, "attack", "--json", "--case", "replay", "--seed", "7")
	if code != 0 {
		t.Fatalf("--json: exit %d, want 0\n%s%s", code, out, errOut)
	}
	var rep struct {
		Mode    string `json:"mode"`
		Seed    uint64 `json:"seed"`
		Results []struct {
			Case, Expected, Result string
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if rep.Mode != "plain" || rep.Seed != 7 || len(rep.Results) != 1 || rep.Results[0].Case != "replay" || rep.Results[0].Result != rep.Results[0].Expected {
		t.Errorf("--json report: %+v", rep)
	}
	if _, errOut, code = runMain(t, "attack", "--case", "nope"); code != 2 || !strings.Contains(errOut, `no case "nope"`) {
		t.Errorf("--case nope: exit %d, stderr %q; want 2 naming the case", code, errOut)
	}
}
