package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/ibex-rdma/ibex/sim/des"
	"github.com/ibex-rdma/ibex/sim/packet"
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

// helpExamples returns every example command line in the Example texts
// of cmd and its subcommands: lines starting with "ibex ", joined where
// they end in a backslash, split as a shell would (quotes, no
// expansion).
func helpExamples(t *testing.T, cmd *cobra.Command) [][]string {
	t.Helper()
	var out [][]string
	var line string
	for _, l := range strings.Split(cmd.Example, "\n") {
		l = strings.TrimSpace(l)
		if cont, ok := strings.CutSuffix(l, "\\"); ok {
			line += cont + " "
			continue
		}
		line += l
		if strings.HasPrefix(line, "ibex ") {
			args, err := shellSplit(line)
			if err != nil {
				t.Fatalf("%s's example %q: %v", cmd.CommandPath(), line, err)
			}
			out = append(out, args[1:])
		}
		line = ""
	}
	for _, c := range cmd.Commands() {
		out = append(out, helpExamples(t, c)...)
	}
	return out
}

// shellSplit splits s into words as sh does for plain words and '...'
// and "..." quotes (no escapes inside quotes, no expansion).
func shellSplit(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case ' ', '\t':
			if inWord {
				words, inWord = append(words, w.String()), false
				w.Reset()
			}
		case '\'', '"':
			j := strings.IndexByte(s[i+1:], c)
			if j < 0 {
				return nil, fmt.Errorf("unterminated %c at %d", c, i)
			}
			w.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// TestSim18HelpExamples runs every example of every `ibex sim ... --help`
// as written, from a directory whose examples/ is the repository's, and
// checks that each succeeds, writes the files it names, and, with --fail,
// shows a slowdown of 10% or more.
func TestSim18HelpExamples(t *testing.T) {
	examples, err := filepath.Abs("../../examples")
	if err != nil {
		t.Fatal(err)
	}
	exs := helpExamples(t, newSimCmd())
	if len(exs) < 8 {
		t.Fatalf("found %d examples in ibex sim's help texts, want at least 8: %q", len(exs), exs)
	}
	for _, args := range exs {
		name := strings.Join(args, " ")
		t.Run(strings.Join(args[:2], "_"), func(t *testing.T) {
			t.Parallel() // each runs in a child process: two at a time on 2 cores
			dir := t.TempDir()
			if err := os.Symlink(examples, filepath.Join(dir, "examples")); err != nil {
				t.Fatal(err)
			}
			stdout, stderr, code := runMainIn(t, dir, args...)
			if code != 0 {
				t.Fatalf("ibex %s: exit %d, stderr %q", name, code, stderr)
			}
			if stdout == "" {
				t.Errorf("ibex %s: no output", name)
			}
			if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--fail") }) {
				// A failure example shows what the failure costs.
				m := regexp.MustCompile(`# failures, .* \(\+([0-9.]+)%\)`).FindStringSubmatch(stdout)
				if m == nil {
					t.Errorf("ibex %s: no slowdown line in\n%s", name, stdout)
				} else if pct, _ := strconv.ParseFloat(m[1], 64); pct < 10 {
					t.Errorf("ibex %s: the failures cost %s%%; the example should show a visible slowdown (10%% or more)", name, m[1])
				}
			}
			for i, a := range args {
				switch a {
				case "--trace", "--plot", "--csv":
					if st, err := os.Stat(filepath.Join(dir, args[i+1])); err != nil || st.Size() == 0 {
						t.Errorf("ibex %s: %s %s not written: %v", name, a, args[i+1], err)
					}
				}
			}
		})
	}
}

// TestSim18SeedsTiersTrace: with --seeds every row names its seed; an
// explicit topology's header names its switch tiers (it said "0 switch
// tiers"); a trace that drops spans says so on stderr.
func TestSim18SeedsTiersTrace(t *testing.T) {
	stdout, stderr, code := runMain(t, "sim", "run", explicitSmall, "all_reduce", "-b", "64K", "--seeds", "3", "--seed", "5", "--top", "0")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if !strings.Contains(stdout, "(explicit, 2 switch tiers: leaf, spine)") {
		t.Errorf("header does not name the explicit topology's tiers:\n%s", stdout)
	}
	var seeds []string
	for _, l := range strings.Split(stdout, "\n") {
		if f := strings.Fields(l); len(f) > 0 && !strings.HasPrefix(l, "#") {
			seeds = append(seeds, f[len(f)-1])
		}
	}
	if strings.Join(seeds, ",") != "5,6,7" {
		t.Errorf("rows end in %q, want the seeds 5,6,7:\n%s", seeds, stdout)
	}
	stdout, _, _ = runMain(t, "sim", "topo", explicitSmall)
	if !strings.Contains(stdout, "topology  explicit-small (explicit, 2 switch tiers: leaf, spine)") {
		t.Errorf("sim topo does not name the explicit topology's tiers:\n%s", stdout)
	}

	trace := filepath.Join(t.TempDir(), "t.json")
	_, stderr, code = runMain(t, "sim", "run", explicitSmall, "all_reduce", "-b", "1M", "--trace", trace, "--trace-limit", "10")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	var tr struct {
		OtherData struct {
			Dropped int64 `json:"spans_dropped"`
		} `json:"otherData"`
	}
	data, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &tr); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("--trace %s: 10 step spans written, %d later ones dropped", trace, tr.OtherData.Dropped)
	if tr.OtherData.Dropped == 0 || !strings.Contains(stderr, want) {
		t.Errorf("trace dropped %d spans; stderr %q, want it to contain %q", tr.OtherData.Dropped, stderr, want)
	}
	// Under the limit nothing is said.
	_, stderr, _ = runMain(t, "sim", "run", explicitSmall, "all_reduce", "-b", "1M", "--trace", trace)
	if strings.Contains(stderr, "dropped") {
		t.Errorf("stderr %q without dropped spans", stderr)
	}
}

// TestSim18ProgressPlain: with stderr not a terminal (a pipe), a
// packet-level run's progress is plain lines: one from the start (below
// 100%), one at 100% at the end, no \r and no escape sequence.
func TestSim18ProgressPlain(t *testing.T) {
	_, stderr, code := runMain(t, "sim", "run", explicitSmall, "all_reduce", "-b", "64M")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if strings.ContainsAny(stderr, "\r\x1b") {
		t.Errorf("stderr has \\r or escape frames though it is a pipe: %q", stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	if len(lines) < 2 || strings.Contains(lines[0], "100.0%") || !strings.Contains(lines[0], "events, simulated") ||
		!strings.Contains(lines[0], " left") || !strings.Contains(lines[len(lines)-1], "ring all_reduce 64M seed 1: 100.0%") {
		t.Errorf("stderr %q: want a line below 100%% with events, simulated time and time left, then one at 100%%", stderr)
	}
	// --progress=false: nothing.
	if _, stderr, _ := runMain(t, "sim", "run", explicitSmall, "all_reduce", "-b", "64M", "--progress=false"); stderr != "" {
		t.Errorf("--progress=false: stderr %q", stderr)
	}
}

// TestSim18ProgressTerminal: with stderr a terminal (a pty with a window
// size), the progress is mpb's bar, and it ends at 100%. (The run is
// shorter than mpb's refresh, so the bar is drawn once.)
func TestSim18ProgressTerminal(t *testing.T) {
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	defer ptm.Close()
	if err := unix.IoctlSetPointerInt(int(ptm.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetWinsize(int(ptm.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: 160}); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptm.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	pts, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	cmd := childCommand(context.Background(), nil, "sim", "run", explicitSmall, "all_reduce", "-b", "64M")
	cmd.Stderr = pts
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pts.Close()
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(ptm) // EIO once the child has exited and the slave is closed
		got <- b
	}()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	var out []byte
	select {
	case out = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the pty never closed")
	}
	s := string(out)
	if !strings.Contains(s, "ring all_reduce 64M seed 1") || !strings.Contains(s, "100 %") || !strings.Contains(s, "events, simulated") {
		t.Errorf("terminal output %q: want mpb's bar with the run's name, events and simulated time, ending at 100 %%", s)
	}
	if strings.Contains(s, "100.0%") {
		t.Errorf("terminal output %q: the plain lines for pipes, not the bar", s)
	}
}

// TestSim18ProgressHint: the estimate of time left suggests the flow
// engine when it is long, and not when it is short.
func TestSim18ProgressHint(t *testing.T) {
	s := &simProgress{}
	p := packet.Progress{Done: 1, Total: 100, Now: des.Millisecond, Events: 1e6}
	if line := s.status(p, 10*time.Second); !strings.Contains(line, "--engine flow") || !strings.Contains(line, "of ~100.000ms") || !strings.Contains(line, "of ~100M events") {
		t.Errorf("1%% after 10 s: %q, want ~100M events, ~100ms and the --engine flow hint", line)
	}
	p.Done = 50
	if line := s.status(p, 10*time.Second); strings.Contains(line, "--engine flow") || !strings.Contains(line, "10s left") {
		t.Errorf("50%% after 10 s: %q, want 10s left and no hint", line)
	}
}

// TestSim18PlanDesignsChecked: a --design file too small for --gpus is
// reported before the first design is simulated, naming the flag.
func TestSim18PlanDesignsChecked(t *testing.T) {
	args := []string{"sim", "plan", "--gpus", "2048", "--design", "big=../../examples/fattree-2tier-k64-8gpu.yaml:roce",
		"--design", "ndr=../../examples/superpod-1024gpu.yaml:ib"}
	stdout, stderr, code := runMain(t, args...)
	want := `--design "ndr=../../examples/superpod-1024gpu.yaml:ib": ../../examples/superpod-1024gpu.yaml has 1024 GPUs, not the 2048 asked for by --gpus`
	if code == 0 || !strings.Contains(stderr, want) || stdout != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want an error containing %q and no output", code, stdout, stderr, want)
	}
}
