package kv

import (
	"sort"
	"time"
)

// arena hands out entry space in the value MR: size classes (multiples of
// 64 bytes up to 1 KiB, then four per doubling), a free list per class
// and a bump pointer. A freed entry waits out the quarantine first, so a
// reader that is still copying it finds it intact (and dead). The server's
// worker goroutine owns it; it allocates nothing per call once its free
// lists have grown.
type arena struct {
	size       uint64
	top        uint64
	classes    []uint64   // class sizes, ascending
	free       [][]uint64 // free offsets per class
	quarantine []freed    // FIFO
	qhead      int
	qbytes     uint64
	used       uint64 // bytes of allocated (live or in flight) entries
	wait       time.Duration
	now        func() time.Time
}

type freed struct {
	off   uint64
	class int
	at    time.Time
}

func newArena(size, maxEntry uint64, quarantine time.Duration) *arena {
	a := &arena{size: size &^ (entryAlign - 1), wait: quarantine, now: time.Now}
	for c := uint64(entryAlign); c <= 1024; c += entryAlign {
		a.classes = append(a.classes, c)
	}
	for base := uint64(1024); a.classes[len(a.classes)-1] < maxEntry; base *= 2 {
		for i := uint64(1); i <= 4; i++ {
			a.classes = append(a.classes, align(base+base*i/4, entryAlign))
		}
	}
	a.free = make([][]uint64, len(a.classes))
	return a
}

func (a *arena) classOf(n uint64) int {
	return sort.Search(len(a.classes), func(i int) bool { return a.classes[i] >= n })
}

// alloc returns the offset of n bytes, and the class to free them with.
func (a *arena) alloc(n uint64) (uint64, int, bool) {
	c := a.classOf(n)
	if c == len(a.classes) {
		return 0, 0, false
	}
	a.reclaim(false)
	if off, ok := a.take(c); ok {
		return off, c, true
	}
	// Under pressure, reuse quarantined entries early: a reader still
	// copying one finds a version it did not expect and retries.
	a.reclaim(true)
	if off, ok := a.take(c); ok {
		return off, c, true
	}
	for d := c + 1; d < len(a.classes); d++ {
		if k := len(a.free[d]); k > 0 {
			off := a.free[d][k-1]
			a.free[d] = a.free[d][:k-1]
			a.used += a.classes[d]
			return off, d, true
		}
	}
	return 0, 0, false
}

func (a *arena) take(c int) (uint64, bool) {
	if k := len(a.free[c]); k > 0 {
		off := a.free[c][k-1]
		a.free[c] = a.free[c][:k-1]
		a.used += a.classes[c]
		return off, true
	}
	if a.top+a.classes[c] <= a.size {
		off := a.top
		a.top += a.classes[c]
		a.used += a.classes[c]
		return off, true
	}
	return 0, false
}

// release puts an entry into quarantine.
func (a *arena) release(off uint64, class int) {
	a.used -= a.classes[class]
	a.qbytes += a.classes[class]
	a.quarantine = append(a.quarantine, freed{off: off, class: class, at: a.now()})
}

// reclaim moves quarantined entries whose time is up (all, if force) to
// their free lists.
func (a *arena) reclaim(force bool) {
	if a.qhead == len(a.quarantine) {
		return
	}
	now := a.now()
	for a.qhead < len(a.quarantine) {
		f := a.quarantine[a.qhead]
		if !force && now.Sub(f.at) < a.wait {
			break
		}
		a.free[f.class] = append(a.free[f.class], f.off)
		a.qbytes -= a.classes[f.class]
		a.qhead++
	}
	if a.qhead == len(a.quarantine) {
		a.quarantine, a.qhead = a.quarantine[:0], 0
	} else if a.qhead > 1024 && a.qhead*2 > len(a.quarantine) {
		n := copy(a.quarantine, a.quarantine[a.qhead:])
		a.quarantine, a.qhead = a.quarantine[:n], 0
	}
}
