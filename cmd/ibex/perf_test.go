package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ibexCmd prepares `ibex args...` as a child process (this test binary
// running main, see TestMain).
func ibexCmd(ctx context.Context, env []string, args ...string) *exec.Cmd {
	cmd := childCommand(ctx, env, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// freePort finds a TCP port nobody listens on.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// server is a running `ibex perf` server.
type server struct {
	cmd *exec.Cmd
	out *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startServer(t *testing.T, env []string, args ...string) *server {
	t.Helper()
	s := &server{out: &syncBuffer{}}
	s.cmd = ibexCmd(context.Background(), env, append([]string{"perf"}, args...)...)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	})
	return s
}

// runClient runs a client to the end and returns its output.
func runClient(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := ibexCmd(ctx, env, append([]string{"perf"}, args...)...).CombinedOutput()
	return string(out), err
}

// parseReport finds the results table of a perftest report and returns
// its rows as numbers, checking the column header.
func parseReport(t *testing.T, out string, latency bool) [][]float64 {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(out))
	var rows [][]float64
	inTable := false
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "#bytes" {
			want := "#bytes #iterations BW peak[MiB/sec] BW average[MiB/sec] MsgRate[Mpps]"
			if latency {
				want = "#bytes #iterations t_min[usec] t_max[usec] t_typical[usec] t_avg[usec] t_stdev[usec] 99% percentile[usec] 99.9% percentile[usec]"
			}
			if got := strings.Join(f, " "); got != want {
				t.Fatalf("column header %q, want %q", got, want)
			}
			inTable = true
			continue
		}
		if !inTable {
			continue
		}
		if strings.HasPrefix(line, "----") {
			break
		}
		var row []float64
		for _, s := range f {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				t.Fatalf("result row %q: %v", line, err)
			}
			row = append(row, v)
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		t.Fatalf("no results table in:\n%s", out)
	}
	return rows
}

// checkRow checks that a row's numbers are positive and consistent.
func checkRow(t *testing.T, row []float64, latency bool, size, iters int) {
	t.Helper()
	if latency {
		if len(row) != 9 {
			t.Fatalf("latency row %v: want 9 columns", row)
		}
		mn, mx, typ, avg, p99, p999 := row[2], row[3], row[4], row[5], row[7], row[8]
		if row[0] != float64(size) || row[1] < 1 || mn <= 0 || mn > typ || typ > mx || avg < mn || avg > mx || p99 < typ || p999 < p99 || p999 > mx {
			t.Fatalf("latency row %v inconsistent (size %d)", row, size)
		}
		return
	}
	if len(row) != 5 {
		t.Fatalf("bandwidth row %v: want 5 columns", row)
	}
	bytes, n, peak, avg, rate := row[0], row[1], row[2], row[3], row[4]
	if bytes != float64(size) || (iters > 0 && n != float64(iters)) || avg <= 0 || peak < avg*0.999 || rate <= 0 {
		t.Fatalf("bandwidth row %v inconsistent (size %d, iters %d)", row, size, iters)
	}
	// MsgRate × size is the average bandwidth (to the printed precision).
	if bw := rate * 1e6 * bytes / (1 << 20); math.Abs(bw-avg) > max(avg*0.02, 0.006) {
		t.Fatalf("bandwidth row %v: MsgRate × size = %.2f MiB/s, BW average %.2f", row, bw, avg)
	}
}

type perfTransport struct {
	name      string
	serverEnv []string
	clientEnv []string
	device    string
}

func transports(t *testing.T) []perfTransport {
	sub := 50 + os.Getpid()%50
	return []perfTransport{
		{name: "shm", device: "shm0"},
		{name: "udp-loopback", device: "udp0",
			serverEnv: []string{fmt.Sprintf("IBEX_UDP_ADDR=127.%d.9.1", sub)},
			clientEnv: []string{fmt.Sprintf("IBEX_UDP_ADDR=127.%d.9.2", sub)}},
	}
}

// TestPerfAllTests runs each of the eight tests with server and client as
// separate processes, on shm0 and on udp0 over loopback, and checks both
// reports. The server serves every test of a transport: it keeps serving
// after a client leaves.
func TestPerfAllTests(t *testing.T) {
	for _, tr := range transports(t) {
		t.Run(tr.name, func(t *testing.T) {
			for _, test := range []string{"write_bw", "write_lat", "read_bw", "read_lat", "send_bw", "send_lat", "atomic_bw", "atomic_lat"} {
				t.Run(test, func(t *testing.T) {
					latency := strings.HasSuffix(test, "_lat")
					port := strconv.Itoa(freePort(t))
					iters := "400"
					if latency {
						iters = "200"
					}
					srv := startServer(t, tr.serverEnv, test, "-d", tr.device, "-p", port, "-n", iters)
					out, err := runClient(t, tr.clientEnv, test, "-d", tr.device, "-p", port, "-n", iters, "127.0.0.1")
					if err != nil {
						t.Fatalf("client: %v\n%s\nserver:\n%s", err, out, srv.out.String())
					}
					size := 65536
					switch {
					case strings.HasPrefix(test, "atomic"):
						size = 8
					case latency:
						size = 2
					}
					n, _ := strconv.Atoi(iters)
					if latency {
						n = 0
					}
					for _, row := range parseReport(t, out, latency) {
						checkRow(t, row, latency, size, n)
					}
					for _, want := range []string{"Device         : " + tr.device, "Number of qps   : 1", "Connection type : RC", "local address: LID", "remote address: LID"} {
						if !strings.Contains(out, want) {
							t.Errorf("client report lacks %q:\n%s", want, out)
						}
					}
					// The server printed its header too, and for the tests
					// where it works (send_bw receives, the ping-pongs
					// answer) its own numbers.
					deadline := time.Now().Add(10 * time.Second)
					for !strings.Contains(srv.out.String(), "remote address") && time.Now().Before(deadline) {
						time.Sleep(10 * time.Millisecond)
					}
					if test == "send_bw" || test == "write_lat" || test == "send_lat" {
						for !strings.Contains(srv.out.String(), "#bytes") && time.Now().Before(deadline) {
							time.Sleep(10 * time.Millisecond)
						}
						time.Sleep(50 * time.Millisecond)
						for _, row := range parseReport(t, srv.out.String(), latency) {
							checkRow(t, row, latency, size, n)
						}
					}
				})
			}
		})
	}
}

// TestPerfServerKeepsServing: a server answers one client after another,
// and a size sweep (-a) and JSON work.
func TestPerfServerKeepsServing(t *testing.T) {
	port := strconv.Itoa(freePort(t))
	srv := startServer(t, nil, "write_bw", "-d", "shm0", "-p", port, "-n", "100", "--serve-forever")
	for i := range 3 {
		out, err := runClient(t, nil, "write_bw", "-d", "shm0", "-p", port, "-n", "100", "localhost")
		if err != nil {
			t.Fatalf("client %d: %v\n%s\nserver:\n%s", i, err, out, srv.out.String())
		}
		parseReport(t, out, false)
	}
	// -a must be given to both ends, as with perftest.
	port2 := strconv.Itoa(freePort(t))
	startServer(t, nil, "write_bw", "-d", "shm0", "-p", port2, "-n", "100", "-a")
	out, err := runClient(t, nil, "write_bw", "-d", "shm0", "-p", port2, "-n", "100", "-a", "--json", "localhost")
	if err != nil {
		t.Fatalf("sweep: %v\n%s", err, out)
	}
	if !strings.Contains(out, `"bytes": 8388608`) || !strings.Contains(out, `"bw_average"`) {
		t.Fatalf("-a --json output:\n%s", out)
	}
}

// TestPerfErrors: a refused connection and a mismatched test end with a
// clear message, not a hang.
func TestPerfErrors(t *testing.T) {
	port := strconv.Itoa(freePort(t))
	start := time.Now()
	out, err := runClient(t, nil, "write_bw", "-d", "shm0", "-p", port, "127.0.0.1")
	if err == nil || !strings.Contains(out, "127.0.0.1:"+port) || !strings.Contains(out, "refused") {
		t.Fatalf("no server: err %v, output %q", err, out)
	}
	t.Logf("refused after %v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(out))

	srv := startServer(t, nil, "write_bw", "-d", "shm0", "-p", port, "--serve-forever")
	out, err = runClient(t, nil, "read_bw", "-d", "shm0", "-p", port, "127.0.0.1")
	if err == nil || !strings.Contains(out, "write_bw") || !strings.Contains(out, "read_bw") {
		t.Fatalf("mismatched test: err %v, output %q\nserver: %s", err, out, srv.out.String())
	}
	t.Logf("mismatch: %s", strings.TrimSpace(out))
	out, err = runClient(t, nil, "write_bw", "-d", "shm0", "-s", "4096", "-p", port, "127.0.0.1")
	if err == nil || !strings.Contains(out, "4096") {
		t.Fatalf("mismatched size: err %v, output %q", err, out)
	}
	// And the server still serves a matching client.
	out, err = runClient(t, nil, "write_bw", "-d", "shm0", "-n", "100", "-p", port, "127.0.0.1")
	if err == nil || !strings.Contains(out, "iterations (-n): we 100, peer 5000") {
		t.Fatalf("mismatched -n: err %v, output %q", err, out)
	}
	out, err = runClient(t, nil, "write_bw", "-d", "shm0", "-p", port, "127.0.0.1")
	if err != nil {
		t.Fatalf("after mismatches: %v\n%s\nserver: %s", err, out, srv.out.String())
	}
}

// TestPerfNetns runs write_bw and write_lat over RoCEv2/UDP between two
// network namespaces joined by a veth pair: the server in a new namespace,
// the client in this one.
func TestPerfNetns(t *testing.T) {
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("cannot create network namespaces: the ip command (iproute2) is not installed")
	}
	ns := fmt.Sprintf("ibexperf%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("cannot create network namespaces here: ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	va, vb := fmt.Sprintf("ipfa%d", os.Getpid()%100000), fmt.Sprintf("ipfb%d", os.Getpid()%100000)
	sub := 150 + os.Getpid()%50
	ipA, ipB := fmt.Sprintf("10.%d.88.1", sub), fmt.Sprintf("10.%d.88.2", sub)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("ip", "link", "add", va, "type", "veth", "peer", "name", vb)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", va).Run() })
	run("ip", "link", "set", vb, "netns", ns)
	run("ip", "addr", "add", ipA+"/24", "dev", va)
	run("ip", "link", "set", va, "up")
	run("ip", "netns", "exec", ns, "ip", "addr", "add", ipB+"/24", "dev", vb)
	run("ip", "netns", "exec", ns, "ip", "link", "set", vb, "up")
	run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")

	for _, test := range []string{"write_bw", "write_lat"} {
		t.Run(test, func(t *testing.T) {
			port := strconv.Itoa(freePort(t))
			args := []string{"perf", test, "-d", "udp0", "-p", port, "-n", "500"}
			srv := &server{out: &syncBuffer{}}
			argv, extra := childArgv(args...)
			srv.cmd = exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
			srv.cmd.Env = append(append(os.Environ(), extra...), "IBEX_UDP_ADDR="+ipB)
			srv.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			srv.cmd.Stdout, srv.cmd.Stderr = srv.out, srv.out
			if err := srv.cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = srv.cmd.Process.Kill()
				_ = srv.cmd.Wait()
			})
			out, err := runClient(t, []string{"IBEX_UDP_ADDR=" + ipA}, test, "-d", "udp0", "-p", port, "-n", "500", ipB)
			if err != nil {
				t.Fatalf("client: %v\n%s\nserver:\n%s", err, out, srv.out.String())
			}
			latency := strings.HasSuffix(test, "_lat")
			size, n := 65536, 500
			if latency {
				size, n = 2, 0
			}
			for _, row := range parseReport(t, out, latency) {
				checkRow(t, row, latency, size, n)
			}
			if !strings.Contains(out, "Mtu             : 1024[B]") {
				t.Errorf("a 1500-byte veth should give MTU 1024:\n%s", out)
			}
			t.Logf("\n%s", out)
		})
	}
}

// TestPerfDurationAndPlot: -D runs for a time instead of a count, and
// --plot draws the sweep.
func TestPerfDurationAndPlot(t *testing.T) {
	port := strconv.Itoa(freePort(t))
	startServer(t, nil, "send_lat", "-d", "shm0", "-p", port, "-D", "1")
	began := time.Now()
	out, err := runClient(t, nil, "send_lat", "-d", "shm0", "-p", port, "-D", "1", "127.0.0.1")
	if err != nil {
		t.Fatalf("-D: %v\n%s", err, out)
	}
	// The run lasts the time asked, whatever the iterations: a count is
	// no measure here (a loaded CI machine made 82 round trips in 1 s).
	if took := time.Since(began); took < time.Second {
		t.Errorf("-D 1 ended after %v", took)
	}
	for _, row := range parseReport(t, out, true) {
		checkRow(t, row, true, 2, 0)
		if row[1] < 2 {
			t.Fatalf("1 s of send_lat on shm0 made %v round trips", row[1])
		}
	}
	port = strconv.Itoa(freePort(t))
	startServer(t, nil, "read_bw", "-d", "shm0", "-p", port, "-n", "50", "-a")
	png := filepath.Join(t.TempDir(), "read_bw.png")
	out, err = runClient(t, nil, "read_bw", "-d", "shm0", "-p", port, "-n", "50", "-a", "--plot", png, "127.0.0.1")
	if err != nil {
		t.Fatalf("--plot: %v\n%s", err, out)
	}
	if rows := parseReport(t, out, false); len(rows) != 23 {
		t.Fatalf("-a gave %d sizes, want 23 (2 B to 8 MiB)", len(rows))
	}
	b, err := os.ReadFile(png)
	if err != nil || len(b) < 1000 || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("plot file: %d bytes, %v", len(b), err)
	}
}
