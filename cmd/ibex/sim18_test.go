package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 18, ibex sim: flags, topology files and output paths are checked
// before the first run, each error naming the flag and its range.

const explicitSmall = "../../examples/explicit-small.yaml"

// TestSim18ZeroFlags: --vls 0, --slots 0 and --qps 0 were taken for "the
// default"; they are errors naming the flag and its range.
func TestSim18ZeroFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--vls", "0"}, "--vls 0: want 1 to 8"},
		{[]string{"--vls", "9"}, "--vls 9: want 1 to 8"},
		{[]string{"--slots", "0"}, "--slots 0: want 1 to 1024"},
		{[]string{"--qps", "0"}, "--qps 0: want 1 to 64"},
		{[]string{"--credit-unit", "0"}, "--credit-unit 0: want 1 to 4096"},
		{[]string{"--msg-overhead", "0s"}, "--msg-overhead 0s: want a duration above 0"},
		{[]string{"--ecn-pmax", "0"}, "--ecn-pmax 0: want above 0 and up to 1"},
		{[]string{"--seeds", "0"}, "--seeds 0: want 1 to 100000"},
		{[]string{"--pipeline", "0"}, "--pipeline 0: want 1 to 1024"},
		{[]string{"--engine", "fluid"}, `--engine "fluid": want packet or flow`},
	} {
		args := append([]string{"sim", "run", explicitSmall, "all_reduce", "-b", "64K"}, c.args...)
		stdout, stderr, code := runMain(t, args...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("ibex %s: exit %d, stderr %q; want an error containing %q", strings.Join(args, " "), code, stderr, c.want)
		}
		if stdout != "" {
			t.Errorf("ibex %s: stdout %q; want nothing before the error", strings.Join(args, " "), stdout)
		}
	}
	// The defaults still run.
	if _, stderr, code := runMain(t, "sim", "run", explicitSmall, "all_reduce", "-b", "64K", "--vls", "2", "--qps", "2"); code != 0 {
		t.Errorf("--vls 2 --qps 2: exit %d, stderr %q", code, stderr)
	}
}

// TestSim18CheckedBeforeRuns: a bad second routing, a bad second
// topology file and unwritable output paths fail before the first run
// prints a row.
func TestSim18CheckedBeforeRuns(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "no-such-dir")
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("kind: fattree\nfattree: {tiers: 9}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		// adaptive with RoCE is refused by fabric.CheckParams; it used to be
		// found after the dmodk run had finished.
		{[]string{"sim", "run", explicitSmall, "-b", "64K", "--link-layer", "roce", "--routing", "dmodk,adaptive"}, "adaptive routing with link layer roce"},
		{[]string{"sim", "run", explicitSmall, "-b", "64K", "--trace", filepath.Join(missing, "t.json")}, "--trace " + filepath.Join(missing, "t.json") + ": directory " + missing + " does not exist"},
		{[]string{"sim", "run", explicitSmall, "-b", "64K", "--trace", dir}, "is a directory"},
		{[]string{"sim", "run", explicitSmall, "-b", "64K", "--engine", "flow", "--trace", filepath.Join(dir, "t.json")}, "--trace needs --engine packet"},
		{[]string{"sim", "sweep", "--topos", explicitSmall + "," + filepath.Join(dir, "none.yaml"), "--sizes", "64K"}, "none.yaml"},
		{[]string{"sim", "sweep", "--topos", explicitSmall + "," + filepath.Join(dir, "bad.yaml"), "--sizes", "64K"}, "bad.yaml"},
		{[]string{"sim", "sweep", "--topos", explicitSmall + "," + explicitSmall, "--sizes", "64K", "--algos", "ring,spiral"}, "spiral"},
		{[]string{"sim", "sweep", "--topos", explicitSmall, "--sizes", "64K", "--routing", "dmodk,bogus"}, `routing "bogus"`},
		{[]string{"sim", "sweep", "--topos", explicitSmall, "--sizes", "64K", "--plot", filepath.Join(missing, "s.png")}, "--plot " + filepath.Join(missing, "s.png") + ": directory " + missing + " does not exist"},
		{[]string{"sim", "sweep", "--topos", explicitSmall, "--sizes", "64K", "--plot", filepath.Join(dir, "s.gif")}, "want a file name ending in .png"},
		{[]string{"sim", "sweep", "--topos", explicitSmall, "--sizes", "64K", "--json", filepath.Join(missing, "s.json")}, "--json"},
		{[]string{"sim", "sweep", "--topos", explicitSmall, "--sizes", "64K", "--csv", filepath.Join(missing, "s.csv")}, "--csv"},
		{[]string{"sim", "plan", "--gpus", "248", "--plot", filepath.Join(missing, "p.png")}, "--plot " + filepath.Join(missing, "p.png") + ": directory"},
		{[]string{"sim", "plan", "--gpus", "248", "--plot", filepath.Join(dir, "p.svg")}, "want a file name ending in .png"},
	} {
		stdout, stderr, code := runMain(t, c.args...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("ibex %s: exit %d, stderr %q; want an error containing %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
		if stdout != "" {
			t.Errorf("ibex %s: stdout %q; want nothing: the error comes before the first run", strings.Join(c.args, " "), stdout)
		}
	}
}
