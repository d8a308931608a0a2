package shm

import (
	"fmt"
	"time"
	"unsafe"

	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/verbs/driver"
)

// Memory regions. Every MR of a node is published in the node's key table
// (in its pool) so peers can check an rkey, the PD, the access rights and
// the bounds themselves and then move the bytes with no code running in
// the target: a copy into their mapping of the pool for memory from
// AllocMR, process_vm_writev/readv for ordinary memory.
//
// Deregistration must not return while a peer still touches the memory.
// An initiator announces each access in its QP half's access word (the
// entry index and generation), then re-checks the entry, copies, and
// clears the word. DeregMR marks the entry dead, then waits until no
// linked peer half announces it. With sequentially consistent atomics,
// either the initiator's re-check sees the entry dead, or DeregMR sees the
// announcement.

type keyTable struct {
	free   []uint32
	byLKey map[uint32]uint32
	gen    [maxMR]uint64
}

func (t *keyTable) init() {
	t.byLKey = map[uint32]uint32{}
	for i := maxMR - 1; i >= 0; i-- {
		t.free = append(t.free, uint32(i))
	}
}

func (n *node) entry(idx uint32) mem {
	off := offKeys + uint64(idx)*keySize
	return n.m[off : off+keySize]
}

// AllocMem carves AllocMR memory out of the pool, where peers map it.
func (n *node) AllocMem(size int) ([]byte, func(), error) {
	off, err := n.pool.Alloc(uint64(size))
	if err != nil {
		return nil, nil, fmt.Errorf("shm: %w", err)
	}
	buf := n.seg.Mem[off : off+uint64(size) : off+uint64(size)]
	return buf, func() {
		if l, err := n.pool.Free(off); err == nil {
			_ = n.seg.PunchHole(int64(off), int64(l))
		}
	}, nil
}

func (n *node) RegMR(mr driver.MR) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.keys.free) == 0 {
		return fmt.Errorf("shm: key table full (%d MRs): %w", maxMR, verbs.ErrLimit)
	}
	idx := n.keys.free[len(n.keys.free)-1]
	n.keys.free = n.keys.free[:len(n.keys.free)-1]
	n.keys.byLKey[mr.LKey()] = idx
	e := n.entry(idx)
	kind, poolOff := uint32(kindPVM), uint64(0)
	// Where the memory is, not what the MR calls it: AllocMR's regions
	// have a random address (their iova), and peers name bytes by it.
	base := uint64(uintptr(unsafe.Pointer(&n.seg.Mem[0])))
	p := uint64(uintptr(unsafe.Pointer(&mr.Bytes()[0])))
	if p >= base && p+uint64(mr.Len()) <= base+uint64(len(n.seg.Mem)) {
		kind, poolOff = kindPool, p-base
	} else {
		// Ordinary memory: peers reach it at its process address, which
		// is not its name when it was registered with an iova.
		poolOff = p
	}
	e.u32(keyRKey).Store(mr.RKey())
	e.u32(keyPD).Store(mr.PD().ID())
	e.u32(keyAccess).Store(uint32(mr.Access()))
	e.u32(keyKind).Store(kind)
	e.u64(keyVA).Store(mr.Addr())
	e.u64(keyLen).Store(uint64(mr.Len()))
	e.u64(keyPool).Store(poolOff)
	n.keys.gen[idx]++
	e.u64(keyState).Store(n.keys.gen[idx]<<1 | 1)
	return nil
}

// drainWait bounds how long DeregMR waits for one peer's access: accesses
// are a copy or one system call, so only a stopped peer takes long.
const drainWait = 10 * time.Second

func (n *node) DeregMR(mr driver.MR) {
	n.mu.Lock()
	idx, ok := n.keys.byLKey[mr.LKey()]
	if !ok {
		n.mu.Unlock()
		return
	}
	delete(n.keys.byLKey, mr.LKey())
	gen := n.keys.gen[idx]
	n.keys.gen[idx]++
	n.entry(idx).u64(keyState).Store(n.keys.gen[idx] << 1)
	n.mu.Unlock()

	tag := accessTag(idx, gen)
	for i := range n.slots {
		q := n.slots[i].Load()
		if q == nil {
			continue
		}
		q.waitAccess(tag)
	}
	n.mu.Lock()
	n.keys.free = append(n.keys.free, idx)
	n.mu.Unlock()
}

func accessTag(idx uint32, gen uint64) uint64 { return uint64(idx+1) | gen<<32 }

// remoteMR is a validated key table entry of a peer.
type remoteMR struct {
	idx    uint32
	state  uint64
	kind   uint32
	access verbs.Access
	va     uint64
	len    uint64
	pool   uint64
	pd     uint32
}

// lookup finds rkey in p's key table and checks the PD, access and bounds
// of [va, va+n). It returns a description of the failure.
func (p *peer) lookup(rkey, pd uint32, va, n uint64, need verbs.Access) (remoteMR, string) {
	p.mu.Lock()
	idx, cached := p.keyCache[rkey]
	p.mu.Unlock()
	if r, ok := p.readEntry(idx, rkey); cached && ok {
		return r.check(rkey, pd, va, n, need)
	}
	for i := uint32(0); i < maxMR; i++ {
		if r, ok := p.readEntry(i, rkey); ok {
			p.mu.Lock()
			p.keyCache[rkey] = i
			p.mu.Unlock()
			return r.check(rkey, pd, va, n, need)
		}
	}
	return remoteMR{}, fmt.Sprintf("rkey %#x is not a registered MR of the responder", rkey)
}

func (r remoteMR) check(rkey, pd uint32, va, n uint64, need verbs.Access) (remoteMR, string) {
	switch {
	case r.pd != pd:
		return r, fmt.Sprintf("rkey %#x is not a registered MR of the responder's PD", rkey)
	case r.access&need == 0:
		return r, fmt.Sprintf("rkey %#x grants %v, not %v", rkey, r.access, need)
	case va < r.va || va-r.va > r.len || n > r.len-(va-r.va):
		return r, fmt.Sprintf("[%#x, +%d) is outside MR rkey %#x [%#x, +%d)", va, n, rkey, r.va, r.len)
	}
	return r, ""
}

// readEntry reads entry idx if it is live and holds rkey (a seqlock read).
func (p *peer) readEntry(idx, rkey uint32) (remoteMR, bool) {
	if idx >= maxMR {
		return remoteMR{}, false
	}
	off := offKeys + uint64(idx)*keySize
	e := p.m[off : off+keySize]
	st := e.u64(keyState).Load()
	if st&1 == 0 || e.u32(keyRKey).Load() != rkey {
		return remoteMR{}, false
	}
	r := remoteMR{idx: idx, state: st, kind: e.u32(keyKind).Load(), access: verbs.Access(e.u32(keyAccess).Load()),
		va: e.u64(keyVA).Load(), len: e.u64(keyLen).Load(), pool: e.u64(keyPool).Load(), pd: e.u32(keyPD).Load()}
	if e.u64(keyState).Load() != st {
		return remoteMR{}, false
	}
	return r, true
}

// live reports whether the entry is still the one r was read from.
func (p *peer) live(r *remoteMR) bool {
	off := offKeys + uint64(r.idx)*keySize
	return p.m.u64(off+keyState).Load() == r.state
}
