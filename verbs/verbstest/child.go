package verbstest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/verbs"
)

// The child protocol: StartChild listens on a unix socket, hands the
// listening descriptor to the child as fd childListenerFD, and sets env to
// the socket's path; the child's stdin is a pipe from the parent, and its
// EOF (the parent closed it, or died) tells the child to stop.
const childListenerFD = 3

// childExitWait bounds how long a stopping child waits for the sessions
// still being served to tear down.
const childExitWait = 20 * time.Second

// StartChild starts the running test binary again as a child process that
// serves the suite's remote end, and returns a function that dials it (one
// connection per Config.Remote call). The child finds the environment
// variable env set and must call ChildMain(env, ...) first thing in
// TestMain. At t's cleanup the child is told to stop (its stdin closes),
// waited for, and killed if it does not exit in time; a child that exits
// with an error fails t. The child also stops when this process dies.
func StartChild(t testing.TB, env string) (dial func() (net.Conn, error)) {
	t.Helper()
	return StartChildBinary(t, env, os.Args[0])
}

// StartChildBinary is StartChild with the child run from bin: a build of
// the same test package (without the race detector, say), whose TestMain
// calls ChildMain(env, ...) too.
func StartChildBinary(t testing.TB, env, bin string) (dial func() (net.Conn, error)) {
	t.Helper()
	// A short directory of our own: a unix socket path must fit in 108
	// bytes, which t.TempDir's need not.
	dir, err := os.MkdirTemp("", "verbstest")
	if err != nil {
		t.Fatalf("verbstest: start child: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "suite.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatalf("verbstest: start child: %v", err)
	}
	l.SetUnlinkOnClose(false) // the child keeps listening on it
	lf, err := l.File()
	_ = l.Close()
	if err != nil {
		t.Fatalf("verbstest: start child: %v", err)
	}
	// -test.run=^$: a TestMain that forgets ChildMain runs no tests in the
	// child (and starts no grandchildren); the parent's dial then fails.
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+path)
	cmd.ExtraFiles = []*os.File{lf} // becomes childListenerFD
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		_ = lf.Close()
		t.Fatalf("verbstest: start child: %v", err)
	}
	err = cmd.Start()
	_ = lf.Close()
	if err != nil {
		t.Fatalf("verbstest: start child %s: %v", os.Args[0], err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("verbstest: child %d: %v (its stderr is above)", cmd.Process.Pid, err)
			}
		case <-time.After(childExitWait + 10*time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("verbstest: child %d did not exit; killed", cmd.Process.Pid)
		}
	})
	return func() (net.Conn, error) { return net.Dial("unix", path) }
}

// ChildMain is the child side of StartChild. Call it first in TestMain:
// when the environment variable env is set, the process was started by
// StartChild, and ChildMain serves every connection on the parent's socket
// with Serve(conn, open, setPortState) until the parent closes the child's
// stdin or dies, then exits the process (status 1 if a session failed).
// Otherwise it returns at once.
func ChildMain(env string, open func() (*verbs.Context, error), setPortState func(verbs.PortState)) {
	path, ok := os.LookupEnv(env)
	if !ok {
		return
	}
	os.Exit(serveChild(path, open, setPortState))
}

func serveChild(path string, open func() (*verbs.Context, error), setPortState func(verbs.PortState)) int {
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "verbstest child %d (%s): %s\n", os.Getpid(), path, fmt.Sprintf(format, args...))
	}
	lf := os.NewFile(childListenerFD, "verbstest listener")
	l, err := net.FileListener(lf)
	_ = lf.Close()
	if err != nil {
		logf("no listener from the parent: %v", err)
		return 2
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin) // returns at EOF: the parent is done or dead
		_ = l.Close()
	}()

	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed bool
	)
	for {
		conn, err := l.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				logf("accept: %v", err)
				mu.Lock()
				failed = true
				mu.Unlock()
			}
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := Serve(conn, open, setPortState); err != nil {
				logf("%v", err)
				mu.Lock()
				failed = true
				mu.Unlock()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(childExitWait):
		logf("sessions still open %v after the parent stopped us", childExitWait)
		return 1
	}
	mu.Lock()
	defer mu.Unlock()
	if failed {
		return 1
	}
	return 0
}
