package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestRankMetricsAddr(t *testing.T) {
	for _, tc := range []struct {
		addr string
		rank int
		want string
		err  string
	}{
		{"", 3, "", ""},
		{"127.0.0.1:9101", 0, "127.0.0.1:9101", ""},
		{"127.0.0.1:9101", 3, "127.0.0.1:9104", ""},
		{":9101", 1, ":9102", ""},
		{"[::1]:9101", 2, "[::1]:9103", ""},
		{"127.0.0.1:0", 5, "127.0.0.1:0", ""},
		{"127.0.0.1:65535", 1, "", "rank 1 would serve on port 65536"},
		{"9101", 0, "", `--metrics "9101": want host:port`},
		{"127.0.0.1:x", 0, "", `port "x" is not a number`},
	} {
		got, err := rankMetricsAddr(tc.addr, tc.rank)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("rankMetricsAddr(%q, %d): %q %v, want an error containing %q", tc.addr, tc.rank, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("rankMetricsAddr(%q, %d) = %q %v, want %q", tc.addr, tc.rank, got, err, tc.want)
		}
	}
}

// runEnv runs ibex with env entries added and returns its stderr and exit
// status.
func runEnv(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := ibexCmd(ctx, env, args...)
	var errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &errOut
	err := cmd.Run()
	if err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return errOut.String(), cmd.ProcessState.ExitCode()
}

// TestMetricsEnv: IBEX_METRICS makes a command serve (a bad address is
// its error, naming the variable), except under a command with its own
// --metrics flag (ibex daemon status: the daemon's flag takes it).
func TestMetricsEnv(t *testing.T) {
	stderr, code := runEnv(t, []string{"IBEX_METRICS=bad"}, "devices")
	if code != 1 || !strings.Contains(stderr, `ibex: IBEX_METRICS=bad: metrics: listen address "bad": want host:port`) {
		t.Errorf("ibex devices with IBEX_METRICS=bad: exit %d, stderr %q", code, stderr)
	}
	if stderr, code := runEnv(t, []string{"IBEX_METRICS=127.0.0.1:0"}, "devices"); code != 0 {
		t.Errorf("ibex devices with IBEX_METRICS=127.0.0.1:0: exit %d, stderr %q", code, stderr)
	}
	sock := filepath.Join(t.TempDir(), "none.sock")
	stderr, code = runEnv(t, []string{"IBEX_METRICS=bad"}, "daemon", "status", "--socket", sock)
	if code != 1 || strings.Contains(stderr, "IBEX_METRICS") || !strings.Contains(stderr, "no daemon answers") {
		t.Errorf("ibex daemon status with IBEX_METRICS=bad: exit %d, stderr %q; want the status's own error", code, stderr)
	}
}

// TestPerfMetrics: an ibex perf server with --metrics serves its device's
// counters while it waits for a client; an address it cannot listen on
// fails it at once, naming the flag.
func TestPerfMetrics(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	srv := startServer(t, nil, "write_bw", "-d", "shm0", "-p", strconv.Itoa(freePort(t)), "--metrics", addr)
	url := "http://" + addr + "/metrics"
	var body string
	deadline := time.Now().Add(20 * time.Second)
	for {
		if strings.Contains(srv.out.String(), "Waiting for client") {
			if resp, err := http.Get(url); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				body = string(b)
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no metrics on %s in 20 s; the server said:\n%s", url, srv.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(srv.out.String(), "ibex perf: metrics on "+url+"\n") {
		t.Errorf("the server does not say where it serves metrics:\n%s", srv.out.String())
	}
	for _, want := range []string{"\nibex_up 1\n", `node_infiniband_port_packets_received_total{device="shm0",port="1"} `} {
		if !strings.Contains(body, want) {
			t.Errorf("%s has no %q:\n%s", url, want, body)
		}
	}

	stderr, code := runEnv(t, nil, "perf", "write_bw", "-d", "shm0", "-p", strconv.Itoa(freePort(t)), "--metrics", addr)
	if code != 1 || !strings.Contains(stderr, "perf: --metrics: metrics: listen on "+addr) {
		t.Errorf("a second server on the same --metrics: exit %d, stderr %q", code, stderr)
	}
}

// TestCollMetrics: under ibex coll --np each rank serves its own counters,
// on the port plus its rank; from IBEX_METRICS too.
func TestCollMetrics(t *testing.T) {
	port := freePortPair(t)
	args := []string{"coll", "all_reduce", "-b", "8", "-e", "8", "-n", "1", "-w", "0", "--np", "2", "--timeout", "60s"}
	for _, tc := range []struct {
		env, flag []string
		want      []string
	}{
		{flag: []string{"--metrics", fmt.Sprintf("127.0.0.1:%d", port)}, want: []string{
			fmt.Sprintf(`ibex coll rank 0: metrics on http://127\.0\.0\.1:%d/metrics`, port),
			fmt.Sprintf(`ibex coll rank 1: metrics on http://127\.0\.0\.1:%d/metrics`, port+1),
		}},
		{env: []string{"IBEX_METRICS=127.0.0.1:0"}, want: []string{
			`ibex coll rank 0: metrics on http://127\.0\.0\.1:\d+/metrics`,
			`ibex coll rank 1: metrics on http://127\.0\.0\.1:\d+/metrics`,
		}},
	} {
		stderr, code := runEnv(t, tc.env, append(args, tc.flag...)...)
		if code != 0 {
			t.Fatalf("%v %v: exit %d\n%s", tc.env, tc.flag, code, stderr)
		}
		for _, w := range tc.want {
			if n := len(regexp.MustCompile(w).FindAllString(stderr, -1)); n != 1 {
				t.Errorf("%v %v: %d lines %s, want one:\n%s", tc.env, tc.flag, n, w, stderr)
			}
		}
	}
}

// freePortPair finds a TCP port that, with the next one, nobody listens on.
func freePortPair(t *testing.T) int {
	t.Helper()
	for range 20 {
		p := freePort(t)
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+1)); err == nil {
			l.Close()
			return p
		}
	}
	t.Fatal("no two free ports in a row")
	return 0
}
