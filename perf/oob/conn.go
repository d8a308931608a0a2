package oob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"
)

// Listener waits for perftest-style clients, like perftest's server side
// (ethernet_server_connect).
type Listener struct {
	ln *net.TCPListener
}

// Listen listens on addr ("host:port", ":port", or "" for every address on
// DefaultPort). A missing port means DefaultPort.
func Listen(addr string) (*Listener, error) {
	addr = withPort(addr)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &Error{Step: "ethernet_server_connect", Role: "server", Err: fmt.Errorf("listen on %s: %w", addr, err)}
	}
	return &Listener{ln: ln.(*net.TCPListener)}, nil
}

// Addr is the address the listener is bound to.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Accept waits for one client until ctx ends. perftest's server accepts a
// single client and stops listening; a Listener may accept more, one Accept
// at a time.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	fail := func(err error) error {
		return &Error{Step: "ethernet_server_connect", Role: "server", Err: fmt.Errorf("accept on %s: %w", l.ln.Addr(), err)}
	}
	if err := ctx.Err(); err != nil {
		return nil, fail(err)
	}
	dl, _ := ctx.Deadline()
	if err := l.ln.SetDeadline(dl); err != nil {
		return nil, fail(err)
	}
	stop := context.AfterFunc(ctx, func() { _ = l.ln.SetDeadline(longAgo) })
	nc, err := l.ln.AcceptTCP()
	if !stop() || errors.Is(err, os.ErrDeadlineExceeded) {
		if nc != nil {
			_ = nc.Close()
		}
		if cerr := ctx.Err(); cerr != nil {
			err = cerr
		} else if errors.Is(err, os.ErrDeadlineExceeded) {
			err = context.DeadlineExceeded
		}
		return nil, fail(fmt.Errorf("no client connected: %w", err))
	}
	if err != nil {
		return nil, fail(err)
	}
	return newConn(nc, true), nil
}

// Close stops listening; connections already accepted stay open.
func (l *Listener) Close() error { return l.ln.Close() }

// Dial connects to a perftest-style server (ethernet_client_connect): one
// attempt per resolved address, no retries, as perftest does. A refused
// connection wraps ErrRefused; callers that want to wait for the server retry
// on it.
func Dial(ctx context.Context, addr string) (*Conn, error) {
	addr = withPort(addr)
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			err = fmt.Errorf("connect to %s: %w (is the server side running and listening on this port?)", addr, ErrRefused)
		case ctx.Err() != nil:
			err = fmt.Errorf("connect to %s: %w", addr, ctx.Err())
		default:
			err = fmt.Errorf("connect to %s: %w", addr, err)
		}
		return nil, &Error{Step: "ethernet_client_connect", Role: "client", Peer: addr, Err: err}
	}
	return newConn(nc.(*net.TCPConn), false), nil
}

func withPort(addr string) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	return net.JoinHostPort(addr, strconv.Itoa(DefaultPort))
}

var longAgo = time.Unix(1, 0)

// Conn is one control connection. Its methods follow perftest's steps and
// must be called in order from one goroutine: Handshake, ExchangeDests,
// Ready, then per run StartRun and EndRun, then Finish (or Close on an
// error). After an error the stream position is unknown and every later call
// fails with ErrState.
type Conn struct {
	nc     *net.TCPConn
	server bool
	peer   string

	state state
	err   error // sticky: the first failure

	local  Params // with defaults
	remote Params
	ext    int // agreed ibex extension version; 0 with a real perftest

	localDests  []Dest
	remoteDests []Dest
	key0        []byte // the encoded local dest[0]: every ctx_hand_shake after the QP rounds sends it
}

type state int

const (
	stateNew state = iota
	stateParams
	stateDests
	stateReady
	stateDone
)

func newConn(nc *net.TCPConn, server bool) *Conn {
	_ = nc.SetNoDelay(true) // lockstep small messages
	return &Conn{nc: nc, server: server, peer: nc.RemoteAddr().String()}
}

// IsServer reports whether this end accepted the connection (perftest's
// server: it reads first in every exchange).
func (c *Conn) IsServer() bool { return c.server }

// RemoteAddr is the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// Close closes the connection without the closing exchange (see Finish).
func (c *Conn) Close() error {
	if c.state != stateDone {
		c.state = stateDone
		if c.err == nil {
			c.err = errors.New("connection closed")
		}
	}
	err := c.nc.Close()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

func (c *Conn) role() string {
	if c.server {
		return "server"
	}
	return "client"
}

func (c *Conn) errorf(step string, err error) error {
	return &Error{Step: step, Role: c.role(), Peer: c.peer, Err: err}
}

// begin checks the call order; want is the state the step needs.
func (c *Conn) begin(step string, want ...state) error {
	if c.err != nil {
		return c.errorf(step, fmt.Errorf("%w: an earlier step failed (%v)", ErrState, c.err))
	}
	for _, s := range want {
		if c.state == s {
			return nil
		}
	}
	return c.errorf(step, fmt.Errorf("%w: called %s", ErrState, c.stateName()))
}

func (c *Conn) stateName() string {
	switch c.state {
	case stateNew:
		return "before Handshake"
	case stateParams:
		return "before ExchangeDests"
	case stateDests:
		return "before Ready"
	case stateReady:
		return "after Ready"
	}
	return "after Finish or Close"
}

// do runs fn with the connection's deadline set from ctx and ctx
// cancellation interrupting the I/O; a failure becomes sticky.
func (c *Conn) do(ctx context.Context, step string, fn func() error) error {
	err := ctx.Err()
	if err == nil {
		dl, _ := ctx.Deadline()
		err = c.nc.SetDeadline(dl)
	}
	if err == nil {
		stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(longAgo) })
		err = fn()
		stop()
		// A cancelled ctx shows as a passed deadline: say which it was.
		var te *timeoutError
		if errors.As(err, &te) && errors.Is(ctx.Err(), context.Canceled) {
			te.cause = context.Canceled
		}
	}
	if err != nil {
		c.err = err
		_ = c.nc.Close() // the stream position is unknown; perftest exits here
		return c.errorf(step, err)
	}
	return nil
}

// write sends one message with one write, as perftest does: its reader
// expects a message in a single read().
func (c *Conn) write(msg []byte, what string) error {
	if _, err := c.nc.Write(msg); err != nil {
		return c.ioError(err, fmt.Sprintf("sending %s", what), 0, len(msg))
	}
	return nil
}

// read fills buf completely.
func (c *Conn) read(buf []byte, what string) error {
	n, err := io.ReadFull(c.nc, buf)
	if err != nil {
		return c.ioError(err, fmt.Sprintf("waiting for the peer's %s", what), n, len(buf))
	}
	return nil
}

func (c *Conn) ioError(err error, doing string, n, want int) error {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return &timeoutError{fmt.Sprintf("%s: no answer (got %d of %d bytes)", doing, n, want), context.DeadlineExceeded}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%s: %w after %d of %d bytes", doing, ErrPeerClosed, n, want)
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return fmt.Errorf("%s: %w (reset)", doing, ErrPeerClosed)
	}
	return fmt.Errorf("%s: %w", doing, err)
}

// timeoutError is an I/O cut short by the ctx: its deadline, or its
// cancellation.
type timeoutError struct {
	msg   string
	cause error // context.DeadlineExceeded or context.Canceled
}

func (e *timeoutError) Error() string { return e.msg + ": " + e.cause.Error() }
func (e *timeoutError) Unwrap() error { return e.cause }

// xchg is perftest's ctx_xchg_data over the socket (ctx_xchg_data_ethernet):
// the client writes then reads, the server reads then writes, same size both
// ways.
func (c *Conn) xchg(out, in []byte, what string) error {
	if c.server {
		if err := c.read(in, what); err != nil {
			return err
		}
		return c.write(out, what)
	}
	if err := c.write(out, what); err != nil {
		return err
	}
	return c.read(in, what)
}
