// Package verbstest is the provider-independent conformance suite: one call
// runs every verbs behaviour ibex promises against a provider. A provider
// is done when Run passes for it, under -race.
//
//	func TestConformance(t *testing.T) {
//		verbstest.Run(t, verbstest.Config{Open: func(t testing.TB) (a, b *verbs.Context) { ... }})
//	}
package verbstest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/verbs"
)

// Config describes the provider under test.
type Config struct {
	// Open returns two fresh contexts, the two ends of a connection (they
	// may be the same device). The suite destroys everything it creates and
	// then closes both contexts.
	Open func(t testing.TB) (a, b *verbs.Context)
	// SetPortState, when the provider can change its port's state, does so
	// for the port both ends use; the port tests need it.
	SetPortState func(verbs.PortState)
	// Short skips the 64 MiB and 1,000-QP tests (for providers or machines
	// too slow to run them in CI); it must name why in ShortReason.
	Short       bool
	ShortReason string
}

// Run runs the whole suite as subtests of t.
func Run(t *testing.T, cfg Config) {
	if cfg.Open == nil {
		t.Fatal("verbstest: Config.Open is nil")
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
// registered buffer.
type end struct {
	t   testing.TB
	ctx *verbs.Context
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
	buf []byte
	mr  *verbs.MR
}

type endOpts struct {
	bufSize int
	access  verbs.Access
	cqDepth int
	cap     verbs.QPCap
	sigAll  bool
}

func openPair(t testing.TB, cfg Config) (a, b *verbs.Context) {
	t.Helper()
	a, b = cfg.Open(t)
	t.Cleanup(func() {
		if a == b {
			closeCtx(t, a)
			return
		}
		closeCtx(t, a)
		closeCtx(t, b)
	})
	return a, b
}

func closeCtx(t testing.TB, c *verbs.Context) {
	if err := c.Close(); err != nil {
		t.Errorf("close context: %v", err)
	}
}

func newEnd(t testing.TB, ctx *verbs.Context, o endOpts) *end {
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
	e.buf = make([]byte, o.bufSize)
	e.mr, err = e.pd.RegMR(e.buf, o.access)
	must(t, err, "reg mr")
	t.Cleanup(func() { mustCleanup(t, e.mr.Dereg(), "dereg mr") })
	e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, Cap: o.cap, SigAll: o.sigAll})
	must(t, err, "create qp")
	t.Cleanup(func() { mustCleanup(t, e.qp.Destroy(), "destroy qp") })
	return e
}

// regMR registers an extra buffer on e's PD, deregistered at cleanup.
func (e *end) regMR(n int, access verbs.Access) *verbs.MR {
	e.t.Helper()
	mr, err := e.pd.RegMR(make([]byte, n), access)
	must(e.t, err, "reg mr")
	e.t.Cleanup(func() {
		if err := mr.Dereg(); err != nil && !errors.Is(err, verbs.ErrClosed) {
			e.t.Errorf("dereg mr: %v", err)
		}
	})
	return mr
}

// pair opens two contexts and returns two connected ends.
func pair(t testing.TB, cfg Config, oa, ob endOpts, conn verbs.ConnectOptions) (a, b *end) {
	t.Helper()
	ca, cb := openPair(t, cfg)
	a, b = newEnd(t, ca, oa), newEnd(t, cb, ob)
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

func sgeOf(mr *verbs.MR, off, n int) verbs.SGE {
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

func waitCQ(t testing.TB, cq *verbs.CQ, n int) []verbs.WC {
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
func expectNoWC(t testing.TB, cq *verbs.CQ, d time.Duration) {
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

// waitEvent waits for an asynchronous event of type typ on ctx, skipping
// others.
func waitEvent(t testing.TB, c *verbs.Context, typ verbs.AsyncEventType) verbs.AsyncEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var seen []string
	for {
		ev, err := c.AsyncEvent(ctx)
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
func waitState(t testing.TB, qp *verbs.QP, want verbs.QPState) {
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
