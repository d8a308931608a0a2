package kvload

import (
	"context"
)

// DialRedis returns a Dialer of RESP2 connections over TCP to addr
// (host:port) that send GET and SET, pipelined as Do's contract says. An
// error reply ("-ERR ...") becomes a *ServerError; the replies after it
// are still read, so the connection stays usable.
func DialRedis(addr string) Dialer {
	return func(ctx context.Context) (Client, error) {
		c, err := dialNet(ctx, "redis", addr)
		if err != nil {
			return nil, err
		}
		return &redisClient{c}, nil
	}
}

type redisClient struct{ *netConn }

func (c *redisClient) Close() error { return c.close() }

func (c *redisClient) Do(ctx context.Context, ops []Op, res []Result) error {
	if err := c.begin(ctx); err != nil {
		return err
	}
	for i := range ops {
		op := &ops[i]
		if op.Kind == Get {
			c.w.WriteString("*2\r\n$3\r\nGET\r\n$")
		} else {
			c.w.WriteString("*3\r\n$3\r\nSET\r\n$")
		}
		c.writeInt(len(op.Key))
		c.w.WriteString("\r\n")
		c.w.Write(op.Key)
		c.w.WriteString("\r\n")
		if op.Kind == Set {
			c.w.WriteString("$")
			c.writeInt(len(op.Value))
			c.w.WriteString("\r\n")
			c.w.Write(op.Value)
			c.w.WriteString("\r\n")
		}
	}
	if err := c.w.Flush(); err != nil {
		return c.fail(ctx, "send", err)
	}
	var first error
	for i := range ops {
		op := &ops[i]
		cmd := op.Kind.String()
		l, err := c.line()
		if err != nil {
			return c.fail(ctx, cmd+" "+string(op.Key), err)
		}
		if len(l) == 0 {
			return c.protocol(cmd, op, l)
		}
		switch l[0] {
		case '-':
			if first == nil {
				first = c.refused(cmd, op, l[1:])
			}
		case '+':
			if op.Kind != Set {
				return c.protocol(cmd, op, l)
			}
			res[i] = Result{Found: true}
		case '$':
			n, ok := atoi(l[1:])
			if !ok || op.Kind != Get {
				return c.protocol(cmd, op, l)
			}
			if n < 0 {
				res[i] = Result{}
				continue
			}
			if _, err := c.r.Discard(n + 2); err != nil {
				return c.fail(ctx, cmd+" "+string(op.Key), err)
			}
			res[i] = Result{Found: true, Len: n}
		default:
			return c.protocol(cmd, op, l)
		}
	}
	return first
}
