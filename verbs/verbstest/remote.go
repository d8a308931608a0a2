package verbstest

import (
	"context"
	"encoding/gob"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/verbs"
)

// callTimeout bounds a call that does not wait; a call that waits on the
// server (with at most the suite's waitTimeout) gets its wait on top.
const callTimeout = 30 * time.Second

// memChunk bounds the bytes one read or write call moves, so a 64 MiB
// buffer does not travel as one message.
const memChunk = 1 << 20

// client is the suite's side of a connection to Serve. It is safe for
// concurrent use: calls are matched to responses by ID.
type client struct {
	t    testing.TB // fails the test when a call without an error result fails
	conn io.ReadWriteCloser

	wmu sync.Mutex // serialises requests
	enc *gob.Encoder

	mu    sync.Mutex
	next  uint64
	calls map[uint64]chan *response
	err   error         // why the connection ended, once it has
	done  chan struct{} // closed when the reader has stopped
}

func newClient(t testing.TB, conn io.ReadWriteCloser) *client {
	c := &client{t: t, conn: conn, enc: gob.NewEncoder(conn), calls: map[uint64]chan *response{}, done: make(chan struct{})}
	go c.read(gob.NewDecoder(conn))
	return c
}

func (c *client) read(dec *gob.Decoder) {
	defer close(c.done)
	for {
		resp := new(response) // gob leaves fields the message lacks untouched
		if err := dec.Decode(resp); err != nil {
			c.fail(fmt.Errorf("connection to the server lost: %w", err))
			return
		}
		c.mu.Lock()
		ch := c.calls[resp.ID]
		delete(c.calls, resp.ID)
		c.mu.Unlock()
		if ch != nil { // nil: the caller gave up
			ch <- resp
		}
	}
}

// fail ends the connection: every call waiting and every later call fails
// with err.
func (c *client) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	for id, ch := range c.calls {
		close(ch)
		delete(c.calls, id)
	}
	c.mu.Unlock()
	_ = c.conn.Close()
}

func (c *client) forget(id uint64) {
	c.mu.Lock()
	delete(c.calls, id)
	c.mu.Unlock()
}

type writeDeadliner interface{ SetWriteDeadline(time.Time) error }

// call sends req and waits for its response, for at most limit (0: until
// ctx ends). The error is the server's verbs error, rebuilt, or one of the
// transport's, which names the call.
func (c *client) call(ctx context.Context, req *request, limit time.Duration) (*response, error) {
	ch := make(chan *response, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, fmt.Errorf("verbstest remote: %v: %w", req.Op, err)
	}
	c.next++
	req.ID = c.next
	c.calls[req.ID] = ch
	c.mu.Unlock()

	c.wmu.Lock()
	if d, ok := c.conn.(writeDeadliner); ok {
		_ = d.SetWriteDeadline(time.Now().Add(callTimeout))
	}
	err := c.enc.Encode(req)
	c.wmu.Unlock()
	if err != nil {
		// A request cut short leaves the stream unusable.
		c.fail(fmt.Errorf("send %v: %w", req.Op, err))
		return nil, fmt.Errorf("verbstest remote: %v: send: %w", req.Op, err)
	}

	var expired <-chan time.Time
	if limit > 0 {
		timer := time.NewTimer(limit)
		defer timer.Stop()
		expired = timer.C
	}
	select {
	case resp, ok := <-ch:
		if !ok {
			c.mu.Lock()
			err := c.err
			c.mu.Unlock()
			return nil, fmt.Errorf("verbstest remote: %v: %w", req.Op, err)
		}
		return resp, resp.Err.decode()
	case <-expired:
		c.forget(req.ID)
		return nil, fmt.Errorf("verbstest remote: %v: no answer from the server within %v", req.Op, limit)
	case <-ctx.Done():
		c.forget(req.ID)
		return nil, ctx.Err()
	}
}

// do is call for requests that do not wait.
func (c *client) do(req *request) (*response, error) {
	return c.call(context.Background(), req, callTimeout)
}

// wait is call for requests that wait on the server: the server waits for
// what is left of ctx's time, and the client for its answer, a while
// longer. The client does not give up at ctx's deadline itself: the answer
// may carry completions or an event the server already took (and an
// expired ctx still polls once, as locally). Without a deadline, the server
// waits until the connection ends, and a cancelled ctx abandons the call
// (with what the server may still take).
func (c *client) wait(ctx context.Context, req *request) (*response, error) {
	if dl, ok := ctx.Deadline(); ok {
		req.HasTimeout, req.Timeout = true, max(0, time.Until(dl))
		return c.call(context.Background(), req, req.Timeout+callTimeout)
	}
	return c.call(ctx, req, 0)
}

// must is do for calls whose verbs method has no error result: a failure
// is the transport's, and fails the test.
func (c *client) must(req *request) *response {
	c.t.Helper()
	resp, err := c.do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp
}

// close ends the connection and waits for the reader to stop.
func (c *client) close() {
	c.fail(fmt.Errorf("connection closed: %w", verbs.ErrClosed))
	<-c.done
}

// remoteCtx is the context of a remote end.
type remoteCtx struct {
	c          *client
	canSetPort bool // Serve was given a setPortState
}

// dialRemote opens the server's context over conn. The connection is
// closed by the context's Close.
func dialRemote(t testing.TB, conn io.ReadWriteCloser) (*remoteCtx, error) {
	c := newClient(t, conn)
	resp, err := c.do(&request{Op: opOpen, N: protocolVersion})
	if err != nil {
		c.close()
		return nil, err
	}
	return &remoteCtx{c: c, canSetPort: resp.CanSetPort}, nil
}

func (r *remoteCtx) AllocPD() (pdHandle, error) {
	resp, err := r.c.do(&request{Op: opAllocPD})
	if err != nil {
		return nil, err
	}
	return &remotePD{r.c, resp.H}, nil
}

func (r *remoteCtx) CreateCQ(depth int) (cqHandle, error) {
	resp, err := r.c.do(&request{Op: opCreateCQ, N: depth})
	if err != nil {
		return nil, err
	}
	return &remoteCQ{r.c, resp.H}, nil
}

func (r *remoteCtx) QueryPort(port uint8) (verbs.PortAttr, error) {
	resp, err := r.c.do(&request{Op: opQueryPort, Port: port})
	if err != nil {
		return verbs.PortAttr{}, err
	}
	return resp.PortAttr, nil
}

func (r *remoteCtx) Event(ctx context.Context) (event, error) {
	resp, err := r.c.wait(ctx, &request{Op: opEvent})
	if err != nil {
		return event{}, err
	}
	w := resp.Event
	ev := event{Type: w.Type, QPN: w.QPN, Port: w.Port, Cause: w.Cause.decode(), text: w.Text}
	if w.IsCQ {
		ev.CQ = &remoteCQ{r.c, w.CQ}
	}
	return ev, nil
}

// Close closes the server's context, reporting what a local Close would
// (ErrBusy for objects left), and then the connection.
func (r *remoteCtx) Close() error {
	_, err := r.c.do(&request{Op: opClose})
	r.c.close()
	return err
}

func (r *remoteCtx) setPortState(s verbs.PortState) error {
	_, err := r.c.do(&request{Op: opSetPort, PortState: s})
	return err
}

type remotePD struct {
	c *client
	h uint64
}

func (p *remotePD) RegMR(n int, access verbs.Access) (mrHandle, error) {
	resp, err := p.c.do(&request{Op: opRegMR, H: p.h, N: n, Access: access})
	if err != nil {
		return nil, err
	}
	return &remoteMR{c: p.c, h: resp.H, addr: resp.Addr, lkey: resp.LKey, rkey: resp.RKey, n: resp.N}, nil
}

func (p *remotePD) CreateQP(cq cqHandle, cap verbs.QPCap, sigAll bool) (qpHandle, error) {
	rcq, ok := cq.(*remoteCQ)
	if !ok || rcq.c != p.c {
		return nil, fmt.Errorf("create qp: cq %T is not in the remote context: %w", cq, verbs.ErrInvalidArgument)
	}
	resp, err := p.c.do(&request{Op: opCreateQP, H: p.h, CQ: rcq.h, Cap: cap, SigAll: sigAll})
	if err != nil {
		return nil, err
	}
	return &remoteQP{c: p.c, h: resp.H, num: resp.QPN, psn: resp.PSN}, nil
}

func (p *remotePD) Dealloc() error {
	_, err := p.c.do(&request{Op: opDeallocPD, H: p.h})
	return err
}

type remoteCQ struct {
	c *client
	h uint64
}

func (q *remoteCQ) Poll(wc []verbs.WC) (int, error) {
	resp, err := q.c.do(&request{Op: opPoll, H: q.h, N: len(wc)})
	if resp == nil {
		return 0, err
	}
	return copy(wc, resp.WC), err
}

func (q *remoteCQ) PollWait(ctx context.Context, wc []verbs.WC) (int, error) {
	resp, err := q.c.wait(ctx, &request{Op: opPollWait, H: q.h, N: len(wc)})
	if resp == nil {
		return 0, err
	}
	return copy(wc, resp.WC), err
}

func (q *remoteCQ) Wait(ctx context.Context) error {
	_, err := q.c.wait(ctx, &request{Op: opWait, H: q.h})
	return err
}

func (q *remoteCQ) Destroy() error {
	_, err := q.c.do(&request{Op: opDestroyCQ, H: q.h})
	return err
}

type remoteMR struct {
	c          *client
	h          uint64
	addr       uint64
	lkey, rkey uint32
	n          int
}

func (m *remoteMR) Addr() uint64 { return m.addr }
func (m *remoteMR) LKey() uint32 { return m.lkey }
func (m *remoteMR) RKey() uint32 { return m.rkey }
func (m *remoteMR) Len() int     { return m.n }

func (m *remoteMR) Dereg() error {
	_, err := m.c.do(&request{Op: opDereg, H: m.h})
	return err
}

func (m *remoteMR) Read(off, n int) []byte {
	m.c.t.Helper()
	out := make([]byte, 0, n)
	for len(out) < n {
		k := min(n-len(out), memChunk)
		resp := m.c.must(&request{Op: opRead, H: m.h, Off: off + len(out), N: k})
		out = append(out, resp.Data...)
	}
	return out
}

func (m *remoteMR) Write(off int, data []byte) {
	m.c.t.Helper()
	for len(data) > 0 {
		k := min(len(data), memChunk)
		m.c.must(&request{Op: opWrite, H: m.h, Off: off, Data: data[:k]})
		off, data = off+k, data[k:]
	}
}

type remoteQP struct {
	c        *client
	h        uint64
	num, psn uint32
}

func (q *remoteQP) Num() uint32        { return q.num }
func (q *remoteQP) InitialPSN() uint32 { return q.psn }

func (q *remoteQP) State() verbs.QPState {
	q.c.t.Helper()
	return q.c.must(&request{Op: opState, H: q.h}).State
}

func (q *remoteQP) Err() error {
	q.c.t.Helper()
	return q.c.must(&request{Op: opErr, H: q.h}).Cause.decode()
}

func (q *remoteQP) Info() verbs.ConnInfo {
	q.c.t.Helper()
	return q.c.must(&request{Op: opInfo, H: q.h}).Info
}

func (q *remoteQP) Query() verbs.QPAttr {
	q.c.t.Helper()
	return q.c.must(&request{Op: opQuery, H: q.h}).Attr
}

func (q *remoteQP) Stats() verbs.QPStats {
	q.c.t.Helper()
	return q.c.must(&request{Op: opStats, H: q.h}).Stats
}

func (q *remoteQP) Modify(attr *verbs.QPAttr, mask verbs.AttrMask) error {
	_, err := q.c.do(&request{Op: opModify, H: q.h, Attr: *attr, Mask: mask})
	return err
}

func (q *remoteQP) Connect(remote verbs.ConnInfo, opt verbs.ConnectOptions) error {
	_, err := q.c.do(&request{Op: opConnect, H: q.h, Info: remote, Conn: opt})
	return err
}

func (q *remoteQP) PostSend(wrs []verbs.SendWR) error {
	_, err := q.c.do(&request{Op: opPostSend, H: q.h, Send: wrs})
	return err
}

func (q *remoteQP) PostRecv(wrs []verbs.RecvWR) error {
	_, err := q.c.do(&request{Op: opPostRecv, H: q.h, Recv: wrs})
	return err
}

func (q *remoteQP) Destroy() error {
	_, err := q.c.do(&request{Op: opDestroyQP, H: q.h})
	return err
}
