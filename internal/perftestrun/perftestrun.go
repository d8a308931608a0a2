// Package perftestrun runs Debian's perftest binaries (ib_write_bw, ...)
// over ibex, for tests.
//
// perftest needs libibverbs and an RDMA device. Build compiles
// libibexverbs.so (testdata/fakeverbs), a stand-in libibverbs with the ABI
// of the real one whose every verb is ibex's package verbs on a real ibex
// device, so that perftest's WRITEs, READs, SENDs and atomics go over
// ibex's RoCEv2 (provider/udp) and land at the addresses perftest names,
// with ibex's MR checks. Start runs a perftest program with the library
// in LD_PRELOAD.
//
// The library's environment:
//
//	FAKEVERBS_DEVICE  the ibex device perftest sees (default udp0: pass -d udp0)
//	IBEX_UDP_ADDR     udp0's address: two processes on one host need two,
//	                  e.g. 127.0.0.2 for the server and 127.0.0.3 for the client
//	FAKEVERBS_TRACE   set: a line on stderr per control verb and per failure
//
// It implements RC QPs only (no UD, UC, SRQ or ibv_qp_ex: run perftest with
// --use_old_post_send; -F skips perftest's CPU-frequency check), and
// completion channels (-e) without a file descriptor. perftest's latency
// tests that spin on memory (ib_write_lat) see the data when ibex's
// progress goroutine delivers it, without a poll to drive it, so their
// latencies are those of that goroutine's naps, not of the wire.
//
// Everything skips the test, naming what is missing, without perftest
// (apt-get install perftest), the verbs headers (libibverbs-dev), a C
// compiler or cgo, and in -short mode.
package perftestrun

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var build struct {
	once sync.Once
	lib  string
	skip string
	err  error
}

// Build builds libibexverbs.so once per test binary and returns its path.
// It skips t if perftest, the verbs headers, a C compiler or cgo is
// missing, or in -short mode, and fails it if the build fails.
func Build(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs perftest's binaries over ibex (skipped in -short mode)")
	}
	build.once.Do(func() { build.lib, build.skip, build.err = buildLib() })
	if build.skip != "" {
		t.Skip(build.skip)
	}
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.lib
}

func buildLib() (lib, skip string, err error) {
	if _, err := exec.LookPath("ib_write_bw"); err != nil {
		return "", "perftest is not installed (apt-get install perftest)", nil
	}
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		return "", "the verbs headers are not installed (apt-get install libibverbs-dev)", nil
	}
	// go test puts its own GOROOT/bin first in PATH; the GOROOT this binary
	// was built with is the fallback.
	goBin, err := exec.LookPath("go")
	if err != nil {
		//lint:ignore SA1019 a test binary runs where it was built
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goBin); err != nil {
			return "", "no go command to build libibexverbs.so", nil
		}
	}
	env := append(os.Environ(), "CGO_ENABLED=1", "GOFLAGS=", "CGO_LDFLAGS_ALLOW=-Wl,--version-script=.*")
	out, err := exec.Command(goBin, "env", "CC").Output()
	if err != nil {
		return "", "", fmt.Errorf("go env CC: %v", err)
	}
	cc := strings.Fields(string(out))
	if len(cc) == 0 {
		cc = []string{"gcc"}
	}
	if _, err := exec.LookPath(cc[0]); err != nil {
		return "", fmt.Sprintf("no C compiler %q for cgo (apt-get install gcc)", cc[0]), nil
	}
	root, err := moduleRoot(goBin)
	if err != nil {
		return "", "", err
	}
	dir, err := libDir()
	if err != nil {
		return "", "", err
	}
	lib = filepath.Join(dir, "libibexverbs.so")
	cmd := exec.Command(goBin, "build", "-buildmode=c-shared", "-o", lib, "./internal/perftestrun/testdata/fakeverbs")
	cmd.Dir, cmd.Env = root, env
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("building libibexverbs.so: %v\n%s", err, out)
	}
	return lib, "", nil
}

// moduleRoot is the directory of ibex's go.mod: two up from this file, or
// what `go env GOMOD` says when the binary was built with -trimpath.
func moduleRoot(goBin string) (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		root := filepath.Dir(filepath.Dir(filepath.Dir(file)))
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			return root, nil
		}
	}
	out, err := exec.Command(goBin, "env", "GOMOD").Output()
	if gomod := strings.TrimSpace(string(out)); err == nil && gomod != "" && gomod != os.DevNull {
		return filepath.Dir(gomod), nil
	}
	return "", errors.New("perftestrun: cannot find the ibex module's root")
}

// libDir is this process's directory for the library, under os.TempDir;
// the directories of processes that are gone are removed on the way.
func libDir() (string, error) {
	base := os.TempDir()
	old, _ := filepath.Glob(filepath.Join(base, "ibex-perftestrun-*"))
	for _, d := range old {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "ibex-perftestrun-"))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); errors.Is(err, os.ErrNotExist) {
			os.RemoveAll(d)
		}
	}
	dir := filepath.Join(base, fmt.Sprintf("ibex-perftestrun-%d", os.Getpid()))
	return dir, os.MkdirAll(dir, 0o755)
}

// Run is a perftest program started by Start.
type Run struct {
	cmd  *exec.Cmd
	out  syncBuffer
	done chan struct{}
	err  error // set before done is closed
}

// Start starts prog (e.g. "ib_write_bw") with args, with lib (from Build)
// in LD_PRELOAD and env ("NAME=value" entries, e.g. IBEX_UDP_ADDR) added
// to the test's environment. Its stdout and stderr are captured (Output).
// When t ends the program is killed, and if t failed its output is logged.
func Start(t testing.TB, lib string, env []string, prog string, args ...string) *Run {
	t.Helper()
	r := &Run{done: make(chan struct{})}
	r.cmd = exec.Command(prog, args...)
	r.cmd.Env = append(append(os.Environ(), "LD_PRELOAD="+lib), env...)
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("perftestrun: %v", err)
	}
	go func() {
		r.err = r.cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		_ = r.cmd.Process.Kill()
		<-r.done
		if t.Failed() {
			t.Logf("%s %s %s:\n%s", strings.Join(env, " "), prog, strings.Join(args, " "), r.Output())
		}
	})
	return r
}

// Wait waits for the program to exit, at most d, and returns its error
// (an *exec.ExitError for a nonzero exit), or an error saying it is still
// running after d. It may be called again.
func (r *Run) Wait(d time.Duration) error {
	select {
	case <-r.done:
		if r.err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(r.cmd.Path), r.err)
		}
		return nil
	case <-time.After(d):
		return fmt.Errorf("%s still running after %v", filepath.Base(r.cmd.Path), d)
	}
}

// Output is what the program printed so far, stdout and stderr together.
func (r *Run) Output() string { return r.out.String() }

// ClockFailed reports whether perftest's output says its clock calibration
// failed. perftest times in CPU cycles and converts with a frequency it
// samples at start (get_cpu_mhz); on a loaded machine the sample's
// correlation can fall below 0.9, and then the frequency is 0 and every
// figure it prints is 0.00, whatever the run did.
func ClockFailed(out string) bool {
	return strings.Contains(out, "Correlation coefficient r^2")
}

// FreePort returns a TCP port that was free on 127.0.0.1 a moment ago,
// for perftest's -p.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
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
