package verbstest

import (
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/verbs/driver"
)

// Serve answers one connection from the suite: it opens a context with
// open, performs the verbs calls the suite asks for on it, and returns when
// conn closes (after destroying what it created, in order). setPortState
// may be nil; the port test is then skipped.
//
// Each request runs in its own goroutine, so a call that waits (a CQ wait,
// an async event) does not hold up the others. Memory the suite registers
// on this end is allocated here (make([]byte, n) and RegMR), so the
// provider reaches it across the stream's two processes. The error is that
// of tearing down or closing the context; a connection that just ends is
// no error.
func Serve(conn io.ReadWriteCloser, open func() (*verbs.Context, error), setPortState func(verbs.PortState)) error {
	base, cancel := context.WithCancel(context.Background())
	s := &server{open: open, setPort: setPortState, enc: gob.NewEncoder(conn), base: base, cqs: map[*verbs.CQ]uint64{}}
	dec := gob.NewDecoder(conn)
	var wg sync.WaitGroup
	var readErr error
	for {
		req := new(request)
		if err := dec.Decode(req); err != nil {
			if !isClosed(err) {
				readErr = fmt.Errorf("verbstest serve: read request: %w", err)
			}
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := s.handle(req)
			resp.ID = req.ID
			s.wmu.Lock()
			_ = s.enc.Encode(resp) // a broken connection ends the read loop
			s.wmu.Unlock()
		}()
	}
	_ = conn.Close()
	cancel() // ends the waits still running
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	err := readErr
	if s.ctx != nil && !s.closed {
		err = errors.Join(err, s.teardownLocked())
		if cerr := s.ctx.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("verbstest serve: close context: %w", cerr))
		}
	}
	return err
}

// isClosed reports whether a read error just means the peer went away.
func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.ErrClosedPipe) ||
		errors.Is(err, net.ErrClosed)
}

type server struct {
	open    func() (*verbs.Context, error)
	setPort func(verbs.PortState)
	base    context.Context // ends when the connection does

	wmu sync.Mutex // serialises responses
	enc *gob.Encoder

	mu     sync.Mutex // guards the fields below
	ctx    *verbs.Context
	closed bool
	objs   []any // handle h is objs[h-1], in creation order
	cqs    map[*verbs.CQ]uint64
}

// serverMR is a registered buffer; buf outlives Dereg so the suite can
// check that nothing wrote to it afterwards.
type serverMR struct {
	mr  *verbs.MR
	buf []byte
}

func (s *server) add(o any) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.objs = append(s.objs, o)
	h := uint64(len(s.objs))
	if cq, ok := o.(*verbs.CQ); ok {
		s.cqs[cq] = h
	}
	return h
}

func lookup[T any](s *server, h uint64) (T, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var zero T
	if h == 0 || h > uint64(len(s.objs)) {
		return zero, fmt.Errorf("verbstest serve: no object %d: %w", h, verbs.ErrInvalidArgument)
	}
	o, ok := s.objs[h-1].(T)
	if !ok {
		return zero, fmt.Errorf("verbstest serve: object %d is a %T, not a %T: %w", h, s.objs[h-1], zero, verbs.ErrInvalidArgument)
	}
	return o, nil
}

func (s *server) context() (*verbs.Context, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.ctx == nil:
		return nil, fmt.Errorf("verbstest serve: no context open: %w", verbs.ErrInvalidState)
	case s.closed:
		return nil, fmt.Errorf("verbstest serve: context closed: %w", verbs.ErrClosed)
	}
	return s.ctx, nil
}

// teardownLocked destroys every object still alive, newest first, which
// puts QPs before the CQs and PDs they use and MRs before their PDs.
func (s *server) teardownLocked() error {
	var errs []error
	for i := len(s.objs) - 1; i >= 0; i-- {
		var err error
		switch o := s.objs[i].(type) {
		case *verbs.QP:
			err = o.Destroy()
		case *serverMR:
			err = o.mr.Dereg()
		case *verbs.CQ:
			err = o.Destroy()
		case *verbs.PD:
			err = o.Dealloc()
		}
		if err != nil && !errors.Is(err, verbs.ErrClosed) {
			errs = append(errs, fmt.Errorf("verbstest serve: teardown: %w", err))
		}
	}
	return errors.Join(errs...)
}

// waitCtx is the context a waiting call runs with: the caller's remaining
// time, and the connection's life.
func (s *server) waitCtx(req *request) (context.Context, context.CancelFunc) {
	if req.HasTimeout {
		return context.WithTimeout(s.base, req.Timeout)
	}
	return context.WithCancel(s.base)
}

func (s *server) handle(req *request) *response {
	resp := &response{}
	resp.Err = encodeErr(s.do(req, resp))
	return resp
}

func (s *server) do(req *request, resp *response) error {
	switch req.Op {
	case opOpen:
		if req.N != protocolVersion {
			return fmt.Errorf("verbstest serve: protocol version %d, this server speaks %d: %w", req.N, protocolVersion, verbs.ErrUnsupported)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.ctx != nil {
			return fmt.Errorf("verbstest serve: context already open: %w", verbs.ErrInvalidState)
		}
		c, err := s.open()
		if err != nil {
			return err
		}
		s.ctx = c
		resp.CanSetPort = s.setPort != nil
		return nil
	case opClose:
		c, err := s.context()
		if err != nil {
			return err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		err = c.Close()
		if err != nil {
			// Report the leak as a local Close would, then clean up.
			_ = s.teardownLocked()
			_ = c.Close()
		}
		s.closed = true
		return err
	case opSetPort:
		if s.setPort == nil {
			return fmt.Errorf("verbstest serve: no setPortState: %w", verbs.ErrUnsupported)
		}
		s.setPort(req.PortState)
		return nil
	}

	c, err := s.context()
	if err != nil {
		return err
	}
	switch req.Op {
	case opQueryPort:
		resp.PortAttr, err = c.QueryPort(req.Port)
		return err
	case opEvent:
		ctx, cancel := s.waitCtx(req)
		defer cancel()
		ev, err := c.AsyncEvent(ctx)
		if err != nil {
			return err
		}
		resp.Event = wireEvent{Type: ev.Type, Port: ev.Port, Cause: encodeErr(ev.Cause), Text: ev.String()}
		if ev.QP != nil {
			resp.Event.QPN = ev.QP.Num()
		}
		if ev.CQ != nil {
			s.mu.Lock()
			resp.Event.IsCQ, resp.Event.CQ = true, s.cqs[ev.CQ]
			s.mu.Unlock()
		}
		return nil
	case opAllocPD:
		pd, err := c.AllocPD()
		if err != nil {
			return err
		}
		resp.H = s.add(pd)
		return nil
	case opCreateCQ:
		cq, err := c.CreateCQ(req.N)
		if err != nil {
			return err
		}
		resp.H = s.add(cq)
		return nil
	case opDeallocPD:
		pd, err := lookup[*verbs.PD](s, req.H)
		if err != nil {
			return err
		}
		return pd.Dealloc()
	case opRegMR:
		pd, err := lookup[*verbs.PD](s, req.H)
		if err != nil {
			return err
		}
		if req.N < 0 {
			return fmt.Errorf("reg mr: length %d: %w", req.N, verbs.ErrInvalidArgument)
		}
		buf := Buf(pd.Context(), req.N)
		mr, err := pd.RegMR(buf, req.Access)
		if err != nil {
			return err
		}
		resp.H = s.add(&serverMR{mr: mr, buf: buf})
		resp.Addr, resp.LKey, resp.RKey, resp.N = mr.Addr(), mr.LKey(), mr.RKey(), mr.Len()
		return nil
	case opDereg:
		m, err := lookup[*serverMR](s, req.H)
		if err != nil {
			return err
		}
		return m.mr.Dereg()
	case opRead, opWrite:
		m, err := lookup[*serverMR](s, req.H)
		if err != nil {
			return err
		}
		n := req.N
		if req.Op == opWrite {
			n = len(req.Data)
		}
		if req.Off < 0 || n < 0 || req.Off > len(m.buf) || n > len(m.buf)-req.Off {
			return fmt.Errorf("verbstest serve: %v [%d, +%d) outside the %d-byte buffer: %w", req.Op, req.Off, n, len(m.buf), verbs.ErrInvalidArgument)
		}
		// verbs orders every access to an MR's memory by its pin count,
		// and this one takes a pin too (when the MR is still registered).
		// Its atomics are the happens-before edge, for the race detector,
		// between the provider's accesses and ours that the test's real
		// synchronisation provides but the detector cannot see when it
		// crosses processes (a completion seen by the other end).
		pinned := driver.MR{MR: m.mr}.Pin()
		if req.Op == opRead {
			resp.Data = append([]byte(nil), m.buf[req.Off:req.Off+n]...)
		} else {
			copy(m.buf[req.Off:], req.Data)
		}
		if pinned {
			driver.MR{MR: m.mr}.Unpin()
		}
		return nil
	case opCreateQP:
		pd, err := lookup[*verbs.PD](s, req.H)
		if err != nil {
			return err
		}
		cq, err := lookup[*verbs.CQ](s, req.CQ)
		if err != nil {
			return err
		}
		qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: req.Cap, SigAll: req.SigAll})
		if err != nil {
			return err
		}
		resp.H, resp.QPN, resp.PSN = s.add(qp), qp.Num(), qp.InitialPSN()
		return nil
	case opDestroyCQ, opPoll, opPollWait, opWait:
		return s.doCQ(req, resp)
	}
	return s.doQP(req, resp)
}

func (s *server) doCQ(req *request, resp *response) error {
	cq, err := lookup[*verbs.CQ](s, req.H)
	if err != nil {
		return err
	}
	switch req.Op {
	case opDestroyCQ:
		return cq.Destroy()
	case opWait:
		ctx, cancel := s.waitCtx(req)
		defer cancel()
		return cq.Wait(ctx)
	}
	if req.N < 0 || req.N > 1<<20 {
		return fmt.Errorf("verbstest serve: poll %d completions: %w", req.N, verbs.ErrInvalidArgument)
	}
	wc := make([]verbs.WC, req.N)
	var n int
	if req.Op == opPoll {
		n, err = cq.Poll(wc)
	} else {
		ctx, cancel := s.waitCtx(req)
		defer cancel()
		n, err = cq.PollWait(ctx, wc)
	}
	resp.WC = wc[:n]
	return err
}

func (s *server) doQP(req *request, resp *response) error {
	qp, err := lookup[*verbs.QP](s, req.H)
	if err != nil {
		return err
	}
	switch req.Op {
	case opDestroyQP:
		return qp.Destroy()
	case opState:
		resp.State = qp.State()
	case opErr:
		resp.Cause = encodeErr(qp.Err())
	case opInfo:
		resp.Info = qp.Info()
	case opQuery:
		resp.Attr = qp.Query()
	case opModify:
		return qp.Modify(&req.Attr, req.Mask)
	case opConnect:
		return qp.Connect(req.Info, req.Conn)
	case opPostSend:
		return qp.PostSend(req.Send)
	case opPostRecv:
		return qp.PostRecv(req.Recv)
	case opStats:
		resp.Stats = qp.Stats()
	default:
		return fmt.Errorf("verbstest serve: unknown %v: %w", req.Op, verbs.ErrUnsupported)
	}
	return nil
}
