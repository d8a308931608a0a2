package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const superpod1SU = "../../examples/superpod-1su.yaml"

// simParallel: the tests that run the simulator in this process
// (TestSimPlan, TestSimRunFlowEngine, TestSimRunJSONTraceFail,
// TestSimRunFailures, TestSimSweep) are each one goroutine's arithmetic,
// about 25 s of it under -race; run in parallel (after the package's other
// tests, two at a time) they use both cores instead of one.

func TestSimTopo(t *testing.T) {
	var buf bytes.Buffer
	if err := runSimTopo(&buf, superpod1SU, false); err != nil {
		t.Fatal(err)
	}
	const want = `topology  superpod-1su (superpod, 2 switch tiers)
hosts     31
GPUs      248 (one NIC each)
NICs      248

switches       count   ports used
leaf               8   504 of 512
spine              4   256 of 256
total             12   760 of 768

links          count   capacity
host-leaf        248   99.2 Tb/s
leaf-spine       256   102.4 Tb/s
total            504   201.6 Tb/s

bisection 49.6 Tb/s per direction
MTU 4096, switch latency 250ns
check: ok
`
	if got := buf.String(); got != want {
		t.Errorf("ibex sim topo %s:\n%s\nwant:\n%s", superpod1SU, got, want)
	}
}

func TestSimTopoJSON(t *testing.T) {
	out, err := run(t, "sim", "topo", "--json", "../../examples/fattree-3tier-k16.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		File     string `json:"file"`
		Kind     string `json:"kind"`
		Tiers    int    `json:"tiers"`
		Hosts    int    `json:"hosts"`
		Switches struct {
			Leaf, Spine, Core, Total int
		} `json:"switches"`
		Links struct {
			HostLeaf  int `json:"host_leaf"`
			LeafSpine int `json:"leaf_spine"`
			SpineCore int `json:"spine_core"`
		} `json:"links"`
		Bisection int64    `json:"bisection_bps"`
		Check     string   `json:"check"`
		Problems  []string `json:"problems"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if r.Kind != "fattree" || r.Tiers != 3 || r.Hosts != 1024 || r.Switches.Leaf != 128 || r.Switches.Spine != 128 ||
		r.Switches.Core != 64 || r.Switches.Total != 320 || r.Links.HostLeaf != 1024 || r.Links.LeafSpine != 1024 ||
		r.Links.SpineCore != 1024 || r.Bisection != 1024*200e9/2 || r.Check != "ok" || r.Problems != nil {
		t.Errorf("unexpected report %+v\n%s", r, out)
	}
}

// badTopo writes an explicit topology with two problems: a switch with
// more cables than ports and a host that reaches no other.
func badTopo(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bad.yaml")
	const spec = `kind: explicit
explicit:
  nodes:
    - {name: h0, kind: host}
    - {name: h1, kind: host}
    - {name: h2, kind: host}
    - {name: sw0, kind: switch, ports: 1}
    - {name: sw1, kind: switch, ports: 2}
  links:
    - {a: h0, b: sw0}
    - {a: h1, b: sw0}
    - {a: h2, b: sw1}
`
	if err := os.WriteFile(path, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestSimTopoProblems(t *testing.T) {
	path := badTopo(t)
	var buf bytes.Buffer
	err := runSimTopo(&buf, path, false)
	if err == nil || err.Error() != path+": check found 2 problems" {
		t.Errorf("err = %v, want %q", err, path+": check found 2 problems")
	}
	wantLines := []string{
		"check: 2 problems",
		"  switch sw0: 2 cables on 1 port",
		"  host h2: cannot reach host h0",
	}
	out := buf.String()
	if !strings.HasSuffix(out, strings.Join(wantLines, "\n")+"\n") {
		t.Errorf("output ends:\n%s\nwant:\n%s", out, strings.Join(wantLines, "\n"))
	}
	if !strings.Contains(out, "bisection not computed for explicit topologies") {
		t.Errorf("output:\n%s", out)
	}

	buf.Reset()
	if err := runSimTopo(&buf, path, true); err == nil {
		t.Error("--json: no error")
	}
	var r struct {
		Check         string   `json:"check"`
		Problems      []string `json:"problems"`
		ProblemsTotal int      `json:"problems_total"`
	}
	if err := json.Unmarshal(buf.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if r.Check != "failed" || r.ProblemsTotal != 2 || len(r.Problems) != 2 || r.Problems[1] != "host h2: cannot reach host h0" {
		t.Errorf("--json report %+v", r)
	}
}

func TestSimTopoExit(t *testing.T) {
	path := badTopo(t)
	stdout, stderr, code := runMain(t, "sim", "topo", path)
	if code != 1 || stderr != "ibex: "+path+": check found 2 problems\n" || !strings.Contains(stdout, "check: 2 problems") {
		t.Errorf("exit %d, stderr %q, stdout:\n%s", code, stderr, stdout)
	}
	bad := filepath.Join(t.TempDir(), "k.yaml")
	if err := os.WriteFile(bad, []byte("kind: fattree\nfattree: {k: 63}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = runMain(t, "sim", "topo", bad)
	if want := "ibex: " + bad + ": fattree.k: 63: want an even number of ports >= 4 and <= 65536 (line 2)\n"; code != 1 || stderr != want || stdout != "" {
		t.Errorf("exit %d, stderr %q (want %q), stdout %q", code, stderr, want, stdout)
	}
	stdout, _, code = runMain(t, "sim", "topo", superpod1SU)
	if code != 0 || !strings.HasSuffix(stdout, "check: ok\n") {
		t.Errorf("exit %d, stdout:\n%s", code, stdout)
	}
}

func TestSimHelp(t *testing.T) {
	out, err := run(t, "sim")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "Usage:") || !strings.Contains(out, "topo ") || !strings.Contains(out, "plan ") || !strings.Contains(out, "sweep ") || !strings.Contains(out, "run ") {
		t.Errorf("ibex sim:\n%s", out)
	}
	if _, err := run(t, "sim", "topo"); err == nil || !strings.Contains(err.Error(), "accepts 1 arg") {
		t.Errorf("ibex sim topo without FILE: err = %v", err)
	}
}

func simRunOpts() simRunOptions {
	o := defaultSimRunOptions()
	o.top = 3
	return o
}

func TestSimRun(t *testing.T) {
	o := simRunOpts()
	o.gpus, o.min, o.max, o.factor = 16, "1M", "16M", 4
	var out bytes.Buffer
	if err := runSimRun(&out, io.Discard, superpod1SU, "all_reduce", o); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	t.Log("\n" + got)
	for _, want := range []string{
		"# ring all_reduce over 16 GPUs, 8 channel(s), PXN, dmodk routing, chunk 512K, 8 slots",
		"busbw/NIC", "      1048576 ", "      4194304 ", "     16777216 ",
		"# hottest links", "host-leaf", "# peak memory",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// busbw grows with size, as it does for nccl-tests.
	var prev float64
	for _, line := range strings.Split(got, "\n") {
		f := strings.Fields(line)
		if len(f) == 9 && !strings.HasPrefix(line, "#") {
			bw, err := strconv.ParseFloat(f[3], 64)
			if err != nil {
				t.Fatalf("row %q: busbw %q", line, f[3])
			}
			if bw <= prev {
				t.Errorf("busbw %v after %v: want it to grow with size", bw, prev)
			}
			prev = bw
		}
	}
}

func TestSimRunJSONTraceFail(t *testing.T) {
	t.Parallel() // in-process simulation: one core; see simParallel
	o := simRunOpts()
	o.on, o.min, o.asJSON = "0-31,128-159", "8M", true
	o.trace = filepath.Join(t.TempDir(), "trace.json")
	o.fail = []string{"leaf0:32@5us"}
	o.routing = "adaptive"
	var out bytes.Buffer
	if err := runSimRun(&out, io.Discard, superpod1SU, "all_reduce", o); err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Rows []simRow `json:"rows"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out.String())
	}
	if len(rep.Rows) != 1 || rep.Rows[0].Bytes != 8<<20 || rep.Rows[0].BusBW <= 0 || len(rep.Rows[0].Links) != 3 {
		t.Fatalf("rows %+v", rep.Rows)
	}
	data, err := os.ReadFile(o.trace)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []struct {
			Ph   string  `json:"ph"`
			Name string  `json:"name"`
			Dur  float64 `json:"dur"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(data, &tr); err != nil {
		t.Fatalf("trace is not JSON: %v", err)
	}
	spans := 0
	for _, e := range tr.TraceEvents {
		if e.Ph == "X" {
			spans++
		}
	}
	// 64 ranks × 8 channels × 126 steps.
	if spans != 64*8*126 {
		t.Errorf("trace has %d step spans, want %d", spans, 64*8*126)
	}
}

func TestSimRunErrors(t *testing.T) {
	for _, c := range []struct {
		what string
		edit func(*simRunOptions)
		want string
	}{
		{"all_reduce", func(o *simRunOptions) { o.gpus = 10000 }, "--gpus 10000"},
		{"allreduce", nil, `"allreduce" is neither a collective`},
		{"incast", func(o *simRunOptions) { o.algo = "ring" }, "is a pattern"},
		{"all_reduce", func(o *simRunOptions) { o.algo = "bogus" }, "--algo"},
		{"all_reduce", func(o *simRunOptions) { o.fail = []string{"leaf0:32"} }, "want PORT@TIME"},
		{"all_reduce", func(o *simRunOptions) { o.fail = []string{"leaf99:1@1us"} }, `no port "leaf99:1"`},
		{"all_reduce", func(o *simRunOptions) { o.fail = []string{"99999@1us"} }, "link 99999"},
		{"all_reduce", func(o *simRunOptions) { o.routing = "ospf" }, "--routing"},
		{"all_reduce", func(o *simRunOptions) { o.buffer = "0" }, "--buffer"},
		{"all_reduce", func(o *simRunOptions) { o.buffer = "1K" }, "less than one"},
		{"all_reduce", func(o *simRunOptions) { o.factor = 1 }, "-f 1"},
		{"all_reduce", func(o *simRunOptions) { o.gpus = 0; o.on = "0-7,5000" }, `"5000": want GPU numbers`},
		{"all_reduce", func(o *simRunOptions) { o.gpus = 0; o.on = "0-7,3" }, "GPU 3 holds two ranks"},
		{"all_reduce", func(o *simRunOptions) { o.gpus = 0; o.on = "0-3,8-11,4" }, "must be contiguous"},
		{"all_reduce", func(o *simRunOptions) { o.min = "1G"; o.max = "1M" }, "min <= max"},
	} {
		o := simRunOpts()
		o.gpus = 16
		if c.edit != nil {
			c.edit(&o)
		}
		err := runSimRun(io.Discard, io.Discard, superpod1SU, c.what, o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %+v: error %v, want one containing %q", c.what, o, err, c.want)
		}
	}
}

func TestSimRunFlowEngine(t *testing.T) {
	t.Parallel() // in-process simulation: one core; see simParallel
	o := simRunOpts()
	o.gpus, o.min, o.engine = 64, "256M", "flow"
	var flowOut, packetOut bytes.Buffer
	if err := runSimRun(&flowOut, io.Discard, superpod1SU, "all_reduce", o); err != nil {
		t.Fatal(err)
	}
	o.engine = "packet"
	if err := runSimRun(&packetOut, io.Discard, superpod1SU, "all_reduce", o); err != nil {
		t.Fatal(err)
	}
	time := func(out string) float64 {
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) == 9 && f[0] == "268435456" {
				v, _ := strconv.ParseFloat(f[1], 64)
				return v
			}
		}
		t.Fatalf("no row in\n%s", out)
		return 0
	}
	if !strings.Contains(flowOut.String(), "# engine flow") || !strings.Contains(flowOut.String(), "solves") {
		t.Errorf("flow output lacks its engine line or column:\n%s", flowOut.String())
	}
	ft, pt := time(flowOut.String()), time(packetOut.String())
	if d := ft/pt - 1; d < -0.05 || d > 0.05 {
		t.Errorf("flow %v us, packet %v us: %+.1f%%", ft, pt, 100*d)
	}

	o = simRunOpts()
	o.gpus, o.min, o.engine, o.hier, o.algo = 64, "64M", "flow", true, "tree"
	var hier bytes.Buffer
	if err := runSimRun(&hier, io.Discard, superpod1SU, "all_reduce", o); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(hier.String(), "67108864") {
		t.Errorf("--hier output:\n%s", hier.String())
	}

	o = simRunOpts()
	o.gpus, o.min, o.engine, o.routing, o.seeds = 128, "4M", "flow", "ecmp", 4
	var seeds bytes.Buffer
	if err := runSimRun(&seeds, io.Discard, "../../examples/fattree-2tier-k64-2to1.yaml", "permutation", o); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(seeds.String(), "# 4 seeds from 1: time min") {
		t.Errorf("--seeds 4 output lacks the spread:\n%s", seeds.String())
	}

	for _, c := range []struct {
		edit func(*simRunOptions)
		want string
	}{
		{func(o *simRunOptions) { o.engine = "fluid" }, `--engine "fluid"`},
		{func(o *simRunOptions) { o.hier = true }, "--hier needs --engine flow"},
		{func(o *simRunOptions) { o.engine, o.trace = "flow", "x.json" }, "--trace needs --engine packet"},
		{func(o *simRunOptions) { o.engine, o.hier, o.gpus = "flow", true, 12 }, "--hier: all_reduce"},
	} {
		o := simRunOpts()
		o.gpus = 16
		c.edit(&o)
		err := runSimRun(io.Discard, io.Discard, superpod1SU, "all_reduce", o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error containing %q", o, err, c.want)
		}
	}
}

func TestSimRunFailures(t *testing.T) {
	t.Parallel() // in-process simulation: one core; see simParallel
	// Own NICs: traffic between rails crosses the spines, so a spine
	// failure in the second iteration costs D-mod-k more than adaptive.
	// As a user runs it (a child without the race detector: the flow
	// engine's 256 ranks take 20 s under it in this process).
	got, errOut, code := runMain(t, "sim", "run", superpod1SU, "permutation", "-b", "16M", "--engine", "flow",
		"--iters", "3", "--routing", "dmodk,adaptive", "--local-nic", "--fail-switch", "spine1@300us")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"# switch spine1 fails at 300us (all its links)",
		"# 3 iterations back to back",
		"# failures, dmodk routing: 1400.6 us without, 1698.3 us with (+21.25%); iterations slowed: 2,3 of 3",
		"# failures, adaptive routing: 1147.4 us without, 1211.7 us with (+5.61%); iterations slowed: 2,3 of 3",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	o := simRunOpts()
	o.gpus, o.min, o.engine, o.failRandom, o.asJSON = 16, "4M", "flow", 3, true
	var out bytes.Buffer
	if err := runSimRun(&out, io.Discard, superpod1SU, "all_reduce", o); err != nil {
		t.Fatal(err)
	}
	var rep struct{ Rows []simRow }
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || len(rep.Rows) != 1 || rep.Rows[0].BaseTimeUS == 0 {
		t.Errorf("--fail-random --json: %v %+v", err, rep.Rows)
	}
	for _, c := range []struct {
		edit func(*simRunOptions)
		want string
	}{
		{func(o *simRunOptions) { o.failSwitch = []string{"spine99@1ms"} }, `no switch "spine99"`},
		{func(o *simRunOptions) { o.failSwitch = []string{"spine0"} }, "want NAME@TIME"},
		{func(o *simRunOptions) { o.iters = -1 }, "--iters -1"},
		{func(o *simRunOptions) { o.engine, o.failRandom = "flow", 100000 }, "100000 random failures"},
	} {
		o := simRunOpts()
		o.gpus = 16
		c.edit(&o)
		err := runSimRun(io.Discard, io.Discard, superpod1SU, "all_reduce", o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error containing %q", o, err, c.want)
		}
	}
}

func TestSimSweep(t *testing.T) {
	t.Parallel() // in-process simulation: one core; see simParallel
	dir := t.TempDir()
	o := simSweepOptions{
		topos: superpod1SU + ",../../examples/fattree-2tier-k64.yaml", sizes: "1M,16M", algos: "ring,tree",
		routings: "dmodk,adaptive", seeds: "1-2",
		csvFile: filepath.Join(dir, "s.csv"), jsonFile: filepath.Join(dir, "s.json"), plotFile: filepath.Join(dir, "s.png"),
	}
	o.run = simRunOpts()
	o.run.engine, o.run.gpus = "flow", 32
	var out bytes.Buffer
	if err := runSimSweep(&out, "all_reduce", o); err != nil {
		t.Fatal(err)
	}
	const runs = 2 * 2 * 2 * 2 * 2 // topologies × sizes × algorithms × routings × seeds
	data, err := os.ReadFile(o.csvFile)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(data), "\n"); lines != runs+1 {
		t.Errorf("CSV has %d lines, want a header and %d rows", lines, runs)
	}
	var rows []sweepRow
	if b, err := os.ReadFile(o.jsonFile); err != nil || json.Unmarshal(b, &rows) != nil || len(rows) != runs {
		t.Fatalf("JSON: %v, %d rows, want %d", err, len(rows), runs)
	}
	for _, r := range rows {
		if r.BusBW <= 0 || r.TimeUS <= 0 || r.Ranks != 32 {
			t.Errorf("row %+v", r)
		}
	}
	if st, err := os.Stat(o.plotFile); err != nil || st.Size() < 1000 {
		t.Errorf("plot: %v", err)
	}
	if _, err := parseSeeds("3-1"); err == nil {
		t.Error("--seeds 3-1 accepted")
	}
	o.topos = ""
	if err := runSimSweep(io.Discard, "all_reduce", o); err == nil || !strings.Contains(err.Error(), "--topos") {
		t.Errorf("no topologies: %v", err)
	}
}

func TestSimPlan(t *testing.T) {
	t.Parallel() // in-process simulation: one core; see simParallel
	dir := t.TempDir()
	o := simPlanOptions{gpus: 1024, size: "64M", routing: "dmodk", plotFile: filepath.Join(dir, "plan.png")}
	var out bytes.Buffer
	if err := runSimPlan(&out, o); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	t.Log("\n" + got)
	for _, want := range []string{"# ibex sim plan: 1024 GPUs, 64M all-reduce", "IB NDR rail-optimized", "RoCE 400G 2-tier", "RoCE 400G 3-tier", "ring ms", "hier tree ms", "W/GPU", "$/GPU"} {
		if !strings.Contains(got, want) {
			t.Errorf("plan output lacks %q", want)
		}
	}
	if st, err := os.Stat(o.plotFile); err != nil || st.Size() < 1000 {
		t.Errorf("plot: %v", err)
	}
	// Own designs from files, as JSON.
	o = simPlanOptions{gpus: 248, size: "64M", routing: "dmodk", asJSON: true,
		designs: []string{"ndr=" + superpod1SU + ":ib", "roce=" + superpod1SU + ":roce"}}
	out.Reset()
	if err := runSimPlan(&out, o); err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Designs []struct {
			Design    string
			LinkLayer string `json:"link_layer"`
			AllReduce []struct {
				TimeUS float64 `json:"time_us"`
			} `json:"allreduce"`
		}
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || len(rep.Designs) != 2 || rep.Designs[1].LinkLayer != "ethernet" {
		t.Fatalf("--json: %v %+v", err, rep)
	}
	// The tree across hosts is bound by the NICs (the ring's steps here by
	// NVLink, which has no framing): RoCE's framing costs it time.
	if rep.Designs[1].AllReduce[1].TimeUS <= rep.Designs[0].AllReduce[1].TimeUS {
		t.Errorf("RoCE framing did not cost time: %+v", rep.Designs)
	}
	for _, c := range []struct {
		o    simPlanOptions
		want string
	}{
		{simPlanOptions{gpus: 100, size: "1G"}, "multiple of 8"},
		{simPlanOptions{gpus: 248, size: "x"}, "--size"},
		{simPlanOptions{gpus: 248, size: "1G", designs: []string{"a=b"}}, "want NAME=TOPOLOGY.yaml:ib"},
		{simPlanOptions{gpus: 248, size: "1G", designs: []string{"a=" + superpod1SU + ":fc"}}, "fc"},
		{simPlanOptions{gpus: 4096, size: "1G", designs: []string{"a=" + superpod1SU + ":ib"}}, "not the 4096 asked for"},
	} {
		c.o.routing = "dmodk"
		if err := runSimPlan(io.Discard, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error containing %q", c.o, err, c.want)
		}
	}
}

func TestSimRunRoCE(t *testing.T) {
	for _, cc := range []string{"auto", "none"} {
		o := simRunOpts()
		o.gpus, o.min, o.linkLayer, o.cc, o.asJSON = 16, "1M", "roce", cc, true
		var out bytes.Buffer
		if err := runSimRun(&out, io.Discard, "../../examples/fattree-2tier-k64.yaml", "incast", o); err != nil {
			t.Fatal(err)
		}
		var rep struct{ Rows []simRow }
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil || len(rep.Rows) != 1 {
			t.Fatalf("%v %s", err, out.String())
		}
		r := rep.Rows[0]
		t.Logf("incast 15 -> 1, RoCE, cc %s: %.1f us, pause %.1f us, %d PAUSE frames, %d drops, %d marks, %d CNPs", cc, r.TimeUS, r.WaitUS, r.PauseFrames, r.Drops, r.ECNMarks, r.CNPs)
		if r.WaitUS <= 0 || r.PauseFrames == 0 || r.Drops != 0 || r.ECNMarks == 0 {
			t.Errorf("cc %s: %+v: want pause time, PAUSE frames and marks, and no drops", cc, r)
		}
		if (r.CNPs > 0) != (cc == "auto") {
			t.Errorf("cc %s: %d CNPs", cc, r.CNPs)
		}
	}
	for _, c := range []struct {
		edit func(*simRunOptions)
		want string
	}{
		{func(o *simRunOptions) { o.linkLayer = "fc" }, "--link-layer"},
		{func(o *simRunOptions) { o.linkLayer, o.cc = "roce", "bbr" }, "--cc"},
		{func(o *simRunOptions) { o.linkLayer, o.routing = "roce", "adaptive" }, "adaptive"},
		{func(o *simRunOptions) { o.linkLayer, o.pfcXoff = "roce", "x" }, "--pfc-xoff"},
	} {
		o := simRunOpts()
		o.gpus = 16
		c.edit(&o)
		err := runSimRun(io.Discard, io.Discard, superpod1SU, "all_reduce", o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error containing %q", o, err, c.want)
		}
	}
}
