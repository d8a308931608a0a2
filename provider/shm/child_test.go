package shm

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/verbs/verbstest"
)

// suiteChildEnv starts this test binary as the far end of the conformance
// suite in remote mode (TestConformanceTwoProcesses).
const suiteChildEnv = "IBEX_SHM_SUITE_CHILD"

// Tests and benchmarks that need a second process start this test binary
// again with IBEX_SHM_CHILD set to a role. The child opens shm0, prints its
// connection info (with its buffer's rkey, address and length) on a line,
// reads the parent's on stdin, connects, runs the role, and exits when its
// stdin closes.
func TestMain(m *testing.M) {
	verbstest.ChildMain(suiteChildEnv, func() (*verbs.Context, error) { return verbs.Open(DeviceName) }, SetPortState)
	if role := os.Getenv("IBEX_SHM_CHILD"); role != "" {
		if err := childMain(role); err != nil {
			fmt.Fprintln(os.Stderr, "shm child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// end is one side of a connection used by these tests.
type end struct {
	ctx *verbs.Context
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
	mr  *verbs.MR
}

const allAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

func newEnd(size int, pool bool, cap verbs.QPCap) (*end, error) {
	e := &end{}
	var err error
	if e.ctx, err = verbs.Open(DeviceName); err != nil {
		return nil, err
	}
	if e.pd, err = e.ctx.AllocPD(); err != nil {
		return nil, err
	}
	if e.cq, err = e.ctx.CreateCQ(4096); err != nil {
		return nil, err
	}
	if pool {
		e.mr, err = e.pd.AllocMR(size, allAccess)
	} else {
		e.mr, err = e.pd.RegMR(make([]byte, size), allAccess)
	}
	if err != nil {
		return nil, err
	}
	e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, Cap: cap})
	return e, err
}

func (e *end) info() verbs.ConnInfo {
	ci := e.qp.Info()
	ci.RKey, ci.Addr, ci.Len = e.mr.RKey(), e.mr.Addr(), uint64(e.mr.Len())
	return ci
}

// close tears the end down in order; errors are returned, not ignored.
func (e *end) close() error {
	var errs []error
	for _, f := range []func() error{e.qp.Destroy, e.mr.Dereg, e.cq.Destroy, e.pd.Dealloc, e.ctx.Close} {
		if err := f(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("close: %v", errs)
	}
	return nil
}

func (e *end) word(off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&e.mr.Bytes()[off]))
}

func childMain(role string) error {
	pool := os.Getenv("IBEX_SHM_CHILD_MEM") != "go"
	e, err := newEnd(1<<20, pool, verbs.QPCap{MaxSendWR: 1024, MaxRecvWR: 1024})
	if err != nil {
		return err
	}
	fmt.Println(e.info().String())
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadString('\n')
	if err != nil {
		return fmt.Errorf("read parent info: %w", err)
	}
	var peer verbs.ConnInfo
	if err := peer.UnmarshalText([]byte(strings.TrimSpace(line))); err != nil {
		return err
	}
	if err := e.qp.Connect(peer, verbs.ConnectOptions{}); err != nil {
		return err
	}
	fmt.Println("connected")
	stdinClosed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, in)
		close(stdinClosed)
	}()
	switch role {
	case "idle":
		<-stdinClosed
	case "lat":
		return childLat(e, peer, stdinClosed)
	case "writer":
		return childWriter(e, peer, stdinClosed)
	case "write-once":
		// One signaled WRITE into the parent's buffer; print its
		// completion and the QP's error.
		for i := range e.mr.Bytes() {
			e.mr.Bytes()[i] = 0xee
		}
		wr := verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{{Addr: e.mr.Addr(), Length: 64, LKey: e.mr.LKey()}}, RemoteAddr: peer.Addr, RKey: peer.RKey}
		if err := e.qp.PostSend([]verbs.SendWR{wr}); err != nil {
			return err
		}
		var wc [1]verbs.WC
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := e.cq.PollWait(ctx, wc[:])
		cancel()
		if err != nil {
			return err
		}
		fmt.Printf("%v|%v\n", wc[0].Status, e.qp.Err())
		<-stdinClosed
	default:
		return fmt.Errorf("unknown role %q", role)
	}
	return e.close()
}

// childLat answers each 8-byte WRITE of the parent with one of its own:
// the other half of ib_write_lat's ping-pong.
func childLat(e *end, peer verbs.ConnInfo, stop chan struct{}) error {
	in, out := e.word(0), e.word(64)
	wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{{Addr: e.mr.Addr() + 64, Length: 8, LKey: e.mr.LKey()}},
		RemoteAddr: peer.Addr, RKey: peer.RKey}}
	var wc [16]verbs.WC
	for i := uint64(1); ; i++ {
		for spins := 0; in.Load() != i; spins++ {
			if spins&0xfffff == 0 {
				select {
				case <-stop:
					return nil
				default:
				}
			}
		}
		out.Store(i)
		wr[0].Flags = 0
		if i%64 == 0 {
			wr[0].Flags = verbs.SendSignaled
		}
		if err := e.qp.PostSend(wr); err != nil {
			return err
		}
		if i%64 == 0 {
			if _, err := e.cq.Poll(wc[:]); err != nil {
				return err
			}
		}
	}
}

// childWriter streams WRITEs and SENDs at the parent until it is killed.
func childWriter(e *end, peer verbs.ConnInfo, stop chan struct{}) error {
	buf := e.mr.Bytes()
	for i := range buf {
		buf[i] = 0xee
	}
	var wc [64]verbs.WC
	for i := uint64(0); ; i++ {
		select {
		case <-stop:
			return nil
		default:
		}
		wrs := []verbs.SendWR{
			{ID: i, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{{Addr: e.mr.Addr(), Length: 4096, LKey: e.mr.LKey()}},
				RemoteAddr: peer.Addr + (i%16)*4096, RKey: peer.RKey},
			{ID: i, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{{Addr: e.mr.Addr(), Length: 64, LKey: e.mr.LKey()}}},
		}
		if err := e.qp.PostSend(wrs); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := e.cq.PollWait(ctx, wc[:1])
		cancel()
		if err != nil {
			return err
		}
	}
}

// child is a peer process running a role.
type child struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	info verbs.ConnInfo
}

// startChild starts a peer process and reads its connection info; the
// caller connects and then calls connected with its own.
func startChild(tb testing.TB, role string, goMem bool) *child {
	tb.Helper()
	return startChildCmd(tb, role, goMem, exec.Command(os.Args[0], "-test.run=^$"))
}

func startChildCmd(tb testing.TB, role string, goMem bool, cmd *exec.Cmd) *child {
	tb.Helper()
	cmd.Env = append(os.Environ(), "IBEX_SHM_CHILD="+role)
	if goMem {
		cmd.Env = append(cmd.Env, "IBEX_SHM_CHILD_MEM=go")
	}
	cmd.Stderr = os.Stderr
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	c := &child{cmd: cmd, in: in, out: bufio.NewReader(outPipe)}
	tb.Cleanup(func() {
		_ = c.in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := c.out.ReadString('\n')
	if err != nil {
		tb.Fatalf("child %s: no connection info: %v", role, err)
	}
	if err := c.info.UnmarshalText([]byte(strings.TrimSpace(line))); err != nil {
		tb.Fatalf("child %s: %v", role, err)
	}
	return c
}

// connect sends our info and waits until the child has connected.
func (c *child) connect(tb testing.TB, e *end) {
	tb.Helper()
	if err := e.qp.Connect(c.info, verbs.ConnectOptions{}); err != nil {
		tb.Fatal(err)
	}
	if _, err := fmt.Fprintln(c.in, e.info().String()); err != nil {
		tb.Fatal(err)
	}
	line, err := c.out.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "connected" {
		tb.Fatalf("child did not connect: %q %v", line, err)
	}
}
