package coll

import (
	"context"
	"fmt"
	"slices"
	"unsafe"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/coll/reduce"
	"github.com/ibex-rdma/ibex/verbs"
)

// work is the registered working buffer of a communicator: allocated on
// the primary device (shared memory where possible) and registered on the
// others, grown on demand.
type workBuf struct {
	buf   []byte
	mrs   map[string]*verbs.MR
	lkeys map[string]uint32
	addrs map[string]uint64
}

func (c *Comm) workBuffer(n int) (*workBuf, error) {
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
	w := &workBuf{buf: mr.Bytes(), mrs: map[string]*verbs.MR{c.primary: mr}, lkeys: map[string]uint32{}, addrs: map[string]uint64{}}
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

// directMin is the smallest call that runs on the caller's buffer: below
// it copying costs less than a registration would.
const directMin = 64 << 10

// maxUserMRs bounds the cache of registered caller buffers; when full it
// is emptied.
const maxUserMRs = 8

type userKey struct {
	p *byte
	n int
}

// userBuffer registers b on every device (or finds it registered) for a
// call to run on it.
func (c *Comm) userBuffer(b []byte) (*workBuf, error) {
	k := userKey{unsafe.SliceData(b), len(b)}
	if w := c.userMRs[k]; w != nil {
		return w, nil
	}
	if len(c.userMRs) >= maxUserMRs {
		if err := c.freeUser(); err != nil {
			return nil, err
		}
	}
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	w := &workBuf{buf: b, mrs: map[string]*verbs.MR{}, lkeys: map[string]uint32{}, addrs: map[string]uint64{}}
	for name, d := range c.devs {
		m, err := d.pd.RegMR(b, access)
		if err != nil {
			for _, m := range w.mrs {
				_ = m.Dereg()
			}
			return nil, fmt.Errorf("coll: rank %d: register the caller's buffer of %d bytes on %s: %w", c.rank, len(b), name, err)
		}
		w.mrs[name], w.lkeys[name], w.addrs[name] = m, m.LKey(), m.Addr()
	}
	if c.userMRs == nil {
		c.userMRs = map[userKey]*workBuf{}
	}
	c.userMRs[k] = w
	return w, nil
}

// userRoom empties the cache of caller buffers if registering a and b
// could overflow it (userBuffer would empty it between the two, and
// deregister the first).
func (c *Comm) userRoom(a, b []byte) error {
	_, okA := c.userMRs[userKey{unsafe.SliceData(a), len(a)}]
	_, okB := c.userMRs[userKey{unsafe.SliceData(b), len(b)}]
	if okA && okB || len(c.userMRs)+2 <= maxUserMRs {
		return nil
	}
	return c.freeUser()
}

// disjoint reports whether a and b share no byte.
func disjoint(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return true
	}
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa+uintptr(len(a)) <= pb || pb+uintptr(len(b)) <= pa
}

// freeUser deregisters the cached caller buffers.
func (c *Comm) freeUser() error {
	var first error
	for k, w := range c.userMRs {
		for _, m := range w.mrs {
			if err := m.Dereg(); err != nil && first == nil {
				first = err
			}
		}
		delete(c.userMRs, k)
	}
	return first
}

func (c *Comm) freeWork() error {
	if err := c.freeUser(); err != nil {
		return err
	}
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

type algoKey struct{}

// WithAlgorithm returns a context under which collective calls use
// algorithm a instead of the one the cost model picks (and IBEX_ALGO).
// Every rank must use the same algorithm for a call.
func WithAlgorithm(ctx context.Context, a algo.Algorithm) context.Context {
	return context.WithValue(ctx, algoKey{}, a)
}

// algorithm picks the algorithm of a call: the context's (WithAlgorithm);
// else IBEX_ALGO's (read at NewComm) if it names one the collective supports (so
// IBEX_ALGO=tree applies to all_reduce, broadcast and reduce); else the
// cheapest by the cost model.
func (c *Comm) algorithm(ctx context.Context, kind algo.Collective, count, esize int) (algo.Algorithm, error) {
	if a, ok := ctx.Value(algoKey{}).(algo.Algorithm); ok {
		return a, nil
	}
	if c.envAlgo != 0 && slices.Contains(algo.Supported(kind), c.envAlgo) {
		return c.envAlgo, nil
	}
	return c.choose(kind, count, esize), nil
}

// progKey names a compiled program: the same call shape on the same
// communicator always runs the same steps.
type progKey struct {
	kind  algo.Collective
	a     algo.Algorithm
	root  int
	count int
	esize int
}

// maxPrograms bounds the program cache (it is emptied when full).
const maxPrograms = 256

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
		out[i].overlap = st.Overlaps()
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
	return c.collective(ctx, algo.AllReduce, 0, sendbuf, recvbuf, count, dt, op)
}

// ReduceScatter reduces size×count elements and leaves block r (count
// elements) on rank r.
func (c *Comm) ReduceScatter(ctx context.Context, sendbuf, recvbuf []byte, count int, dt reduce.DType, op reduce.Op) error {
	return c.collective(ctx, algo.ReduceScatter, 0, sendbuf, recvbuf, count, dt, op)
}

// AllGather gathers count elements from every rank into size×count
// elements on every rank, rank r's at block r.
func (c *Comm) AllGather(ctx context.Context, sendbuf, recvbuf []byte, count int, dt reduce.DType) error {
	return c.collective(ctx, algo.AllGather, 0, sendbuf, recvbuf, count, dt, reduce.Sum)
}

// Broadcast copies root's count elements to every rank.
func (c *Comm) Broadcast(ctx context.Context, sendbuf, recvbuf []byte, count int, dt reduce.DType, root int) error {
	return c.collective(ctx, algo.Broadcast, root, sendbuf, recvbuf, count, dt, reduce.Sum)
}

// Reduce reduces count elements onto root; recvbuf matters only there.
func (c *Comm) Reduce(ctx context.Context, sendbuf, recvbuf []byte, count int, dt reduce.DType, op reduce.Op, root int) error {
	return c.collective(ctx, algo.Reduce, root, sendbuf, recvbuf, count, dt, op)
}

// AllToAll sends block j (count elements) of sendbuf to rank j, which
// places it at block r of its recvbuf.
func (c *Comm) AllToAll(ctx context.Context, sendbuf, recvbuf []byte, count int, dt reduce.DType) error {
	return c.collective(ctx, algo.AllToAll, 0, sendbuf, recvbuf, count, dt, reduce.Sum)
}

// collective runs one call. float16 and bfloat16 reductions run in
// float32: the input is widened, reduced as float32 (Avg as Sum), and the
// output narrowed once, dividing for Avg.
func (c *Comm) collective(ctx context.Context, kind algo.Collective, root int, sendbuf, recvbuf []byte, count int, dt reduce.DType, op reduce.Op) error {
	if !reduce.Wide(dt) || (kind != algo.AllReduce && kind != algo.ReduceScatter && kind != algo.Reduce) {
		return c.collectiveAs(ctx, kind, root, sendbuf, recvbuf, count, dt, op, dt, op)
	}
	in, out := 2*count, 2*count
	if kind == algo.ReduceScatter {
		in *= c.size
	}
	if count < 0 || len(sendbuf) < in || len(recvbuf) < out {
		return fmt.Errorf("coll: %v of %d %v: needs %d bytes of input and %d of output; got %d and %d", kind, count, dt, in, out, len(sendbuf), len(recvbuf))
	}
	if cap(c.wide) < 2*(in+out) {
		c.wide = make([]byte, 2*(in+out))
	}
	win, wout := c.wide[:2*in], c.wide[2*in:2*(in+out)]
	if err := reduce.Widen(win, sendbuf[:in], dt); err != nil {
		return err
	}
	op32 := op
	if op == reduce.Avg {
		op32 = reduce.Sum
	}
	if err := c.collectiveAs(ctx, kind, root, win, wout, count, reduce.Float32, op32, dt, op); err != nil {
		return err
	}
	if kind == algo.Reduce && c.rank != root {
		return nil
	}
	div := 1
	if op == reduce.Avg {
		div = c.size
	}
	return reduce.Narrow(recvbuf[:out], wout, dt, div)
}

// collectiveAs runs one call on dt with op, which the peers know as a call
// on descDT with descOp (they differ for widened float16): lay the input
// into the working buffer as coll/algo's conventions say, run the
// schedule, take the output out.
func (c *Comm) collectiveAs(ctx context.Context, kind algo.Collective, root int, sendbuf, recvbuf []byte, count int, dt reduce.DType, op reduce.Op,
	descDT reduce.DType, descOp reduce.Op) error {
	esize := dt.Size()
	n, N := count*esize, c.size
	in, out := n, n // bytes of input and output per rank
	work := n
	switch kind {
	case algo.ReduceScatter:
		in, work = N*n, N*n
	case algo.AllGather:
		out, work = N*n, N*n
	case algo.AllToAll:
		in, out, work = N*n, N*n, 2*N*n
	}
	if count < 0 || len(sendbuf) < in || len(recvbuf) < out {
		return fmt.Errorf("coll: %v of %d %v: needs %d bytes of input and %d of output; got %d and %d", kind, count, dt, in, out, len(sendbuf), len(recvbuf))
	}
	if root < 0 || root >= N {
		return fmt.Errorf("coll: %v: root %d of %d ranks", kind, root, N)
	}
	a, err := c.algorithm(ctx, kind, count, esize)
	if err != nil {
		return err
	}
	key := progKey{kind, a, root, count, esize}
	prog, ok := c.programs[key]
	if !ok {
		s, err := algo.Generate(kind, a, N, root, 1)
		if err != nil {
			return fmt.Errorf("coll: %v: %w", kind, err)
		}
		prog = steps(s, c.rank, count, esize)
		if c.programs == nil || len(c.programs) >= maxPrograms {
			c.programs = map[progKey][]execStep{}
			c.programMode = map[progKey]int{}
		}
		c.programs[key] = prog
		// Both ends of every transfer must take the same path.
		c.programMode[key] = c.pathFor(func(q int) []execStep {
			if q == c.rank {
				return prog
			}
			return steps(s, q, count, esize)
		})
	}
	// Large all-reduce, all-gather and broadcast run on the caller's
	// recvbuf itself (registered once, cached), not the working buffer:
	// no copy out, and no copy in when in place. An out-of-place
	// all-reduce on a fast path does not copy in either: it reads the
	// caller's sendbuf (registered too) until the bytes are first written
	// (fromInput).
	mode := c.programMode[key]
	direct := work >= directMin && (kind == algo.AllReduce || kind == algo.AllGather || kind == algo.Broadcast)
	for _, d := range c.devs {
		// A device whose transport maps only memory allocated for it
		// (ibexd) cannot register the caller's buffer: copy through
		// the working buffer.
		if d.caps.Has(verbs.CapAllocatedMemory) {
			direct = false
		}
	}
	fromInput := direct && kind == algo.AllReduce && mode != modeNormal && disjoint(sendbuf[:in], recvbuf[:work])
	var w, src *workBuf
	switch {
	case fromInput:
		if err := c.userRoom(sendbuf[:in], recvbuf[:work]); err != nil {
			return err
		}
		if src, err = c.userBuffer(sendbuf[:in]); err == nil {
			w, err = c.userBuffer(recvbuf[:work])
		}
	case direct:
		w, err = c.userBuffer(recvbuf[:work])
	default:
		w, err = c.workBuffer(work)
	}
	if err != nil {
		return err
	}
	buf := w.buf[:work]
	r := c.rank
	switch {
	case fromInput:
	case kind == algo.AllGather:
		copy(buf[r*n:(r+1)*n], sendbuf[:n])
	case kind == algo.AllToAll:
		copy(buf[:N*n], sendbuf[:N*n])
		copy(buf[(N+r)*n:(N+r+1)*n], sendbuf[r*n:(r+1)*n])
	case kind == algo.Broadcast:
		if r == root {
			copy(buf, sendbuf[:n])
		}
	default:
		copy(buf, sendbuf[:in])
	}
	if c.broken != nil {
		return c.broken
	}
	c.calls++
	cl := &c.cur
	inited := cl.inited[:0]
	*cl = call{seq: c.calls % callSeqMod, desc: descriptor(kind, a, count, descDT, descOp, root), steps: prog,
		buf: buf, lkeys: w.lkeys, addrs: w.addrs, dt: dt, op: op, mode: mode, inited: inited,
		info: callInfo{op: recOp(kind), root: int32(root), bytes: int64(max(in, out) * descDT.Size() / max(esize, 1))}}
	if fromInput {
		cl.src, cl.srcKeys, cl.srcAddrs = src.buf[:in], src.lkeys, src.addrs
	}
	if err := c.run(ctx, cl); err != nil {
		return fmt.Errorf("coll: %v of %d %v (%v): %w", kind, count, dt, a, err)
	}
	if cl.rerr != nil {
		return cl.rerr
	}
	if fromInput {
		cl.fill(0, work) // bytes no receive wrote: the input's
	}
	switch kind {
	case algo.ReduceScatter:
		if err := reduce.Finish(buf[r*n:(r+1)*n], dt, op, N); err != nil {
			return err
		}
		copy(recvbuf[:n], buf[r*n:(r+1)*n])
	case algo.AllGather:
		copy(recvbuf[:N*n], buf)
	case algo.AllToAll:
		copy(recvbuf[:N*n], buf[N*n:])
	case algo.Reduce:
		if r == root {
			if err := reduce.Finish(buf, dt, op, N); err != nil {
				return err
			}
			copy(recvbuf[:n], buf)
		}
	case algo.AllReduce:
		if err := reduce.Finish(buf, dt, op, N); err != nil {
			return err
		}
		copy(recvbuf[:n], buf)
	default:
		copy(recvbuf[:n], buf)
	}
	return nil
}

// Barrier returns once every rank has called it: an all-reduce of nothing
// (zero-byte pieces still travel every link of the ring).
func (c *Comm) Barrier(ctx context.Context) error {
	if err := c.collective(ctx, algo.AllReduce, 0, nil, nil, 0, reduce.Int8, reduce.Sum); err != nil {
		return fmt.Errorf("coll: barrier: %w", err)
	}
	return nil
}

// Send sends count elements to rank peer, which must call Recv with the
// same count and type. Sends and receives between two ranks match in
// order.
func (c *Comm) Send(ctx context.Context, buf []byte, count int, dt reduce.DType, peer int) error {
	return c.p2p(ctx, buf, count, dt, peer, true)
}

// Recv receives count elements from rank peer into buf.
func (c *Comm) Recv(ctx context.Context, buf []byte, count int, dt reduce.DType, peer int) error {
	return c.p2p(ctx, buf, count, dt, peer, false)
}

// SendRecv sends count elements of sendbuf to rank to and receives count
// elements from rank from into recvbuf, both at once (nccl-tests'
// sendrecv: to = rank+1, from = rank-1). sendbuf and recvbuf may be the
// same slice. It matches a Send (from's) and a Recv (to's), or their
// SendRecv.
func (c *Comm) SendRecv(ctx context.Context, sendbuf []byte, to int, recvbuf []byte, from int, count int, dt reduce.DType) error {
	n := count * dt.Size()
	switch {
	case to < 0 || to >= c.size || to == c.rank || from < 0 || from >= c.size || from == c.rank:
		return fmt.Errorf("coll: sendrecv: to %d, from %d: want other ranks of %d", to, from, c.size)
	case count < 0 || len(sendbuf) < n || len(recvbuf) < n:
		return fmt.Errorf("coll: sendrecv: %d %v elements need %d bytes; the buffers have %d and %d", count, dt, n, len(sendbuf), len(recvbuf))
	}
	w, err := c.workBuffer(2 * n)
	if err != nil {
		return err
	}
	copy(w.buf[:n], sendbuf[:n])
	st := execStep{sends: []xfer{{peer: to, n: n}}, recvs: []xfer{{peer: from, off: n, n: n}}}
	cl := &call{seq: p2pSeq, desc: descriptor(p2pKind, 0, count, dt, 0, 0), steps: []execStep{st}, buf: w.buf[:2*n], lkeys: w.lkeys, addrs: w.addrs,
		info: callInfo{op: recSendRecv, bytes: int64(n)}}
	cl.mode = c.p2pPath(cl.steps)
	if err := c.run(ctx, cl); err != nil {
		return fmt.Errorf("coll: sendrecv of %d %v to rank %d, from rank %d: %w", count, dt, to, from, err)
	}
	copy(recvbuf[:n], w.buf[n:2*n])
	return nil
}

// p2pPath is the path of a point-to-point program: LL when it fits (the
// peer's program sends or receives the same bytes), else flagged when the
// communicator takes it.
func (c *Comm) p2pPath(prog []execStep) int {
	switch {
	case c.ll.on && llOK(prog, c.ll.max):
		return modeLL
	case c.fl.on:
		return modeFL
	}
	return modeNormal
}

func (c *Comm) p2p(ctx context.Context, buf []byte, count int, dt reduce.DType, peer int, send bool) error {
	op := "recv"
	if send {
		op = "send"
	}
	n := count * dt.Size()
	switch {
	case peer < 0 || peer >= c.size || peer == c.rank:
		return fmt.Errorf("coll: %s: peer %d: want another rank of %d", op, peer, c.size)
	case count < 0 || len(buf) < n:
		return fmt.Errorf("coll: %s: %d %v elements need %d bytes; the buffer has %d", op, count, dt, n, len(buf))
	}
	w, err := c.workBuffer(n)
	if err != nil {
		return err
	}
	st := execStep{}
	if send {
		copy(w.buf[:n], buf[:n])
		st.sends = []xfer{{peer: peer, n: n}}
	} else {
		st.recvs = []xfer{{peer: peer, n: n}}
	}
	// Point-to-point calls do not advance the collective call number: two
	// ranks exchanging messages need not have made the same collectives.
	cl := &call{seq: p2pSeq, desc: descriptor(p2pKind, 0, count, dt, 0, 0), steps: []execStep{st}, buf: w.buf[:n], lkeys: w.lkeys, addrs: w.addrs,
		info: callInfo{op: recRecv, bytes: int64(n)}}
	if send {
		cl.info.op = recSend
	}
	cl.mode = c.p2pPath(cl.steps)
	if err := c.run(ctx, cl); err != nil {
		return fmt.Errorf("coll: %s of %d %v with rank %d: %w", op, count, dt, peer, err)
	}
	if !send {
		copy(buf[:n], w.buf[:n])
	}
	return nil
}
