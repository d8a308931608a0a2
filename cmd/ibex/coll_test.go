package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCollNp runs `ibex coll` with two rank processes on this host (shm0
// between them) for all_reduce, all_gather and broadcast, and checks
// nccl-tests' table: the column header, one row per size with 13 columns,
// no wrong elements, and the footer.
func TestCollNp(t *testing.T) {
	for _, c := range []struct {
		coll  string
		redop string
	}{{"all_reduce", "sum"}, {"all_gather", "none"}, {"broadcast", "none"}, {"sendrecv", "none"}} {
		t.Run(c.coll, func(t *testing.T) {
			out, errOut, code := runMain(t, "coll", c.coll, "-b", "8", "-e", "64K", "-f", "8", "-n", "3", "-w", "1", "-c", "1", "--np", "2", "--timeout", "60s")
			if code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			if !strings.Contains(out, "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong") {
				t.Fatalf("no nccl-tests column header:\n%s", out)
			}
			var sizes []int
			for _, line := range strings.Split(out, "\n") {
				f := strings.Fields(line)
				if len(f) == 0 || strings.HasPrefix(f[0], "#") {
					continue
				}
				if len(f) != 13 {
					t.Fatalf("row %q: %d columns, want 13", line, len(f))
				}
				size, _ := strconv.Atoi(f[0])
				sizes = append(sizes, size)
				if f[2] != "float" || f[3] != c.redop || f[8] != "0" || f[12] != "0" {
					t.Fatalf("row %q: want type float, redop %s and no wrong elements", line, c.redop)
				}
				for _, i := range []int{5, 9} {
					if v, err := strconv.ParseFloat(f[i], 64); err != nil || v <= 0 {
						t.Fatalf("row %q: time column %d is %q", line, i, f[i])
					}
				}
			}
			if want := []int{8, 64, 512, 4096, 32768}; len(sizes) != len(want) {
				t.Fatalf("sizes %v, want %v", sizes, want)
			}
			if !strings.Contains(out, "# Out of bounds values : 0 OK") || !strings.Contains(out, "# Avg bus bandwidth    : ") {
				t.Fatalf("no footer:\n%s", out)
			}
		})
	}
}

func TestCollBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"coll", "all_sum"},
		{"coll", "all_reduce", "-b", "1K", "-e", "8"},
		{"coll", "all_reduce", "-d", "complex"},
		{"coll", "all_reduce", "-o", "xor"},
		{"coll", "all_reduce", "-f", "1"},
		{"coll", "all_reduce", "--algo", "butterfly"},
		{"coll", "all_reduce", "--np", "-2"},
	} {
		_, errOut, code := runMain(t, args...)
		if code == 0 || !strings.Contains(errOut, "coll") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
}

// TestCollCalibrate: `ibex coll calibrate --np 2 --save F` prints shm0's
// α and β and writes a model that IBEX_COLL_MODEL then loads (the run
// with it succeeds).
func TestCollCalibrate(t *testing.T) {
	file := filepath.Join(t.TempDir(), "model.json")
	out, errOut, code := runMain(t, "coll", "calibrate", "--np", "2", "--save", file, "--timeout", "60s")
	if code != 0 || !strings.Contains(out, "shm0   alpha") || !strings.Contains(out, "saved to "+file) {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	b, err := os.ReadFile(file)
	if err != nil || !strings.Contains(string(b), `"shm0"`) {
		t.Fatalf("saved model: %s, %v", b, err)
	}
	t.Setenv("IBEX_COLL_MODEL", file)
	out, errOut, code = runMain(t, "coll", "all_reduce", "-b", "8", "-e", "1K", "-f", "32", "-n", "2", "-w", "1", "--np", "2", "--timeout", "60s")
	if code != 0 || !strings.Contains(out, "# Out of bounds values : 0 OK") {
		t.Fatalf("with the model: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	t.Setenv("IBEX_COLL_MODEL", file+".missing")
	if _, errOut, code := runMain(t, "coll", "all_reduce", "-b", "8", "-e", "8", "--np", "2", "--timeout", "20s"); code == 0 || !strings.Contains(errOut, "cost model") {
		t.Fatalf("a missing model file: exit %d, stderr %q", code, errOut)
	}
}

// TestCollLaunchers: two ranks started as a launcher would start them,
// Open MPI's variables plus --rendezvous, and torchrun's (rank 0's
// MASTER_PORT+1 is the rendezvous); rank 0 prints the table.
func TestCollLaunchers(t *testing.T) {
	port := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	}
	for _, tc := range []struct {
		name  string
		env   func(rank int, p string) []string
		extra func(p string) []string
	}{
		{"openmpi", func(r int, p string) []string {
			return []string{"OMPI_COMM_WORLD_RANK=" + strconv.Itoa(r), "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=" + strconv.Itoa(r)}
		}, func(p string) []string { return []string{"--rendezvous", "127.0.0.1:" + p} }},
		{"torchrun", func(r int, p string) []string {
			n, _ := strconv.Atoi(p)
			return []string{"RANK=" + strconv.Itoa(r), "WORLD_SIZE=2", "LOCAL_RANK=" + strconv.Itoa(r), "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + strconv.Itoa(n-1)}
		}, func(string) []string { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := port()
			var outs [2]bytes.Buffer
			var errs [2]bytes.Buffer
			cmds := make([]*exec.Cmd, 2)
			for r := range 2 {
				args := append([]string{"coll", "all_reduce", "-b", "8", "-e", "4K", "-f", "8", "-n", "2", "-w", "1", "--timeout", "60s"}, tc.extra(p)...)
				c := childCommand(context.Background(), tc.env(r, p), args...)
				c.Stdout, c.Stderr = &outs[r], &errs[r]
				if err := c.Start(); err != nil {
					t.Fatal(err)
				}
				cmds[r] = c
			}
			for r, c := range cmds {
				if err := c.Wait(); err != nil {
					t.Fatalf("rank %d: %v\nstdout:\n%s\nstderr:\n%s", r, err, outs[r].String(), errs[r].String())
				}
			}
			if !strings.Contains(outs[0].String(), "# Out of bounds values : 0 OK") || outs[1].Len() != 0 {
				t.Fatalf("rank 0 printed:\n%s\nrank 1 printed:\n%s", outs[0].String(), outs[1].String())
			}
		})
	}
}
