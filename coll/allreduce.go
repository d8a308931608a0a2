package coll

import (
	"context"
	"fmt"
	"os"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/coll/reduce"
	"github.com/ibex-rdma/ibex/verbs"
)

// work is the registered working buffer of a communicator: allocated on
// the primary device (shared memory where possible) and registered on the
// others, grown on demand.
type work struct {
	buf   []byte
	mrs   map[string]*verbs.MR
	lkeys map[string]uint32
	addrs map[string]uint64
}

func (c *Comm) workBuffer(n int) (*work, error) {
	n = max(n, 64)
	if c.work != nil && len(c.work.buf) >= n {
		return c.work, nil
	}
	if err := c.freeWork(); err != nil {
		return nil, err
	}
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	p := c.devs[c.primary]
	mr, err := p.pd.AllocMR(n, access)
	if err != nil {
		return nil, fmt.Errorf("coll: rank %d: working buffer of %d bytes: %w", c.rank, n, err)
	}
	w := &work{buf: mr.Bytes(), mrs: map[string]*verbs.MR{c.primary: mr}, lkeys: map[string]uint32{}, addrs: map[string]uint64{}}
	for name, d := range c.devs {
		if name != c.primary {
			if w.mrs[name], err = d.pd.RegMR(w.buf, access); err != nil {
				return nil, err
			}
		}
	}
	for name, m := range w.mrs {
		w.lkeys[name], w.addrs[name] = m.LKey(), m.Addr()
	}
	c.work = w
	return w, nil
}

func (c *Comm) freeWork() error {
	if c.work == nil {
		return nil
	}
	var first error
	for name, m := range c.work.mrs {
		if name != c.primary {
			if err := m.Dereg(); err != nil && first == nil {
				first = err
			}
		}
	}
	if err := c.work.mrs[c.primary].Dereg(); err != nil && first == nil {
		first = err
	}
	c.work = nil
	return first
}

// algorithm picks the algorithm of a call: IBEX_ALGO if set and
// supported, else the default (a cost model replaces this).
func (c *Comm) algorithm(coll algo.Collective) (algo.Algorithm, error) {
	if s := os.Getenv("IBEX_ALGO"); s != "" {
		a, err := algo.ParseAlgorithm(s)
		if err != nil {
			return 0, fmt.Errorf("coll: IBEX_ALGO=%q: %w", s, err)
		}
		return a, nil
	}
	if coll == algo.AllToAll {
		return algo.Direct, nil
	}
	return algo.Ring, nil
}

// steps turns a rank's program into byte ranges of the working buffer.
func steps(s *algo.Schedule, rank, count, esize int) []execStep {
	rng := func(first, n int) (int, int) {
		lo, _ := s.SlotRange(count, first)
		_, hi := s.SlotRange(count, first+n-1)
		return lo * esize, (hi - lo) * esize
	}
	prog := s.Program(rank)
	out := make([]execStep, len(prog))
	for i, st := range prog {
		for _, t := range st.Sends {
			off, n := rng(t.Src, t.Len)
			out[i].sends = append(out[i].sends, xfer{peer: t.Peer, off: off, n: n})
		}
		for _, t := range st.Recvs {
			off, n := rng(t.Dst, t.Len)
			out[i].recvs = append(out[i].recvs, xfer{peer: t.Peer, off: off, n: n, reduce: t.Reduce})
		}
	}
	return out
}

// AllReduce reduces count elements of type dt with op over every rank;
// every rank gets the same result in recvbuf. sendbuf and recvbuf may be
// the same slice (in place). Every rank must make the same call.
func (c *Comm) AllReduce(ctx context.Context, sendbuf, recvbuf []byte, count int, dt reduce.DType, op reduce.Op) error {
	esize := dt.Size()
	if count < 0 || len(sendbuf) < count*esize || len(recvbuf) < count*esize {
		return fmt.Errorf("coll: all_reduce: %d %v elements need %d bytes; send buffer has %d, receive buffer %d", count, dt, count*esize, len(sendbuf), len(recvbuf))
	}
	a, err := c.algorithm(algo.AllReduce)
	if err != nil {
		return err
	}
	if a == algo.RecDoubling {
		return fmt.Errorf("coll: all_reduce: algorithm %v is not run by the executor yet (its steps send and receive the same slots)", a)
	}
	s, err := algo.Generate(algo.AllReduce, a, c.size, 0, 1)
	if err != nil {
		return fmt.Errorf("coll: all_reduce: %w", err)
	}
	w, err := c.workBuffer(count * esize)
	if err != nil {
		return err
	}
	n := count * esize
	copy(w.buf[:n], sendbuf[:n])
	c.calls++
	var rerr error
	red := func(dst, src []byte) {
		if err := reduce.Reduce(dst, src, dt, op); err != nil && rerr == nil {
			rerr = err
		}
	}
	if err := c.run(ctx, c.calls, steps(s, c.rank, count, esize), w.buf[:n], w.lkeys, w.addrs, red); err != nil {
		return fmt.Errorf("coll: all_reduce of %d %v (%v): %w", count, dt, a, err)
	}
	if rerr != nil {
		return rerr
	}
	if err := reduce.Finish(w.buf[:n], dt, op, c.size); err != nil {
		return err
	}
	copy(recvbuf[:n], w.buf[:n])
	return nil
}
