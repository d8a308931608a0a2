package verbstest

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ibex-rdma/ibex/provider/loopback"
	"github.com/ibex-rdma/ibex/verbs"
)

// The harness's own tests. The whole suite in remote mode runs in
// provider/loopback (TestConformanceRemote); here: the RPC plumbing against
// a server in a child process, error rebuilding, and a server that dies.

const childEnv = "IBEX_VERBSTEST_CHILD"

func openLoop() (*verbs.Context, error) { return verbs.Open(loopback.DeviceName) }

func TestMain(m *testing.M) {
	ChildMain(childEnv, openLoop, loopback.SetPortState)
	goleak.VerifyTestMain(m)
}

// TestChildProcess drives a loopback context in a child process through
// every kind of call. Loopback QPs connect only within one process, so the
// child's QP is connected to itself.
func TestChildProcess(t *testing.T) {
	dial := StartChild(t, childEnv)
	var r *remoteCtx
	for range 2 { // the child serves one connection after another
		conn, err := dial()
		must(t, err, "dial the child")
		r, err = dialRemote(t, conn)
		must(t, err, "open the remote context")
		exerciseRemote(t, r)
		// Objects left behind: Close reports them as a local Close would,
		// and the server destroys them.
		errContains(t, r.Close(), verbs.ErrBusy, "still exist")
	}
	_, err := r.AllocPD()
	errContains(t, err, nil, "verbstest remote: alloc pd", "connection closed")
}

func exerciseRemote(t *testing.T, r *remoteCtx) {
	pa, err := r.QueryPort(1)
	must(t, err, "query port")
	if pa.State != verbs.PortActive || !pa.ActiveMTU.Valid() {
		t.Fatalf("remote port: %+v", pa)
	}
	_, err = r.QueryPort(0)
	errContains(t, err, verbs.ErrInvalidArgument, "port 0")

	pd, err := r.AllocPD()
	must(t, err, "alloc pd")
	mr, err := pd.RegMR(3<<20, allRemote) // more than one memChunk
	must(t, err, "reg mr")
	if mr.Addr() == 0 || mr.Len() != 3<<20 || mr.LKey() == mr.RKey() {
		t.Fatalf("remote mr: addr %#x len %d lkey %#x rkey %#x", mr.Addr(), mr.Len(), mr.LKey(), mr.RKey())
	}
	data := pattern(2<<20+5, 17)
	mr.Write(100, data)
	if !bytes.Equal(mr.Read(100, len(data)), data) || mr.Read(99, 1)[0] != 0 {
		t.Fatal("remote memory does not read back what was written")
	}
	_, err = pd.RegMR(64, verbs.AccessRemoteWrite)
	errContains(t, err, verbs.ErrInvalidArgument, "LOCAL_WRITE")

	cq, err := r.CreateCQ(16)
	must(t, err, "create cq")
	qp, err := pd.CreateQP(cq, verbs.QPCap{}, false)
	must(t, err, "create qp")
	if qp.Num() == 0 || qp.State() != verbs.QPSReset || qp.Err() != nil {
		t.Fatalf("new remote qp %#x: state %v err %v", qp.Num(), qp.State(), qp.Err())
	}
	attr := verbs.QPAttr{State: verbs.QPSRTR}
	errContains(t, qp.Modify(&attr, verbs.AttrState), verbs.ErrInvalidState, "RESET→RTR")
	attr = verbs.QPAttr{State: verbs.QPSInit, Port: 1, AccessFlags: verbs.AccessRemoteWrite}
	must(t, qp.Modify(&attr, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags), "modify to INIT")
	if q := qp.Query(); q.State != verbs.QPSInit || q.AccessFlags != verbs.AccessRemoteWrite || q.Port != 1 {
		t.Fatalf("query after INIT: %+v", q)
	}
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState), "modify to RESET")

	// Connected to itself, the QP moves a SEND inside the child.
	info := qp.Info()
	if info.QPN != qp.Num() || info.PSN != qp.InitialPSN() {
		t.Fatalf("remote info %v", info)
	}
	must(t, qp.Connect(info, verbs.ConnectOptions{}), "connect to itself")
	must(t, qp.PostRecv([]verbs.RecvWR{{ID: 2, SGL: []verbs.SGE{sgeOf(mr, 1<<20, 64)}}}), "post recv")
	must(t, qp.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{sgeOf(mr, 100, 64)}}}), "post send")
	wcs := waitCQ(t, cq, 2)
	if wcs[0].WRID+wcs[1].WRID != 3 || wcs[0].Status != verbs.WCSuccess || wcs[1].Status != verbs.WCSuccess {
		t.Fatalf("completions %v", wcs)
	}
	if !bytes.Equal(mr.Read(1<<20, 64), data[:64]) {
		t.Fatal("SEND inside the child moved the wrong bytes")
	}
	if st := qp.Stats(); st.Sends != 1 || st.Recvs != 1 {
		t.Fatalf("stats %+v", st)
	}
	expectNoWC(t, cq, 0)
	n, err := cq.Poll(make([]verbs.WC, 4))
	if n != 0 || err != nil {
		t.Fatalf("poll of an empty cq: %d, %v", n, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := cq.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait on an empty remote cq: %v", err)
	}

	// A bad WR in a batch: the PostError and its index survive.
	bad := []verbs.SendWR{
		{ID: 3, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{sgeOf(mr, 0, 8)}, RemoteAddr: mr.Addr(), RKey: mr.RKey()},
		{ID: 4, Opcode: verbs.WRSend, SGL: []verbs.SGE{{Addr: mr.Addr(), Length: 8, LKey: 0x3f2a}}},
	}
	err = qp.PostSend(bad)
	var pe *verbs.PostError
	if !errors.As(err, &pe) || pe.Index != 1 || pe.QPN != qp.Num() || pe.Op != "post send" {
		t.Fatalf("post error %v: want *PostError at index 1", err)
	}
	errContains(t, err, verbs.ErrInvalidLKey, "wr[1]", "lkey 0x3f2a not registered in this PD")

	// Events come back with the QP by number and the port.
	if !r.canSetPort {
		t.Fatal("the child's server has a setPortState, but open did not say so")
	}
	must(t, r.setPortState(verbs.PortDown), "port down")
	if ev := waitEvent(t, r, verbs.EventPortErr); ev.Port != 1 || ev.String() != "PORT_ERR on port 1" {
		t.Fatalf("event %v", ev)
	}
	must(t, r.setPortState(verbs.PortActive), "port up")
	waitEvent(t, r, verbs.EventPortActive)
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSSQD, EnSQDAsyncNotify: true}, verbs.AttrState|verbs.AttrEnSQDAsyncNotify), "modify to SQD")
	if ev := waitEvent(t, r, verbs.EventSQDrained); ev.QPN != qp.Num() {
		t.Fatalf("SQ_DRAINED names qp %#x, want %#x", ev.QPN, qp.Num())
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := r.Event(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("event with none queued: %v", err)
	}

	// Destruction order and ErrClosed travel too.
	errContains(t, cq.Destroy(), verbs.ErrBusy, "QPs")
	must(t, qp.Destroy(), "destroy qp")
	errContains(t, qp.Destroy(), verbs.ErrClosed)
	// Left for Close to find: the PD, the CQ and the MR.
}

// TestRemoteErrors checks that an error from the server prints the same
// message as the local call and wraps the same sentinel.
func TestRemoteErrors(t *testing.T) {
	for _, err := range []error{
		&verbs.PostError{Op: "post recv", QPN: 0x42, Index: 3, Err: errors.Join(errors.New("x"), verbs.ErrQueueFull)},
		verbs.ErrCQOverflow,
		context.DeadlineExceeded,
		errors.New("no sentinel"),
	} {
		back := encodeErr(err).decode()
		if back.Error() != err.Error() {
			t.Errorf("%q came back as %q", err, back)
		}
		for _, s := range sentinels {
			if errors.Is(back, s) != errors.Is(err, s) {
				t.Errorf("%q: errors.Is(%v) %v after the trip", err, s, errors.Is(back, s))
			}
		}
		var pe *verbs.PostError
		if errors.As(back, &pe) != errors.As(err, new(*verbs.PostError)) {
			t.Errorf("%q: PostError lost or invented", err)
		}
	}
	if encodeErr(nil).decode() != nil {
		t.Error("nil error came back non-nil")
	}
}

// TestServerDies: calls on a connection whose server went away fail with
// an error that says so, without waiting for their deadline.
func TestServerDies(t *testing.T) {
	cc, sc := net.Pipe()
	served := make(chan error, 1)
	go func() { served <- Serve(sc, openLoop, nil) }()
	r, err := dialRemote(t, cc)
	must(t, err, "open")
	if r.canSetPort {
		t.Fatal("Serve without setPortState claims it can set the port")
	}
	pd, err := r.AllocPD()
	must(t, err, "alloc pd")
	_ = sc.Close() // the server's end of the stream goes away
	// Serve tears down the PD and closes its context; a client that never
	// sent close is no error.
	if err := <-served; err != nil {
		t.Fatalf("serve: %v", err)
	}
	start := time.Now()
	err = pd.Dealloc()
	if err == nil || !strings.Contains(err.Error(), "verbstest remote: dealloc pd") || time.Since(start) > 5*time.Second {
		t.Fatalf("call after the server died: %v after %v", err, time.Since(start))
	}
	t.Logf("call after the server died: %v", err)
	if err := r.Close(); err == nil {
		t.Fatal("close after the server died succeeded")
	}
}

// TestServeBadStream: Serve gives up, with an error, on a stream that is
// not the suite's.
func TestServeBadStream(t *testing.T) {
	cc, sc := net.Pipe()
	defer cc.Close()
	served := make(chan error, 1)
	go func() { served <- Serve(sc, openLoop, nil) }()
	// A well-framed message (length 5) that is no gob type or value.
	go func() { _, _ = cc.Write([]byte{5, 0xff, 0xff, 0xff, 0xff, 0xff}) }()
	select {
	case err := <-served:
		if err == nil {
			t.Fatal("Serve accepted garbage")
		}
		t.Logf("Serve on garbage: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return on a bad stream")
	}
}
