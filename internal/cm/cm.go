// Package cm connects RC queue pairs between a server and its clients, the
// job rdma_cm does for libibverbs programs: a client sends its QP's ConnInfo
// and private data over TCP (REQ), the server connects a QP of its own and
// answers with its ConnInfo and private data (REP) or a reason (REJ), and the
// client, once its QP is connected, says so (RTU) before the server sends
// anything on the QP.
//
// The TCP connection stays open for the life of the pair: it is how each end
// learns that the other has gone (Conn.Done), so that a server frees a dead
// client's QP and buffers at once rather than after a retry timeout.
//
// Wire format, every message: "IXCM", version 1, type (REQ 1, REP 2, REJ 3,
// RTU 4), payload length (uint16, big endian), payload. REQ and REP carry a
// one-byte length, verbs.ConnInfo's binary form, then the private data; REJ
// carries the reason as text; RTU carries nothing.
package cm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/ibex-rdma/ibex/verbs"
)

// MaxPrivate is the most private data one message carries.
const MaxPrivate = 60000

// Errors wrapped by this package's errors.
var (
	// ErrRejected: the server refused the connection; the error names its reason.
	ErrRejected = errors.New("connection rejected")
	// ErrProtocol: the peer sent something that is not this protocol.
	ErrProtocol = errors.New("connection protocol")
)

const (
	version = 1
	typeREQ = 1
	typeREP = 2
	typeREJ = 3
	typeRTU = 4
	hdrLen  = 8
)

var magic = [4]byte{'I', 'X', 'C', 'M'}

// Listener accepts clients' connection requests. Each TCP connection is read
// in its own goroutine, so a client that connects and sends nothing, or
// garbage, holds up no other client: it is dropped after reqTimeout or at its
// first bad byte.
type Listener struct {
	ln   *net.TCPListener
	reqs chan *Request
	quit chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	pending map[*net.TCPConn]struct{} // read by a goroutine, not yet handed out
	closed  bool
	dropped uint64
}

// Listen listens for clients on addr ("host:port"; port 0 picks one).
func Listen(addr string) (*Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cm: listen on %s: %w", addr, err)
	}
	l := &Listener{ln: ln.(*net.TCPListener), reqs: make(chan *Request), quit: make(chan struct{}), pending: map[*net.TCPConn]struct{}{}}
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

// Addr is the address the listener is bound to.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Dropped counts connections dropped before a valid REQ (garbage, a wrong
// version, silence past the timeout).
func (l *Listener) Dropped() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped
}

// Close stops listening and drops requests not yet accepted; connections
// already made stay open. It returns when the listener's goroutines have
// ended.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	for nc := range l.pending {
		_ = nc.Close()
	}
	l.mu.Unlock()
	close(l.quit)
	err := l.ln.Close()
	l.wg.Wait()
	return err
}

func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	for {
		nc, err := l.ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and the like: wait a little rather than spin.
			select {
			case <-l.quit:
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			_ = nc.Close()
			return
		}
		l.pending[nc] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
		go l.readREQ(nc)
	}
}

func (l *Listener) readREQ(nc *net.TCPConn) {
	defer l.wg.Done()
	_ = nc.SetNoDelay(true)
	ctx, cancel := context.WithTimeout(context.Background(), reqTimeout)
	defer cancel()
	typ, payload, err := readMsg(ctx, nc)
	if err == nil && typ != typeREQ {
		err = fmt.Errorf("%w: message type %d, want REQ", ErrProtocol, typ)
	}
	var r *Request
	if err == nil {
		r = &Request{nc: nc}
		r.Remote, r.Private, err = decodeInfo(payload)
	}
	if err == nil {
		select {
		case l.reqs <- r:
		case <-l.quit:
			err = net.ErrClosed
		case <-ctx.Done():
			err = fmt.Errorf("no Accept took the request within %v", reqTimeout)
		}
	}
	l.mu.Lock()
	delete(l.pending, nc)
	if err != nil {
		l.dropped++
	}
	l.mu.Unlock()
	if err != nil {
		if err != net.ErrClosed && !errors.Is(err, io.EOF) {
			wctx, wcancel := context.WithTimeout(context.Background(), time.Second)
			_ = writeMsg(wctx, nc, typeREJ, []byte(err.Error()))
			wcancel()
		}
		_ = nc.Close()
	}
}

// Request is a client's connection request, to Accept or Reject.
type Request struct {
	// Remote is the client QP's ConnInfo; Private its private data.
	Remote  verbs.ConnInfo
	Private []byte
	nc      *net.TCPConn
}

// RemoteAddr is the client's TCP address.
func (r *Request) RemoteAddr() net.Addr { return r.nc.RemoteAddr() }

// Accept waits until ctx ends for the next client's valid request.
func (l *Listener) Accept(ctx context.Context) (*Request, error) {
	select {
	case r := <-l.reqs:
		return r, nil
	case <-l.quit:
		return nil, fmt.Errorf("cm: accept on %s: %w", l.ln.Addr(), net.ErrClosed)
	case <-ctx.Done():
		return nil, fmt.Errorf("cm: accept on %s: %w", l.ln.Addr(), ctx.Err())
	}
}

// reqTimeout bounds how long a connected client may take to send its REQ and
// its RTU.
const reqTimeout = 10 * time.Second

// Options adjusts Dial and Accept.
type Options struct {
	// Connect is passed to QP.Connect.
	Connect verbs.ConnectOptions
	// Ready, if set, runs once the QP is connected and before the peer
	// learns so: post the receives the peer's first messages need here
	// (a QP in RESET takes no receive).
	Ready func(qp *verbs.QP) error
}

// Accept connects qp to the client's QP, runs opt.Ready, answers with qp's
// ConnInfo and private, and waits for the client's RTU: when Accept returns,
// both QPs are ready to receive. On an error the TCP connection is closed;
// qp is the caller's to destroy.
func (r *Request) Accept(ctx context.Context, qp *verbs.QP, private []byte, opt Options) (*Conn, error) {
	fail := func(err error) (*Conn, error) {
		_ = r.nc.Close()
		return nil, fmt.Errorf("cm: accept %s: %w", r.nc.RemoteAddr(), err)
	}
	if len(private) > MaxPrivate {
		return fail(fmt.Errorf("private data of %d bytes, at most %d", len(private), MaxPrivate))
	}
	if err := connect(qp, r.Remote, opt); err != nil {
		_ = writeMsg(ctx, r.nc, typeREJ, []byte(err.Error()))
		return fail(err)
	}
	payload, err := encodeInfo(qp.Info(), private)
	if err != nil {
		return fail(err)
	}
	if err := writeMsg(ctx, r.nc, typeREP, payload); err != nil {
		return fail(err)
	}
	rctx, cancel := context.WithTimeout(ctx, reqTimeout)
	typ, _, err := readMsg(rctx, r.nc)
	cancel()
	if err == nil && typ != typeRTU {
		err = fmt.Errorf("%w: message type %d, want RTU", ErrProtocol, typ)
	}
	if err != nil {
		return fail(err)
	}
	return newConn(r.nc, r.Remote, r.Private), nil
}

// Reject refuses the request, telling the client why, and closes the
// connection.
func (r *Request) Reject(ctx context.Context, reason string) error {
	if len(reason) > MaxPrivate {
		reason = reason[:MaxPrivate]
	}
	err := writeMsg(ctx, r.nc, typeREJ, []byte(reason))
	_ = r.nc.Close()
	return err
}

// Dial connects qp to a server at addr: it sends qp's ConnInfo and private,
// connects qp to the server's QP from the reply, runs opt.Ready and
// confirms. A refusal wraps ErrRejected and carries the server's reason.
func Dial(ctx context.Context, addr string, qp *verbs.QP, private []byte, opt Options) (*Conn, error) {
	fail := func(err error) (*Conn, error) {
		return nil, fmt.Errorf("cm: connect to %s: %w", addr, err)
	}
	if len(private) > MaxPrivate {
		return fail(fmt.Errorf("private data of %d bytes, at most %d", len(private), MaxPrivate))
	}
	payload, err := encodeInfo(qp.Info(), private)
	if err != nil {
		return fail(err)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fail(err)
	}
	nc := c.(*net.TCPConn)
	_ = nc.SetNoDelay(true)
	closeFail := func(err error) (*Conn, error) {
		_ = nc.Close()
		return fail(err)
	}
	if err := writeMsg(ctx, nc, typeREQ, payload); err != nil {
		return closeFail(err)
	}
	typ, payload, err := readMsg(ctx, nc)
	if err != nil {
		return closeFail(err)
	}
	switch typ {
	case typeREP:
	case typeREJ:
		return closeFail(fmt.Errorf("%w: %s", ErrRejected, payload))
	default:
		return closeFail(fmt.Errorf("%w: message type %d, want REP or REJ", ErrProtocol, typ))
	}
	remote, priv, err := decodeInfo(payload)
	if err != nil {
		return closeFail(err)
	}
	if err := connect(qp, remote, opt); err != nil {
		return closeFail(err)
	}
	if err := writeMsg(ctx, nc, typeRTU, nil); err != nil {
		return closeFail(err)
	}
	return newConn(nc, remote, priv), nil
}

func connect(qp *verbs.QP, remote verbs.ConnInfo, opt Options) error {
	if err := qp.Connect(remote, opt.Connect); err != nil {
		return err
	}
	if opt.Ready != nil {
		return opt.Ready(qp)
	}
	return nil
}

// Conn is one end of a connected pair's TCP connection.
type Conn struct {
	nc      *net.TCPConn
	remote  verbs.ConnInfo
	private []byte
	done    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	err     error
}

func newConn(nc *net.TCPConn, remote verbs.ConnInfo, private []byte) *Conn {
	c := &Conn{nc: nc, remote: remote, private: private, done: make(chan struct{})}
	// The watcher owns reads from here on: the peer sends nothing after the
	// handshake, so whatever the read returns (EOF, reset, stray bytes)
	// means the peer is gone or broken. It ends when the peer closes or
	// Close closes the socket.
	go c.watch()
	return c
}

func (c *Conn) watch() {
	var b [1]byte
	_, err := c.nc.Read(b[:])
	if err == nil {
		err = fmt.Errorf("%w: data after the handshake", ErrProtocol)
	} else if errors.Is(err, io.EOF) {
		err = io.EOF
	}
	c.finish(fmt.Errorf("cm: peer %s: %w", c.nc.RemoteAddr(), err))
}

func (c *Conn) finish(err error) {
	c.once.Do(func() {
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		_ = c.nc.Close()
		close(c.done)
	})
}

// Remote is the peer QP's ConnInfo; Private the peer's private data.
func (c *Conn) Remote() verbs.ConnInfo { return c.remote }

// Private is the peer's private data.
func (c *Conn) Private() []byte { return c.private }

// RemoteAddr is the peer's TCP address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// Done is closed when the connection ends: the peer closed it or died, or
// Close was called.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err says why the connection ended (nil while it is open).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the connection; the peer's Done closes.
func (c *Conn) Close() error {
	c.finish(fmt.Errorf("cm: %w", net.ErrClosed))
	return nil
}

func encodeInfo(ci verbs.ConnInfo, private []byte) ([]byte, error) {
	b, err := ci.MarshalBinary()
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, 1+len(b)+len(private))
	out = append(out, byte(len(b)))
	out = append(out, b...)
	return append(out, private...), nil
}

func decodeInfo(p []byte) (verbs.ConnInfo, []byte, error) {
	var ci verbs.ConnInfo
	if len(p) < 1 || int(p[0]) > len(p)-1 {
		return ci, nil, fmt.Errorf("%w: conn info of %d bytes in a %d-byte message", ErrProtocol, firstByte(p), len(p))
	}
	n := int(p[0])
	if err := ci.UnmarshalBinary(p[1 : 1+n]); err != nil {
		return ci, nil, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	return ci, append([]byte(nil), p[1+n:]...), nil
}

func firstByte(p []byte) int {
	if len(p) == 0 {
		return 0
	}
	return int(p[0])
}

// readMsg reads one message before ctx ends.
func readMsg(ctx context.Context, nc *net.TCPConn) (byte, []byte, error) {
	var typ byte
	var payload []byte
	err := withCtx(ctx, nc, func() error {
		var h [hdrLen]byte
		if _, err := io.ReadFull(nc, h[:]); err != nil {
			return err
		}
		if [4]byte(h[:4]) != magic {
			return fmt.Errorf("%w: bad magic %q", ErrProtocol, h[:4])
		}
		if h[4] != version {
			return fmt.Errorf("%w: version %d, want %d", ErrProtocol, h[4], version)
		}
		typ = h[5]
		n := int(binary.BigEndian.Uint16(h[6:]))
		payload = make([]byte, n)
		_, err := io.ReadFull(nc, payload)
		return err
	})
	return typ, payload, err
}

func writeMsg(ctx context.Context, nc *net.TCPConn, typ byte, payload []byte) error {
	if len(payload) > 0xffff {
		return fmt.Errorf("cm: message of %d bytes, at most 65535", len(payload))
	}
	b := make([]byte, hdrLen, hdrLen+len(payload))
	copy(b, magic[:])
	b[4] = version
	b[5] = typ
	binary.BigEndian.PutUint16(b[6:], uint16(len(payload)))
	b = append(b, payload...)
	return withCtx(ctx, nc, func() error {
		_, err := nc.Write(b)
		return err
	})
}

// withCtx runs one blocking I/O with ctx's deadline, interrupted when ctx
// ends.
func withCtx(ctx context.Context, nc *net.TCPConn, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dl, _ := ctx.Deadline()
	_ = nc.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	err := fn()
	stopped := stop()
	_ = nc.SetDeadline(time.Time{})
	if err != nil && (!stopped || errors.Is(err, os.ErrDeadlineExceeded)) && ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}
