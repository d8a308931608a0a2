package kvload

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"
)

// ErrServer is wrapped by every *ServerError.
var ErrServer = errors.New("kvload: server refused a command")

// ErrProtocol is wrapped by the errors about replies that break the
// protocol; the connection is unusable afterwards.
var ErrProtocol = errors.New("kvload: protocol error")

// ServerError is a server's refusal of one command: RESP's "-ERR ...",
// "-WRONGTYPE ...", memcached's "SERVER_ERROR ...", "CLIENT_ERROR ...",
// "ERROR".
type ServerError struct {
	Server string // protocol and address: "redis 127.0.0.1:6379"
	Cmd    string // the command and its key: "GET key:000000000042"
	Msg    string // the server's reply, its error prefix included
}

func (e *ServerError) Error() string { return e.Server + ": " + e.Cmd + ": " + e.Msg }

func (e *ServerError) Is(target error) bool { return target == ErrServer }

// aLongTimeAgo is a deadline in the past: it makes blocked I/O return at
// once.
var aLongTimeAgo = time.Unix(1, 0)

// netConn is the part of a TCP client that the protocols share: buffered
// I/O, and the binding of each Do's context to the connection's deadline.
type netConn struct {
	name    string // "redis 127.0.0.1:6379"
	conn    net.Conn
	r       *bufio.Reader
	w       *bufio.Writer
	scratch []byte // strconv's buffer

	// mu orders the context hook's deadline against begin's. The hook is
	// registered once per distinct context (Run passes the same one to
	// every Do), so that the steady state allocates nothing.
	mu       sync.Mutex
	ctx      context.Context
	gen      uint64
	stop     func() bool
	deadline time.Time

	// broken is set by an error that leaves the stream in an unknown
	// state; every later Do returns it.
	broken error
}

const bufSize = 64 << 10

func dialNet(ctx context.Context, proto, addr string) (*netConn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", proto, addr, err)
	}
	return &netConn{
		name:    proto + " " + addr,
		conn:    conn,
		r:       bufio.NewReaderSize(conn, bufSize),
		w:       bufio.NewWriterSize(conn, bufSize),
		scratch: make([]byte, 0, 24),
	}, nil
}

// begin binds the connection to ctx for one Do: ctx's deadline becomes the
// connection's, and ctx's cancellation interrupts blocked I/O.
func (c *netConn) begin(ctx context.Context) error {
	if c.broken != nil {
		return c.broken
	}
	c.mu.Lock()
	if ctx != c.ctx {
		if c.stop != nil {
			c.stop()
		}
		c.gen++
		gen := c.gen
		c.ctx = ctx
		c.stop = context.AfterFunc(ctx, func() {
			c.mu.Lock()
			if c.gen == gen {
				c.conn.SetDeadline(aLongTimeAgo)
				c.deadline = aLongTimeAgo
			}
			c.mu.Unlock()
		})
	}
	var err error
	if ctx.Err() == nil {
		if d, _ := ctx.Deadline(); !d.Equal(c.deadline) {
			err = c.conn.SetDeadline(d)
			c.deadline = d
		}
	}
	c.mu.Unlock()
	// After the check under mu, a cancellation's hook runs after our
	// SetDeadline, so it cannot be undone.
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", c.name, context.Cause(ctx))
	}
	if err != nil {
		return c.fail(ctx, "set deadline", err)
	}
	return nil
}

// fail wraps an I/O error of what (a command, "flush"), as ctx's error if
// ctx ended it, and marks the connection broken.
func (c *netConn) fail(ctx context.Context, what string, err error) error {
	switch {
	case ctx.Err() != nil:
		err = fmt.Errorf("%s: %s: %w", c.name, what, context.Cause(ctx))
	case errors.Is(err, os.ErrDeadlineExceeded):
		if _, ok := ctx.Deadline(); ok {
			err = fmt.Errorf("%s: %s: %w", c.name, what, context.DeadlineExceeded)
		} else {
			err = fmt.Errorf("%s: %s: %w", c.name, what, err)
		}
	default:
		err = fmt.Errorf("%s: %s: %w", c.name, what, err)
	}
	c.broken = fmt.Errorf("%s: connection unusable after an earlier error: %w", c.name, err)
	return err
}

// protocol reports a reply that breaks the protocol and marks the
// connection broken.
func (c *netConn) protocol(cmd string, op *Op, line []byte) error {
	err := fmt.Errorf("%w: %s: %s %s: unexpected reply %q", ErrProtocol, c.name, cmd, op.Key, line)
	c.broken = fmt.Errorf("%s: connection unusable after an earlier error: %w", c.name, err)
	return err
}

func (c *netConn) refused(cmd string, op *Op, msg []byte) error {
	return &ServerError{Server: c.name, Cmd: cmd + " " + string(op.Key), Msg: string(msg)}
}

// line reads one reply line without its "\r\n"; the slice is valid until
// the next read.
func (c *netConn) line() ([]byte, error) {
	l, err := c.r.ReadSlice('\n')
	if err != nil {
		if err == bufio.ErrBufferFull {
			return nil, fmt.Errorf("%w: reply line longer than %d bytes", ErrProtocol, bufSize)
		}
		return nil, err
	}
	if len(l) < 2 || l[len(l)-2] != '\r' {
		return nil, fmt.Errorf("%w: reply line %q does not end in CRLF", ErrProtocol, l)
	}
	return l[:len(l)-2], nil
}

func (c *netConn) writeInt(n int) {
	c.scratch = strconv.AppendInt(c.scratch[:0], int64(n), 10)
	c.w.Write(c.scratch)
}

func (c *netConn) close() error {
	c.mu.Lock()
	if c.stop != nil {
		c.stop()
	}
	c.gen++
	c.mu.Unlock()
	return c.conn.Close()
}

// atoi parses a non-negative decimal (or -1) without allocating; ok is
// false for anything else.
func atoi(b []byte) (n int, ok bool) {
	if len(b) == 2 && b[0] == '-' && b[1] == '1' {
		return -1, true
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	for _, d := range b {
		if d < '0' || d > '9' {
			return 0, false
		}
		n = n*10 + int(d-'0')
	}
	return n, true
}
