package verbs

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
)

// WC is a work completion (ibv_wc).
type WC struct {
	WRID    uint64
	Status  WCStatus
	Opcode  WCOpcode
	Flags   WCFlags
	ByteLen uint32
	Imm     uint32 // valid when Flags has WCWithImm
	QPNum   uint32 // the local QP
	SrcQP   uint32 // receive completions: the sending QP
}

func (wc WC) String() string {
	s := fmt.Sprintf("wr_id %#x %v %v qp %#x byte_len %d", wc.WRID, wc.Opcode, wc.Status, wc.QPNum, wc.ByteLen)
	if wc.Flags&WCWithImm != 0 {
		s += fmt.Sprintf(" imm %#x", wc.Imm)
	}
	if wc.Opcode >= WCRecv {
		s += fmt.Sprintf(" src_qp %#x", wc.SrcQP)
	}
	return s
}

// CQ is a completion queue (ibv_cq) of fixed depth. It is safe for
// concurrent use.
type CQ struct {
	ctx   *Context
	id    uint32
	depth int

	mu         sync.Mutex
	ring       []WC
	head, n    int
	overflowed bool
	destroyed  bool
	nqp        int

	waiters atomic.Int32
	notify  chan struct{}

	progress progresser // the device, when it can progress in Poll
	idle     idler      // the device, when it wants to hear that a poller sleeps
}

// CreateCQ creates a completion queue that holds depth completions. When a
// completion arrives at a full CQ the CQ overflows: it moves to error, an
// EventCQErr is posted, the QP that completed moves to ERR, and Poll reports
// ErrCQOverflow once the queued entries are drained.
func (c *Context) CreateCQ(depth int) (*CQ, error) {
	if depth < 1 || depth > c.attr.MaxCQE {
		return nil, errorf(ErrInvalidArgument, "create cq: depth %d: device %s allows 1..%d", depth, c.name, c.attr.MaxCQE)
	}
	if err := c.count(&c.ncq, 1, c.attr.MaxCQ, "create cq"); err != nil {
		return nil, err
	}
	cq := &CQ{ctx: c, id: randKey() & 0xffffff, depth: depth, ring: make([]WC, depth), notify: make(chan struct{}, 1)}
	cq.progress, _ = c.dev.(progresser)
	cq.idle, _ = c.dev.(idler)
	return cq, nil
}

// Depth is the number of completions the CQ holds.
func (cq *CQ) Depth() int { return cq.depth }

// Poll moves up to len(wc) completions into wc and returns how many. It
// never blocks and allocates nothing. After an overflow, Poll returns the
// completions still queued and then ErrCQOverflow.
func (cq *CQ) Poll(wc []WC) (int, error) {
	n, err := cq.poll(wc)
	if n == 0 && err == nil && cq.progress != nil && len(wc) > 0 {
		cq.progress.Progress()
		n, err = cq.poll(wc)
	}
	return n, err
}

func (cq *CQ) poll(wc []WC) (int, error) {
	cq.mu.Lock()
	n := 0
	for n < len(wc) && cq.n > 0 {
		wc[n] = cq.ring[cq.head]
		cq.head++
		if cq.head == len(cq.ring) {
			cq.head = 0
		}
		cq.n--
		n++
	}
	over := cq.overflowed && cq.n == 0
	cq.mu.Unlock()
	if n == 0 && over {
		return 0, cq.overflowErr()
	}
	return n, nil
}

func (cq *CQ) overflowErr() error {
	return fmt.Errorf("poll cq %#x: completions lost (depth %d): %w", cq.id, cq.depth, ErrCQOverflow)
}

// Wait blocks until the CQ holds a completion, the CQ is in error, or ctx
// ends (the completion channel of libibverbs, without the arm/ack dance).
func (cq *CQ) Wait(ctx context.Context) error {
	cq.waiters.Add(1)
	defer cq.waiters.Add(-1)
	for {
		cq.mu.Lock()
		ready, over := cq.n > 0, cq.overflowed
		cq.mu.Unlock()
		if ready {
			if cq.waiters.Load() > 1 {
				cq.wake() // pass the wake-up on to the next waiter
			}
			return nil
		}
		if over {
			return cq.overflowErr()
		}
		if cq.idle != nil {
			cq.idle.Idle() // this goroutine stops driving the device
		}
		select {
		case <-cq.notify:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// PollWait polls, waiting with ctx until at least one completion arrives.
func (cq *CQ) PollWait(ctx context.Context, wc []WC) (int, error) {
	for {
		n, err := cq.Poll(wc)
		if n > 0 || err != nil {
			return n, err
		}
		if err := cq.Wait(ctx); err != nil {
			return 0, err
		}
	}
}

// push appends a completion. It returns false when the CQ overflowed (or
// had already), in which case the caller's QP must move to ERR.
func (cq *CQ) push(wc *WC) bool {
	cq.mu.Lock()
	if cq.overflowed || cq.destroyed {
		cq.mu.Unlock()
		return false
	}
	if cq.n == len(cq.ring) {
		cq.overflowed = true
		cq.mu.Unlock()
		cq.ctx.postEvent(AsyncEvent{Type: EventCQErr, CQ: cq,
			Cause: fmt.Errorf("cq %#x overflowed at depth %d; completion of wr_id %#x on qp %#x lost", cq.id, cq.depth, wc.WRID, wc.QPNum)})
		cq.wake()
		return false
	}
	i := cq.head + cq.n
	if i >= len(cq.ring) {
		i -= len(cq.ring)
	}
	cq.ring[i] = *wc
	cq.n++
	cq.mu.Unlock()
	if cq.waiters.Load() > 0 {
		cq.wake()
	}
	return true
}

func (cq *CQ) wake() {
	select {
	case cq.notify <- struct{}{}:
	default:
	}
}

// Destroy frees the CQ. QPs that use it must be destroyed first.
func (cq *CQ) Destroy() error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.destroyed {
		return errorf(ErrClosed, "destroy cq %#x", cq.id)
	}
	if cq.nqp > 0 {
		return errorf(ErrBusy, "destroy cq %#x: %d QPs still use it", cq.id, cq.nqp)
	}
	cq.destroyed = true
	return cq.ctx.count(&cq.ctx.ncq, -1, 0, "destroy cq")
}

func (cq *CQ) attach(delta int) error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.destroyed {
		return errorf(ErrClosed, "cq %#x destroyed", cq.id)
	}
	cq.nqp += delta
	return nil
}
