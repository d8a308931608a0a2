package udp_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/verbs"
)

// TestDestroyAcknowledges: a QP destroyed, and its device closed, at once
// after its application saw the peer's WRITE land (ib_write_lat's server
// ends so) still acknowledges that WRITE: the peer's request completes
// with SUCCESS, not RETRY_EXC_ERR. The target polls its CQ, so the pass
// that places the WRITE is its own, the one that holds acknowledgements
// back (keepAcks); before destroy sent them, this failed in most rounds.
func TestDestroyAcknowledges(t *testing.T) {
	a, b := newDevices(t)
	for round := range 20 {
		ca, cb := open(t, a), open(t, b)
		ea, eb := newEnd(t, ca), newEnd(t, cb)
		// perftest's timeout and retries (14: 67 ms, 7): an ACK lost
		// fails the round in about half a second.
		var opt verbs.ConnectOptions
		if err := ea.qp.Connect(eb.qp.Info(), opt); err != nil {
			t.Fatal(err)
		}
		if err := eb.qp.Connect(ea.qp.Info(), opt); err != nil {
			t.Fatal(err)
		}
		mark := byte(round + 1)
		ea.mr.Bytes()[7] = mark
		w := verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL:        []verbs.SGE{{Addr: ea.mr.Addr(), Length: 8, LKey: ea.mr.LKey()}},
			RemoteAddr: eb.mr.Addr(), RKey: eb.mr.RKey()}
		wc := make([]verbs.WC, 1)
		// The target polls before the WRITE is posted, as a latency
		// test's receiver does.
		for range 100 {
			if _, err := eb.cq.Poll(wc); err != nil {
				t.Fatal(err)
			}
		}
		if err := ea.qp.PostSend([]verbs.SendWR{w}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for eb.mr.Bytes()[7] != mark {
			if _, err := eb.cq.Poll(wc); err != nil {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the WRITE did not land in 10 s", round)
			}
		}
		eb.close(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		n, err := ea.cq.PollWait(ctx, wc)
		cancel()
		if err != nil || n != 1 {
			t.Fatalf("round %d: no completion of the WRITE: %v", round, err)
		}
		if wc[0].Status != verbs.WCSuccess {
			t.Fatalf("round %d: the WRITE the destroyed QP had received completed %v (%v)", round, wc[0].Status, ea.qp.Err())
		}
		ea.close(t)
	}
}

type farewellEnd struct {
	ctx *verbs.Context
	pd  *verbs.PD
	cq  *verbs.CQ
	mr  *verbs.MR
	qp  *verbs.QP
}

func newEnd(t *testing.T, c *verbs.Context) *farewellEnd {
	t.Helper()
	e := &farewellEnd{ctx: c}
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

// close destroys everything at once, in the order an application does.
func (e *farewellEnd) close(t *testing.T) {
	t.Helper()
	for i, err := range []error{e.qp.Destroy(), e.mr.Dereg(), e.cq.Destroy(), e.pd.Dealloc(), e.ctx.Close()} {
		if err != nil {
			t.Error(fmt.Errorf("teardown step %d: %w", i, err))
		}
	}
}
