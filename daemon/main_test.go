package daemon_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/daemon"
	_ "github.com/ibex-rdma/ibex/provider/ibexd"
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
	if sock := os.Getenv(daemonEnv); sock != "" {
		os.Exit(daemonChild(sock, os.Getenv(daemonAddrEnv)))
	}
	verbstest.ChildMain(suiteEnv, func() (*verbs.Context, error) { return verbs.Open("ibexd/udp0") }, nil)
	if role := os.Getenv(appEnv); role != "" {
		os.Exit(appChild(role))
	}
	os.Exit(m.Run())
}

// daemonChild serves until its stdin closes or SIGTERM; it prints "ready"
// once the socket listens.
func daemonChild(sock, addr string) int {
	cfg := daemon.DefaultConfig()
	cfg.Socket = sock
	cfg.Devices = []daemon.DeviceConfig{{Name: "udp0", Address: addr}}
	d, err := daemon.New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "daemon child:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	fmt.Println("ready")
	if err := d.Serve(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "daemon child:", err)
		return 1
	}
	return 0
}

// testDaemon is a daemon child.
type testDaemon struct {
	sock  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	exit  chan error
}

// startDaemon starts a daemon on addr with its socket in a fresh
// directory, and points this process's ibexd provider (and children's) at
// it. It is stopped at cleanup.
func startDaemon(t testing.TB, addr string) *testDaemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "ibexd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := &testDaemon{sock: filepath.Join(dir, "ibexd.sock"), exit: make(chan error, 1)}
	d.cmd = exec.Command(os.Args[0], "-test.run=^$")
	d.cmd.Env = append(os.Environ(), daemonEnv+"="+d.sock, daemonAddrEnv+"="+addr)
	d.cmd.Stderr = os.Stderr
	d.stdin, _ = d.cmd.StdinPipe()
	out, _ := d.cmd.StdoutPipe()
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		ready <- line
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() { d.exit <- d.cmd.Wait() }()
	select {
	case line := <-ready:
		if strings.TrimSpace(line) != "ready" {
			t.Fatalf("daemon child did not start: %q", line)
		}
	case <-time.After(20 * time.Second):
		_ = d.cmd.Process.Kill()
		t.Fatal("daemon child: no ready line in 20s")
	}
	t.Setenv("IBEX_DAEMON_SOCKET", d.sock)
	t.Cleanup(func() { d.stop(t) })
	return d
}

// stop closes the daemon's stdin and waits for it to exit.
func (d *testDaemon) stop(t testing.TB) {
	if d.stdin == nil {
		return
	}
	d.stdin.Close()
	d.stdin = nil
	select {
	case err := <-d.exit:
		if err != nil {
			t.Errorf("daemon exited: %v", err)
		}
	case <-time.After(20 * time.Second):
		_ = d.cmd.Process.Kill()
		t.Errorf("daemon did not stop in 20s; killed")
	}
}

// kill kills the daemon with SIGKILL.
func (d *testDaemon) kill() {
	_ = d.cmd.Process.Kill()
	<-d.exit
	d.stdin = nil
}

// TestConformance runs the verbs conformance suite through the daemon:
// end a in this process, end b in a child process, both attached to one
// daemon in a third.
func TestConformance(t *testing.T) {
	startDaemon(t, "127.0.0.41")
	dial := verbstest.StartChild(t, suiteEnv)
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
