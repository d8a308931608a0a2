package daemon_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/verbs"
)

// TestManyProcesses: 16 processes share the daemon's one udp0 and its
// address; the daemon allocates every QP number; each process WRITEs its
// pid into its own slot of this process's MR, through its own QP.
func TestManyProcesses(t *testing.T) {
	d := startDaemon(t, "127.0.0.42")
	const n = 16
	ctx, err := verbs.Open("ibexd/udp0")
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	pd, _ := ctx.AllocPD()
	mr, err := pd.AllocMR(n*64, allAccess)
	if err != nil {
		t.Fatal(err)
	}
	peers := startPeers(t, n)
	ends := make([]*end, n)
	qpns := map[uint32]bool{}
	for i := range n {
		cq, _ := ctx.CreateCQ(16)
		qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq})
		if err != nil {
			t.Fatal(err)
		}
		ends[i] = &end{ctx: ctx, pd: pd, cq: cq, qp: qp, mr: mr}
		qpns[qp.Num()] = true
		qpns[peers[i].info.ci.QPN] = true
	}
	if len(qpns) != 2*n {
		t.Fatalf("%d distinct QP numbers among %d QPs: the daemon must allocate them host-wide", len(qpns), 2*n)
	}
	if got := len(status(t, d)); got != n+1 {
		t.Fatalf("daemon status lists %d processes, want %d", got, n+1)
	}
	for i, p := range peers {
		p.connect(t, ends[i], i, verbs.ConnectOptions{})
	}
	for i, p := range peers {
		if got := p.line(t); got != "done SUCCESS" {
			t.Fatalf("peer %d: %q", i, got)
		}
		if pid := binary.LittleEndian.Uint64(mr.Bytes()[i*64:]); pid != uint64(p.cmd.Process.Pid) {
			t.Errorf("slot %d holds %d, want peer pid %d", i, pid, p.cmd.Process.Pid)
		}
	}
	for _, e := range ends {
		_ = e.qp.Destroy()
		_ = e.cq.Destroy()
	}
	_ = mr.Dereg()
	_ = pd.Dealloc()
}

// TestKilledProcess: a process killed with SIGKILL has its QPs destroyed
// and its memory unmapped by the daemon; its peer's next request fails
// (RETRY_EXC_ERR: nobody answers for that QP), and another process is not
// affected.
func TestKilledProcess(t *testing.T) {
	d := startDaemon(t, "127.0.0.43")
	victim, bystander := startPeer(t), startPeer(t)
	ev, eb := openEnd(t, 4096), openEnd(t, 4096)
	victim.connect(t, ev, 0, quick)
	bystander.connect(t, eb, 0, verbs.ConnectOptions{})
	for _, p := range []*peerProc{victim, bystander} {
		if got := p.line(t); got != "done SUCCESS" {
			t.Fatalf("peer: %q", got)
		}
	}
	pid := victim.cmd.Process.Pid
	if !mapsHold(t, d, pid) {
		t.Fatalf("the daemon does not map pid %d's memory before the kill", pid)
	}
	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-victim.exit
	victim.exit <- nil // for its cleanup
	waitUntil(t, "the daemon drops the killed process", func() bool { return !status(t, d)[pid] })
	if mapsHold(t, d, pid) {
		t.Errorf("the daemon still maps memory of the killed pid %d", pid)
	}
	if wc := ev.write(t, victim.info, 0, 0, 8); wc.Status != verbs.WCRetryExcErr {
		t.Errorf("write to the killed process's QP: %v, want RETRY_EXC_ERR", wc.Status)
	}
	if wc := eb.write(t, bystander.info, 0, 8, 8); wc.Status != verbs.WCSuccess {
		t.Errorf("write to the bystander: %v, want SUCCESS", wc.Status)
	}
	if !status(t, d)[bystander.cmd.Process.Pid] {
		t.Error("the bystander is no longer attached")
	}
}

// mapsHold reports whether the daemon maps a memfd the process pid made
// (provider/ibexd names them ibexd-mr-PID).
func mapsHold(t testing.TB, d *testDaemon, pid int) bool {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", d.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), fmt.Sprintf("ibexd-mr-%d ", pid)) || strings.Contains(string(b), fmt.Sprintf("ibexd-mr-%d\n", pid))
}

// TestDaemonDies: when the daemon dies, every QP of an attached process
// goes to ERR with a cause naming the daemon, a waiter on the CQ or the
// async events returns, and the verbs that need the daemon fail at once.
func TestDaemonDies(t *testing.T) {
	d := startDaemon(t, "127.0.0.44")
	peer := startPeer(t)
	e := openEnd(t, 4096)
	peer.connect(t, e, 0, verbs.ConnectOptions{})
	if got := peer.line(t); got != "done SUCCESS" {
		t.Fatalf("peer: %q", got)
	}
	waitDone := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for {
			ev, err := e.ctx.AsyncEvent(ctx)
			if err != nil {
				waitDone <- err
				return
			}
			if ev.Type == verbs.EventQPFatal && ev.QP == e.qp {
				waitDone <- nil
				return
			}
		}
	}()
	d.kill()
	if err := <-waitDone; err != nil {
		t.Fatalf("no QP_FATAL after the daemon died: %v", err)
	}
	waitUntil(t, "the QP goes to ERR", func() bool { return e.qp.State() == verbs.QPSErr })
	if err := e.qp.Err(); err == nil || !strings.Contains(err.Error(), "ibexd") {
		t.Errorf("QP error %v: want a cause naming ibexd", err)
	}
	// A request posted now is flushed, not lost or hung.
	err := e.qp.PostSend([]verbs.SendWR{{ID: 9, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: e.mr.Addr(), Length: 8, LKey: e.mr.LKey()}}, RemoteAddr: peer.info.addr, RKey: peer.info.rkey}})
	if err != nil {
		t.Fatalf("post after the daemon died: %v", err)
	}
	if wc := waitWC(t, e.cq); wc.Status != verbs.WCWRFlushErr {
		t.Errorf("request after the daemon died: %v, want WR_FLUSH_ERR", wc.Status)
	}
	// Control verbs fail at once, naming the daemon.
	_, err = e.pd.AllocMR(4096, allAccess)
	if err == nil || !strings.Contains(err.Error(), "ibexd") {
		t.Errorf("alloc mr after the daemon died: %v, want an error naming ibexd", err)
	}
	if _, err := e.ctx.CreateCQ(4); err != nil && errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("create cq hung: %v", err)
	}
}
