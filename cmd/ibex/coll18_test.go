package main

import (
	"strconv"
	"strings"
	"testing"
)

// collRows are the table rows of `ibex coll` output (lines not starting
// with #), each split into its 13 fields.
func collRows(t *testing.T, out string) [][]string {
	t.Helper()
	var rows [][]string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) != 13 {
			t.Fatalf("row %q: %d columns, want 13", line, len(f))
		}
		rows = append(rows, f)
	}
	return rows
}

// TestColl18NcclTestsFlags: a command line with every nccl-tests flag
// ibex used to reject (-t -g -T -a -m -z -N -p -G -C -R) runs: -N 2
// prints the sweep twice, -m 2 and -C 1 show in the header, and each flag
// that changes nothing gets one note on stderr.
func TestColl18NcclTestsFlags(t *testing.T) {
	out, errOut, code := runMain(t, "coll", "all_reduce", "-b", "8", "-e", "64", "-f", "2", "-n", "2", "-w", "1",
		"-t", "1", "-g", "1", "-T", "60", "-a", "2", "-m", "2", "-z", "1", "-N", "2", "-p", "1", "-G", "1", "-C", "1", "-R", "1", "--np", "2")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	var sizes []string
	for _, f := range collRows(t, out) {
		sizes = append(sizes, f[0])
		if f[8] != "0" || f[12] != "0" {
			t.Errorf("row %v: wrong elements", f)
		}
	}
	if got, want := strings.Join(sizes, " "), "8 16 32 64 8 16 32 64"; got != want {
		t.Errorf("-N 2: sizes %s, want %s", got, want)
	}
	if !strings.Contains(out, "agg iters: 2 ") || !strings.Contains(out, "  cputime   algbw") {
		t.Errorf("header without agg iters: 2 or cputime:\n%s", out)
	}
	for _, flag := range []string{"-z 1:", "-p 1:", "-G 1:", "-R 1:"} {
		if n := strings.Count(errOut, "note: "+flag); n != 1 {
			t.Errorf("%d notes for %s, want 1; stderr:\n%s", n, flag, errOut)
		}
	}
}

// TestColl18AllTypesOps: -d all -o all runs every type with every op, in
// nccl-tests' order, on 3 ranks (products that wrap int8 and round
// bfloat16, integer averages that truncate: all checked right); -r -1
// runs broadcast from every root; a collective without an op runs once
// per type under -o all.
func TestColl18AllTypesOps(t *testing.T) {
	types := []string{"int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16"}
	ops := []string{"sum", "prod", "max", "min", "avg"}
	for _, c := range []struct {
		name string
		args []string
		want func() []string // "type redop root" per row
	}{
		{"all_reduce", []string{"all_reduce", "-d", "all", "-o", "all"}, func() (w []string) {
			for _, ty := range types {
				for _, op := range ops {
					w = append(w, ty+" "+op+" -1")
				}
			}
			return
		}},
		{"broadcast", []string{"broadcast", "-d", "all", "-r", "-1"}, func() (w []string) {
			for _, ty := range types {
				for r := range 3 {
					w = append(w, ty+" none "+strconv.Itoa(r))
				}
			}
			return
		}},
		{"all_gather", []string{"all_gather", "-d", "all", "-o", "all"}, func() (w []string) {
			for _, ty := range types {
				w = append(w, ty+" none -1")
			}
			return
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append(append([]string{"coll"}, c.args...), "-b", "24", "-e", "24", "-n", "1", "-w", "0", "--np", "3")
			out, errOut, code := runMain(t, args...)
			if code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			var got []string
			for _, f := range collRows(t, out) {
				got = append(got, f[2]+" "+f[3]+" "+f[4])
				if f[8] != "0" || f[12] != "0" {
					t.Errorf("row %v: wrong elements", f)
				}
			}
			if want := c.want(); strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("rows (type redop root):\n%v\nwant\n%v", got, want)
			}
		})
	}
}

// TestColl18DefaultFactor: -f defaults to 2, as --help says, also for the
// built-in run without a collective (it used to step by 4).
func TestColl18DefaultFactor(t *testing.T) {
	for _, args := range [][]string{
		{"coll", "-b", "8", "-e", "64", "-n", "1", "-w", "0"},
		{"coll", "all_reduce", "-b", "8", "-e", "64", "-n", "1", "-w", "0", "--np", "2"},
	} {
		out, errOut, code := runMain(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, out, errOut)
		}
		var sizes []string
		for _, f := range collRows(t, out) {
			sizes = append(sizes, f[0])
		}
		if got := strings.Join(sizes, " "); got != "8 16 32 64" || !strings.Contains(out, "step: 2(factor)") {
			t.Errorf("%v: sizes %s, want 8 16 32 64 and step: 2(factor) in\n%s", args, got, out)
		}
	}
}

// TestColl18BadFlags: what ibex cannot do fails at once, before any rank
// starts, with one message naming the flag and the reason: no "rank N:
// exit status" line, no copy per rank.
func TestColl18BadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"all_reduce", "-g", "2"}, "ibex: coll: -g 2: only 1 GPU per thread: ibex runs one rank per process, with no GPU; start more ranks with --np N"},
		{[]string{"all_reduce", "-t", "4"}, "ibex: coll: -t 4: only 1 thread per process: ibex runs one rank per process"},
		{[]string{"all_reduce", "--np", "0"}, "ibex: coll: --np 0: want at least 1 rank"},
		{[]string{"broadcast", "-r", "5", "--np", "2"}, "ibex: coll: -r 5: the root must be one of the 2 ranks (0..1), or -1 for each in turn"},
		{[]string{"reduce", "-r", "-2"}, "ibex: coll: -r -2: the root must be one of the 2 ranks (0..1)"},
		{[]string{"all_reduce", "--transport", "nope0", "--np", "2"}, "ibex: coll: --transport nope0: no such device (devices: loop0 shm0 udp0"},
		{[]string{"all_reduce", "-a", "4"}, "ibex: coll: -a 4: want 0 (rank 0's time), 1 (the mean), 2 (the minimum) or 3 (the maximum)"},
		{[]string{"all_reduce", "-z", "4"}, "ibex: coll: -z 4: want 0, 1, 2 or 3"},
		{[]string{"all_reduce", "-m", "0"}, "ibex: coll: -m 0: want at least 1 call per iteration"},
		{[]string{"all_reduce", "-N", "-1"}, "ibex: coll: -N -1: want a number of cycles"},
		{[]string{"all_reduce", "-T", "-3"}, "-3: want 0 (no timeout) or more seconds"},
		{[]string{"all_reduce", "-T", "soon"}, `"soon": want seconds (30) or a duration (90s, 2m)`},
		{[]string{"all_reduce", "-d", "complex"}, "ibex: coll: -d complex: "},
	} {
		args := append([]string{"coll"}, c.args...)
		out, errOut, code := runMain(t, args...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want it to contain %q", args, code, errOut, c.want)
			continue
		}
		if lines := strings.Count(strings.TrimSpace(errOut), "\n") + 1; lines != 1 || out != "" {
			t.Errorf("%v: %d lines on stderr (want 1), stdout %q:\n%s", args, lines, out, errOut)
		}
	}
}

// TestColl18Timeout: -T is seconds, as nccl-tests takes it: -T 0.001 ends
// the setup of two ranks with a deadline error; --timeout 60s (a Go
// duration) still works; -r applies only to rooted collectives, as in
// nccl-tests (all_reduce -r 5 ignores it).
func TestColl18Timeout(t *testing.T) {
	_, errOut, code := runMain(t, "coll", "all_reduce", "-b", "8", "-e", "8", "-n", "1", "-T", "0.001", "--np", "2")
	if code == 0 || !strings.Contains(errOut, "deadline exceeded") {
		t.Errorf("-T 0.001: exit %d, stderr %q", code, errOut)
	}
	out, errOut, code := runMain(t, "coll", "all_reduce", "-b", "8", "-e", "8", "-n", "1", "-w", "0", "-r", "5", "--timeout", "60s", "--np", "2")
	if code != 0 || len(collRows(t, out)) != 1 {
		t.Errorf("--timeout 60s -r 5: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}
