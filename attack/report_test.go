package attack_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/ibex-rdma/ibex/attack"
)

// TestReport: a result that differs from its expectation is counted and
// marked in the table; the JSON form carries every field.
func TestReport(t *testing.T) {
	rep := &attack.Report{Mode: attack.Plain, Seed: 5, Results: []attack.Result{
		{Case: "a", Ref: "V8/A1", Expected: attack.Blocked, Got: attack.Blocked, Detail: "fine"},
		{Case: "b", Ref: "V8/A2", Expected: attack.Blocked, Got: attack.Succeeded, Detail: "QP in ERR"},
		{Case: "c", Ref: "A4", Expected: attack.Succeeded, Got: attack.NA, Detail: "needs partitions"},
	}}
	if n := rep.Mismatches(); n != 2 {
		t.Errorf("Mismatches = %d, want 2", n)
	}
	var b strings.Builder
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 5 || strings.Contains(lines[1], "(!)") || !strings.Contains(lines[2], "SUCCEEDED  (!)") || !strings.Contains(lines[3], "n/a  (!)") {
		t.Errorf("table:\n%s", b.String())
	}
	if !strings.Contains(lines[4], "3 cases, 1 succeeded, 2 differ") {
		t.Errorf("summary line %q", lines[4])
	}
	b.Reset()
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var back attack.Report
	if err := json.Unmarshal([]byte(b.String()), &back); err != nil || len(back.Results) != 3 || back.Results[1].Got != attack.Succeeded || back.Seed != 5 {
		t.Errorf("JSON round trip: %v %+v\n%s", err, back, b.String())
	}
}

// TestSelect: an unknown case is refused, naming the cases, before
// anything runs (no capability needed).
func TestSelect(t *testing.T) {
	none := func([]string) *exec.Cmd { t.Fatal("a victim was started"); return nil }
	_, err := attack.Run(attack.Config{Victim: none, Cases: []string{"nope"}})
	if err == nil || !strings.Contains(err.Error(), `no case "nope"`) || !strings.Contains(err.Error(), "inject-spoofed") {
		t.Errorf("unknown case: %v", err)
	}
	_, err = attack.Run(attack.Config{Victim: none, Controls: true, Cases: []string{"inject-spoofed"}})
	if err == nil || !strings.Contains(err.Error(), "control-rkey") {
		t.Errorf("a case among the controls: %v", err)
	}
	if _, err := attack.Run(attack.Config{}); err == nil || !strings.Contains(err.Error(), "Victim") {
		t.Errorf("no Victim: %v", err)
	}
	if len(attack.Cases()) < 20 || len(attack.Controls()) != 6 {
		t.Errorf("%d cases, %d controls", len(attack.Cases()), len(attack.Controls()))
	}
}
