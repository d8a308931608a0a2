package shm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/verbs"
)

// deathBound is how long the survivor may take to notice a killed peer.
// The kernel closes the dead process's sockets at once; the bound only
// keeps a broken implementation from hanging the test.
const deathBound = 10 * time.Second

// mapsWith counts this process's mappings whose name contains s.
func mapsWith(t *testing.T, s string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), s)
}

// TestPeerKilled kills (SIGKILL) a peer process while it streams WRITEs
// and SENDs into this one. The survivor's QP must move to ERR with a cause
// naming the dead process, flush its outstanding work requests, release
// the peer's shared memory, and keep its own memory intact: the regions
// the peer could write hold only what it wrote, and memory next to them
// is untouched. The survivor then works with a new peer.
func TestPeerKilled(t *testing.T) {
	for _, goMem := range []bool{false, true} {
		name := "pool"
		if goMem {
			name = "gomem"
		}
		t.Run(name, func(t *testing.T) { testPeerKilled(t, goMem) })
	}
}

func testPeerKilled(t *testing.T, goMem bool) {
	const target = 16 * 4096 // the region the peer writes
	e, err := newEnd(1<<20, !goMem, verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 1024})
	if err != nil {
		t.Fatal(err)
	}
	buf := e.mr.Bytes()
	// Guards: the rest of the registered buffer, beyond what the peer is
	// told to write, and an unregistered AllocMR neighbour in the pool.
	for i := range buf {
		buf[i] = 0x5a
	}
	guard, err := e.pd.AllocMR(1<<16, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	for i := range guard.Bytes() {
		guard.Bytes()[i] = 0xa5
	}
	var recvs []verbs.RecvWR
	for i := range 1000 {
		recvs = append(recvs, verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{{Addr: e.mr.Addr() + target, Length: 64, LKey: e.mr.LKey()}}})
	}
	c := startChild(t, "writer", goMem)
	pid := c.cmd.Process.Pid
	if err := e.qp.Connect(c.info, verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.qp.PostRecv(recvs); err != nil {
		t.Fatal(err)
	}
	// Tell the child only the first 64 KiB of the region exists.
	info := e.info()
	info.Len = target
	if _, err := fmt.Fprintln(c.in, info.String()); err != nil {
		t.Fatal(err)
	}
	if line, err := c.out.ReadString('\n'); err != nil || strings.TrimSpace(line) != "connected" {
		t.Fatalf("child did not connect: %q %v", line, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), deathBound)
	defer cancel()
	// Traffic flows: wait for some SENDs to land.
	var wc [64]verbs.WC
	got := 0
	for got < 20 {
		n, err := e.cq.PollWait(ctx, wc[:])
		if err != nil {
			t.Fatalf("no traffic from the peer: %v", err)
		}
		for _, w := range wc[:n] {
			if w.Status != verbs.WCSuccess {
				t.Fatalf("completion before the kill: %v", w)
			}
		}
		got += n
	}
	peerMaps := fmt.Sprintf("ibex-shm:%d:", pid)
	if mapsWith(t, peerMaps) == 0 {
		t.Fatalf("the peer's pool (%s) is not mapped while connected", peerMaps)
	}
	killed := time.Now()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = c.cmd.Wait()

	// The survivor's QP moves to ERR and says why.
	for e.qp.State() != verbs.QPSErr {
		if ctx.Err() != nil {
			t.Fatalf("qp still %v %v after the peer was killed", e.qp.State(), deathBound)
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("peer pid %d killed; qp in ERR after %v: %v", pid, time.Since(killed), e.qp.Err())
	if err := e.qp.Err(); err == nil || !strings.Contains(err.Error(), fmt.Sprint(pid)) || !strings.Contains(err.Error(), "died") {
		t.Fatalf("cause %v does not name the dead peer %d", err, pid)
	}
	ev, err := e.ctx.AsyncEvent(ctx)
	if err != nil || ev.Type != verbs.EventQPFatal || ev.QP != e.qp {
		t.Fatalf("async event %v (%v), want QP_FATAL for the qp", ev, err)
	}
	// Every receive still posted is flushed.
	flushed := 0
	for got+flushed < len(recvs) {
		n, err := e.cq.PollWait(ctx, wc[:])
		if err != nil {
			t.Fatalf("after %d completions and %d flushes of %d receives: %v", got, flushed, len(recvs), err)
		}
		for _, w := range wc[:n] {
			switch {
			case w.Status == verbs.WCWRFlushErr:
				flushed++
			case w.Status == verbs.WCSuccess && flushed == 0:
				got++ // landed before the kill was noticed
			default:
				t.Fatalf("completion %v after the kill", w)
			}
		}
	}
	if flushed == 0 {
		t.Fatal("no receive was flushed")
	}
	// A request posted now fails at once (the QP is in ERR): nothing hangs.
	err = e.qp.PostSend([]verbs.SendWR{{ID: 7, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: e.mr.Addr(), Length: 8, LKey: e.mr.LKey()}}, RemoteAddr: c.info.Addr, RKey: c.info.RKey}})
	if err == nil {
		n, err := e.cq.PollWait(ctx, wc[:1])
		if err != nil || n != 1 || wc[0].Status != verbs.WCWRFlushErr {
			t.Fatalf("post after death: %v %v", wc[0], err)
		}
	} else if !errors.Is(err, verbs.ErrInvalidState) {
		t.Fatalf("post after death: %v", err)
	}

	// The peer's shared memory is released here.
	for mapsWith(t, peerMaps) != 0 {
		if ctx.Err() != nil {
			t.Fatalf("the dead peer's pool is still mapped")
		}
		time.Sleep(time.Millisecond)
	}
	// Our memory: the written region holds the peer's bytes or ours; the
	// rest is untouched.
	for i, b := range buf[:target] {
		if b != 0xee && b != 0x5a {
			t.Fatalf("byte %d of the written region is %#x", i, b)
		}
	}
	if !bytes.Equal(buf[target+64:], bytes.Repeat([]byte{0x5a}, len(buf)-target-64)) {
		t.Fatal("memory beyond the region the peer may write changed")
	}
	if !bytes.Equal(guard.Bytes(), bytes.Repeat([]byte{0xa5}, len(guard.Bytes()))) {
		t.Fatal("an unregistered neighbour in the pool changed")
	}
	if err := guard.Dereg(); err != nil {
		t.Fatal(err)
	}

	// The survivor carries on: reset the QP and connect to a new peer.
	if err := e.qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState); err != nil {
		t.Fatal(err)
	}
	c2 := startChild(t, "idle", goMem)
	c2.connect(t, e)
	wr := verbs.SendWR{ID: 8, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: e.mr.Addr(), Length: 4096, LKey: e.mr.LKey()}}, RemoteAddr: c2.info.Addr, RKey: c2.info.RKey}
	if err := e.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	if n, err := e.cq.PollWait(ctx, wc[:1]); err != nil || n != 1 || wc[0].Status != verbs.WCSuccess {
		t.Fatalf("WRITE to a new peer after the kill: %v %v", wc[0], err)
	}
	if err := e.close(); err != nil {
		t.Fatal(err)
	}
}
