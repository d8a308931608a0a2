package verbs_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	_ "github.com/ibex-rdma/ibex/provider/loopback" // registers device loop0
	"github.com/ibex-rdma/ibex/verbs"
)

// side is one end of a connection: a context, PD, registered buffer, CQ
// and RC QP.
type side struct {
	ctx *verbs.Context
	pd  *verbs.PD
	mr  *verbs.MR
	cq  *verbs.CQ
	qp  *verbs.QP
}

func open(device string, size int) (*side, error) {
	s := &side{}
	var err error
	if s.ctx, err = verbs.Open(device); err != nil {
		return nil, err
	}
	if s.pd, err = s.ctx.AllocPD(); err != nil {
		return nil, err
	}
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	if s.mr, err = s.pd.RegMR(make([]byte, size), access); err != nil {
		return nil, err
	}
	if s.cq, err = s.ctx.CreateCQ(16); err != nil {
		return nil, err
	}
	s.qp, err = s.pd.CreateQP(verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8}})
	return s, err
}

func (s *side) close() {
	_ = s.qp.Destroy()
	_ = s.cq.Destroy()
	_ = s.mr.Dereg()
	_ = s.pd.Dealloc()
	_ = s.ctx.Close()
}

// wait polls the CQ for one completion, with a deadline.
func (s *side) wait() (verbs.WC, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wc [1]verbs.WC
	_, err := s.cq.PollWait(ctx, wc[:])
	return wc[0], err
}

// connect opens two ends on device and connects their QPs with the
// default attributes, exchanging ConnInfo as two hosts would out of band.
func connect(device string) (a, b *side, err error) {
	if a, err = open(device, 64); err != nil {
		return nil, nil, err
	}
	if b, err = open(device, 64); err != nil {
		return nil, nil, err
	}
	if err = a.qp.Connect(b.qp.Info(), verbs.ConnectOptions{}); err != nil {
		return nil, nil, err
	}
	return a, b, b.qp.Connect(a.qp.Info(), verbs.ConnectOptions{})
}

// Two RC QPs connected on loop0: an RDMA WRITE into the peer's memory, then
// an RDMA READ back from it, each with its completion.
func Example() {
	a, b, err := connect("loop0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.close()
	defer b.close()

	// WRITE 5 bytes from a's buffer into b's, at b's address and rkey.
	copy(a.mr.Bytes(), "hello")
	write := verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL:        []verbs.SGE{{Addr: a.mr.Addr(), Length: 5, LKey: a.mr.LKey()}},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	if err := a.qp.PostSend([]verbs.SendWR{write}); err != nil {
		fmt.Println(err)
		return
	}
	wc, err := a.wait()
	fmt.Println(wc.WRID, wc.Opcode, wc.Status, err, string(b.mr.Bytes()[:5]))

	// READ them back into the second half of a's buffer.
	read := verbs.SendWR{ID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGL:        []verbs.SGE{{Addr: a.mr.Addr() + 32, Length: 5, LKey: a.mr.LKey()}},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	if err := a.qp.PostSend([]verbs.SendWR{read}); err != nil {
		fmt.Println(err)
		return
	}
	wc, err = a.wait()
	fmt.Println(wc.WRID, wc.Opcode, wc.Status, wc.ByteLen, err, string(a.mr.Bytes()[32:37]))
	// Output:
	// 1 RDMA_WRITE SUCCESS <nil> hello
	// 2 RDMA_READ SUCCESS 5 <nil> hello
}

// A WRITE with an rkey the peer never gave: the request completes with
// REM_ACCESS_ERR, the QP moves to ERR and says why, and the request posted
// behind it is flushed.
func Example_errorCompletion() {
	a, b, err := connect("loop0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.close()
	defer b.close()

	sgl := []verbs.SGE{{Addr: a.mr.Addr(), Length: 8, LKey: a.mr.LKey()}}
	bad := verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: sgl,
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() ^ 1}
	next := verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: sgl,
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	if err := a.qp.PostSend([]verbs.SendWR{bad, next}); err != nil {
		fmt.Println(err)
		return
	}
	for range 2 {
		wc, err := a.wait()
		fmt.Println(wc.WRID, wc.Status, err)
	}
	// Err names the request and the responder's reason (QP numbers and
	// keys are random, so the example prints only the part that is not).
	fmt.Println(a.qp.State(), strings.Contains(a.qp.Err().Error(), "wr 0x1 RDMA_WRITE completed with REM_ACCESS_ERR"))
	// Output:
	// 1 REM_ACCESS_ERR <nil>
	// 2 WR_FLUSH_ERR <nil>
	// ERR true
}
