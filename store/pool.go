package store

import (
	"sync"

	"github.com/ibex-rdma/ibex/verbs"
)

// dioAlign is the alignment O_DIRECT reads get: offsets, lengths and
// buffer addresses in multiples of it.
const dioAlign = 4096

// pool is the server's registered buffers: one MR, registered once, cut
// into equal buffers that clients borrow (READ mode: until they release
// them; WRITE mode: until the WRITE completes). Each buffer has an owner
// (the client's id, or -1 when free), so that a client's buffers all come
// back when it goes.
type pool struct {
	mr     *verbs.MR
	mem    []byte // the buffers, from the first aligned byte of mr
	addr   uint64 // mr's address of mem[0]
	chunk  int    // data bytes a buffer serves
	stride int    // bytes between buffers (chunk, plus dioAlign with O_DIRECT)
	n      int

	mu      sync.Mutex
	free    []int32 // stack of free buffers
	owner   []int32 // guarded by mu
	waiters []chan struct{}
}

func newPool(pd *verbs.PD, n, chunk int, direct bool) (*pool, error) {
	stride := chunk
	if direct {
		stride = chunk + dioAlign
	}
	access := verbs.AccessLocalWrite | verbs.AccessRemoteRead
	mr, err := pd.AllocMR(n*stride, access)
	if err != nil {
		return nil, err
	}
	b := mr.Bytes()
	skip := 0
	if a := addrOf(b) % dioAlign; a != 0 && direct {
		// O_DIRECT needs aligned buffers: take one block more and
		// start at the first aligned byte.
		if err := mr.Dereg(); err != nil {
			return nil, err
		}
		if mr, err = pd.AllocMR(n*stride+dioAlign, access); err != nil {
			return nil, err
		}
		b = mr.Bytes()
		if a := addrOf(b) % dioAlign; a != 0 {
			skip = int(dioAlign - a)
		}
	}
	p := &pool{mr: mr, mem: b[skip : skip+n*stride], addr: mr.Addr() + uint64(skip), chunk: chunk, stride: stride, n: n,
		free: make([]int32, n), owner: make([]int32, n)}
	for i := range p.free {
		p.free[i] = int32(n - 1 - i)
		p.owner[i] = -1
	}
	return p, nil
}

func (p *pool) buf(i int32) []byte {
	return p.mem[int(i)*p.stride : (int(i)+1)*p.stride]
}

func (p *pool) bufAddr(i int32) uint64 { return p.addr + uint64(i)*uint64(p.stride) }

// alloc takes len(out) buffers for owner, all or none.
func (p *pool) alloc(owner int32, out []int32) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(out) > len(p.free) {
		return false
	}
	for i := range out {
		b := p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
		p.owner[b] = owner
		out[i] = b
	}
	return true
}

// put returns buffer b, which owner holds. It reports false (and does
// nothing) if owner does not hold b: a client's release is checked here.
func (p *pool) put(owner int32, b uint32) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if uint64(b) >= uint64(p.n) || p.owner[b] != owner {
		return false
	}
	p.owner[b] = -1
	p.free = append(p.free, int32(b))
	p.wakeLocked()
	return true
}

// putAll returns every buffer owner holds and says how many.
func (p *pool) putAll(owner int32) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for i, o := range p.owner {
		if o == owner {
			p.owner[i] = -1
			p.free = append(p.free, int32(i))
			n++
		}
	}
	if n > 0 {
		p.wakeLocked()
	}
	return n
}

// wait asks for a wake-up on ch when a buffer comes back.
func (p *pool) wait(ch chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.waiters {
		if w == ch {
			return
		}
	}
	p.waiters = append(p.waiters, ch)
}

func (p *pool) wakeLocked() {
	for i, w := range p.waiters {
		select {
		case w <- struct{}{}:
		default:
		}
		p.waiters[i] = nil
	}
	p.waiters = p.waiters[:0]
}

func (p *pool) freeCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free)
}
