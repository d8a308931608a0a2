package daemon

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ibex-rdma/ibex/internal/ibexdwire"
	"github.com/ibex-rdma/ibex/internal/shmem"
	"github.com/ibex-rdma/ibex/verbs"
)

// client is one attached process (one verbs.Context of it): its
// connection, its daemon-side objects and its engine.
//
// Locks: mu guards the maps and counts (the control path); engMu is held
// by the engine for each pass over the rings and by the control path
// while it changes what the engine serves or tears it down, so the engine
// never touches a ring or QP that is going away. Order: mu, then engMu.
type client struct {
	d       *Daemon
	conn    *net.UnixConn
	pid     int
	who     Identity // what the kernel says of the process
	tenant  *tenant
	command string
	device  string
	ctx     *verbs.Context
	eng     *engine
	cancel  context.CancelFunc // ends the event forwarder

	sendMu sync.Mutex // one writer on conn

	mu       sync.Mutex
	nextID   uint32
	pds      map[uint32]*verbs.PD
	segs     map[uint32]*segment
	mrs      map[uint32]*mrEntry
	cqs      map[uint32]*cqEntry
	qps      map[uint32]*qpEntry
	memBytes uint64
	dead     bool
	reason   error // why it was detached

	engMu sync.Mutex
	off   bool // (engMu) the engine serves this process no more
	set   atomic.Pointer[engineSet]

	// An upgrade: handing stops serve between two requests (serveDone
	// is closed when it has stopped); quiesce stops the engine from
	// taking new work.
	handing   atomic.Bool
	quiesce   atomic.Bool
	serveDone chan struct{}

	posted, completed atomic.Uint64
	inflight          atomic.Int64 // send WQEs posted whose completion has not been moved
}

type segment struct {
	seg  *shmem.Segment
	nmr  int
	size uint64
}

type mrEntry struct {
	mr  *verbs.MR
	seg uint32
}

func (d *Daemon) serveConn(ctx context.Context, conn *net.UnixConn) {
	defer conn.Close()
	buf := make([]byte, ibexdwire.MaxMessage)
	var req ibexdwire.Request
	fds, err := ibexdwire.Recv(conn, buf, &req)
	ibexdwire.CloseFDs(fds)
	if err != nil {
		return
	}
	switch req.Op {
	case OpHandover:
		if err := d.handOver(conn); err != nil {
			fmt.Fprintf(os.Stderr, "ibexd: %v\n", err)
			_ = ibexdwire.Send(conn, &handoverHeader{Err: err.Error()})
			d.handedOver <- false
			return
		}
		fmt.Fprintf(os.Stderr, "ibexd: handed over to a new daemon; exiting\n")
		d.handedOver <- true
		return
	case ibexdwire.OpStatus:
		st := d.Status()
		_ = ibexdwire.Send(conn, &ibexdwire.Response{ID: req.ID, Status: &st})
		return
	case ibexdwire.OpCapture:
		d.serveCapture(ctx, conn, &req)
		return
	case ibexdwire.OpHello:
	default:
		_ = ibexdwire.Send(conn, &ibexdwire.Response{ID: req.ID, Err: fmt.Sprintf("first message is %q: expected hello, status or capture", req.Op), Code: "invalid_argument"})
		return
	}
	c, err := d.attach(ctx, conn, &req)
	if err != nil {
		_ = ibexdwire.Send(conn, &ibexdwire.Response{ID: req.ID, Err: err.Error(), Code: ibexdwire.Code(err)})
		return
	}
	c.serve(buf)
}

func (d *Daemon) attach(ctx context.Context, conn *net.UnixConn, req *ibexdwire.Request) (*client, error) {
	if req.Version != ibexdwire.Version {
		return nil, fmt.Errorf("hello: protocol version %d, this daemon speaks %d: %w", req.Version, ibexdwire.Version, verbs.ErrUnsupported)
	}
	dev := d.devs[req.Device]
	if dev == nil {
		names := make([]string, 0, len(d.cfg.Devices))
		for _, dc := range d.cfg.Devices {
			names = append(names, dc.Name)
		}
		return nil, fmt.Errorf("hello: no device %q (this daemon owns %v): %w", req.Device, names, verbs.ErrInvalidArgument)
	}
	who, err := peerIdentity(conn)
	if err != nil {
		return nil, fmt.Errorf("hello: who is attaching: %w", err)
	}
	t, err := d.tenantOf(who)
	if err != nil {
		return nil, fmt.Errorf("hello: %w", err)
	}
	vctx, err := verbs.Open("udp/" + req.Device)
	if err != nil {
		return nil, fmt.Errorf("hello: %w", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	c := &client{d: d, conn: conn, pid: who.PID, who: who, tenant: t, device: req.Device, ctx: vctx, eng: d.engineFor(), cancel: cancel,
		serveDone: make(chan struct{}), pds: map[uint32]*verbs.PD{}, segs: map[uint32]*segment{},
		mrs: map[uint32]*mrEntry{}, cqs: map[uint32]*cqEntry{}, qps: map[uint32]*qpEntry{}}
	c.command = commandOf(c.pid)
	c.set.Store(&engineSet{})
	if err := d.add(c); err != nil {
		cancel()
		vctx.Close()
		return nil, err
	}
	attr := vctx.QueryDevice()
	pa, _ := vctx.QueryPort(1)
	resp := &ibexdwire.Response{ID: req.ID, DaemonPID: os.Getpid(), Attr: &attr, Ports: []verbs.PortAttr{pa}, PKeys: pkeyTable(vctx)}
	if err := ibexdwire.Send(conn, resp, c.eng.db.FD); err != nil {
		c.detachAs(err, false)
		return nil, err
	}
	c.eng.add(c)
	go c.events(cctx)
	return c, nil
}

// pkeyTable is port 1's P_Key table of c.
func pkeyTable(c *verbs.Context) []uint16 {
	pa, err := c.QueryPort(1)
	if err != nil {
		return nil
	}
	t := make([]uint16, 0, pa.PKeyTblLen)
	for i := range pa.PKeyTblLen {
		k, err := c.QueryPKey(1, i)
		if err != nil {
			return nil
		}
		t = append(t, k)
	}
	return t
}

func commandOf(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// serve answers the process's requests until it goes away or misbehaves.
func (c *client) serve(buf []byte) {
	defer close(c.serveDone)
	for {
		var req ibexdwire.Request
		fds, err := ibexdwire.Recv(c.conn, buf, &req)
		if err != nil && c.handing.Load() {
			// An upgrade stops this reader between two requests (a
			// read deadline); the next daemon reads what comes next.
			return
		}
		if err != nil {
			// EOF is a process that exited or was killed: no message.
			if strings.Contains(err.Error(), "malformed") {
				c.detach(fmt.Errorf("hostile control message: %w", err))
			} else {
				c.detach(nil)
			}
			return
		}
		resp, out, herr := c.handle(&req, fds)
		if herr != nil {
			resp = &ibexdwire.Response{Err: herr.Error(), Code: ibexdwire.Code(herr)}
			out = -1
		}
		resp.ID = req.ID
		c.sendMu.Lock()
		if out >= 0 {
			err = ibexdwire.Send(c.conn, resp, out)
		} else {
			err = ibexdwire.Send(c.conn, resp)
		}
		c.sendMu.Unlock()
		if err != nil {
			c.detachAs(err, false) // the process went away
			return
		}
		c.mu.Lock()
		dead := c.dead
		c.mu.Unlock()
		if dead || c.handing.Load() {
			return
		}
	}
}

// send writes an unsolicited message (an event).
func (c *client) send(r *ibexdwire.Response) {
	c.sendMu.Lock()
	_ = ibexdwire.Send(c.conn, r)
	c.sendMu.Unlock()
}

// events forwards the daemon-side context's asynchronous events about the
// process's QPs (a responder error moves a QP to ERR with no completion).
func (c *client) events(ctx context.Context) {
	for {
		ev, err := c.ctx.AsyncEvent(ctx)
		if err != nil {
			return
		}
		switch ev.Type {
		case verbs.EventQPFatal, verbs.EventQPReqErr, verbs.EventQPAccessErr:
		default:
			// SQ_DRAINED, COMM_EST: the process's verbs makes its own;
			// CQ_ERR comes with a QP_FATAL of the QP that lost a
			// completion.
			continue
		}
		if ev.QP == nil {
			continue
		}
		// Completions the QP made before the event go to the rings
		// first, so the process sees them before the QP fails.
		_, _ = c.pass()
		cause := ev.String()
		if ev.Cause != nil {
			cause = ev.Cause.Error()
		}
		c.send(&ibexdwire.Response{Event: &ibexdwire.Event{Kind: ibexdwire.EventQP, QPN: ev.QP.Num(), Type: ev.Type, Cause: cause}})
	}
}

// detach ends the process's attachment: why (nil for a process that went
// away) is sent to it if it is still there; its QPs are destroyed (peers
// see their requests go unanswered), its MRs deregistered and its memory
// unmapped. Safe to call more than once.
func (c *client) detach(why error) { c.detachAs(why, true) }

// detachAs is detach; hostile says the process broke the protocol (it is
// counted and logged), rather than the daemon shutting down.
func (c *client) detachAs(why error, hostile bool) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.dead = true
	c.reason = why
	c.mu.Unlock()
	if why != nil {
		c.send(&ibexdwire.Response{Event: &ibexdwire.Event{Kind: ibexdwire.EventDetach, Cause: why.Error()}})
		if hostile {
			c.d.detached.Add(1)
			fmt.Fprintf(os.Stderr, "ibexd: detached pid %d (%s): %v\n", c.pid, c.command, why)
		}
	}
	c.cancel()
	c.eng.remove(c)
	c.conn.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.teardown()
}

// teardown destroys the process's objects (c.mu held, engine stopped).
func (c *client) teardown() {
	for n, q := range c.qps {
		c.d.qpGone(n)
		_ = q.qp.Destroy()
		q.seg.Close()
		delete(c.qps, n)
		c.tenant.give(resQP, 1)
	}
	for n, m := range c.mrs {
		_ = m.mr.Dereg()
		delete(c.mrs, n)
		c.tenant.give(resMR, 1)
		c.tenant.give(resMemory, uint64(m.mr.Len()))
	}
	for n, q := range c.cqs {
		if q.cancel != nil {
			q.stop()
		}
		_ = q.cq.Destroy()
		q.seg.Close()
		delete(c.cqs, n)
		c.tenant.give(resCQ, 1)
	}
	for n, pd := range c.pds {
		_ = pd.Dealloc()
		delete(c.pds, n)
	}
	for n, s := range c.segs {
		s.seg.Close()
		delete(c.segs, n)
	}
	_ = c.ctx.Close()
	c.d.remove(c)
}

func (c *client) status() ibexdwire.ClientStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	cs := ibexdwire.ClientStatus{PID: c.pid, UID: c.who.UID, GID: c.who.GID, Groups: c.who.Groups, Cgroup: c.who.Cgroup, Tenant: c.tenant.name, Command: c.command, Device: c.device, MRs: len(c.mrs),
		MRBytes: c.memBytes, CQs: len(c.cqs), Posted: c.posted.Load(), Comps: c.completed.Load()}
	for _, q := range c.qps {
		a := q.qp.Query()
		qs := ibexdwire.QPStatus{QPN: q.qp.Num(), State: q.qp.State().String(), DestQPN: a.DestQPN, Stats: q.qp.Stats()}
		if err := q.qp.Err(); err != nil {
			qs.Err = err.Error()
		}
		cs.QPs = append(cs.QPs, qs)
	}
	return cs
}
