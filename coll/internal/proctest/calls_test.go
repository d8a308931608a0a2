package proctest

import (
	"context"
	"fmt"

	"github.com/ibex-rdma/ibex/coll"
	"github.com/ibex-rdma/ibex/coll/reduce"
)

// caller makes collective calls with fresh inputs (each call its own
// shift into the pattern, so a piece not delivered cannot pass by leaving
// the previous call's data in coll's working buffer) and checks every
// element of their outputs, and that the bytes after each output stay as
// they were.
type caller struct {
	ctx     context.Context
	c       *coll.Comm
	p       *pattern
	calls   int
	dt      reduce.DType
	count   int
	inPlace bool
	// The buffers of the last call, reused.
	send, whole []byte
}

func newCaller(ctx context.Context, c *coll.Comm, seed uint64) *caller {
	return &caller{ctx: ctx, c: c, p: newPattern(seed, c.Size())}
}

// next is the shift of the next call's inputs: the same on every rank,
// which make the same calls in the same order.
func (x *caller) next() int {
	x.calls++
	return int(mix(x.p.seed+uint64(x.calls)*0x9e3779b97f4a7c15) % period)
}

func (x *caller) what(name string) string {
	place := "out of place"
	if x.inPlace {
		place = "in place"
	}
	return fmt.Sprintf("rank %d: call %d: %s %v count %d %s", x.c.Rank(), x.calls, name, x.dt, x.count, place)
}

// fill writes n elements of this rank's input from element s to b.
func (x *caller) fill(b []byte, s, n int) { fill(b, x.p.input(x.dt, x.c.Rank()), x.dt, s, n) }

// buffers returns the input (in elements) and output (out elements)
// of a call: the output with a guard after it; in place, the input
// starts at element off of the output.
func (x *caller) buffers(in, out, off int) (send, recv, whole []byte) {
	es := x.dt.Size()
	x.whole = grow(x.whole, out*es+guard)
	whole = x.whole
	poison(whole)
	recv = whole[:out*es]
	if x.inPlace {
		send = whole[off*es : (off+in)*es]
	} else {
		x.send = grow(x.send, in*es)
		send = x.send
	}
	return send, recv, whole
}

// unchanged checks that an out-of-place call left its n-element input,
// filled from element s, as it was.
func (x *caller) unchanged(what string, in []byte, s, n int) error {
	if x.inPlace {
		return nil
	}
	return check(what+": input changed", in, x.p.input(x.dt, x.c.Rank()), x.dt, s, n)
}

func (x *caller) allReduce(op reduce.Op) error {
	s, n := x.next(), x.count
	in, out, whole := x.buffers(n, n, 0)
	x.fill(in, s, n)
	what := x.what("all_reduce " + op.String())
	if err := x.c.AllReduce(x.ctx, in, out, n, x.dt, op); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := check(what, out, x.p.output(x.dt, op), x.dt, s, n); err != nil {
		return err
	}
	if err := x.unchanged(what, in, s, n); err != nil {
		return err
	}
	return checkGuard(what, whole, len(out))
}

// reduceScatter: rank r's input is N blocks of count; it gets block r
// reduced over every rank. In place, its output is block r of its input
// (NCCL's convention).
func (x *caller) reduceScatter(op reduce.Op) error {
	s, n, r, N := x.next(), x.count, x.c.Rank(), x.c.Size()
	var in, out, whole []byte
	if x.inPlace {
		in, _, whole = x.buffers(N*n, N*n, 0)
		out = whole[r*n*x.dt.Size() : (r+1)*n*x.dt.Size()]
	} else {
		in, out, whole = x.buffers(N*n, n, 0)
	}
	x.fill(in, s, N*n)
	what := x.what("reduce_scatter " + op.String())
	if err := x.c.ReduceScatter(x.ctx, in, out, n, x.dt, op); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := check(what, out, x.p.output(x.dt, op), x.dt, s+r*n, n); err != nil {
		return err
	}
	if err := x.unchanged(what, in, s, N*n); err != nil {
		return err
	}
	return checkGuard(what, whole, len(whole)-guard)
}

// reduce onto root: only root's output is defined.
func (x *caller) reduce(op reduce.Op, root int) error {
	s, n := x.next(), x.count
	in, out, whole := x.buffers(n, n, 0)
	x.fill(in, s, n)
	what := x.what(fmt.Sprintf("reduce %v to root %d", op, root))
	if err := x.c.Reduce(x.ctx, in, out, n, x.dt, op, root); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if x.c.Rank() == root {
		if err := check(what, out, x.p.output(x.dt, op), x.dt, s, n); err != nil {
			return err
		}
	}
	if err := x.unchanged(what, in, s, n); err != nil {
		return err
	}
	return checkGuard(what, whole, len(out))
}

// broadcast from root: every rank passes its own input, so a non-root's
// input leaking into the output shows.
func (x *caller) broadcast(root int) error {
	s, n := x.next(), x.count
	in, out, whole := x.buffers(n, n, 0)
	x.fill(in, s, n)
	what := x.what(fmt.Sprintf("broadcast from root %d", root))
	if err := x.c.Broadcast(x.ctx, in, out, n, x.dt, root); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := check(what, out, x.p.input(x.dt, root), x.dt, s, n); err != nil {
		return err
	}
	if err := x.unchanged(what, in, s, n); err != nil {
		return err
	}
	return checkGuard(what, whole, len(out))
}

// allGather: block q of the output is rank q's input. In place, the
// input is block r of the output (NCCL's convention).
func (x *caller) allGather() error {
	s, n, r, N := x.next(), x.count, x.c.Rank(), x.c.Size()
	in, out, whole := x.buffers(n, N*n, r*n)
	x.fill(in, s, n)
	what := x.what("all_gather")
	if err := x.c.AllGather(x.ctx, in, out, n, x.dt); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	bs := n * x.dt.Size()
	for q := range N {
		if err := check(fmt.Sprintf("%s: block %d", what, q), out[q*bs:], x.p.input(x.dt, q), x.dt, s, n); err != nil {
			return err
		}
	}
	if err := x.unchanged(what, in, s, n); err != nil {
		return err
	}
	return checkGuard(what, whole, len(out))
}

// allToAll: rank r's output block q is block r of rank q's input.
func (x *caller) allToAll() error {
	s, n, r, N := x.next(), x.count, x.c.Rank(), x.c.Size()
	in, out, whole := x.buffers(N*n, N*n, 0)
	x.fill(in, s, N*n)
	what := x.what("all_to_all")
	if err := x.c.AllToAll(x.ctx, in, out, n, x.dt); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	bs := n * x.dt.Size()
	for q := range N {
		if err := check(fmt.Sprintf("%s: block %d", what, q), out[q*bs:], x.p.input(x.dt, q), x.dt, s+r*n, n); err != nil {
			return err
		}
	}
	if err := x.unchanged(what, in, s, N*n); err != nil {
		return err
	}
	return checkGuard(what, whole, len(out))
}

// ring sends count int32 to the next rank and receives from the previous
// one; even ranks send first.
func (x *caller) ring(count int) error {
	x.dt, x.count, x.inPlace = reduce.Int32, count, false
	s, r, N := x.next(), x.c.Rank(), x.c.Size()
	next, prev := (r+1)%N, (r+N-1)%N
	in, out, whole := x.buffers(count, count, 0)
	x.fill(in, s, count)
	what := x.what(fmt.Sprintf("send to %d, receive from %d", next, prev))
	send := func() error { return x.c.Send(x.ctx, in, count, reduce.Int32, next) }
	recv := func() error { return x.c.Recv(x.ctx, out, count, reduce.Int32, prev) }
	first, second := send, recv
	if r%2 == 1 {
		first, second = recv, send
	}
	if err := first(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := second(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := check(what, out, x.p.input(reduce.Int32, prev), reduce.Int32, s, count); err != nil {
		return err
	}
	if err := x.unchanged(what, in, s, count); err != nil {
		return err
	}
	return checkGuard(what, whole, len(out))
}
