package cm_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/internal/cm"
	_ "github.com/ibex-rdma/ibex/provider/loopback"
	"github.com/ibex-rdma/ibex/verbs"
)

type end struct {
	qp  *verbs.QP
	cq  *verbs.CQ
	mr  *verbs.MR
	buf []byte
}

func newEnd(t *testing.T, vc *verbs.Context) *end {
	t.Helper()
	pd, err := vc.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := vc.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = qp.Destroy(); _ = cq.Destroy(); _ = mr.Dereg(); _ = pd.Dealloc() })
	return &end{qp: qp, cq: cq, mr: mr, buf: buf}
}

func open(t *testing.T) *verbs.Context {
	t.Helper()
	vc, err := verbs.Open("loop0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = vc.Close() })
	return vc
}

// TestConnect: a client's private data reaches the server, the server's
// reaches the client, the QPs are connected (a SEND posted by the server
// right after Accept lands in the client's receive posted before Dial), and
// each side's Done closes when the other closes.
func TestConnect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	vc := open(t)
	l, err := cm.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	// A client that connects and sends garbage, and one that sends nothing,
	// must not hold up the real one.
	silent, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	junk, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer junk.Close()
	if _, err := junk.Write([]byte("GET / HTTP/1.0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}

	srv, cli := newEnd(t, vc), newEnd(t, vc)
	postRecv := func(qp *verbs.QP) error {
		return qp.PostRecv([]verbs.RecvWR{{ID: 7, SGL: []verbs.SGE{{Addr: cli.mr.Addr(), Length: 64, LKey: cli.mr.LKey()}}}})
	}
	type res struct {
		c   *cm.Conn
		err error
	}
	got := make(chan res, 1)
	go func() {
		c, err := cm.Dial(ctx, l.Addr().String(), cli.qp, []byte("hello from client"), cm.Options{Ready: postRecv})
		got <- res{c, err}
	}()
	req, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(req.Private) != "hello from client" || req.Remote.QPN != cli.qp.Num() {
		t.Fatalf("request: private %q qpn %#x, want %q %#x", req.Private, req.Remote.QPN, "hello from client", cli.qp.Num())
	}
	sc, err := req.Accept(ctx, srv.qp, []byte("welcome"), cm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	copy(srv.buf, "payload")
	if err := srv.qp.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{{Addr: srv.mr.Addr(), Length: 7, LKey: srv.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	cc := r.c
	if string(cc.Private()) != "welcome" || cc.Remote().QPN != srv.qp.Num() {
		t.Fatalf("reply: private %q qpn %#x", cc.Private(), cc.Remote().QPN)
	}
	wc := make([]verbs.WC, 1)
	if _, err := cli.cq.PollWait(ctx, wc); err != nil {
		t.Fatal(err)
	}
	if wc[0].Status != verbs.WCSuccess || wc[0].WRID != 7 || !bytes.Equal(cli.buf[:7], []byte("payload")) {
		t.Fatalf("client received %v %q", wc[0], cli.buf[:7])
	}

	if err := cc.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sc.Done():
	case <-ctx.Done():
		t.Fatal("server's Done did not close after the client closed")
	}
	if sc.Err() == nil {
		t.Fatal("server's Err is nil after Done")
	}
	waitDropped(t, l, 1) // the junk client at least
}

func waitDropped(t *testing.T, l *cm.Listener, n uint64) {
	t.Helper()
	for i := 0; i < 200 && l.Dropped() < n; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if l.Dropped() < n {
		t.Fatalf("dropped %d connections, want ≥ %d", l.Dropped(), n)
	}
}

// TestReject: the client's error wraps ErrRejected and carries the reason.
func TestReject(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	vc := open(t)
	l, err := cm.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cli := newEnd(t, vc)
	errc := make(chan error, 1)
	go func() {
		_, err := cm.Dial(ctx, l.Addr().String(), cli.qp, nil, cm.Options{})
		errc <- err
	}()
	req, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := req.Reject(ctx, "too many clients (4 of 4)"); err != nil {
		t.Fatal(err)
	}
	err = <-errc
	if !errors.Is(err, cm.ErrRejected) || !bytes.Contains([]byte(err.Error()), []byte("too many clients (4 of 4)")) {
		t.Fatalf("Dial: %v, want ErrRejected with the reason", err)
	}
}

// TestGarbage: a client speaking another protocol gets a clear error; the
// listener counts it.
func TestGarbage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	vc := open(t)
	l, err := cm.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// A server that is not cm: the client's Dial fails naming the protocol.
	fake, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	go func() {
		c, err := fake.Accept()
		if err == nil {
			_, _ = c.Write([]byte("SSH-2.0-OpenSSH_9.6\r\n"))
			time.Sleep(100 * time.Millisecond)
			c.Close()
		}
	}()
	cli := newEnd(t, vc)
	_, err = cm.Dial(ctx, fake.Addr().String(), cli.qp, nil, cm.Options{})
	if !errors.Is(err, cm.ErrProtocol) {
		t.Fatalf("Dial to a non-cm server: %v, want ErrProtocol", err)
	}
	// Accept with an expired context returns at once.
	ectx, ecancel := context.WithTimeout(ctx, time.Millisecond)
	defer ecancel()
	if _, err := l.Accept(ectx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Accept: %v, want DeadlineExceeded", err)
	}
}
