// Package ibexd is the provider through which a process uses the devices
// of ibexd, the host's daemon (package daemon), with the same verbs API:
// its one job is to be the process's side of that HCA. Control verbs (PD,
// MR, CQ and QP create/modify/destroy) go to the daemon over its unix
// socket; work requests go into send and receive rings in memory both map,
// with a doorbell that costs no syscall while the daemon's engine is
// awake; completions come back in completion rings this process polls. The
// daemon reads and writes the process's registered memory itself: it must
// come from PD.AllocMR (memfd memory the daemon maps, as an HCA needs
// pinned memory), and RegMR of other memory is refused, saying so.
//
// The provider lists the daemon's devices (udp0, ...) when a daemon
// answers on IBEX_DAEMON_SOCKET (default /run/ibex/ibexd.sock); its name
// sorts before "udp", so verbs.Open("udp0") goes through the daemon when
// one runs and in-process otherwise. IBEX_DAEMON=off ignores the daemon;
// "ibexd/udp0" and "udp/udp0" name a mode explicitly.
package ibexd

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ibex-rdma/ibex/internal/ibexdwire"
	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/verbs/driver"
)

// DefaultSocket is where the daemon listens unless IBEX_DAEMON_SOCKET says
// otherwise.
const DefaultSocket = "/run/ibex/ibexd.sock"

// rpcTimeout bounds every control round trip: a daemon that stops
// answering fails the verb instead of hanging it.
const rpcTimeout = 10 * time.Second

// SocketPath is the daemon socket this process attaches to.
func SocketPath() string {
	if s := os.Getenv("IBEX_DAEMON_SOCKET"); s != "" {
		return s
	}
	return DefaultSocket
}

// Enabled reports whether IBEX_DAEMON allows attaching (anything but
// "off").
func Enabled() bool {
	switch strings.ToLower(os.Getenv("IBEX_DAEMON")) {
	case "off", "0", "false", "no":
		return false
	}
	return true
}

type provider struct {
	mu      sync.Mutex
	cached  []string
	checked time.Time
	path    string
}

func init() { driver.Register(&provider{}) }

func (p *provider) Name() string { return "ibexd" }

// Devices asks the daemon which devices it owns; none when no daemon
// answers. The answer is kept for a second (Devices is called by every
// verbs.Open).
func (p *provider) Devices() []string {
	if !Enabled() {
		return nil
	}
	path := SocketPath()
	p.mu.Lock()
	defer p.mu.Unlock()
	if path == p.path && time.Since(p.checked) < time.Second {
		return p.cached
	}
	p.path, p.checked, p.cached = path, time.Now(), nil
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	st, err := QueryStatus(path, time.Second)
	if err != nil {
		return nil
	}
	for _, d := range st.Devices {
		p.cached = append(p.cached, d.Name)
	}
	return p.cached
}

// QueryStatus asks the daemon at path for its status (`ibex daemon
// status`).
func QueryStatus(path string, timeout time.Duration) (*ibexdwire.Status, error) {
	c, err := net.DialTimeout("unixpacket", path, timeout)
	if err != nil {
		return nil, fmt.Errorf("ibexd: %s: %w", path, err)
	}
	defer c.Close()
	uc := c.(*net.UnixConn)
	_ = uc.SetDeadline(time.Now().Add(timeout))
	if err := ibexdwire.Send(uc, &ibexdwire.Request{ID: 1, Op: ibexdwire.OpStatus}); err != nil {
		return nil, fmt.Errorf("ibexd: %s: %w", path, err)
	}
	var r ibexdwire.Response
	fds, err := ibexdwire.Recv(uc, make([]byte, ibexdwire.MaxMessage), &r)
	ibexdwire.CloseFDs(fds)
	if err != nil {
		return nil, fmt.Errorf("ibexd: %s: %w", path, err)
	}
	if err := r.Error(); err != nil {
		return nil, err
	}
	if r.Status == nil {
		return nil, errors.New("ibexd: status: empty answer")
	}
	return r.Status, nil
}

// Open attaches this context to the daemon's device.
func (p *provider) Open(name string, c driver.Context) (driver.Device, error) {
	path := SocketPath()
	conn, err := net.DialTimeout("unixpacket", path, rpcTimeout)
	if err != nil {
		return nil, fmt.Errorf("ibexd: attach to %s: %w", path, err)
	}
	d := &device{name: name, ctx: c, conn: conn.(*net.UnixConn), path: path,
		pending: map[uint64]chan reply{}, qps: map[uint32]*qpDriver{}, pds: map[*verbs.PD]uint32{},
		cqs: map[*verbs.CQ]*cqRing{}, mrs: map[*verbs.MR]uint32{}, done: make(chan struct{}), wakeRings: make(chan struct{}, 1)}
	if err := d.hello(); err != nil {
		conn.Close()
		return nil, err
	}
	return d, nil
}

type reply struct {
	r   *ibexdwire.Response
	fds []int
	err error
}

// rpc sends one request and waits for its answer, at most rpcTimeout.
func (d *device) rpc(req *ibexdwire.Request, fds ...int) (*ibexdwire.Response, []int, error) {
	ch := make(chan reply, 1)
	d.mu.Lock()
	if d.gone != nil {
		err := d.gone
		d.mu.Unlock()
		return nil, nil, err
	}
	d.nextID++
	req.ID = d.nextID
	d.pending[req.ID] = ch
	d.mu.Unlock()
	d.sendMu.Lock()
	err := ibexdwire.Send(d.conn, req, fds...)
	d.sendMu.Unlock()
	if err != nil {
		d.mu.Lock()
		delete(d.pending, req.ID)
		d.mu.Unlock()
		return nil, nil, fmt.Errorf("ibexd: %s: %w", req.Op, err)
	}
	t := time.NewTimer(rpcTimeout)
	defer t.Stop()
	select {
	case rep := <-ch:
		if rep.err != nil {
			return nil, nil, rep.err
		}
		if err := rep.r.Error(); err != nil {
			ibexdwire.CloseFDs(rep.fds)
			return nil, nil, fmt.Errorf("%s: %w", req.Op, err)
		}
		return rep.r, rep.fds, nil
	case <-t.C:
		d.mu.Lock()
		delete(d.pending, req.ID)
		d.mu.Unlock()
		return nil, nil, fmt.Errorf("ibexd: %s: no answer from the daemon (pid %d) in %v", req.Op, d.daemonPID, rpcTimeout)
	}
}

// reader takes the daemon's messages: answers to requests, and events.
// When the connection ends, the daemon is gone (or detached us): every QP
// goes to ERR with a cause naming the daemon, and every later verb fails.
func (d *device) reader() {
	defer close(d.done)
	buf := make([]byte, ibexdwire.MaxMessage)
	var detach string
	for {
		var r ibexdwire.Response
		fds, err := ibexdwire.Recv(d.conn, buf, &r)
		if err != nil {
			cause := fmt.Errorf("ibexd (pid %d, %s) is gone: %v", d.daemonPID, d.path, err)
			if detach != "" {
				cause = fmt.Errorf("ibexd (pid %d) detached this process: %s", d.daemonPID, detach)
			}
			d.lost(cause)
			return
		}
		if r.Event != nil {
			ibexdwire.CloseFDs(fds)
			switch r.Event.Kind {
			case ibexdwire.EventDetach:
				detach = r.Event.Cause
			case ibexdwire.EventQP:
				d.evMu.Lock()
				d.evs = append(d.evs, *r.Event)
				d.evMu.Unlock()
				select {
				case d.evWake <- struct{}{}:
				default:
				}
			}
			continue
		}
		d.mu.Lock()
		ch := d.pending[r.ID]
		delete(d.pending, r.ID)
		d.mu.Unlock()
		if ch == nil {
			ibexdwire.CloseFDs(fds) // a request that timed out
			continue
		}
		rr := r
		ch <- reply{r: &rr, fds: fds}
	}
}

// qpEvents fails the QPs the daemon's events name, in the order they
// came, until the reader ends (lost then fails every QP).
func (d *device) qpEvents() {
	for {
		select {
		case <-d.evWake:
		case <-d.done:
			return
		}
		for {
			d.evMu.Lock()
			if len(d.evs) == 0 {
				d.evMu.Unlock()
				break
			}
			ev := d.evs[0]
			d.evs = d.evs[1:]
			d.evMu.Unlock()
			if q := d.qp(ev.QPN); q != nil {
				// The daemon wrote the QP's completions before the
				// event: deliver them first. Delivering an error
				// completion asks the daemon its cause, which the
				// reader, free meanwhile, answers.
				q.sendCQ.drainAll()
				q.recvCQ.drainAll()
				q.h.Fail(fmt.Errorf("ibexd: %s", ev.Cause), ev.Type, true)
			}
		}
	}
}

// lost fails everything after the daemon went away.
func (d *device) lost(cause error) {
	d.mu.Lock()
	if d.gone == nil {
		d.gone = cause
	}
	for id, ch := range d.pending {
		ch <- reply{err: cause}
		delete(d.pending, id)
	}
	qps := make([]*qpDriver, 0, len(d.qps))
	for _, q := range d.qps {
		qps = append(qps, q)
	}
	closing := d.closing
	d.mu.Unlock()
	if closing {
		return
	}
	for _, q := range qps {
		q.h.Fail(cause, verbs.EventQPFatal, true)
	}
	d.ctx.PostEvent(verbs.AsyncEvent{Type: verbs.EventDeviceFatal, Port: 1, Cause: cause})
}

// String is for debugging.
func (d *device) String() string {
	b, _ := json.Marshal(map[string]any{"device": d.name, "socket": d.path, "daemon": d.daemonPID})
	return string(b)
}
