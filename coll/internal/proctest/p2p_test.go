package proctest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/coll"
	"github.com/ibex-rdma/ibex/coll/reduce"
)

// p2pCounts are the messages of TestSendRecvQueued, in order: together
// less than a landing buffer, so every send completes before the
// receiver asks for any.
var p2pCounts = []int{0, 1, 5, 1000, 3}

// TestSendRecvQueued: after a barrier, rank 0 sends several messages of
// different counts to rank 1 back to back; rank 1 starts receiving only
// after they all arrived (it waits 200 ms), and must get each, in order
// ("sends and receives between two ranks match in order"). Two processes
// over shm0.
func TestSendRecvQueued(t *testing.T) {
	j := start(t, spec{Case: "p2p", Size: 2, ID: newID(t, freeAddr(t)), Seed: seed(t), Limit: 30 * time.Second})
	j.wait(40 * time.Second)
}

// p2pCase is one rank of TestSendRecvQueued.
func p2pCase(ctx context.Context, c *coll.Comm, seed uint64) error {
	x := newCaller(ctx, c, seed)
	x.dt = reduce.Int32
	// After a first call the ranks' receives are posted, so the messages
	// land at rank 1 at once rather than waiting out RNR retries.
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if c.Rank() == 1 {
		time.Sleep(200 * time.Millisecond)
	}
	for k, count := range p2pCounts {
		x.count = count
		s := x.next()
		what := fmt.Sprintf("rank %d: message %d of %d int32", c.Rank(), k, count)
		in, out, whole := x.buffers(count, count, 0)
		if c.Rank() == 0 {
			x.fill(in, s, count)
			if err := c.Send(ctx, in, count, reduce.Int32, 1); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			continue
		}
		if err := c.Recv(ctx, out, count, reduce.Int32, 0); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if err := check(what, out, x.p.input(reduce.Int32, 0), reduce.Int32, s, count); err != nil {
			return err
		}
		if err := checkGuard(what, whole, len(out)); err != nil {
			return err
		}
	}
	return c.Barrier(ctx)
}
