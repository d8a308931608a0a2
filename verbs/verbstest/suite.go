// Package verbstest is the provider-independent conformance suite: one call
// runs every verbs behaviour ibex promises against a provider. A provider
// is done when Run passes for it, under -race.
//
//	func TestConformance(t *testing.T) {
//		verbstest.Run(t, verbstest.Config{Open: func(t testing.TB) (a, b *verbs.Context) { ... }})
//	}
//
// # Remote mode
//
// With Config.Remote set, end a of every connection stays in the test
// process and end b lives behind a byte stream, in a server running Serve:
// typically another process, so that a provider's cross-process path is
// what the suite exercises. The suite reaches b's objects and memory only
// by RPC (request/response over the stream, encoding/gob); b's buffers are
// allocated by the server. The same test functions run in both modes; the
// only thing that needs both ends in this process (a CQ of b's context
// offered to a QP of a's, in Resources) is checked locally only.
//
// A provider runs the remote end in a child process with two helpers.
// TestMain calls ChildMain first, which serves and exits when the process
// was started by StartChild and returns at once otherwise:
//
//	const childEnv = "IBEX_SHM_SUITE_CHILD"
//
//	func TestMain(m *testing.M) {
//		verbstest.ChildMain(childEnv, func() (*verbs.Context, error) { return verbs.Open("shm0") }, shm.SetPortState)
//		goleak.VerifyTestMain(m)
//	}
//
//	func TestConformanceCrossProcess(t *testing.T) {
//		dial := verbstest.StartChild(t, childEnv) // the child ends at t's cleanup
//		verbstest.Run(t, verbstest.Config{
//			Remote: func(t testing.TB) (*verbs.Context, io.ReadWriteCloser) {
//				a, err := verbs.Open("shm0")
//				if err != nil {
//					t.Fatal(err)
//				}
//				conn, err := dial()
//				if err != nil {
//					t.Fatal(err)
//				}
//				return a, conn
//			},
//			SetPortState: shm.SetPortState,
//		})
//	}
package verbstest

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/verbs"
)

// Config describes the provider under test.
type Config struct {
	// Open returns two fresh contexts, the two ends of a connection (they
	// may be the same device, or even the same context). The suite destroys
	// everything it creates and then closes both contexts. Unused when
	// Remote is set.
	Open func(t testing.TB) (a, b *verbs.Context)
	// Remote, when set, runs the suite with end b in another process (or
	// anything reachable only through a byte stream). It returns the local
	// context (end a) and a fresh connection to a server running Serve; the
	// suite closes the connection at the end of the test, and the server
	// then destroys everything it created for it and closes its context.
	Remote func(t testing.TB) (a *verbs.Context, conn io.ReadWriteCloser)
	// SetPortState, when the provider can change its port's state, does so
	// for the port both ends use; the port tests need it. In remote mode it
	// changes the local port, and the suite asks the server to call the
	// setPortState given to Serve as well.
	SetPortState func(verbs.PortState)
	// Short skips the 64 MiB and 1,000-QP tests (for providers or machines
	// too slow to run them in CI); it must name why in ShortReason.
	Short       bool
	ShortReason string
}

// Run runs the whole suite as subtests of t.
func Run(t *testing.T, cfg Config) {
	if cfg.Open == nil && cfg.Remote == nil {
		t.Fatal("verbstest: Config.Open and Config.Remote are both nil")
	}
	tests := []struct {
		name string
		fn   func(*testing.T, Config)
	}{
		{"Device", testDevice},
		{"MR", testMR},
		{"MRKeysUnguessable", testMRKeys},
		{"Resources", testResources},
		{"StateMachine", testStateMachine},
		{"StateMachineValues", testStateValues},
		{"ConnInfo", testConnInfo},
		{"Send", testSend},
		{"SendWithImm", testSendImm},
		{"Write", testWrite},
		{"WriteWithImm", testWriteImm},
		{"Read", testRead},
		{"AtomicFetchAdd", testFetchAdd},
		{"AtomicCmpSwap", testCmpSwap},
		{"AtomicExactlyOnce", testAtomicExactlyOnce},
		{"AtomicMisaligned", testAtomicMisaligned},
		{"SGEList", testSGEList},
		{"Inline", testInline},
		{"Unsignaled", testUnsignaled},
		{"SigAll", testSigAll},
		{"Batch", testBatch},
		{"BadWRInBatch", testBadWRInBatch},
		{"Ordering", testOrdering},
		{"SendAfterWriteSeesWrite", testSendAfterWrite},
		{"Fence", testFence},
		{"ZeroByte", testZeroByte},
		{"Large64MiB", testLarge},
		{"RemoteAccessBadRKey", testBadRKey},
		{"RemoteAccessPermission", testPermission},
		{"RemoteAccessBounds", testBounds},
		{"RemoteInvalidRequest", testInvalidRequest},
		{"LocalProtection", testLocalProt},
		{"LocalLength", testLocalLength},
		{"RemoteOperational", testRemoteOp},
		{"LocalProtAfterPost", testLocalProtAfterPost},
		{"LocalQPOp", testLocalQPOp},
		{"PostErrors", testPostErrors},
		{"WrongPD", testWrongPD},
		{"DeregisteredMR", testDeregistered},
		{"DeregWhileInFlight", testDeregInFlight},
		{"UnsignaledErrorCompletes", testUnsignaledError},
		{"FlushOnErr", testFlushOnErr},
		{"PostInErr", testPostInErr},
		{"ResetDiscards", testResetDiscards},
		{"RNRFinite", testRNRFinite},
		{"RNRInfinite", testRNRInfinite},
		{"RetryExceeded", testRetryExceeded},
		{"CQOverflow", testCQOverflow},
		{"CQWait", testCQWait},
		{"SQD", testSQD},
		{"PortState", testPortState},
		{"ThousandQPs", testThousandQPs},
		{"ConcurrentPosters", testConcurrentPosters},
		{"ConcurrentQPs", testConcurrentQPs},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, cfg) })
	}
}

// waitTimeout bounds every wait for a completion or event in the suite.
const waitTimeout = 10 * time.Second

// end is one side of a connection: a PD, a CQ for both queues, a QP and a
// registered buffer. End a is always in this process; end b is in another
// one in remote mode, so the tests reach b's memory with read and write,
// never through buf.
type end struct {
	t   testing.TB
	ctx ctxHandle
	pd  pdHandle
	cq  cqHandle
	qp  qpHandle
	mr  mrHandle
	buf []byte // mr's memory; nil for a remote end
}

type endOpts struct {
	bufSize int
	access  verbs.Access
	cqDepth int
	cap     verbs.QPCap
	sigAll  bool
}

// openPair opens the two contexts of a test: a in this process, b in this
// process or (remote mode) behind the server. Cleanup closes both.
func openPair(t testing.TB, cfg Config) (a *verbs.Context, b ctxHandle) {
	t.Helper()
	if cfg.Remote != nil {
		a, conn := cfg.Remote(t)
		t.Cleanup(func() { closeCtx(t, localCtx{a}) })
		r, err := dialRemote(t, conn)
		if err != nil {
			_ = conn.Close()
			t.Fatalf("open the remote end: %v", err)
		}
		// Registered after a's: runs first, as in local mode.
		t.Cleanup(func() { closeCtx(t, r) })
		return a, r
	}
	a, lb := cfg.Open(t)
	t.Cleanup(func() {
		if a == lb {
			closeCtx(t, localCtx{a})
			return
		}
		closeCtx(t, localCtx{a})
		closeCtx(t, localCtx{lb})
	})
	return a, localCtx{lb}
}

func closeCtx(t testing.TB, c ctxHandle) {
	if err := c.Close(); err != nil {
		t.Errorf("close context: %v", err)
	}
}

func newEnd(t testing.TB, ctx ctxHandle, o endOpts) *end {
	t.Helper()
	if o.bufSize == 0 {
		o.bufSize = 64 << 10
	}
	if o.access == 0 {
		o.access = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	}
	if o.cqDepth == 0 {
		o.cqDepth = 1024
	}
	e := &end{t: t, ctx: ctx}
	var err error
	e.pd, err = ctx.AllocPD()
	must(t, err, "alloc pd")
	t.Cleanup(func() { mustCleanup(t, e.pd.Dealloc(), "dealloc pd") })
	e.cq, err = ctx.CreateCQ(o.cqDepth)
	must(t, err, "create cq")
	t.Cleanup(func() { mustCleanup(t, e.cq.Destroy(), "destroy cq") })
	e.mr, err = e.pd.RegMR(o.bufSize, o.access)
	must(t, err, "reg mr")
	if l, ok := e.mr.(localMR); ok {
		e.buf = l.Bytes()
	}
	t.Cleanup(func() { mustCleanup(t, e.mr.Dereg(), "dereg mr") })
	e.qp, err = e.pd.CreateQP(e.cq, o.cap, o.sigAll)
	must(t, err, "create qp")
	t.Cleanup(func() { mustCleanup(t, e.qp.Destroy(), "destroy qp") })
	return e
}

// regMR registers an extra buffer of n bytes on e's PD, deregistered at
// cleanup.
func (e *end) regMR(n int, access verbs.Access) mrHandle {
	e.t.Helper()
	mr, err := e.pd.RegMR(n, access)
	must(e.t, err, "reg mr")
	e.t.Cleanup(func() {
		if err := mr.Dereg(); err != nil && !errors.Is(err, verbs.ErrClosed) {
			e.t.Errorf("dereg mr: %v", err)
		}
	})
	return mr
}

// read returns a copy of n bytes at off of e's main MR.
func (e *end) read(off, n int) []byte { return e.mr.Read(off, n) }

// write copies data to off of e's main MR.
func (e *end) write(off int, data []byte) { e.mr.Write(off, data) }

func (e *end) byteAt(off int) byte { return e.mr.Read(off, 1)[0] }

// u64 and putU64 access the native-endian word at off of e's main MR.
func (e *end) u64(off int) uint64 { return u64(e.mr.Read(off, 8)) }

func (e *end) putU64(off int, v uint64) { e.mr.Write(off, binary.NativeEndian.AppendUint64(nil, v)) }

// pair opens two contexts and returns two connected ends.
func pair(t testing.TB, cfg Config, oa, ob endOpts, conn verbs.ConnectOptions) (a, b *end) {
	t.Helper()
	ca, cb := openPair(t, cfg)
	a, b = newEnd(t, localCtx{ca}, oa), newEnd(t, cb, ob)
	connect(t, a, b, conn)
	return a, b
}

func connect(t testing.TB, a, b *end, conn verbs.ConnectOptions) {
	t.Helper()
	must(t, a.qp.Connect(b.qp.Info(), conn), "connect a")
	must(t, b.qp.Connect(a.qp.Info(), conn), "connect b")
}

func must(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func mustCleanup(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil {
		t.Errorf("cleanup: %s: %v", what, err)
	}
}

// sge covers buf[off:off+n] of e's main MR.
func (e *end) sge(off, n int) verbs.SGE {
	return verbs.SGE{Addr: e.mr.Addr() + uint64(off), Length: uint32(n), LKey: e.mr.LKey()}
}

func sgeOf(mr mrHandle, off, n int) verbs.SGE {
	return verbs.SGE{Addr: mr.Addr() + uint64(off), Length: uint32(n), LKey: mr.LKey()}
}

func (e *end) post(wrs ...verbs.SendWR) {
	e.t.Helper()
	must(e.t, e.qp.PostSend(wrs), "post send")
}

func (e *end) recv(wrs ...verbs.RecvWR) {
	e.t.Helper()
	must(e.t, e.qp.PostRecv(wrs), "post recv")
}

// wait polls e's CQ until n completions arrived, failing after waitTimeout.
func (e *end) wait(n int) []verbs.WC {
	e.t.Helper()
	return waitCQ(e.t, e.cq, n)
}

func waitCQ(t testing.TB, cq cqHandle, n int) []verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	out := make([]verbs.WC, 0, n)
	buf := make([]verbs.WC, 64)
	for len(out) < n {
		k, err := cq.PollWait(ctx, buf[:min(len(buf), n-len(out))])
		if err != nil {
			t.Fatalf("waiting for completion %d of %d: %v (got %v)", len(out)+1, n, err, out)
		}
		out = append(out, buf[:k]...)
	}
	return out
}

// expectNoWC checks that no completion arrives within d.
func expectNoWC(t testing.TB, cq cqHandle, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wc [1]verbs.WC
	if n, err := cq.PollWait(ctx, wc[:]); n > 0 || (err != nil && !errors.Is(err, context.DeadlineExceeded)) {
		t.Fatalf("expected no completion, got %v (err %v)", wc[:n], err)
	}
}

func (e *end) wait1() verbs.WC {
	e.t.Helper()
	return e.wait(1)[0]
}

// expectWC checks the fields of a completion that matter for the test.
func expectWC(t testing.TB, wc verbs.WC, id uint64, status verbs.WCStatus, op verbs.WCOpcode) {
	t.Helper()
	if wc.WRID != id || wc.Status != status {
		t.Fatalf("completion %v: want wr_id %#x status %v", wc, id, status)
	}
	if status == verbs.WCSuccess && wc.Opcode != op {
		t.Fatalf("completion %v: want opcode %v", wc, op)
	}
}

// waitEvent waits for an asynchronous event of type typ on c, skipping
// others.
func waitEvent(t testing.TB, c ctxHandle, typ verbs.AsyncEventType) event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var seen []string
	for {
		ev, err := c.Event(ctx)
		if err != nil {
			t.Fatalf("waiting for async event %v: %v (saw %v)", typ, err, seen)
		}
		if ev.Type == typ {
			return ev
		}
		seen = append(seen, ev.String())
	}
}

// waitState polls a QP until it reaches want.
func waitState(t testing.TB, qp qpHandle, want verbs.QPState) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for qp.State() != want {
		if time.Now().After(deadline) {
			t.Fatalf("qp %#x: state %v, want %v", qp.Num(), qp.State(), want)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func errContains(t testing.TB, err error, sentinel error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want error wrapping %v, got nil", sentinel)
	}
	if sentinel != nil && !errors.Is(err, sentinel) {
		t.Fatalf("error %q does not wrap %v", err, sentinel)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not mention %q", err, p)
		}
	}
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

// pattern returns n bytes filled as fill does.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	fill(b, seed)
	return b
}
