package oob

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/internal/perftestrun"
)

// The real thing: Debian's perftest 4.5 binaries (ib_write_bw, ...) against
// this package. They need an RDMA device before they open the socket.
// TestRealPerftest runs them on testdata/fakeverbs, a stand-in libibverbs
// loaded with LD_PRELOAD: one RoCE device whose sends and receives complete
// at once and move no data, since its ibex end has no QPs (it only speaks
// the exchange); only the TCP exchange is real, which is what is tested
// here. perftest's data phase against real ibex QPs is package perf's
// (ibex perf against perftest) and internal/perftestrun's (perftest against
// perftest over ibex). TestRealPerftestQPMismatch needs no data phase and
// runs on internal/perftestrun's libibexverbs.so, a real ibex device.
// Skipped unless the binaries and gcc with the verbs headers are installed
// (apt-get install perftest libibverbs-dev).

func fakeVerbs(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs perftest's binaries (40 s)")
	}
	if _, err := exec.LookPath("ib_write_bw"); err != nil {
		t.Skip("perftest is not installed (apt-get install perftest)")
	}
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		t.Skip("verbs headers are not installed (apt-get install libibverbs-dev)")
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no gcc")
	}
	so := filepath.Join(t.TempDir(), "libfakeverbs.so")
	out, err := exec.Command(gcc, "-shared", "-fPIC", "-O1", "-o", so, "testdata/fakeverbs/fakeverbs.c",
		"-Wl,--version-script=testdata/fakeverbs/fakeverbs.map").CombinedOutput()
	if err != nil {
		t.Fatalf("building fakeverbs: %v\n%s", err, out)
	}
	return so
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

type perftestRun struct {
	cmd *exec.Cmd
	out bytes.Buffer
	err chan error
}

func startPerftest(t *testing.T, so string, prog string, args ...string) *perftestRun {
	t.Helper()
	r := &perftestRun{err: make(chan error, 1)}
	r.cmd = exec.Command(prog, append([]string{"--use_old_post_send", "-F"}, args...)...)
	r.cmd.Env = append(os.Environ(), "LD_PRELOAD="+so)
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.err <- r.cmd.Wait() }()
	t.Cleanup(func() {
		r.cmd.Process.Kill()
		<-r.err
		if t.Failed() {
			t.Logf("%s %v output:\n%s", prog, args, r.out.String())
		}
	})
	return r
}

func (r *perftestRun) wait(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case err := <-r.err:
		r.err <- err
		if err != nil {
			t.Errorf("%s: %v", r.cmd.Path, err)
		}
	case <-time.After(d):
		t.Errorf("%s did not exit within %v", r.cmd.Path, d)
	}
}

func TestRealPerftest(t *testing.T) {
	so := fakeVerbs(t)
	for _, tc := range []struct {
		test Test
		args []string
	}{
		{Test{Name: WriteBW, QPs: 1}, nil},
		{Test{Name: WriteBW, QPs: 4}, []string{"-q", "4"}},
		{Test{Name: WriteBW, QPs: 1, AllSizes: true}, []string{"-a"}},
		{Test{Name: WriteBW, QPs: 2, AllSizes: true, Duplex: true}, []string{"-a", "-b", "-q", "2"}},
		{Test{Name: ReadBW, QPs: 1}, nil},
		{Test{Name: ReadBW, QPs: 1, Duplex: true}, []string{"-b"}},
		{Test{Name: AtomicBW, QPs: 1}, nil},
		{Test{Name: AtomicBW, QPs: 1, Duplex: true}, []string{"-b"}},
		{Test{Name: SendBW, QPs: 2}, []string{"-q", "2"}},
		{Test{Name: SendBW, QPs: 1, AllSizes: true, Duplex: true}, []string{"-a", "-b"}},
		{Test{Name: WriteLat, QPs: 1}, nil},
	} {
		for _, ibexServer := range []bool{false, true} {
			name := fmt.Sprintf("%s%s/ibex-server=%v", tc.test.Name, strings.Join(tc.args, ""), ibexServer)
			t.Run(name, func(t *testing.T) { realPerftest(t, so, tc.test, tc.args, ibexServer) })
		}
	}
}

func realPerftest(t *testing.T, so string, test Test, args []string, ibexServer bool) {
	port := freePort(t)
	args = append(args, "-p", strconv.Itoa(port))
	prog := "ib_" + test.Name
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var c *Conn
	var run *perftestRun
	if ibexServer {
		ln, err := Listen(fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		run = startPerftest(t, so, prog, append(args, "127.0.0.1")...)
		if c, err = ln.Accept(ctx); err != nil {
			t.Fatal(err)
		}
	} else {
		run = startPerftest(t, so, prog, args...)
		var err error
		for { // perftest listens after opening its device
			if c, err = Dial(ctx, fmt.Sprintf("127.0.0.1:%d", port)); err == nil || ctx.Err() != nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	defer c.Close()
	p := Params{MTU: 4096, Test: test}
	remote, dests, reports, err := runIbex(ctx, c, p)
	if err != nil {
		t.Fatalf("ibex: %v", err)
	}
	if test.Name == WriteLat {
		// ib_write_lat's data phase waits for the peer's RDMA WRITE in
		// memory, which fakeverbs never delivers: stop it once its exchange
		// is over (it has no closing exchange).
		time.Sleep(200 * time.Millisecond)
		run.cmd.Process.Kill()
	} else {
		run.wait(t, 10*time.Second)
	}
	if remote.Version != "6.06" || remote.Ibex || remote.MTU != 1024 || remote.CycleBuffer <= 0 {
		t.Errorf("remote params %+v", remote)
	}
	if len(dests) != test.QPs || dests[0].GID != [16]byte{10: 0xff, 11: 0xff, 12: 127, 15: 1} {
		t.Errorf("remote dests %v", dests)
	}
	if test.Name == WriteLat {
		return // killed: its output is still in its stdio buffers
	}
	out := run.out.String()
	t.Logf("%d reports from perftest", len(reports))
	// perftest prints the dests it received: ours.
	if !strings.Contains(out, fmt.Sprintf("remote address: LID 0000 QPN 0x%04x", testDest(!ibexServer, 0, true).QPN)) {
		t.Errorf("perftest did not print our QPN")
	}
	if !test.Duplex && test.Name != SendBW && ibexServer {
		// The unidirectional perftest client sends its report at the end.
		if len(reports) != 1 || reports[0].Iters == 0 || reports[0].Size == 0 {
			t.Errorf("reports %+v, want the client's", reports)
		}
	}
	if !test.Duplex && test.Name != SendBW && !ibexServer {
		// The perftest server prints our report.
		if !strings.Contains(out, "11250.50") || !strings.Contains(out, "11200.25") {
			t.Errorf("the perftest server did not print our report")
		}
	}
}

// A real perftest server with one QP against an ibex client with two: the
// server's second round arrives as QP 1, which the client reports. The
// server runs on internal/perftestrun's libibexverbs.so, a real ibex device
// (udp0 on its own address): only the exchange is needed here, and the
// data-less stand-in is not.
func TestRealPerftestQPMismatch(t *testing.T) {
	lib := perftestrun.Build(t)
	port := perftestrun.FreePort(t)
	run := perftestrun.Start(t, lib, []string{"IBEX_UDP_ADDR=127.0.73.2"}, "ib_write_bw",
		"--use_old_post_send", "-F", "-d", "udp0", "-p", strconv.Itoa(port))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var c *Conn
	var err error
	for {
		if c, err = Dial(ctx, fmt.Sprintf("127.0.0.1:%d", port)); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _, _, err = runIbex(ctx, c, Params{Test: Test{Name: WriteBW, QPs: 2}})
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "fewer QPs") {
		t.Fatalf("got %v, want a QP count mismatch", err)
	}
	t.Log(err)
	// perftest fails on the closed socket and exits.
	if err := run.Wait(10 * time.Second); err == nil || strings.Contains(err.Error(), "still running") {
		t.Errorf("ib_write_bw after the ibex end closed: %v, want a failed exit", err)
	} else {
		t.Logf("ib_write_bw: %v", err)
	}
}
