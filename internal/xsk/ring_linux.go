package xsk

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A ring as the kernel maps it: a producer and a consumer index, a flags
// word (XDP_RING_NEED_WAKEUP) and a power-of-two array of entries. The
// indices run freely and wrap at 2^32; entry i is at i&mask. One side
// produces, the other consumes; each publishes its index with an atomic
// store after writing or reading the entries, and reads the other's with
// an atomic load (the kernel's smp_load_acquire/smp_store_release pair).
type ring struct {
	prod, cons, flags *uint32
	entries           unsafe.Pointer
	mask              uint32
	mem               []byte // the mapping, for munmap

	local  uint32 // our own index: the producer's for fill and TX, the consumer's for RX and completion
	cached uint32 // the other side's index as last read
}

// mapRing maps a ring of n entries of size esize at the mmap offset pgoff
// of the socket fd, with the offsets the kernel gave.
func mapRing(fd int, off unix.XDPRingOffset, n uint32, esize uintptr, pgoff int64) (*ring, error) {
	size := int(off.Desc) + int(n)*int(esize)
	mem, err := unix.Mmap(fd, pgoff, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, err
	}
	base := unsafe.Pointer(unsafe.SliceData(mem))
	return &ring{
		prod:    (*uint32)(unsafe.Add(base, off.Producer)),
		cons:    (*uint32)(unsafe.Add(base, off.Consumer)),
		flags:   (*uint32)(unsafe.Add(base, off.Flags)),
		entries: unsafe.Add(base, off.Desc),
		mask:    n - 1,
		mem:     mem,
	}, nil
}

func (r *ring) unmap() {
	if r != nil && r.mem != nil {
		_ = unix.Munmap(r.mem)
		r.mem = nil
	}
}

// needWakeup reports whether the kernel asks to be woken (a system call)
// to go on with this ring.
func (r *ring) needWakeup() bool { return atomic.LoadUint32(r.flags)&unix.XDP_RING_NEED_WAKEUP != 0 }

// addr is entry i of a fill or completion ring.
func (r *ring) addr(i uint32) *uint64 {
	return (*uint64)(unsafe.Add(r.entries, uintptr(i&r.mask)*8))
}

// desc is entry i of an RX or TX ring.
func (r *ring) desc(i uint32) *unix.XDPDesc {
	return (*unix.XDPDesc)(unsafe.Add(r.entries, uintptr(i&r.mask)*unsafe.Sizeof(unix.XDPDesc{})))
}

// available is, for a consumer, how many entries the producer has
// published beyond ours.
func (r *ring) available() uint32 {
	r.cached = atomic.LoadUint32(r.prod)
	return r.cached - r.local
}

// release publishes that we consumed n more entries.
func (r *ring) release(n uint32) {
	r.local += n
	atomic.StoreUint32(r.cons, r.local)
}

// submit publishes the entries we produced up to local.
func (r *ring) submit() { atomic.StoreUint32(r.prod, r.local) }

// consumed reports whether the consumer has taken every entry we submitted.
func (r *ring) consumed() bool { return atomic.LoadUint32(r.cons) == r.local }
