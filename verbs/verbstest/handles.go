package verbstest

import (
	"context"
	"fmt"

	"github.com/ibex-rdma/ibex/verbs"
)

// The suite reaches each end's objects through these handles. A local end's
// handles are the verbs objects themselves (or thin wrappers where the
// method sets differ); a remote end's are RPC stubs (remote.go). The tests
// are written once against the handles and run in both modes.

// ctxHandle is an opened device.
type ctxHandle interface {
	AllocPD() (pdHandle, error)
	CreateCQ(depth int) (cqHandle, error)
	QueryPort(port uint8) (verbs.PortAttr, error)
	// Event waits for the next asynchronous event, as AsyncEvent does.
	Event(ctx context.Context) (event, error)
	Close() error
}

// pdHandle is a protection domain.
type pdHandle interface {
	// RegMR registers n bytes of fresh memory (make([]byte, n) in the
	// process that owns the PD).
	RegMR(n int, access verbs.Access) (mrHandle, error)
	// CreateQP creates a QP whose send and receive CQ is cq.
	CreateQP(cq cqHandle, cap verbs.QPCap, sigAll bool) (qpHandle, error)
	Dealloc() error
}

// cqHandle is a completion queue; *verbs.CQ is one.
type cqHandle interface {
	Poll(wc []verbs.WC) (int, error)
	Wait(ctx context.Context) error
	PollWait(ctx context.Context, wc []verbs.WC) (int, error)
	Destroy() error
}

// qpHandle is a queue pair; *verbs.QP is one.
type qpHandle interface {
	Num() uint32
	InitialPSN() uint32
	State() verbs.QPState
	Err() error
	Info() verbs.ConnInfo
	Query() verbs.QPAttr
	Modify(attr *verbs.QPAttr, mask verbs.AttrMask) error
	Connect(remote verbs.ConnInfo, opt verbs.ConnectOptions) error
	PostSend(wrs []verbs.SendWR) error
	PostRecv(wrs []verbs.RecvWR) error
	Stats() verbs.QPStats
	Destroy() error
}

// mrHandle is a registered memory region and access to its memory. Read
// returns a copy; both work after Dereg (the memory stays allocated), so
// a test can check that nothing touched it.
type mrHandle interface {
	Addr() uint64
	LKey() uint32
	RKey() uint32
	Len() int
	Dereg() error
	Read(off, n int) []byte
	Write(off int, data []byte)
}

var (
	_ cqHandle = (*verbs.CQ)(nil)
	_ qpHandle = (*verbs.QP)(nil)
)

// event is an asynchronous event as the suite sees it at either end. The
// QP is named by number: a remote end's QP is no object in this process.
type event struct {
	Type  verbs.AsyncEventType
	QPN   uint32   // QP events
	CQ    cqHandle // CQ events; nil otherwise
	Port  uint8    // port events
	Cause error    // why, for QP and CQ errors
	text  string   // the event as verbs formats it
}

func (e event) String() string { return e.text }

func localEvent(ev verbs.AsyncEvent) event {
	e := event{Type: ev.Type, Port: ev.Port, Cause: ev.Cause, text: ev.String()}
	if ev.QP != nil {
		e.QPN = ev.QP.Num()
	}
	if ev.CQ != nil {
		e.CQ = ev.CQ
	}
	return e
}

// localCtx is a context in this process.
type localCtx struct{ c *verbs.Context }

func (l localCtx) AllocPD() (pdHandle, error) {
	pd, err := l.c.AllocPD()
	if err != nil {
		return nil, err
	}
	return localPD{pd}, nil
}

func (l localCtx) CreateCQ(depth int) (cqHandle, error) {
	cq, err := l.c.CreateCQ(depth)
	if err != nil {
		return nil, err
	}
	return cq, nil
}

func (l localCtx) QueryPort(port uint8) (verbs.PortAttr, error) { return l.c.QueryPort(port) }

func (l localCtx) Event(ctx context.Context) (event, error) {
	ev, err := l.c.AsyncEvent(ctx)
	if err != nil {
		return event{}, err
	}
	return localEvent(ev), nil
}

func (l localCtx) Close() error { return l.c.Close() }

type localPD struct{ pd *verbs.PD }

func (l localPD) RegMR(n int, access verbs.Access) (mrHandle, error) {
	mr, err := l.pd.RegMR(Buf(l.pd.Context(), n), access)
	if err != nil {
		return nil, err
	}
	return localMR{mr}, nil
}

func (l localPD) CreateQP(cq cqHandle, cap verbs.QPCap, sigAll bool) (qpHandle, error) {
	c, ok := cq.(*verbs.CQ)
	if !ok {
		return nil, fmt.Errorf("create qp: cq %T is not in this process: %w", cq, verbs.ErrInvalidArgument)
	}
	qp, err := l.pd.CreateQP(verbs.QPInitAttr{SendCQ: c, RecvCQ: c, Cap: cap, SigAll: sigAll})
	if err != nil {
		return nil, err
	}
	return qp, nil
}

func (l localPD) Dealloc() error { return l.pd.Dealloc() }

type localMR struct{ *verbs.MR }

func (l localMR) Read(off, n int) []byte { return append([]byte(nil), l.Bytes()[off:off+n]...) }

func (l localMR) Write(off int, data []byte) { copy(l.Bytes()[off:off+len(data)], data) }

// Buf is n bytes of fresh memory for RegMR: make([]byte, n), or, on a
// device with CapAllocatedMemory, Context.AllocBuf's (kept until the
// context closes). n <= 0 gives nil, for the suite's length checks.
func Buf(c *verbs.Context, n int) []byte {
	if n <= 0 || !c.QueryDevice().Caps.Has(verbs.CapAllocatedMemory) {
		return make([]byte, max(n, 0))
	}
	b, _, err := c.AllocBuf(n)
	if err != nil {
		return make([]byte, n) // RegMR then says why
	}
	return b
}
