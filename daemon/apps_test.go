package daemon_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/provider/ibexd"
	"github.com/ibex-rdma/ibex/verbs"
)

// An application end: a context on the daemon's udp0, a PD, a CQ, a QP and
// an MR of memory the daemon maps.
type end struct {
	ctx *verbs.Context
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
	mr  *verbs.MR
}

const allAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

func newEnd(ctx *verbs.Context, size int) (*end, error) {
	e := &end{ctx: ctx}
	var err error
	if e.pd, err = ctx.AllocPD(); err != nil {
		return nil, err
	}
	if e.cq, err = ctx.CreateCQ(64); err != nil {
		return nil, err
	}
	if e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq}); err != nil {
		return nil, err
	}
	if e.mr, err = e.pd.AllocMR(size, allAccess); err != nil {
		return nil, err
	}
	return e, nil
}

// info is what an end tells its peer: its QP's connection info and its
// MR's address and rkey, on one line.
func (e *end) info() string {
	ci, _ := e.qp.Info().MarshalText()
	return fmt.Sprintf("%s|%d|%d", ci, e.mr.Addr(), e.mr.RKey())
}

type peerInfo struct {
	ci   verbs.ConnInfo
	addr uint64
	rkey uint32
}

func parseInfo(line string) (peerInfo, error) {
	f := strings.Split(line, "|")
	if len(f) != 3 {
		return peerInfo{}, fmt.Errorf("peer info %q: want 3 fields", line)
	}
	var p peerInfo
	if err := p.ci.UnmarshalText([]byte(f[0])); err != nil {
		return p, err
	}
	a, err1 := strconv.ParseUint(f[1], 10, 64)
	k, err2 := strconv.ParseUint(f[2], 10, 32)
	if err1 != nil || err2 != nil {
		return p, fmt.Errorf("peer info %q: bad address or rkey", line)
	}
	p.addr, p.rkey = a, uint32(k)
	return p, nil
}

// quick fails a request to a dead peer in well under a second: timeout 8
// (about 1 ms) and one retry.
var quick = verbs.ConnectOptions{Set: verbs.AttrTimeout | verbs.AttrRetryCnt, Attr: verbs.QPAttr{Timeout: 8, RetryCnt: 1}}

// write posts one signaled WRITE of n bytes from off of e's MR to p at
// poff and waits (with a deadline) for its completion.
func (e *end) write(t testing.TB, p peerInfo, off, poff uint64, n uint32) verbs.WC {
	t.Helper()
	err := e.qp.PostSend([]verbs.SendWR{{ID: 7, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: e.mr.Addr() + off, Length: n, LKey: e.mr.LKey()}}, RemoteAddr: p.addr + poff, RKey: p.rkey}})
	if err != nil {
		t.Fatalf("post write: %v", err)
	}
	return waitWC(t, e.cq)
}

func waitWC(t testing.TB, cq *verbs.CQ) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 1)
	if _, err := cq.PollWait(ctx, wc); err != nil {
		t.Fatalf("wait for a completion: %v", err)
	}
	return wc[0]
}

// appChild runs an application role in a child process. Role "peer":
// open ibexd/udp0, print this end's info, read the parent's (and a slot
// number) on stdin, connect, WRITE 64 bytes holding this pid into the
// parent's MR at slot×64, print "done STATUS", then stay attached until
// stdin closes.
func appChild(role string) int {
	if role == "tenant" {
		return tenantChild()
	}
	if role != "peer" {
		fmt.Fprintln(os.Stderr, "unknown app role", role)
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "peer:", err)
		return 1
	}
	ctx, err := verbs.Open("ibexd/udp0")
	if err != nil {
		return fail(err)
	}
	e, err := newEnd(ctx, 4096)
	if err != nil {
		return fail(err)
	}
	fmt.Println(e.info())
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadString('\n')
	if err != nil {
		return fail(err)
	}
	slotText, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
	slot, _ := strconv.Atoi(slotText)
	p, err := parseInfo(rest)
	if err != nil {
		return fail(err)
	}
	if err := e.qp.Connect(p.ci, verbs.ConnectOptions{}); err != nil {
		return fail(err)
	}
	binary.LittleEndian.PutUint64(e.mr.Bytes(), uint64(os.Getpid()))
	wc := e.write(tbStub{}, p, 0, uint64(slot)*64, 64)
	fmt.Println("done", wc.Status)
	_, _ = io.Copy(io.Discard, in)
	return 0
}

// tbStub lets a child use the helpers; a failure exits the child.
type tbStub struct{ testing.TB }

func (tbStub) Helper() {}
func (tbStub) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

// peerProc is a "peer" child.
type peerProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	info   peerInfo
	exit   chan error
	closed bool
}

func startPeer(t *testing.T) *peerProc {
	t.Helper()
	p := launchPeer(t)
	p.ready(t)
	return p
}

// startPeers starts n peers at once (their start-up, long under -race,
// overlaps) and waits until each has printed its info.
func startPeers(t *testing.T, n int) []*peerProc {
	t.Helper()
	ps := make([]*peerProc, n)
	for i := range ps {
		ps[i] = launchPeer(t)
	}
	for _, p := range ps {
		p.ready(t)
	}
	return ps
}

// launchPeer starts a peer child without waiting for it.
func launchPeer(t *testing.T) *peerProc {
	t.Helper()
	p := &peerProc{cmd: exec.Command(childBin, "-test.run=^$"), exit: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), appEnv+"=peer")
	p.cmd.Stderr = os.Stderr
	p.stdin, _ = p.cmd.StdinPipe()
	out, _ := p.cmd.StdoutPipe()
	p.out = bufio.NewReader(out)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exit <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.stdin.Close()
		select {
		case <-p.exit:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			t.Errorf("peer %d did not exit; killed", p.cmd.Process.Pid)
		}
	})
	return p
}

// ready reads the peer's info line.
func (p *peerProc) ready(t *testing.T) {
	t.Helper()
	var err error
	if p.info, err = parseInfo(p.line(t)); err != nil {
		t.Fatal(err)
	}
}

// line reads the child's next line, with a deadline.
func (p *peerProc) line(t testing.TB) string {
	t.Helper()
	ch := make(chan string, 1)
	go func() {
		s, _ := p.out.ReadString('\n')
		ch <- strings.TrimSpace(s)
	}()
	select {
	case s := <-ch:
		if s == "" {
			t.Fatalf("peer %d: no output (exited?)", p.cmd.Process.Pid)
		}
		return s
	case <-time.After(20 * time.Second):
		t.Fatalf("peer %d: no line in 20s", p.cmd.Process.Pid)
	}
	return ""
}

// connect sends the parent end's info and the slot, and connects e to it
// with opt: quick only where a request is meant to fail (a peer that is
// gone); the default (67 ms, 7 retries) elsewhere, as a loaded machine
// can hold a loopback datagram back for milliseconds (TestKilledProcess's
// bystander once ended in RETRY_EXC_ERR under quick).
func (p *peerProc) connect(t *testing.T, e *end, slot int, opt verbs.ConnectOptions) {
	t.Helper()
	if err := e.qp.Connect(p.info.ci, opt); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(p.stdin, "%d %s\n", slot, e.info()); err != nil {
		t.Fatal(err)
	}
}

// status asks the test daemon for its status.
func status(t testing.TB, d *testDaemon) map[int]bool {
	t.Helper()
	st, err := ibexd.QueryStatus(d.sock, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	pids := map[int]bool{}
	for _, c := range st.Clients {
		pids[c.PID] = true
	}
	return pids
}

// waitUntil polls cond until it holds or 20 s pass.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 20s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func openEnd(t *testing.T, size int) *end {
	t.Helper()
	ctx, err := verbs.Open("ibexd/udp0")
	if err != nil {
		t.Fatal(err)
	}
	e, err := newEnd(ctx, size)
	if err != nil {
		ctx.Close()
		t.Fatal(err)
	}
	t.Cleanup(e.close)
	return e
}

// close destroys what newEnd made; after the daemon died the verbs still
// succeed locally.
func (e *end) close() {
	_ = e.qp.Destroy()
	_ = e.mr.Dereg()
	_ = e.cq.Destroy()
	_ = e.pd.Dealloc()
	_ = e.ctx.Close()
}
