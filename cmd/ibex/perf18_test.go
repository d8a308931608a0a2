package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Issue 18, ibex perf with perftest's habits. The tests run the ibex
// binary (this test binary running main) as a user would.

// TestPerf18FlagRanges: -s, -n and -p take perftest's forms and ranges,
// and a bad value fails at once with perftest's message on stderr and a
// non-zero status, before anything connects (the port named is closed,
// so a parse that passed would say "refused" instead).
func TestPerf18FlagRanges(t *testing.T) {
	port := strconv.Itoa(freePort(t))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-s", "0"}, "Message Size should be between 1 and 2147483647"},
		{[]string{"-s", "3G"}, "Message Size should be between 1 and 2147483647"},
		{[]string{"-s", "64X"}, "Message Size argument 64X should be"},
		{[]string{"-n", "0"}, "Iteration num should be between 5 and 100000000"},
		{[]string{"-n", "4"}, "Iteration num should be between 5 and 100000000"},
		{[]string{"-n", "100000001"}, "Iteration num should be between 5 and 100000000"},
		{[]string{"-p", "0"}, "Port should be between 1 and 65535"},
		{[]string{"-p", "65536"}, "Port should be between 1 and 65535"},
		{[]string{"-Q", "0"}, "CQ moderation should be between 1 and 1024"},
		{[]string{"-I", "2000"}, "Max inline should be between 0 and 1024"},
		{[]string{"-m", "1000"}, "MTU 1000: want 256, 512, 1024, 2048 or 4096"},
	} {
		args := append([]string{"perf", "write_bw", "-d", "shm0"}, c.args...)
		if !contains(c.args, "-p") {
			args = append(args, "-p", port)
		}
		start := time.Now()
		stdout, stderr, code := runMain(t, append(args, "127.0.0.1")...)
		if code == 0 || !strings.Contains(stderr, c.want) || stdout != "" || strings.Contains(stderr, "refused") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want a non-zero exit and %q on stderr", c.args, code, stdout, stderr, c.want)
		}
		t.Logf("%v: %v: %s", c.args, time.Since(start).Round(time.Millisecond), strings.TrimSpace(stderr))
	}
	// The suffixes parse: the client gets as far as connecting. The four
	// clients run at once: each retries the refused connection for 3 s,
	// as a client started before its server does (12 s one after another).
	suffixes := []string{"64K", "1M", "1G", "0x1000"}
	cmds := make([]*exec.Cmd, len(suffixes))
	stderrs := make([]bytes.Buffer, len(suffixes))
	for i, s := range suffixes {
		cmds[i] = childCommand(context.Background(), nil, "perf", "write_bw", "-d", "shm0", "-s", s, "-p", port, "127.0.0.1")
		cmds[i].Stderr = &stderrs[i]
		if err := cmds[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range suffixes {
		err := cmds[i].Wait()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || !strings.Contains(stderrs[i].String(), "refused") {
			t.Errorf("-s %s: %v, stderr %q; want it parsed and the connection refused", s, err, stderrs[i].String())
		}
	}
}

// TestPerf18SizeSuffixRuns: -s 64K on both ends runs 65536-byte messages.
func TestPerf18SizeSuffixRuns(t *testing.T) {
	port := strconv.Itoa(freePort(t))
	srv := startServer(t, nil, "write_bw", "-d", "shm0", "-p", port, "-n", "50", "-s", "64K")
	out, err := runClient(t, nil, "write_bw", "-d", "shm0", "-p", port, "-n", "50", "-s", "64K", "127.0.0.1")
	if err != nil {
		t.Fatalf("client: %v\n%s\nserver:\n%s", err, out, srv.out.String())
	}
	for _, row := range parseReport(t, out, false) {
		checkRow(t, row, false, 65536, 50)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestPerf18BadDevice: -d mlx5_0 fails at once on both sides with the
// list of devices; the server neither listens nor waits.
func TestPerf18BadDevice(t *testing.T) {
	port := strconv.Itoa(freePort(t))
	for _, args := range [][]string{
		{"perf", "write_bw", "-d", "mlx5_0", "-p", port},              // server
		{"perf", "write_bw", "-d", "mlx5_0", "-p", port, "127.0.0.1"}, // client
	} {
		start := time.Now()
		stdout, stderr, code := runMainWithin(t, 20*time.Second, nil, args...)
		if code == 0 || !strings.Contains(stderr, `"mlx5_0"`) || !strings.Contains(stderr, "shm0") || !strings.Contains(stderr, "udp0") {
			t.Errorf("%v: exit %d, stderr %q: want a non-zero exit naming mlx5_0 and the devices", args, code, stderr)
		}
		if strings.Contains(stdout, "Waiting") || strings.Contains(stderr, "refused") {
			t.Errorf("%v: got as far as the network: stdout %q, stderr %q", args, stdout, stderr)
		}
		t.Logf("%v: %v", args, time.Since(start).Round(time.Millisecond))
	}
}

// TestPerf18DeviceMismatch: udp0 against shm0 is reported as different
// devices on both ends.
func TestPerf18DeviceMismatch(t *testing.T) {
	port := strconv.Itoa(freePort(t))
	sub := 50 + os.Getpid()%50
	srv := startServer(t, []string{fmt.Sprintf("IBEX_UDP_ADDR=127.%d.18.1", sub)}, "write_bw", "-d", "udp0", "-p", port)
	out, err := runClient(t, nil, "write_bw", "-d", "shm0", "-p", port, "127.0.0.1")
	if err == nil || !strings.Contains(out, "the two ends use different devices (shm0 / udp0)") || strings.Contains(out, "GID") {
		t.Fatalf("client: err %v, output %q", err, out)
	}
	if err := waitExit(t, srv); err == nil {
		t.Errorf("server exited 0 after a mismatched client")
	}
	if s := srv.out.String(); !strings.Contains(s, "the two ends use different devices (udp0 / shm0)") {
		t.Errorf("server output %q", s)
	}
}

// TestPerf18ServeOnce: the server prints perftest's waiting banner, serves
// one client and exits 0, so `server & client; wait` works; with
// --serve-forever it serves a second.
func TestPerf18ServeOnce(t *testing.T) {
	port := strconv.Itoa(freePort(t))
	srv := startServer(t, nil, "write_bw", "-d", "shm0", "-p", port, "-n", "50")
	out, err := runClient(t, nil, "write_bw", "-d", "shm0", "-p", port, "-n", "50", "localhost")
	if err != nil {
		t.Fatalf("client: %v\n%s\nserver:\n%s", err, out, srv.out.String())
	}
	if err := waitExit(t, srv); err != nil {
		t.Fatalf("server: %v\n%s", err, srv.out.String())
	}
	s := srv.out.String()
	banner := "************************************\n* Waiting for client to connect... *\n************************************\n"
	if !strings.HasPrefix(s, "\n"+banner) || strings.Count(s, "Waiting") != 1 {
		t.Errorf("server output does not start with perftest's banner (once):\n%s", s)
	}
	parseReport(t, s, false)

	port = strconv.Itoa(freePort(t))
	srv = startServer(t, nil, "write_bw", "-d", "shm0", "-p", port, "-n", "50", "--serve-forever")
	for i := range 2 {
		if out, err := runClient(t, nil, "write_bw", "-d", "shm0", "-p", port, "-n", "50", "localhost"); err != nil {
			t.Fatalf("client %d of --serve-forever: %v\n%s", i, err, out)
		}
	}
	if srv.cmd.ProcessState != nil {
		t.Errorf("--serve-forever server exited")
	}
	help, _, _ := runMain(t, "perf", "--help")
	if !strings.Contains(help, "--serve-forever") {
		t.Errorf("--help does not name --serve-forever:\n%s", help)
	}
}

// TestPerf18DefaultDevice: without -d both ends pick a device that
// reaches another process (shm0), so a server and a client on one host
// just work.
func TestPerf18DefaultDevice(t *testing.T) {
	port := strconv.Itoa(freePort(t))
	srv := startServer(t, nil, "write_bw", "-p", port, "-n", "50")
	out, err := runClient(t, nil, "write_bw", "-p", port, "-n", "50", "localhost")
	if err != nil {
		t.Fatalf("client: %v\n%s\nserver:\n%s", err, out, srv.out.String())
	}
	if !strings.Contains(out, "Device         : shm0") {
		t.Errorf("default device is not shm0:\n%s", out)
	}
	parseReport(t, out, false)
}

// TestPerf18UDPAddr: --help names IBEX_UDP_ADDR and the rule for two
// processes on one host; a client whose udp0 cannot bind (the server
// holds the address) says so at once, before it connects.
func TestPerf18UDPAddr(t *testing.T) {
	help, _, _ := runMain(t, "perf", "--help")
	for _, want := range []string{"IBEX_UDP_ADDR", "127.0.0.2", "two processes on one host"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	port := strconv.Itoa(freePort(t))
	sub := 50 + os.Getpid()%50
	addr := fmt.Sprintf("IBEX_UDP_ADDR=127.%d.18.2", sub)
	srv := startServer(t, []string{addr}, "write_bw", "-d", "udp0", "-p", port)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(srv.out.String(), "Waiting") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := ibexCmd(ctx, []string{addr}, "perf", "write_bw", "-d", "udp0", "-p", port, "127.0.0.1")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if err == nil || !strings.Contains(stderr.String(), "bind") || !strings.Contains(stderr.String(), "udp0") {
		t.Fatalf("client on the server's address: err %v, stderr %q", err, stderr.String())
	}
	// A second server on the same address fails at once too, before it
	// says it waits.
	stdout, stderr2, code := runMainWithin(t, 20*time.Second, []string{addr}, "perf", "write_bw", "-d", "udp0", "-p", strconv.Itoa(freePort(t)))
	if code == 0 || !strings.Contains(stderr2, "bind") || strings.Contains(stdout, "Waiting") {
		t.Errorf("second server on the address: exit %d, stdout %q, stderr %q", code, stdout, stderr2)
	}
	// The server never saw a client: it is still waiting.
	if s := srv.out.String(); strings.Contains(s, "perf: client") || strings.Contains(s, "remote address") {
		t.Errorf("the server heard from the client:\n%s", srv.out.String())
	}
}

// TestPerf18Flags: perftest's flags that mean something here work, those
// that do not are accepted with a note or refused with the reason.
func TestPerf18Flags(t *testing.T) {
	stdout, _, code := runMain(t, "perf", "-V")
	if code != 0 || !strings.HasPrefix(stdout, "Version: ") {
		t.Errorf("-V: exit %d, stdout %q", code, stdout)
	}
	port := strconv.Itoa(freePort(t))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-c", "UD"}, "-c UD: not supported yet"},
		{[]string{"-c", "UC"}, "-c UC: not supported yet"},
		{[]string{"-x", "3"}, "only valid -x"},
		{[]string{"-i", "2"}, "only valid -i"},
		{[]string{"-l", "3", "-n", "400"}, "Number of iterations must be a multiple of post list size"},
		{[]string{"-l", "4", "-Q", "3", "-n", "400"}, "Post list size must be a multiple of CQ moderation"},
		{[]string{"-l", "0"}, "Send Post List size should be between 1 and 8192"},
		{[]string{"-R"}, "-R: not supported: ibex has no rdma_cm"},
		{[]string{"-H"}, "-H: not supported"},
		{[]string{"-C"}, "-C: not supported"},
		{[]string{"-U"}, "-U: not supported"},
		{[]string{"-w", "10"}, "-w: not supported: rate limiting"},
		{[]string{"-y", "10"}, "-y: not supported: rate limiting"},
		{[]string{"--use_cuda", "0"}, "--use_cuda: not supported"},
		{[]string{"--output", "speed"}, "Please use bandwidth, latency, message_rate"},
	} {
		args := append(append([]string{"perf", "write_bw", "-d", "shm0", "-p", port}, c.args...), "127.0.0.1")
		_, stderr, code := runMain(t, args...)
		if code == 0 || !strings.Contains(stderr, c.want) || strings.Contains(stderr, "refused") {
			t.Errorf("%v: exit %d, stderr %q, want %q", c.args, code, stderr, c.want)
		}
	}
	_, stderr, _ := runMain(t, "perf", "write_lat", "-b", "-d", "shm0", "127.0.0.1")
	if !strings.Contains(stderr, "Bidirectional is only available in BW test") {
		t.Errorf("write_lat -b: %q", stderr)
	}
	// -b send_bw: both ends send and receive; each prints the sum.
	bidi := []string{"send_bw", "-b", "-d", "shm0", "-p", port, "-n", "200", "-s", "4096"}
	bsrv := startServer(t, nil, bidi...)
	if out, err := runClient(t, nil, append(bidi, "127.0.0.1")...); err != nil || !strings.Contains(out, " 4096       200") {
		t.Errorf("send_bw -b client: %v\n%s", err, out)
	}
	if err := waitExit(t, bsrv); err != nil || !strings.Contains(bsrv.out.String(), " 4096       200") {
		t.Errorf("send_bw -b server: %v\n%s", err, bsrv.out.String())
	}

	// The ones that work, on a real run: -I, -Q, -m, -u, -x 0, -i 1,
	// -c RC, -F, --report-both, --out_json(_file), --output.
	dir := t.TempDir()
	jsonFile := filepath.Join(dir, "out.json")
	common := []string{"write_bw", "-d", "shm0", "-p", port, "-n", "60", "-s", "64", "-I", "64", "-Q", "10", "-m", "1024", "-u", "16", "-x", "0", "-i", "1", "-c", "RC"}
	srv := startServer(t, nil, append(common, "-F", "--cpu_util")...)
	out, err := runClient(t, nil, append(common, "--report-both", "--out_json", "--out_json_file", jsonFile, "127.0.0.1")...)
	if err != nil {
		t.Fatalf("client: %v\n%s\nserver:\n%s", err, out, srv.out.String())
	}
	for _, want := range []string{"CQ Moderation   : 10", "Mtu             : 1024[B]", "Max inline data : 64[B]"} {
		if !strings.Contains(out, want) {
			t.Errorf("client report lacks %q:\n%s", want, out)
		}
	}
	for _, row := range parseReport(t, out, false) {
		checkRow(t, row, false, 64, 60)
	}
	b, err := os.ReadFile(jsonFile)
	if err != nil || !strings.Contains(string(b), `"bytes": 64`) {
		t.Errorf("--out_json_file: %v %q", err, b)
	}
	_ = waitExit(t, srv)
	if s := srv.out.String(); !strings.Contains(s, "-F: noted") || !strings.Contains(s, "--cpu_util: noted") {
		t.Errorf("server output lacks the notes for -F and --cpu_util:\n%s", s)
	}

	port = strconv.Itoa(freePort(t))
	startServer(t, nil, "write_bw", "-d", "shm0", "-p", port, "-n", "50")
	out, err = runClient(t, nil, "write_bw", "-d", "shm0", "-p", port, "-n", "50", "--output", "bandwidth", "127.0.0.1")
	if err != nil {
		t.Fatalf("--output bandwidth: %v\n%s", err, out)
	}
	if v, err := strconv.ParseFloat(strings.TrimSpace(out), 64); err != nil || v <= 0 {
		t.Errorf("--output bandwidth printed %q, want one positive number", out)
	}
}

// TestPerf18ServerReport: a passive server prints the client's figures
// in its own unit under its own header (the client alone has
// --report_gbits), and with -a one line, the last size, as perftest 4.5's
// write_bw server does (print_full_bw_report of the client's last report).
func TestPerf18ServerReport(t *testing.T) {
	port := strconv.Itoa(freePort(t))
	srv := startServer(t, nil, "write_bw", "-d", "shm0", "-p", port, "-n", "200")
	out, err := runClient(t, nil, "write_bw", "-d", "shm0", "-p", port, "-n", "200", "--report_gbits", "127.0.0.1")
	if err != nil {
		t.Fatalf("client: %v\n%s", err, out)
	}
	if err := waitExit(t, srv); err != nil {
		t.Fatalf("server: %v\n%s", err, srv.out.String())
	}
	if !strings.Contains(out, "BW average[Gb/sec]") {
		t.Fatalf("client header not in Gb/sec:\n%s", out)
	}
	crow := gbitsRow(t, out)
	srows := parseReport(t, srv.out.String(), false) // checks the MiB/sec header
	if len(srows) != 1 {
		t.Fatalf("server rows %v", srows)
	}
	// The client's Gb/s average in MiB/s, to the printed precision.
	want := crow[3] * 1e9 / 8 / (1 << 20)
	if got := srows[0][3]; math.Abs(got-want) > 0.01*want+0.01 {
		t.Errorf("server's BW average %.2f MiB/s, the client's %.2f Gb/s is %.2f MiB/s", got, crow[3], want)
	}
	checkRow(t, srows[0], false, 65536, 200)

	port = strconv.Itoa(freePort(t))
	srv = startServer(t, nil, "write_bw", "-d", "shm0", "-p", port, "-n", "20", "-a")
	out, err = runClient(t, nil, "write_bw", "-d", "shm0", "-p", port, "-n", "20", "-a", "127.0.0.1")
	if err != nil {
		t.Fatalf("-a client: %v\n%s", err, out)
	}
	if err := waitExit(t, srv); err != nil {
		t.Fatalf("-a server: %v\n%s", err, srv.out.String())
	}
	if n := len(parseReport(t, out, false)); n != 23 {
		t.Errorf("-a client printed %d sizes, want 23", n)
	}
	srows = parseReport(t, srv.out.String(), false)
	if len(srows) != 1 || srows[0][0] != 8388608 {
		t.Errorf("-a server rows %v, want one row of 8388608 bytes", srows)
	}
}

// gbitsRow is the one result row of a Gb/sec report.
func gbitsRow(t *testing.T, out string) []float64 {
	t.Helper()
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "#bytes ") && i+1 < len(lines) {
			var row []float64
			for _, f := range strings.Fields(lines[i+1]) {
				v, err := strconv.ParseFloat(f, 64)
				if err != nil {
					t.Fatalf("row %q: %v", lines[i+1], err)
				}
				row = append(row, v)
			}
			if len(row) == 5 {
				return row
			}
		}
	}
	t.Fatalf("no result row in:\n%s", out)
	return nil
}

// TestPerf18Bidirectional: -b on both ends: both post, each prints the
// sum of both directions, and --report-both adds this end's and the
// peer's lines (one end's local line is the other's remote line).
func TestPerf18Bidirectional(t *testing.T) {
	for _, tr := range transports(t) {
		for _, test := range []string{"write_bw", "read_bw", "atomic_bw"} {
			t.Run(tr.name+"/"+test, func(t *testing.T) {
				port := strconv.Itoa(freePort(t))
				args := []string{test, "-d", tr.device, "-p", port, "-n", "200", "-b", "--report-both"}
				srv := startServer(t, tr.serverEnv, args...)
				out, err := runClient(t, tr.clientEnv, append(args, "127.0.0.1")...)
				if err != nil {
					t.Fatalf("client: %v\n%s\nserver:\n%s", err, out, srv.out.String())
				}
				if err := waitExit(t, srv); err != nil {
					t.Fatalf("server: %v\n%s", err, srv.out.String())
				}
				size := 65536
				if test == "atomic_bw" {
					size = 8
				}
				c, sv := bothRows(t, out), bothRows(t, srv.out.String())
				for _, rows := range [][3][]float64{c, sv} {
					for _, row := range rows {
						checkRow(t, row, false, size, 200)
					}
					// The sum's average is local + remote (to the printed
					// precision).
					if d := rows[0][3] - rows[1][3] - rows[2][3]; d > 0.02 || d < -0.02 {
						t.Errorf("sum %v != local %v + remote %v", rows[0], rows[1], rows[2])
					}
				}
				if c[1][3] != sv[2][3] || c[2][3] != sv[1][3] {
					t.Errorf("client local/remote %v %v, server %v %v", c[1], c[2], sv[1], sv[2])
				}
			})
		}
	}
}

// bothRows are the three result rows of a --report-both report: the sum,
// local, remote.
func bothRows(t *testing.T, out string) [3][]float64 {
	t.Helper()
	var rows [][]float64
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "#bytes ") && i+1 < len(lines) {
			var row []float64
			for _, f := range strings.Fields(lines[i+1]) {
				v, err := strconv.ParseFloat(f, 64)
				if err != nil {
					t.Fatalf("row %q: %v", lines[i+1], err)
				}
				row = append(row, v)
			}
			rows = append(rows, row)
		}
	}
	if len(rows) != 3 || !strings.Contains(out, "Local results") || !strings.Contains(out, "Remote results") {
		t.Fatalf("want the sum, local and remote results in:\n%s", out)
	}
	return [3][]float64{rows[0], rows[1], rows[2]}
}

// TestPerf18PostList: -l posts lists of requests; -Q defaults to the
// list's size, as in perftest.
func TestPerf18PostList(t *testing.T) {
	_, stderr, _ := runMain(t, "perf", "write_lat", "-l", "2", "-d", "shm0", "127.0.0.1")
	if !strings.Contains(stderr, "Post list is supported in BW tests only") {
		t.Errorf("write_lat -l 2: %q", stderr)
	}
	for _, tr := range transports(t) {
		t.Run(tr.name, func(t *testing.T) {
			port := strconv.Itoa(freePort(t))
			args := []string{"write_bw", "-d", tr.device, "-p", port, "-n", "400", "-l", "8"}
			srv := startServer(t, tr.serverEnv, args...)
			out, err := runClient(t, tr.clientEnv, append(args, "127.0.0.1")...)
			if err != nil {
				t.Fatalf("client: %v\n%s\nserver:\n%s", err, out, srv.out.String())
			}
			for _, want := range []string{"Post List       : 8", "CQ Moderation   : 8"} {
				if !strings.Contains(out, want) {
					t.Errorf("report lacks %q:\n%s", want, out)
				}
			}
			for _, row := range parseReport(t, out, false) {
				checkRow(t, row, false, 65536, 400)
			}
		})
	}
}

// waitExit waits for a server to exit after its one client; one that
// keeps running fails the test (and is killed by startServer's cleanup).
func waitExit(t *testing.T, srv *server) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- srv.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		_ = srv.cmd.Process.Kill()
		<-done
		t.Fatalf("the server did not exit after its client:\n%s", srv.out.String())
		return nil
	}
}

// runMainWithin is runMain with a time limit: a command that waits
// instead of failing fails the test.
func runMainWithin(t *testing.T, d time.Duration, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := ibexCmd(ctx, env, args...)
	var out, errOut syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%v: still running after %v; stdout %q, stderr %q", args, d, out.String(), errOut.String())
	}
	if err != nil {
		code = cmd.ProcessState.ExitCode()
	}
	return out.String(), errOut.String(), code
}
