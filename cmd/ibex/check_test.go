package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/check"
)

// checkQuick are small sizes for a quick check on a loaded 2-core host.
// The thresholds are wide: on such a host (other test processes, four
// ranks on two cores) one pair's bandwidth varies tenfold from run to
// run, and latencies more; these tests check the plumbing (ranks,
// baseline, shape, exit status), check's own tests the judgement, and the
// namespace test a slowdown far beyond any noise.
var checkQuick = []string{"-s", "64K", "-n", "4", "-r", "3", "--lat-iters", "20", "--allreduce-size", "256K", "--allreduce-iters", "2", "-T", "60"}

func checkArgs(extra ...string) []string {
	return append(append([]string{"check"}, checkQuick...), extra...)
}

// TestCheckNp runs `ibex check --np 4` (shm0 between the rank processes)
// with --save, then again with --baseline: both pass, the file holds the
// run's shape and every pair, and a baseline of other sizes or a broken
// file is refused with exit status 2.
func TestCheckNp(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base.json")
	loose := []string{"--threshold", "0.99", "--lat-threshold", "100"}
	out, errOut, code := runMain(t, checkArgs(append(loose, "--np", "4", "--save", base)...)...)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{"# ibex check: 4 ranks, transport shm0", "check: passed", "# figures saved to " + base} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	f, err := check.Load(base)
	if err != nil {
		t.Fatal(err)
	}
	if f.Ranks != 4 || f.Transport != "shm0" || len(f.Pairs) != 6 || len(f.Hosts) != 4 || f.Config.Bytes != 64<<10 || f.AllReduce.Bytes != 256<<10 {
		t.Fatalf("baseline %+v", f)
	}
	for _, p := range f.Pairs {
		if p.BWAB <= 0 || p.BWBA <= 0 || p.LatUs <= 0 || p.Transport != "shm0" {
			t.Errorf("pair %+v", p)
		}
		if !strings.Contains(out, fmt.Sprintf("%s       shm0", p.Name())) {
			t.Errorf("no row for %s:\n%s", p.Name(), out)
		}
	}
	if f.AllReduce.BusBW <= 0 || f.AllReduce.Wrong != 0 {
		t.Errorf("all_reduce %+v", f.AllReduce)
	}

	out, errOut, code = runMain(t, checkArgs(append(loose, "--np", "4", "--baseline", base)...)...)
	if code != 0 {
		t.Fatalf("against the baseline: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{"baseline: " + base, "drift: none beyond the thresholds", "check: passed"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}

	// Other sizes: rank 0 refuses before measuring; every rank stops.
	out, errOut, code = runMain(t, append(checkArgs("--np", "4", "--baseline", base), "-s", "32K")...)
	if code != 2 || !strings.Contains(errOut, "the baseline has another shape") || !strings.Contains(errOut, "--size 65536, this run 32768") {
		t.Errorf("baseline of other sizes: exit %d (want 2)\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.json"), []byte(`{"format": "ibex-check", "version": 7}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = runMain(t, checkArgs("--np", "4", "--baseline", filepath.Join(dir, "bad.json"))...)
	if code != 2 || !strings.Contains(errOut, "version 7") || out != "" {
		t.Errorf("baseline of a later version: exit %d (want 2)\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// TestCheckUsage: what cannot run exits 2, naming the problem.
func TestCheckUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"check", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"check", "extra"}, `unknown command "extra"`},
		{[]string{"check", "--np", "2", "--threshold", "1.5"}, "bandwidth threshold 1.5"},
		{[]string{"check", "--np", "2", "-s", "0"}, "--size 0: want at least 1"},
		{[]string{"check", "--np", "1"}, "--np 1: want at least 2"},
		{[]string{"check", "--np", "2", "--degrade", "leaf0:1=0.5"}, "for a simulated fabric"},
		{[]string{"check"}, "no ranks: start them with --np N"},
		{[]string{"check", "--sim", "no-such.yaml"}, "no-such.yaml"},
		{[]string{"check", "--sim", "../../examples/fattree-3tier-k16.yaml"}, "has 1024 hosts: say how many"},
		{[]string{"check", "--sim", "../../examples/fattree-3tier-k16.yaml", "--np", "4", "--degrade", "leaf0:99=0.5"}, `no port or cable "leaf0:99"`},
		{[]string{"check", "--np", "2", "--baseline", "no-such.json"}, "no-such.json"},
	} {
		// Without a launcher's environment, whatever runs these tests.
		for _, k := range []string{"RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "PMI_RANK", collRankEnv} {
			if v, ok := os.LookupEnv(k); ok {
				t.Setenv(k, v)
				_ = os.Unsetenv(k)
			}
		}
		_, err := run(t, c.args...)
		if err == nil || exitCode(err) != checkUsage || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v (exit %d), want exit 2 naming %q", c.args, err, exitCode(err), c.want)
		}
	}
	// The exit status itself.
	_, errOut, code := runMain(t, "check", "--np", "2", "--threshold", "-1")
	if code != 2 || !strings.HasPrefix(errOut, "ibex: check: --threshold -1") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// TestCheckSim: `ibex check --sim` on examples/fattree-3tier-k16.yaml
// (16 ranks: the hosts of leaf0 and leaf1). The intact fabric passes
// and is saved; with host 5's cable at a tenth of its rate the check
// names rank 5 and its cable, lists the drifts and exits 1; a flapping
// cable of host 2 is found the same way.
func TestCheckSim(t *testing.T) {
	topo := "../../examples/fattree-3tier-k16.yaml"
	base := filepath.Join(t.TempDir(), "clean.json")
	args := []string{"check", "--sim", topo, "--np", "16", "-s", "256K", "--lat-iters", "20"}
	out, errOut, code := runMain(t, append(args, "--save", base)...)
	if code != 0 || !strings.Contains(out, "check: passed") {
		t.Fatalf("intact fabric: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	out, errOut, code = runMain(t, append(args, "--baseline", base, "--degrade", "host5.nic0=0.1")...)
	if code != 1 {
		t.Fatalf("degraded cable: exit %d (want 1)\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"# simulated on " + topo + " (fattree-3tier-k16) by sim/flow, degrade host5.nic0=0.1",
		"\nslow ranks: 5\n",
		"\nsuspect cables: host5.nic0 - leaf0:5 (15 slow pairs cross it, 0 fast)\n",
		"\ndrift: 5->0 bw ",
		"\ndrift: all_reduce busbw ",
		"\ncheck: FAILED: 1 slow rank, 31 figures drifted from the baseline\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("degraded cable: no %q in:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "ibex: check: FAILED: 1 slow rank") {
		t.Errorf("stderr %q", errOut)
	}
	out, errOut, code = runMain(t, append(args, "--flap", "host2.nic0=1ms")...)
	if code != 1 || !strings.Contains(out, "\nslow ranks: 2\n") || !strings.Contains(out, "\nsuspect cables: host2.nic0 - leaf0:2 ") {
		t.Errorf("flapping cable: exit %d (want 1)\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	// A baseline of another shape is refused.
	out, errOut, code = runMain(t, "check", "--sim", topo, "--np", "8", "-s", "256K", "--lat-iters", "20", "--baseline", base)
	if code != 2 || !strings.Contains(errOut, "ranks 16, this run 8") {
		t.Errorf("8 ranks against 16: exit %d (want 2)\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// TestCheckNetns runs 4 ranks in 4 network namespaces on one bridge (4
// hosts to coll: udp0 between them), started as torchrun starts them,
// and saves a baseline; then slows rank 3's veth (tc tbf) and checks
// again: rank 3 is named, its outgoing bandwidth drifted, and rank 0
// exits 1. It is skipped only when network namespaces cannot be made here
// (no iproute2, or no CAP_SYS_ADMIN).
//
// The ranks use udp0's socket path (IBEX_UDP_XDP=off): AF_XDP frames
// bypass the qdisc. The sizes are small and the shaping is hard: on a
// loaded 2-core host coll's transfers of 16 KiB over udp0 reach 0.5 to
// 100 MB/s from run to run, so the slow link runs at 2 Mbit/s (0.25
// MB/s; 50 Mbit/s is within that noise), with a queue deep enough that
// tbf shapes rather than drops (drops would make RC retransmit and
// stretch the test).
func TestCheckNetns(t *testing.T) {
	ns, addr := checkNetns(t, 4)
	base := filepath.Join(t.TempDir(), "base.json")
	// Latency is not judged: tbf delays nothing that does not queue.
	args := []string{"check", "-s", "8K", "-n", "2", "-r", "2", "-w", "0", "--lat-iters", "10", "--allreduce-size", "4K", "--allreduce-iters", "1",
		"--threshold", "0.8", "--lat-threshold", "1000", "-T", "60"}
	res := checkNetnsRun(t, ns, addr, append(args, "--save", base)...)
	// Noise may name a link already (exit 1); the figures are saved
	// either way.
	if c := res[0].code; c != 0 && c != 1 || !strings.Contains(res[0].stdout, "# ibex check: 4 ranks, transport udp0") {
		t.Fatalf("before the slowdown: rank 0 exit %d\nstdout:\n%s\nstderr:\n%s", res[0].code, res[0].stdout, res[0].stderr)
	}
	if _, err := check.Load(base); err != nil {
		t.Fatal(err)
	}
	t.Logf("before:\n%s", res[0].stdout)
	slow := fmt.Sprintf("ick3a%d", os.Getpid()%100000)
	if out, err := exec.Command("ip", "netns", "exec", ns[3], "tc", "qdisc", "add", "dev", slow, "root", "tbf", "rate", "2mbit", "burst", "4kb", "latency", "1s").CombinedOutput(); err != nil {
		t.Fatalf("tc qdisc add tbf: %v: %s", err, out)
	}
	res = checkNetnsRun(t, ns, addr, append(args, "--baseline", base)...)
	out := res[0].stdout
	t.Logf("after:\n%s", out)
	if res[0].code != 1 {
		t.Fatalf("after the slowdown: rank 0 exit %d (want 1)\nstdout:\n%s\nstderr:\n%s", res[0].code, out, res[0].stderr)
	}
	var ranks string
	for _, l := range strings.Split(out, "\n") {
		if r, ok := strings.CutPrefix(l, "slow ranks: "); ok {
			ranks = r
		}
	}
	if !slices.Contains(strings.Split(ranks, ", "), "3") {
		t.Errorf("rank 3 not among the slow ranks (%q)", ranks)
	}
	// The baseline's own figures are noisy; one of rank 3's directions
	// at least is far below its own.
	if !strings.Contains(out, "\ndrift: 3->") {
		t.Errorf("no drift of rank 3's bandwidth")
	}
}

// checkNetns makes n network namespaces, each with a veth whose other end
// is on a bridge in a namespace of its own, addresses 10.79.X.1..n, and
// returns the namespaces and addresses.
func checkNetns(t *testing.T, n int) (ns, addr []string) {
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("cannot create network namespaces: the ip command (iproute2) is not installed")
	}
	pid := os.Getpid()
	br := fmt.Sprintf("ickbr-%d", pid)
	if out, err := exec.Command("ip", "netns", "add", br).CombinedOutput(); err != nil {
		t.Skipf("cannot create network namespaces here: ip netns add %s: %v: %s", br, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", br).Run() })
	ipCmd := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	ipCmd("-n", br, "link", "add", "br0", "type", "bridge")
	ipCmd("-n", br, "link", "set", "br0", "up")
	sub := 100 + pid%150
	for r := range n {
		name := fmt.Sprintf("ick%d-%d", r, pid)
		ipCmd("netns", "add", name)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
		// Veth names have at most 15 bytes.
		a, b := fmt.Sprintf("ick%da%d", r, pid%100000), fmt.Sprintf("ick%db%d", r, pid%100000)
		ipCmd("link", "add", a, "type", "veth", "peer", "name", b)
		t.Cleanup(func() { _ = exec.Command("ip", "link", "del", a).Run() })
		ipCmd("link", "set", a, "netns", name)
		ipCmd("link", "set", b, "netns", br)
		ipCmd("-n", br, "link", "set", b, "master", "br0")
		ipCmd("-n", br, "link", "set", b, "up")
		ip := fmt.Sprintf("10.79.%d.%d", sub, r+1)
		ipCmd("-n", name, "addr", "add", ip+"/24", "dev", a)
		ipCmd("-n", name, "link", "set", a, "up")
		ipCmd("-n", name, "link", "set", "lo", "up")
		ns, addr = append(ns, name), append(addr, ip)
	}
	return ns, addr
}

// checkNetnsRun runs ibex with args as torchrun would start it, rank r in
// namespace ns[r], and returns every rank's result.
func checkNetnsRun(t *testing.T, ns, addr []string, args ...string) []procResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := len(ns)
	res := make([]procResult, n)
	var wg sync.WaitGroup
	for r := range n {
		argv, env := childArgv(args...)
		cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns[r]}, argv...)...)
		cmd.Env = launchEnv(append(env, fmt.Sprintf("RANK=%d", r), fmt.Sprintf("WORLD_SIZE=%d", n), fmt.Sprintf("LOCAL_RANK=%d", 0),
			"LOCAL_WORLD_SIZE=1", "MASTER_ADDR="+addr[0], "MASTER_PORT=29500", "IBEX_UDP_ADDR="+addr[r], "IBEX_UDP_XDP=off")...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := cmd.Wait()
			res[r] = procResult{stdout: out.String(), stderr: errOut.String()}
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				res[r].code = exit.ExitCode()
			} else if err != nil {
				res[r].code, res[r].stderr = -1, err.Error()
			}
		}()
	}
	wg.Wait()
	for r := 1; r < n; r++ {
		if res[r].code != 0 {
			t.Errorf("rank %d: exit %d\nstderr:\n%s", r, res[r].code, res[r].stderr)
		}
	}
	return res
}
