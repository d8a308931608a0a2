package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Issue 18: under a launcher (mpirun, torchrun, srun) ibex coll forms
// exactly one job of the launcher's size, or fails on every rank saying
// what to set; it never starts a 2-rank job of its own per process.

// launchArgs is a small, quick all_reduce: 2 sizes, one table row each.
var launchArgs = []string{"coll", "all_reduce", "-b", "8", "-e", "16", "-n", "2", "-w", "1", "-T", "30"}

// buildIbex is the ibex binary the launchers start: the tests' commands
// (childBin, main_test.go), else a build for this test (race-instrumented
// when IBEX_TEST_CHILD_RACE=1 keeps the commands so).
func buildIbex(t *testing.T) string {
	t.Helper()
	if childBin != "" {
		return childBin
	}
	bin := filepath.Join(t.TempDir(), "ibex")
	var flags []string
	if raceBuild {
		flags = append(flags, "-race")
	}
	if err := goBuild(bin, flags...); err != nil {
		t.Fatal(err)
	}
	return bin
}

// launchEnv is this process's environment without any launcher's or
// ibex's rendezvous variables (the tests may themselves run under one),
// plus extra.
func launchEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "OMPI_"), strings.HasPrefix(k, "PMIX_"), strings.HasPrefix(k, "SLURM"),
			strings.HasPrefix(k, "PMI_"), strings.HasPrefix(k, "TORCHELASTIC_"), strings.HasPrefix(k, "IBEX_RENDEZVOUS"):
		case k == "RANK", k == "WORLD_SIZE", k == "LOCAL_RANK", k == "LOCAL_WORLD_SIZE", k == "MASTER_ADDR", k == "MASTER_PORT",
			k == collRankEnv, k == collSizeEnv, k == mainArgsEnv:
		default:
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

type procResult struct {
	stdout, stderr string
	code           int
}

// runProc runs cmd to completion (it carries its deadline).
func runProc(t *testing.T, cmd *exec.Cmd) procResult {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	r := procResult{stdout: out.String(), stderr: errOut.String()}
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		t.Fatalf("%v: %v", cmd.Args, err)
	}
	return r
}

// startRanks starts n processes of bin with args, rank r's environment
// launchEnv plus env(r), as a launcher would, and waits for all.
func startRanks(t *testing.T, n int, env func(r int) []string, bin string, args ...string) []procResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res := make([]procResult, n)
	var wg sync.WaitGroup
	for r := range n {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = launchEnv(env(r)...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			err := cmd.Run()
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
	return res
}

// checkOneJob asserts what nccl-tests prints for one job of size ranks:
// one table, by one process, whose header lists size ranks; the table
// has a row per size with no wrong elements.
func checkOneJob(t *testing.T, size int, stdout string) {
	t.Helper()
	if n := strings.Count(stdout, "# nThread 1 nGpus 1"); n != 1 {
		t.Fatalf("%d tables printed, want exactly 1:\n%s", n, stdout)
	}
	if n := strings.Count(stdout, "#  Rank "); n != size {
		t.Errorf("header lists %d ranks, want %d:\n%s", n, size, stdout)
	}
	if !strings.Contains(stdout, fmt.Sprintf("#  Rank %2d Group  0 Pid", size-1)) {
		t.Errorf("header without rank %d:\n%s", size-1, stdout)
	}
	rows := collRows(t, stdout)
	if len(rows) != 2 {
		t.Errorf("%d rows, want 2 (8 and 16 bytes):\n%s", len(rows), stdout)
	}
	for _, f := range rows {
		if f[8] != "0" || f[12] != "0" {
			t.Errorf("row %v: wrong elements", f)
		}
	}
	if n := strings.Count(stdout, "# Out of bounds values : 0 OK"); n != 1 {
		t.Errorf("%d footers, want 1:\n%s", n, stdout)
	}
}

// checkRanks: exactly one process (rank 0) printed, and it printed one
// job of len(res) ranks; every process exited 0.
func checkRanks(t *testing.T, res []procResult) {
	t.Helper()
	var all string
	for r, p := range res {
		if p.code != 0 {
			t.Fatalf("rank %d: exit %d\nstdout:\n%s\nstderr:\n%s", r, p.code, p.stdout, p.stderr)
		}
		if r != 0 && p.stdout != "" {
			t.Errorf("rank %d printed (only rank 0 prints):\n%s", r, p.stdout)
		}
		all += p.stdout
	}
	checkOneJob(t, len(res), all)
}

// checkFailsEverywhere: every rank exits 1, printing nothing on stdout
// and an error containing each of want on stderr.
func checkFailsEverywhere(t *testing.T, res []procResult, want ...string) {
	t.Helper()
	for r, p := range res {
		if p.code != 1 || p.stdout != "" {
			t.Errorf("rank %d: exit %d (want 1), stdout:\n%s\nstderr:\n%s", r, p.code, p.stdout, p.stderr)
		}
		for _, w := range want {
			if !strings.Contains(p.stderr, w) {
				t.Errorf("rank %d: stderr %q does not name %s", r, p.stderr, w)
			}
		}
	}
}

// emptyDir fails if the rendezvous directory kept a file: rank 0 removes
// its rendezvous file once every rank is in.
func emptyDir(t *testing.T, dir string) {
	t.Helper()
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("rendezvous directory keeps %v", ents)
	}
}

// torchPython is a python3 that imports torch ("" if none): the one in
// PATH, else Debian's (python3-torch installs for /usr/bin/python3).
func torchPython() string {
	for _, p := range []string{"python3", "/usr/bin/python3"} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := exec.CommandContext(ctx, p, "-c", "import torch").Run()
		cancel()
		if err == nil {
			return p
		}
	}
	return ""
}

// torchrunPy runs torch.distributed.run (torchrun) with the command line
// it is given. It first mends Std.from_str of torch 1.13 (Debian's) on
// Python 3.11, where "0" (the default --redirects and --tee) parses to
// None (an enum's zero flag is no longer iterated) and torchrun fails
// before it starts a worker; later torch is unaffected.
const torchrunPy = `import runpy, sys
import torch.distributed.elastic.multiprocessing.api as api
_from_str = api.Std.from_str
api.Std.from_str = lambda vm: _from_str(vm) or api.Std.NONE
sys.argv = ["torchrun"] + sys.argv[1:]
runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)
`

func TestLaunch18(t *testing.T) {
	bin := buildIbex(t)

	t.Run("mpirun", func(t *testing.T) {
		mpirun, err := exec.LookPath("mpirun")
		if err != nil {
			t.Skip("mpirun not found (Debian: openmpi-bin)")
		}
		for _, np := range []int{2, 3} {
			t.Run(strconv.Itoa(np), func(t *testing.T) {
				dir := t.TempDir()
				args := []string{"-np", strconv.Itoa(np), "--oversubscribe"}
				if os.Geteuid() == 0 {
					args = append(args, "--allow-run-as-root")
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, mpirun, append(append(args, bin), launchArgs...)...)
				cmd.Env = launchEnv("IBEX_RENDEZVOUS_DIR="+dir, "OMPI_MCA_btl=self,tcp")
				p := runProc(t, cmd)
				if p.code != 0 {
					t.Fatalf("mpirun -np %d: exit %d\nstdout:\n%s\nstderr:\n%s", np, p.code, p.stdout, p.stderr)
				}
				checkOneJob(t, np, p.stdout)
				emptyDir(t, dir)
			})
		}
	})

	t.Run("torchrun", func(t *testing.T) {
		py := torchPython()
		if py == "" {
			t.Skip("python3 -c 'import torch' fails (Debian: python3-torch)")
		}
		script := filepath.Join(t.TempDir(), "torchrun.py")
		if err := os.WriteFile(script, []byte(torchrunPy), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		args := []string{script, "--nproc_per_node", "2", "--monitor_interval", "0.1",
			"--master_addr", "127.0.0.1", "--master_port", strconv.Itoa(freePort(t)), "--no_python", bin}
		cmd := exec.CommandContext(ctx, py, append(args, launchArgs...)...)
		cmd.Env = launchEnv()
		p := runProc(t, cmd)
		if p.code != 0 {
			t.Fatalf("torchrun: exit %d\nstdout:\n%s\nstderr:\n%s", p.code, p.stdout, p.stderr)
		}
		checkOneJob(t, 2, p.stdout)
	})

	// torchrun's RANK and WORLD_SIZE without MASTER_ADDR: every rank
	// fails naming it (it used to start 2 local ranks each).
	t.Run("torchrun-partial", func(t *testing.T) {
		res := startRanks(t, 2, func(r int) []string {
			return []string{"RANK=" + strconv.Itoa(r), "WORLD_SIZE=2", "LOCAL_RANK=" + strconv.Itoa(r)}
		}, bin, launchArgs...)
		checkFailsEverywhere(t, res, "MASTER_ADDR")
	})

	slurm := func(dir, job string, n, nodes int, nodelist string) func(r int) []string {
		return func(r int) []string {
			env := []string{"SLURM_PROCID=" + strconv.Itoa(r), "SLURM_NTASKS=" + strconv.Itoa(n), "SLURM_LOCALID=" + strconv.Itoa(r),
				"SLURM_JOB_ID=" + job, "SLURM_STEP_ID=0", "SLURM_NNODES=" + strconv.Itoa(nodes), "SLURM_JOB_NUM_NODES=" + strconv.Itoa(nodes),
				"SLURM_STEP_NUM_TASKS=" + strconv.Itoa(n), "IBEX_RENDEZVOUS_DIR=" + dir}
			if nodelist != "" {
				env = append(env, "SLURM_NODELIST="+nodelist, "SLURM_JOB_NODELIST="+nodelist)
			}
			return env
		}
	}
	job := strconv.Itoa(os.Getpid())

	// srun on one node: the file rendezvous, keyed by job and step.
	t.Run("slurm-one-node", func(t *testing.T) {
		host, _ := os.Hostname()
		dir := t.TempDir()
		checkRanks(t, startRanks(t, 3, slurm(dir, job, 3, 1, host), bin, launchArgs...))
		emptyDir(t, dir)
	})

	// srun on two nodes: rank 0 is on the first node of SLURM_NODELIST
	// (here localhost, in compressed form; the port given, as the
	// derived one might be in use on this machine).
	t.Run("slurm-nodelist", func(t *testing.T) {
		env := slurm(t.TempDir(), job, 2, 2, "localhost,ibexnode[02-03]")
		port := strconv.Itoa(freePort(t))
		checkRanks(t, startRanks(t, 2, func(r int) []string { return append(env(r), "IBEX_RENDEZVOUS_PORT="+port) }, bin, launchArgs...))
	})

	// srun on two nodes with no node list, Open MPI on two hosts (its
	// local size below its size): no way to find rank 0; every rank says
	// to set IBEX_RENDEZVOUS or --rendezvous.
	t.Run("slurm-no-nodelist", func(t *testing.T) {
		checkFailsEverywhere(t, startRanks(t, 2, slurm(t.TempDir(), job, 2, 2, ""), bin, launchArgs...), "IBEX_RENDEZVOUS=host:port", "--rendezvous")
	})
	t.Run("openmpi-two-hosts", func(t *testing.T) {
		res := startRanks(t, 2, func(r int) []string {
			return []string{"OMPI_COMM_WORLD_RANK=" + strconv.Itoa(r), "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=0",
				"OMPI_COMM_WORLD_LOCAL_SIZE=1", "OMPI_MCA_ess_base_jobid=" + job, "OMPI_MCA_orte_num_nodes=2"}
		}, bin, launchArgs...)
		checkFailsEverywhere(t, res, "IBEX_RENDEZVOUS=host:port", "--rendezvous")
	})

	// --np under a launcher would start a job per rank: an error.
	t.Run("np-under-launcher", func(t *testing.T) {
		res := startRanks(t, 2, func(r int) []string {
			return []string{"OMPI_COMM_WORLD_RANK=" + strconv.Itoa(r), "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_SIZE=2",
				"OMPI_MCA_ess_base_jobid=" + job}
		}, bin, append(launchArgs, "--np", "2")...)
		checkFailsEverywhere(t, res, "--np 2 under openmpi, which started 2 ranks")
	})
}

// TestColl18NoCheck: with -c 0 the #wrong columns say N/A, as nccl-tests
// prints them, and the header says validation: 0.
func TestColl18NoCheck(t *testing.T) {
	out, errOut, code := runMain(t, "coll", "all_reduce", "-b", "8", "-e", "16", "-n", "1", "-w", "0", "-c", "0", "--np", "2")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	rows := collRows(t, out)
	if len(rows) != 2 || !strings.Contains(out, "validation: 0") {
		t.Fatalf("want 2 rows and validation: 0:\n%s", out)
	}
	for _, f := range rows {
		if f[8] != "N/A" || f[12] != "N/A" {
			t.Errorf("row %v: #wrong %s and %s, want N/A", f, f[8], f[12])
		}
	}
}
