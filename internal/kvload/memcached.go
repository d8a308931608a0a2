package kvload

import (
	"bytes"
	"context"
)

// DialMemcached returns a Dialer of memcached text-protocol connections over
// TCP to addr (host:port) that send get and set (flags 0, no expiry),
// pipelined as Do's contract says. An error reply becomes a *ServerError.
// After SERVER_ERROR the replies that follow are still read (memcached
// swallows a refused set's data, so the stream stays in step); after
// CLIENT_ERROR or ERROR it may not be, and the connection is dropped.
func DialMemcached(addr string) Dialer {
	return func(ctx context.Context) (Client, error) {
		c, err := dialNet(ctx, "memcached", addr)
		if err != nil {
			return nil, err
		}
		return &memcachedClient{c}, nil
	}
}

type memcachedClient struct{ *netConn }

func (c *memcachedClient) Close() error { return c.close() }

var (
	mcValue       = []byte("VALUE ")
	mcEnd         = []byte("END")
	mcStored      = []byte("STORED")
	mcNotStored   = []byte("NOT_STORED")
	mcServerError = []byte("SERVER_ERROR")
	mcClientError = []byte("CLIENT_ERROR")
	mcError       = []byte("ERROR")
)

func (c *memcachedClient) Do(ctx context.Context, ops []Op, res []Result) error {
	if err := c.begin(ctx); err != nil {
		return err
	}
	for i := range ops {
		op := &ops[i]
		if op.Kind == Get {
			c.w.WriteString("get ")
			c.w.Write(op.Key)
			c.w.WriteString("\r\n")
			continue
		}
		c.w.WriteString("set ")
		c.w.Write(op.Key)
		c.w.WriteString(" 0 0 ")
		c.writeInt(len(op.Value))
		c.w.WriteString("\r\n")
		c.w.Write(op.Value)
		c.w.WriteString("\r\n")
	}
	if err := c.w.Flush(); err != nil {
		return c.fail(ctx, "send", err)
	}
	var first error
	for i := range ops {
		op := &ops[i]
		cmd := "get"
		if op.Kind == Set {
			cmd = "set"
		}
		l, err := c.line()
		if err != nil {
			return c.fail(ctx, cmd+" "+string(op.Key), err)
		}
		switch {
		case bytes.HasPrefix(l, mcServerError):
			if first == nil {
				first = c.refused(cmd, op, l)
			}
		case bytes.HasPrefix(l, mcClientError), bytes.Equal(l, mcError):
			err := c.refused(cmd, op, l)
			c.fail(ctx, "after "+cmd+" "+string(op.Key), err)
			c.conn.Close()
			return err
		case op.Kind == Set && bytes.Equal(l, mcStored):
			res[i] = Result{Found: true}
		case op.Kind == Set && bytes.Equal(l, mcNotStored):
			res[i] = Result{}
		case op.Kind == Get && bytes.Equal(l, mcEnd):
			res[i] = Result{}
		case op.Kind == Get && bytes.HasPrefix(l, mcValue):
			n, ok := atoi(l[bytes.LastIndexByte(l, ' ')+1:])
			if !ok || n < 0 {
				return c.protocol(cmd, op, l)
			}
			if _, err := c.r.Discard(n + 2); err != nil {
				return c.fail(ctx, cmd+" "+string(op.Key), err)
			}
			if l, err = c.line(); err != nil {
				return c.fail(ctx, cmd+" "+string(op.Key), err)
			}
			if !bytes.Equal(l, mcEnd) {
				return c.protocol(cmd, op, l)
			}
			res[i] = Result{Found: true, Len: n}
		default:
			return c.protocol(cmd, op, l)
		}
	}
	return first
}
