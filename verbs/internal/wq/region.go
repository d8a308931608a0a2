package wq

import (
	"sync/atomic"

	"github.com/ibex-rdma/ibex/ib"
)

// Region is the memory of a registered MR and the count of accesses in
// progress. verbs.MR holds one; SendWQEs point at it.
type Region struct {
	Buf    []byte
	Addr   uint64 // virtual address of Buf[0]
	Access ib.Access

	// pins counts accesses in progress; the top bit marks the region dead.
	// Kill sets the bit; once Drained, no access touches the memory.
	pins atomic.Uint64
}

const dead = 1 << 63

// Pin marks an access in progress; false means the region is
// deregistered. Every successful Pin must be followed by Unpin. Pins nest.
func (r *Region) Pin() bool {
	for {
		v := r.pins.Load()
		if v&dead != 0 {
			return false
		}
		if r.pins.CompareAndSwap(v, v+1) {
			return true
		}
	}
}

// Unpin ends an access started by Pin.
func (r *Region) Unpin() { r.pins.Add(^uint64(0)) }

// Kill marks the region dead, so no new access starts; false if it was
// already dead.
func (r *Region) Kill() bool {
	for {
		v := r.pins.Load()
		if v&dead != 0 {
			return false
		}
		if r.pins.CompareAndSwap(v, v|dead) {
			return true
		}
	}
}

// Drained reports whether the region is dead and no access is in progress.
func (r *Region) Drained() bool { return r.pins.Load() == dead }

// Slice returns the bytes [addr, addr+n) of the region, or false when the
// range is not inside it.
func (r *Region) Slice(addr uint64, n uint64) ([]byte, bool) {
	if addr < r.Addr {
		return nil, false
	}
	off := addr - r.Addr
	if off > uint64(len(r.Buf)) || n > uint64(len(r.Buf))-off {
		return nil, false
	}
	return r.Buf[off : off+n], true
}

// PinAll pins every region; on failure it unpins those it pinned and
// returns the index of the dead one.
func PinAll(rs []*Region) (int, bool) {
	for i, r := range rs {
		if !r.Pin() {
			UnpinAll(rs[:i])
			return i, false
		}
	}
	return 0, true
}

// UnpinAll unpins every region.
func UnpinAll(rs []*Region) {
	for _, r := range rs {
		r.Unpin()
	}
}

// Writable reports whether every region grants LOCAL_WRITE.
func Writable(rs []*Region) bool {
	for _, r := range rs {
		if r.Access&ib.AccessLocalWrite == 0 {
			return false
		}
	}
	return true
}
