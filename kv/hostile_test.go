package kv_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/internal/cm"
	"github.com/ibex-rdma/ibex/kv"
	"github.com/ibex-rdma/ibex/verbs"
)

// rawClient is a QP connected to a kv server that sends whatever the test
// says.
type rawClient struct {
	vc   *verbs.Context
	pd   *verbs.PD
	cq   *verbs.CQ
	qp   *verbs.QP
	mr   *verbs.MR
	conn *cm.Conn
}

func dialRaw(t *testing.T, addr string, private []byte) (*rawClient, error) {
	t.Helper()
	r := &rawClient{}
	var err error
	if r.vc, err = verbs.Open("loop0"); err != nil {
		t.Fatal(err)
	}
	r.pd, _ = r.vc.AllocPD()
	r.cq, _ = r.vc.CreateCQ(64)
	r.qp, err = r.pd.CreateQP(verbs.QPInitAttr{SendCQ: r.cq, RecvCQ: r.cq, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 256}})
	if err != nil {
		t.Fatal(err)
	}
	r.mr, _ = r.pd.RegMR(make([]byte, 1<<20), verbs.AccessLocalWrite|verbs.AccessRemoteRead)
	t.Cleanup(func() {
		if r.conn != nil {
			_ = r.conn.Close()
		}
		_ = r.qp.Destroy()
		_ = r.mr.Dereg()
		_ = r.cq.Destroy()
		_ = r.pd.Dealloc()
		_ = r.vc.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.conn, err = cm.Dial(ctx, addr, r.qp, private, cm.Options{})
	return r, err
}

func (r *rawClient) send(t *testing.T, b []byte) {
	t.Helper()
	copy(r.mr.Bytes(), b)
	if err := r.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, SGL: []verbs.SGE{{Addr: r.mr.Addr(), Length: uint32(len(b)), LKey: r.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestHostileClients: clients that speak another protocol, send garbage
// requests, send more than a receive buffer holds, name memory they do
// not have for a large PUT, or vanish in the middle, are dropped; the
// server frees what they held and a well-behaved client sees nothing.
func TestHostileClients(t *testing.T) {
	srv := startServer(t, kv.ServerConfig{Device: "loop0", MaxClients: 8})
	ctx := testCtx(t)
	good := dial(t, kv.ClientConfig{Server: srv.Addr(), Device: "loop0"})
	if err := good.Put(ctx, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	base := srv.Stats()

	// Wrong private data: rejected at connect.
	if _, err := dialRaw(t, srv.Addr(), []byte("HELLO")); !errors.Is(err, cm.ErrRejected) {
		t.Fatalf("wrong private data: %v", err)
	}
	// TCP garbage: the listener drops it.
	nc, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	_, _ = nc.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	nc.Close()

	priv := []byte{'I', 'X', 'K', 'V', 1, 0, 0, 0}
	garbage := [][]byte{
		{},                             // empty
		bytes.Repeat([]byte{0xff}, 40), // unknown op, bad flags
		append([]byte{1, 0, 0, 0, 100, 0, 0, 0}, make([]byte, 24)...),                      // key longer than the request
		append([]byte{2, 0, 0, 0, 3, 0, 0, 0}, append(make([]byte, 24), "abcVALUE"...)...), // delete with a value
	}
	for i, g := range garbage {
		r, err := dialRaw(t, srv.Addr(), priv)
		if err != nil {
			t.Fatal(err)
		}
		r.send(t, g)
		select {
		case <-r.conn.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("garbage %d: the server kept the client", i)
		}
	}
	// A request larger than the server's receive buffers: the receive
	// fails, the client is dropped.
	r, err := dialRaw(t, srv.Addr(), priv)
	if err != nil {
		t.Fatal(err)
	}
	r.send(t, make([]byte, 64<<10))
	select {
	case <-r.conn.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("oversized request: the server kept the client")
	}
	// A large PUT naming an rkey the client does not have: the server's
	// READ fails, the client is dropped, the entry space is freed.
	r, err = dialRaw(t, srv.Addr(), priv)
	if err != nil {
		t.Fatal(err)
	}
	usedBefore := srv.Stats().ArenaUsed
	req := make([]byte, 32+3)
	req[0], req[1] = 1, 1
	req[4] = 3
	req[8] = 77
	req[16], req[17] = 0, 0x10 // 1 MiB
	req[18] = 0x00
	copy(req[20:], []byte{0xde, 0xad, 0xbe, 0xef})
	copy(req[32:], "key")
	req[24] = 0x10
	r.send(t, req)
	select {
	case <-r.conn.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("PUT with a bad rkey: the server kept the client")
	}
	waitFor(t, "the bad PUT's entry freed", func() bool { return srv.Stats().ArenaUsed == usedBefore })
	// Clients that connect and vanish.
	for i := 0; i < 3; i++ {
		c, err := kv.Dial(ctx, kv.ClientConfig{Server: srv.Addr(), Device: "loop0"})
		if err != nil {
			t.Fatal(err)
		}
		_ = c.Put(ctx, []byte(fmt.Sprintf("gone-%d", i)), make([]byte, 10000))
		_ = c.Close()
	}
	waitFor(t, "every hostile client dropped", func() bool { return srv.Stats().Clients == 1 })
	st := srv.Stats()
	if st.BadRequests < uint64(len(garbage)) {
		t.Errorf("bad requests %d, want ≥ %d", st.BadRequests, len(garbage))
	}
	if st.Keys != base.Keys+3 || st.RemoteReads != base.RemoteReads+4 {
		t.Errorf("keys %d, remote reads %d after the hostile clients (before %d, %d)", st.Keys, st.RemoteReads, base.Keys, base.RemoteReads)
	}
	// The good client goes on.
	dst := make([]byte, 16)
	if n, found, err := good.Get(ctx, []byte("k"), dst); err != nil || !found || string(dst[:n]) != "v" {
		t.Fatalf("good client after the hostile ones: %q %v %v", dst[:n], found, err)
	}
	if err := good.Put(ctx, []byte("k2"), []byte("v2")); err != nil {
		t.Fatal(err)
	}
}

// TestServerFull: the client past MaxClients is refused, naming the
// limit; one that leaves makes room.
func TestServerFull(t *testing.T) {
	srv := startServer(t, kv.ServerConfig{Device: "loop0", MaxClients: 2})
	a := dial(t, kv.ClientConfig{Server: srv.Addr(), Device: "loop0"})
	dial(t, kv.ClientConfig{Server: srv.Addr(), Device: "loop0"})
	ctx := testCtx(t)
	_, err := kv.Dial(ctx, kv.ClientConfig{Server: srv.Addr(), Device: "loop0"})
	if !errors.Is(err, cm.ErrRejected) || !strings.Contains(err.Error(), "MaxClients") {
		t.Fatalf("third client: %v", err)
	}
	a.Close()
	waitFor(t, "a slot", func() bool { return srv.Stats().Clients == 1 })
	dial(t, kv.ClientConfig{Server: srv.Addr(), Device: "loop0"})
}

// TestFixedMemory: the registered bytes do not change as keys are added;
// a full arena is an error that names the limit; a delete makes room
// again (after the quarantine).
func TestFixedMemory(t *testing.T) {
	srv := startServer(t, kv.ServerConfig{Device: "loop0", Values: 1 << 20, MaxValue: 64 << 10, Quarantine: time.Millisecond})
	c := dial(t, kv.ClientConfig{Server: srv.Addr(), Device: "loop0"})
	ctx := testCtx(t)
	reg := srv.RegisteredBytes()
	if reg != 4<<20+1<<20 {
		t.Fatalf("registered %d bytes, want index + values", reg)
	}
	val := make([]byte, 10000)
	var err error
	n := 0
	for ; n < 1000; n++ {
		if err = c.Put(ctx, []byte(fmt.Sprintf("k%d", n)), val); err != nil {
			break
		}
	}
	if !errors.Is(err, kv.ErrArenaFull) || !strings.Contains(err.Error(), "1048576-byte value arena") || !strings.Contains(err.Error(), "--values") {
		t.Fatalf("after %d PUTs: %v", n, err)
	}
	if srv.RegisteredBytes() != reg {
		t.Fatalf("registered bytes went from %d to %d", reg, srv.RegisteredBytes())
	}
	if n < 90 {
		t.Fatalf("only %d 10 KB values in 1 MiB", n)
	}
	if found, err := c.Delete(ctx, []byte("k0")); err != nil || !found {
		t.Fatal(found, err)
	}
	time.Sleep(5 * time.Millisecond)
	if err := c.Put(ctx, []byte("again"), val); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
}

// TestIndexFull: an index at its largest with the key's buckets full is
// an error naming the limit.
func TestIndexFull(t *testing.T) {
	srv := startServer(t, kv.ServerConfig{Device: "loop0", Index: 4096 + 2*128*32, Buckets: 16})
	c := dial(t, kv.ClientConfig{Server: srv.Addr(), Device: "loop0"})
	ctx := testCtx(t)
	var err error
	n := 0
	for ; n < 1000; n++ {
		if err = c.Put(ctx, []byte(fmt.Sprintf("k%d", n)), []byte("v")); err != nil {
			break
		}
	}
	if !errors.Is(err, kv.ErrIndexFull) || !strings.Contains(err.Error(), "--index") {
		t.Fatalf("after %d PUTs: %v", n, err)
	}
	st := srv.Stats()
	t.Logf("%d keys in %d buckets of 7 slots (%.0f%%), %d resizes", st.Keys, st.Buckets, 100*float64(st.Keys)/float64(7*st.Buckets), st.Resizes)
	dst := make([]byte, 4)
	for i := 0; i < n; i++ {
		if _, found, err := c.Get(ctx, []byte(fmt.Sprintf("k%d", i)), dst); err != nil || !found {
			t.Fatalf("k%d after the index filled: %v %v", i, found, err)
		}
	}
}
