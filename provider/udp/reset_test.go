package udp

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/rc/rctest"
	"github.com/ibex-rdma/ibex/verbs"
)

// TestResetStopsResponder: once Modify to RESET has returned, the QP takes
// no request any more, however busy its device's loop is with other QPs:
// a WRITE sent to it is neither placed nor acknowledged, and the sender
// ends in RETRY_EXC_ERR. The conformance suite's RetryExceeded failed so
// in a CI run (the WRITE was acknowledged, and only the request behind it
// failed): the RESET was still queued for a loop in mid-pass.
func TestResetStopsResponder(t *testing.T) {
	da, db := newMemNet(1, rctest.Faults{}).devices(t)
	ca, cb := memOpen(t, da), memOpen(t, db)
	// A stream of WRITEs between two other QPs of the same devices keeps
	// the target's loop in its passes.
	sa, sb := newResetEnd(t, ca), newResetEnd(t, cb)
	connectPair(t, sa, sb, verbs.ConnectOptions{})
	stop := make(chan struct{})
	streamed := make(chan error, 1)
	go func() { streamed <- stream(sa, sb, stop) }()
	defer func() {
		close(stop)
		if err := <-streamed; err != nil {
			t.Error(err)
		}
		sa.destroy(t)
		sb.destroy(t)
		for _, c := range []*verbs.Context{ca, cb} {
			if err := c.Close(); err != nil {
				t.Error(err)
			}
		}
	}()

	fail := verbs.ConnectOptions{Set: verbs.AttrTimeout | verbs.AttrRetryCnt, Attr: verbs.QPAttr{Timeout: 1, RetryCnt: 0}}
	wc := make([]verbs.WC, 1)
	for round := range 200 {
		ea, eb := newResetEnd(t, ca), newResetEnd(t, cb)
		connectPair(t, ea, eb, fail)
		if err := eb.qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState); err != nil {
			t.Fatal(err)
		}
		ea.mr.Bytes()[0] = 0xa5
		w := verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL:        []verbs.SGE{{Addr: ea.mr.Addr(), Length: 8, LKey: ea.mr.LKey()}},
			RemoteAddr: eb.mr.Addr(), RKey: eb.mr.RKey()}
		if err := ea.qp.PostSend([]verbs.SendWR{w}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		n, err := ea.cq.PollWait(ctx, wc)
		cancel()
		if err != nil || n != 1 {
			t.Fatalf("round %d: no completion of the WRITE: %v", round, err)
		}
		if wc[0].Status != verbs.WCRetryExcErr || eb.mr.Bytes()[0] != 0 {
			t.Fatalf("round %d: a WRITE to a QP in RESET completed %v, and placed %#x (want RETRY_EXC_ERR, nothing placed)", round, wc[0].Status, eb.mr.Bytes()[0])
		}
		ea.destroy(t)
		eb.destroy(t)
	}
}

// resetEnd is one QP, its CQ and a 4 KiB MR on an open context.
type resetEnd struct {
	pd *verbs.PD
	cq *verbs.CQ
	mr *verbs.MR
	qp *verbs.QP
}

func newResetEnd(t *testing.T, c *verbs.Context) *resetEnd {
	t.Helper()
	e := &resetEnd{}
	var err error
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	e.pd, err = c.AllocPD()
	must(err)
	e.cq, err = c.CreateCQ(16)
	must(err)
	e.mr, err = e.pd.AllocMR(4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	must(err)
	e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	must(err)
	return e
}

func connectPair(t *testing.T, a, b *resetEnd, opt verbs.ConnectOptions) {
	t.Helper()
	if err := a.qp.Connect(b.qp.Info(), opt); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(a.qp.Info(), opt); err != nil {
		t.Fatal(err)
	}
}

// stream WRITEs from a to b, four at a time, until stop.
func stream(a, b *resetEnd, stop <-chan struct{}) error {
	w := verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL:        []verbs.SGE{{Addr: a.mr.Addr(), Length: 4096, LKey: a.mr.LKey()}},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	wrs := []verbs.SendWR{w, w, w, w}
	wc := make([]verbs.WC, 4)
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		if err := a.qp.PostSend(wrs); err != nil {
			return err
		}
		for got := 0; got < len(wrs); {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			n, err := a.cq.PollWait(ctx, wc)
			cancel()
			if err != nil {
				return fmt.Errorf("stream: %w", err)
			}
			for _, c := range wc[:n] {
				if c.Status != verbs.WCSuccess {
					return fmt.Errorf("stream: a WRITE completed %v", c.Status)
				}
			}
			got += n
		}
	}
}

// destroy destroys the QP, MR, CQ and PD; the context stays open.
func (e *resetEnd) destroy(t *testing.T) {
	t.Helper()
	for i, err := range []error{e.qp.Destroy(), e.mr.Dereg(), e.cq.Destroy(), e.pd.Dealloc()} {
		if err != nil {
			t.Error(fmt.Errorf("teardown step %d: %w", i, err))
		}
	}
}
