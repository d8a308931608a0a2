package hwq

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// Region layout. A queue is one region: a byte slice both processes map,
// typically a piece of an internal/shmem Segment. Offsets below are from
// the start of the region, which must be 64-byte aligned. The region holds
// integers only, never Go pointers: it is mapped at a different address in
// every process.
//
//	0    magic "IBEXHWQ1" (u64, stored last by Init)
//	8    version (u32)
//	12   entry size in bytes (u32): a multiple of 8, 8 to 64 KiB
//	16   entry count (u32): a power of two, 2 to 2^24
//	20   flags (u32): the user's, e.g. which queue this is; hwq ignores them
//	24   reserved, zero
//	64   producer index (u64), its own cache line: entries ever published
//	128  consumer index (u64), its own cache line: entries ever released
//	192  sleeping word (u32), its own cache line: 1 while the consumer is
//	     (about to be) asleep in a futex wait on this word
//	256  entries: count × entry size; entry i of the stream is at
//	     256 + (i mod count) × entry size
//
// The indices run free (they are not reduced mod count) and are compared
// with modular arithmetic, so producer − consumer is the number of
// published, unreleased entries: from 0 to count.
const (
	offMagic    = 0
	offVersion  = 8
	offSize     = 12
	offCount    = 16
	offFlags    = 20
	offProducer = 64
	offConsumer = 128
	offSleeping = 192
	offEntries  = 256

	magic   = 0x3151574858454249 // "IBEXHWQ1" little-endian
	version = 1

	minSize  = 8
	maxSize  = 64 << 10
	minCount = 2
	maxCount = 1 << 24
)

// Align is the alignment a region must have: a cache line, so that the
// index words are on lines of their own.
const Align = 64

// Config is the geometry of a new queue.
type Config struct {
	EntrySize int    // bytes per entry: a multiple of 8, from 8 to 64 KiB
	Count     int    // entries: a power of two, from 2 to 2^24
	Flags     uint32 // stored in the header for the user; hwq ignores it
}

func (c Config) check() error {
	switch {
	case c.EntrySize < minSize || c.EntrySize > maxSize:
		return headerErrorf("entry size %d: outside [%d, %d]", c.EntrySize, minSize, maxSize)
	case c.EntrySize%8 != 0:
		return headerErrorf("entry size %d: not a multiple of 8", c.EntrySize)
	case c.Count < minCount || c.Count > maxCount:
		return headerErrorf("entry count %d: outside [%d, %d]", c.Count, minCount, maxCount)
	case bits.OnesCount(uint(c.Count)) != 1:
		return headerErrorf("entry count %d: not a power of two", c.Count)
	}
	return nil
}

// RegionSize returns the bytes a queue of count entries of entrySize bytes
// occupies, or an error naming the bad field.
func RegionSize(entrySize, count int) (int, error) {
	c := Config{EntrySize: entrySize, Count: count}
	if err := c.check(); err != nil {
		return 0, err
	}
	return offEntries + entrySize*count, nil
}

// Ring is a validated view of a region: the geometry copied into private
// memory, and the shared words. Producer and Consumer are built from it.
type Ring struct {
	mem     []byte // the region, exactly RegionSize long
	entries []byte
	size    int
	count   uint64
	mask    uint64
	flags   uint32
}

// Init formats region as an empty queue of cfg's geometry and returns it.
// region must be Align-aligned and at least RegionSize long; the bytes past
// it are not touched. Nobody may be attached while Init runs.
func Init(region []byte, cfg Config) (*Ring, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	need := offEntries + cfg.EntrySize*cfg.Count
	if err := checkRegion(region, need); err != nil {
		return nil, err
	}
	m := region[:need]
	clear(m[:offEntries])
	le := binary.LittleEndian
	le.PutUint32(m[offVersion:], version)
	le.PutUint32(m[offSize:], uint32(cfg.EntrySize))
	le.PutUint32(m[offCount:], uint32(cfg.Count))
	le.PutUint32(m[offFlags:], cfg.Flags)
	u64(m, offMagic).Store(magic)
	return newRing(m, cfg), nil
}

// Attach validates the header of a region another process (or Init)
// formatted and returns the view. Errors wrap ErrBadHeader and name the
// field. The geometry is read once, here: rewriting the header afterwards
// has no effect on the returned Ring.
func Attach(region []byte) (*Ring, error) {
	if err := checkRegion(region, offEntries); err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	if m := u64(region, offMagic).Load(); m != magic {
		return nil, headerErrorf("magic %#x: not %#x (not an hwq region, or not initialised)", m, uint64(magic))
	}
	if v := le.Uint32(region[offVersion:]); v != version {
		return nil, headerErrorf("version %d: want %d", v, version)
	}
	cfg := Config{
		EntrySize: int(le.Uint32(region[offSize:])),
		Count:     int(le.Uint32(region[offCount:])),
		Flags:     le.Uint32(region[offFlags:]),
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	need := offEntries + cfg.EntrySize*cfg.Count
	if len(region) < need {
		return nil, headerErrorf("entry size %d × count %d: needs %d bytes, region has %d",
			cfg.EntrySize, cfg.Count, need, len(region))
	}
	return newRing(region[:need], cfg), nil
}

func checkRegion(region []byte, need int) error {
	if len(region) < need {
		return headerErrorf("region of %d bytes: needs %d", len(region), need)
	}
	if a := uintptr(unsafe.Pointer(unsafe.SliceData(region))) % Align; a != 0 {
		return headerErrorf("region address: %d bytes past a %d-byte boundary", a, Align)
	}
	return nil
}

func newRing(m []byte, cfg Config) *Ring {
	return &Ring{
		mem:     m,
		entries: m[offEntries:],
		size:    cfg.EntrySize,
		count:   uint64(cfg.Count),
		mask:    uint64(cfg.Count - 1),
		flags:   cfg.Flags,
	}
}

// EntrySize returns the bytes per entry.
func (r *Ring) EntrySize() int { return r.size }

// Count returns the number of entries.
func (r *Ring) Count() int { return int(r.count) }

// Flags returns the header's flags as Init or Attach saw them.
func (r *Ring) Flags() uint32 { return r.flags }

// entry returns the entry of stream index i. Its bounds follow from the
// private geometry alone, whatever the shared memory says.
func (r *Ring) entry(i uint64) []byte {
	off := int(i&r.mask) * r.size
	return r.entries[off : off+r.size : off+r.size]
}

func (r *Ring) producer() *atomic.Uint64 { return u64(r.mem, offProducer) }
func (r *Ring) consumer() *atomic.Uint64 { return u64(r.mem, offConsumer) }
func (r *Ring) sleeping() *atomic.Uint32 { return u32(r.mem, offSleeping) }

// u64 and u32 give atomic access to a word of the region at a trusted,
// aligned offset (a constant of this file, inside the header every Ring's
// region has). No plain access may touch these bytes: the race detector
// (and the memory model) would see a race with the peer's atomic stores.
func u64(m []byte, off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&m[off]))
}

func u32(m []byte, off int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&m[off]))
}

func headerErrorf(format string, args ...any) error {
	return fmt.Errorf("hwq: "+format+": %w", append(args, ErrBadHeader)...)
}
