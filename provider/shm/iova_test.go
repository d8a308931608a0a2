package shm

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/verbs"
)

// TestRegMRIOVA: a peer names ordinary memory registered with RegMRIOVA by
// its iova, and the bytes land in (and are read from) the buffer, not at
// the process address the iova happens to equal. Before, a WRITE went to
// the target process at address iova+offset (process_vm_writev): an
// unmapped address failed the WRITE, a mapped one would have been
// overwritten.
func TestRegMRIOVA(t *testing.T) {
	ca, cb := openCtx(t), openCtx(t)
	defer ca.Close()
	defer cb.Close()
	type end struct {
		pd *verbs.PD
		cq *verbs.CQ
		qp *verbs.QP
		mr *verbs.MR
	}
	mk := func(c *verbs.Context, mr func(pd *verbs.PD) (*verbs.MR, error)) *end {
		e := &end{}
		var err error
		if e.pd, err = c.AllocPD(); err != nil {
			t.Fatal(err)
		}
		if e.cq, err = c.CreateCQ(8); err != nil {
			t.Fatal(err)
		}
		if e.mr, err = mr(e.pd); err != nil {
			t.Fatal(err)
		}
		if e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}}); err != nil {
			t.Fatal(err)
		}
		return e
	}
	const iova = 0x7e57_0000_0000
	target := make([]byte, 4096)
	a := mk(ca, func(pd *verbs.PD) (*verbs.MR, error) {
		return pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite)
	})
	b := mk(cb, func(pd *verbs.PD) (*verbs.MR, error) {
		return pd.RegMRIOVA(target, iova, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	})
	defer func() {
		for _, e := range []*end{a, b} {
			for _, err := range []error{e.qp.Destroy(), e.mr.Dereg(), e.cq.Destroy(), e.pd.Dealloc()} {
				if err != nil {
					t.Error(err)
				}
			}
		}
	}()
	if err := a.qp.Connect(b.qp.Info(), verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(a.qp.Info(), verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	src := a.mr.Bytes()
	copy(src, "written by iova")
	run := func(op verbs.Opcode, local, remote uint64) {
		t.Helper()
		w := verbs.SendWR{ID: 1, Opcode: op, Flags: verbs.SendSignaled,
			SGL:        []verbs.SGE{{Addr: a.mr.Addr() + local, Length: 15, LKey: a.mr.LKey()}},
			RemoteAddr: iova + remote, RKey: b.mr.RKey()}
		if err := a.qp.PostSend([]verbs.SendWR{w}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		wc := make([]verbs.WC, 1)
		if n, err := a.cq.PollWait(ctx, wc); err != nil || n != 1 {
			t.Fatalf("%v: no completion: %v", op, err)
		}
		if wc[0].Status != verbs.WCSuccess {
			t.Fatalf("%v to iova %#x: %v (%v)", op, iova+remote, wc[0].Status, a.qp.Err())
		}
	}
	run(verbs.WRRDMAWrite, 0, 100)
	if !bytes.Equal(target[100:115], src[:15]) {
		t.Fatalf("the WRITE to iova+100 left %q at the buffer's offset 100", target[100:115])
	}
	copy(target[200:], "read from iova.")
	run(verbs.WRRDMARead, 1000, 200)
	if !bytes.Equal(src[1000:1015], target[200:215]) {
		t.Fatalf("the READ from iova+200 brought %q", src[1000:1015])
	}
}
