package shmem

import (
	"errors"
	"fmt"
	"math/bits"
	"sort"
	"sync"
)

// ErrNoSpace is wrapped by Pool.Alloc when no free extent is large enough.
var ErrNoSpace = errors.New("shmem: no space")

// Pool allocates aligned extents of a range of offsets, typically the part
// of a Segment's Mem after a fixed header. It hands out offsets, not slices,
// because offsets are what may be written into shared memory.
//
// Allocation is first fit over a free list sorted by offset; Free coalesces
// an extent with its free neighbours, so freeing everything restores one
// extent covering the whole range. A Pool is safe for concurrent use.
type Pool struct {
	base, end, align uint64 // immutable

	mu    sync.Mutex
	free  []extent          // guarded by mu; sorted by off, never adjacent, never empty extents
	used  map[uint64]uint64 // guarded by mu; off -> rounded length of live allocations
	inUse uint64            // guarded by mu; sum of used
}

type extent struct{ off, len uint64 }

// NewPool returns a Pool over the offsets [base, base+size). align must be a
// power of two of at least 4096 (a page, so extents can be punched out of a
// Segment individually); NewPool panics otherwise, as that is a programming
// error. Every extent starts on an align boundary and every size is rounded
// up to a multiple of align; base is rounded up and base+size down to align,
// so an unaligned range loses its ragged ends.
func NewPool(base, size, align uint64) *Pool {
	if align < 4096 || align&(align-1) != 0 {
		panic(fmt.Sprintf("shmem: NewPool: align %d is not a power of two >= 4096", align))
	}
	end, carry := bits.Add64(base, size, 0)
	if carry != 0 {
		panic(fmt.Sprintf("shmem: NewPool: base %#x + size %#x overflows", base, size))
	}
	lo := (base + align - 1) &^ (align - 1)
	hi := end &^ (align - 1)
	if lo < base || hi < lo { // rounding base up overflowed, or the range holds no aligned extent
		lo, hi = base, base
	}
	p := &Pool{base: lo, end: hi, align: align, used: make(map[uint64]uint64)}
	if hi > lo {
		p.free = []extent{{lo, hi - lo}}
	}
	return p
}

// Alloc returns the offset of an extent of at least n bytes (n rounded up to
// the Pool's alignment). When nothing fits it returns an error wrapping
// ErrNoSpace that names the request and the free space.
func (p *Pool) Alloc(n uint64) (uint64, error) {
	if n == 0 {
		return 0, errors.New("shmem: alloc 0 bytes")
	}
	size := (n + p.align - 1) &^ (p.align - 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	if size >= n { // else rounding overflowed: nothing can fit
		for i := range p.free {
			e := &p.free[i]
			if e.len < size {
				continue
			}
			off := e.off
			if e.len == size {
				p.free = append(p.free[:i], p.free[i+1:]...)
			} else {
				e.off += size
				e.len -= size
			}
			p.used[off] = size
			p.inUse += size
			return off, nil
		}
	}
	var free, largest uint64
	for _, e := range p.free {
		free += e.len
		largest = max(largest, e.len)
	}
	return 0, fmt.Errorf("%w: alloc %d bytes (%d aligned): %d of %d bytes free in %d extents, the largest %d",
		ErrNoSpace, n, size, free, p.end-p.base, len(p.free), largest)
}

// Free returns the extent at off, which Alloc returned, to the Pool, and
// reports the extent's length so the caller can release its pages
// (Segment.PunchHole(off, length)). Freeing an offset that is not a live
// allocation is an error and changes nothing.
func (p *Pool) Free(off uint64) (length uint64, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	size, ok := p.used[off]
	if !ok {
		return 0, fmt.Errorf("shmem: free %#x: not an allocated extent of the pool [%#x, %#x)", off, p.base, p.end)
	}
	delete(p.used, off)
	p.inUse -= size

	// i is the first free extent after off.
	i := sort.Search(len(p.free), func(i int) bool { return p.free[i].off > off })
	joinPrev := i > 0 && p.free[i-1].off+p.free[i-1].len == off
	joinNext := i < len(p.free) && off+size == p.free[i].off
	switch {
	case joinPrev && joinNext:
		p.free[i-1].len += size + p.free[i].len
		p.free = append(p.free[:i], p.free[i+1:]...)
	case joinPrev:
		p.free[i-1].len += size
	case joinNext:
		p.free[i].off = off
		p.free[i].len += size
	default:
		p.free = append(p.free, extent{})
		copy(p.free[i+1:], p.free[i:])
		p.free[i] = extent{off, size}
	}
	return size, nil
}

// InUse returns the bytes currently allocated, alignment padding included.
func (p *Pool) InUse() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inUse
}
