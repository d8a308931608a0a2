package proctest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/coll"
)

// spec describes the rank processes of one communicator.
type spec struct {
	Case      string        // a key of rankCases
	Size      int           // ranks
	ID        coll.UniqueID // the rendezvous
	Transport string        // coll.Options.Transport
	Seed      uint64
	Limit     time.Duration           // each rank's own deadline
	Env       func(rank int) []string // extra environment, if any
	Wrap      func(rank int) []string // a command prefix, if any (ip netns exec NS)
}

// job is the running rank processes. The test's cleanup kills whatever
// still runs and waits for it, so no process outlives the test.
type job struct {
	t     *testing.T
	procs []*proc
}

type proc struct {
	rank   int
	cmd    *exec.Cmd
	stdout lines
	stderr syncBuffer
	done   chan struct{} // closed when the process has been waited for
	err    error         // cmd.Wait's, once done is closed
	exited time.Time
}

// start launches s.Size copies of this test binary as the ranks of s.
func start(t *testing.T, s spec) *job {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The backstop: a rank that outlives its own deadline by this much is
	// killed (and the test fails on its status).
	ctx, cancel := context.WithTimeout(context.Background(), s.Limit+15*time.Second)
	j := &job{t: t}
	t.Cleanup(func() {
		cancel()
		for _, p := range j.procs {
			<-p.done
		}
	})
	for r := range s.Size {
		var argv []string
		if s.Wrap != nil {
			argv = s.Wrap(r)
		}
		// -test.run=^$: were the environment lost, the child would run no
		// test rather than all of them.
		argv = append(argv, exe, "-test.run=^$")
		p := &proc{rank: r, done: make(chan struct{})}
		p.stdout.changed = make(chan struct{}, 1)
		p.cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
		// IBEX_TRANSPORT would override the by-host choice these tests
		// check (s.Transport still forces one); the last value wins.
		p.cmd.Env = append(os.Environ(), "IBEX_TRANSPORT=",
			fmt.Sprintf("%s=%d", envRank, r), fmt.Sprintf("%s=%d", envSize, s.Size),
			envID+"="+s.ID.String(), envCase+"="+s.Case, envTransport+"="+s.Transport,
			fmt.Sprintf("%s=%d", envSeed, s.Seed), envLimit+"="+s.Limit.String())
		if s.Env != nil {
			p.cmd.Env = append(p.cmd.Env, s.Env(r)...)
		}
		p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		p.cmd.WaitDelay = 5 * time.Second
		if err := p.cmd.Start(); err != nil {
			close(p.done)
			t.Fatalf("start rank %d (%s): %v", r, strings.Join(argv, " "), err)
		}
		j.procs = append(j.procs, p)
		go func() {
			p.err = p.cmd.Wait()
			p.exited = time.Now()
			close(p.done)
		}()
	}
	return j
}

// wait waits up to bound for every rank, and fails the test unless each
// exited with status 0.
func (j *job) wait(bound time.Duration) {
	j.t.Helper()
	if hung := j.waitExit(bound, j.procs...); len(hung) > 0 {
		j.t.Fatalf("ranks %v still running after %v (killed)\n%s", hung, bound, j.report())
	}
	for _, p := range j.procs {
		if p.err != nil {
			j.t.Fatalf("rank %d: %v\n%s", p.rank, p.err, j.report())
		}
	}
}

// waitExit waits up to bound for the processes ps; it kills and returns
// the ranks of those still running then.
func (j *job) waitExit(bound time.Duration, ps ...*proc) (hung []int) {
	timer := time.NewTimer(bound)
	defer timer.Stop()
	for _, p := range ps {
		select {
		case <-p.done:
		case <-timer.C:
			for _, p := range ps {
				select {
				case <-p.done:
				default:
					hung = append(hung, p.rank)
					_ = p.cmd.Process.Kill()
				}
			}
			for _, p := range ps {
				<-p.done
			}
			return hung
		}
	}
	return nil
}

// report is every rank's state and stderr, for a failure message.
func (j *job) report() string {
	var b strings.Builder
	for _, p := range j.procs {
		state := "running"
		select {
		case <-p.done:
			state = "exit status 0"
			if p.err != nil {
				state = p.err.Error()
			}
		default:
		}
		fmt.Fprintf(&b, "--- rank %d (%s), stderr:\n%s", p.rank, state, p.stderr.String())
	}
	return b.String()
}

// exitCode is the process's exit status, or -1 if a signal ended it.
func (p *proc) exitCode() int {
	var ee *exec.ExitError
	if p.err == nil {
		return 0
	}
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// waitLine waits until the rank printed a line for which ok holds, the
// rank exited, or bound passed; it reports whether the line came.
func (p *proc) waitLine(bound time.Duration, ok func(string) bool) bool {
	timer := time.NewTimer(bound)
	defer timer.Stop()
	for {
		if p.stdout.any(ok) {
			return true
		}
		select {
		case <-p.stdout.changed:
		case <-p.done:
			return p.stdout.any(ok)
		case <-timer.C:
			return false
		}
	}
}

// lines collects a process's stdout by line.
type lines struct {
	mu      sync.Mutex
	partial []byte
	done    []string
	changed chan struct{} // a token after each write with a full line
}

func (l *lines) Write(b []byte) (int, error) {
	l.mu.Lock()
	l.partial = append(l.partial, b...)
	full := false
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.done = append(l.done, string(l.partial[:i]))
		l.partial = l.partial[i+1:]
		full = true
	}
	l.mu.Unlock()
	if full {
		select {
		case l.changed <- struct{}{}:
		default:
		}
	}
	return len(b), nil
}

func (l *lines) any(ok func(string) bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.done {
		if ok(s) {
			return true
		}
	}
	return false
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(b)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// freeAddr is a loopback TCP address free a moment ago, for a rendezvous.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func newID(t *testing.T, addr string) coll.UniqueID {
	t.Helper()
	id, err := coll.NewUniqueID(addr)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// seed is -seed, else a random one; logged so a failure can be replayed.
func seed(t *testing.T) uint64 {
	t.Helper()
	s := *seedFlag
	if s == 0 {
		s = rand.Uint64() | 1
	}
	t.Logf("seed %d (replay with -seed=%d)", s, s)
	return s
}
