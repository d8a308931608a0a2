package daemon_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/provider/ibexd"
	_ "github.com/ibex-rdma/ibex/provider/udp"
	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/verbs/verbstest"
)

// The tests run the daemon in a child process (this test binary again,
// with daemonEnv set): a daemon and the processes attached to it never
// share an address space, as in production (each keeps its own table of
// MR keys). Applications are this process and further children.
const (
	daemonEnv     = "IBEX_TEST_IBEXD"       // run as the daemon: the value is the socket
	daemonAddrEnv = "IBEX_TEST_IBEXD_ADDR"  // its udp0 address
	suiteEnv      = "IBEX_TEST_IBEXD_SUITE" // run as the suite's far end
	appEnv        = "IBEX_TEST_IBEXD_APP"   // run as an application role (apps_test.go)
)

func TestMain(m *testing.M) {
	verbstest.ChildMain(suiteEnv, func() (*verbs.Context, error) { return verbs.Open("ibexd/udp0") }, nil)
	if role := os.Getenv(appEnv); role != "" {
		os.Exit(appChild(role))
	}
	dir, err := os.MkdirTemp("", "ibexd-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The daemon runs as a user runs it: `ibex daemon`, built without the
	// race detector (under -race a race-instrumented daemon made the
	// conformance suite take 97 s instead of 11); the processes attached
	// to it are this test binary, with whatever flags it was built.
	ibexBin = filepath.Join(dir, "ibex")
	if err := goBuild(ibexBin, "github.com/ibex-rdma/ibex/cmd/ibex"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	// Under -race the other processes of the tests (the suite's far
	// end, the peers) run as this package's tests built without it: 16
	// race-instrumented peers took 16 s of CI on 2 cores. The test
	// process itself keeps the race detector.
	childBin = os.Args[0]
	if raceEnabled {
		childBin = filepath.Join(dir, "daemon.test")
		if err := goBuild(childBin, "-test", "github.com/ibex-rdma/ibex/daemon"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// ibexBin is the ibex binary TestMain builds; childBin runs the tests'
// other processes (this test binary, or its build without -race).
var ibexBin, childBin string

// goBuild builds pkg into bin ("-test", pkg: its test binary).
func goBuild(bin string, args ...string) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("no go tool to build %v (%v)", args, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := []string{"build", "-o", bin}
	if args[0] == "-test" {
		cmd = []string{"test", "-c", "-o", bin}
		args = args[1:]
	}
	out, err := exec.CommandContext(ctx, goTool, append(cmd, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %v: %v: %s", append(cmd, args...), err, out)
	}
	return nil
}

// testDaemon is a running `ibex daemon`.
type testDaemon struct {
	sock string
	cmd  *exec.Cmd
	exit chan error
	done bool
}

// startDaemon starts `ibex daemon` with its udp0 on addr and its socket in
// a fresh directory, waits until it answers, and points this process's
// ibexd provider (and its children's) at it. At cleanup it is stopped
// with SIGTERM and must exit 0.
func startDaemon(t testing.TB, addr string) *testDaemon { return startDaemonIn(t, "", addr) }

// startDaemonIn is startDaemon in network namespace ns ("": this one).
func startDaemonIn(t testing.TB, ns, addr string) *testDaemon {
	return startDaemonConfig(t, ns, addr, "")
}

// startDaemonConfig is startDaemonIn with config (YAML, "": none) as the
// daemon's --config. The socket's directory is open to every user (as
// /run/ibex is), so processes of other uids can attach.
func startDaemonConfig(t testing.TB, ns, addr, config string) *testDaemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "ibexd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	_ = os.Chmod(dir, 0o755)
	d := &testDaemon{sock: filepath.Join(dir, "ibexd.sock"), exit: make(chan error, 1)}
	args := []string{ibexBin, "daemon", "--socket", d.sock}
	if config != "" {
		f := filepath.Join(dir, "ibexd.yaml")
		if err := os.WriteFile(f, []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", f)
	}
	d.cmd = exec.Command(args[0], args[1:]...)
	if ns != "" {
		// ip netns exec execs the daemon: its pid is the daemon's.
		d.cmd = exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...)
	}
	d.cmd.Env = append(os.Environ(), "IBEX_UDP_ADDR="+addr, "IBEX_DAEMON=off")
	d.cmd.Stderr = os.Stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.exit <- d.cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := ibexd.QueryStatus(d.sock, time.Second); err == nil {
			break
		}
		select {
		case err := <-d.exit:
			t.Fatalf("ibex daemon exited before it served: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			_ = d.cmd.Process.Kill()
			t.Fatal("ibex daemon: no answer on its socket in 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Setenv("IBEX_DAEMON_SOCKET", d.sock)
	t.Cleanup(func() { d.stop(t) })
	return d
}

// stop sends SIGTERM and waits for a clean exit.
func (d *testDaemon) stop(t testing.TB) {
	if d.done {
		return
	}
	d.done = true
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.exit:
		if err != nil {
			t.Errorf("ibex daemon, stopped with SIGTERM: %v", err)
		}
	case <-time.After(20 * time.Second):
		_ = d.cmd.Process.Kill()
		t.Errorf("ibex daemon did not stop in 20s after SIGTERM; killed")
	}
}

// kill kills the daemon with SIGKILL.
func (d *testDaemon) kill() {
	_ = d.cmd.Process.Kill()
	<-d.exit
	d.done = true
}

// TestConformance runs the verbs conformance suite through the daemon:
// end a in this process, end b in a child process, both attached to one
// daemon in a third.
func TestConformance(t *testing.T) {
	startDaemon(t, "127.0.0.41")
	runSuite(t, verbstest.StartChildBinary(t, suiteEnv, childBin))
}

// runSuite runs the conformance suite with end a attached here (to the
// daemon IBEX_DAEMON_SOCKET names) and end b served by the child dial
// reaches.
func runSuite(t *testing.T, dial func() (net.Conn, error)) {
	verbstest.Run(t, verbstest.Config{
		Remote: func(t testing.TB) (*verbs.Context, io.ReadWriteCloser) {
			a, err := verbs.Open("ibexd/udp0")
			if err != nil {
				t.Fatal(err)
			}
			conn, err := dial()
			if err != nil {
				t.Fatal(err)
			}
			return a, conn
		},
	})
}
