package kv

import (
	"encoding/binary"
	"hash/crc32"
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// The two registered regions, as offsets. Both hold integers and offsets
// only, little-endian, never Go pointers; readers copy them with RDMA READ
// and trust nothing they did not check.
//
// Index MR (ServerConfig.Index bytes):
//
//	0      header (hdrSize bytes used, the rest of the first 4 KiB reserved)
//	4096   table area 0
//	4096+A table area 1 (A = (Index-4096)/2, rounded down to a bucket)
//
// The live table fills the start of one area; a resize builds the next
// table, twice as large, in the other area, publishes a new header and
// marks every bucket of the old table moved.
//
// Header (64 bytes at 0), rewritten in place, self-checksummed:
//
//	0  magic "IBEXKVI1"
//	8  generation (≥ 1; +1 per resize)
//	16 bucket count (a power of two)
//	24 table offset in the index MR
//	32 hash seed (random per server)
//	40 reserved
//	56 CRC32C of bytes [0, 56)
//
// Bucket (128 bytes, two cache lines), rewritten whole and in place:
//
//	0  CRC32C of bytes [4, 128)
//	4  generation of its table (low 32 bits): a reader holding an older
//	   header learns it is stale even when the area was reused
//	8  flags: bit 0 moved (a newer table exists: re-read the header)
//	12 update count
//	16 7 slots of 16 bytes:
//	   +0 version<<16 | tag (16 bits of the key's hash); 0 = empty
//	   +8 entry offset/64 <<32 | entry length
//
// A key hashes to two buckets of the table (two-choice hashing) and lives
// in one of them; a reader READs both at once. A key never moves between
// them except by a DELETE and a later PUT, so a reader that misses it in
// both saw a moment when it was absent.
//
// Value arena MR (ServerConfig.Values bytes): entries at 64-byte aligned
// offsets, written out of place, never changed while live except for the
// dead bit:
//
//	0  version (bit 63: dead — superseded or deleted; set before the
//	   bucket stops naming it, so a reader that went straight to the
//	   entry learns it may be stale)
//	8  key length (uint32)
//	12 value length (uint32)
//	16 the key's 64-bit hash (the server rehashes by it)
//	24 CRC32C of version (8 bytes) || bytes [8, 24) || key || value
//	28 reserved (0)
//	32 key, then the value, then zero padding to 8 bytes
//	L-8 version again (trailer)
//
// A reader accepts an entry only if header and trailer carry the version
// the bucket named, the dead bit is clear, the lengths add up to the
// length the bucket named, the CRC matches and the key is its key. Freed
// entries wait out a quarantine before reuse, so a slow reader usually
// finds intact (dead) data; a reader slower than that finds a version it
// did not expect and retries.
const (
	hdrSize      = 64
	hdrMagic     = 0x3149564b58454249 // "IBEXKVI1" little-endian
	tableStart   = 4096
	bucketSize   = 128
	slotsPerBkt  = 7
	slotBase     = 16
	slotSize     = 16
	flagMoved    = 1
	entryHdr     = 32
	entryAlign   = 64
	deadBit      = uint64(1) << 63
	maxVersion   = uint64(1)<<48 - 1
	minIndexSize = tableStart + 2*bucketSize*minBuckets
	minBuckets   = 16
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func le64(b []byte) uint64              { return binary.LittleEndian.Uint64(b) }
func le32(b []byte) uint32              { return binary.LittleEndian.Uint32(b) }
func put64(b []byte, v uint64)          { binary.LittleEndian.PutUint64(b, v) }
func put32(b []byte, v uint32)          { binary.LittleEndian.PutUint32(b, v) }
func align(n, a uint64) uint64          { return (n + a - 1) &^ (a - 1) }
func crc(b []byte) uint32               { return crc32.Checksum(b, castagnoli) }
func crcMore(c uint32, b []byte) uint32 { return crc32.Update(c, castagnoli, b) }

// header is the decoded index header.
type header struct {
	gen, buckets, table, seed uint64
}

func (h header) encode(b []byte) {
	put64(b[0:], hdrMagic)
	put64(b[8:], h.gen)
	put64(b[16:], h.buckets)
	put64(b[24:], h.table)
	put64(b[32:], h.seed)
	put64(b[40:], 0)
	put64(b[48:], 0)
	put64(b[56:], uint64(crc(b[:56])))
}

// decodeHeader checks a header READ from an index of indexLen bytes.
func decodeHeader(b []byte, indexLen uint64) (header, bool) {
	if len(b) < hdrSize || le64(b) != hdrMagic || le64(b[56:]) != uint64(crc(b[:56])) {
		return header{}, false
	}
	h := header{gen: le64(b[8:]), buckets: le64(b[16:]), table: le64(b[24:]), seed: le64(b[32:])}
	if h.gen == 0 || h.buckets < minBuckets || h.buckets&(h.buckets-1) != 0 || h.table < tableStart ||
		h.table%bucketSize != 0 || h.buckets > indexLen/bucketSize || h.table+h.buckets*bucketSize > indexLen {
		return header{}, false
	}
	return h, true
}

// slot is one decoded bucket slot.
type slot struct {
	ver uint64 // 0: empty
	tag uint16
	off uint64 // arena offset
	n   uint32 // entry length
}

func decodeSlot(b []byte) slot {
	a, c := le64(b), le64(b[8:])
	return slot{ver: a >> 16, tag: uint16(a), off: (c >> 32) * entryAlign, n: uint32(c)}
}

func (s slot) encode(b []byte) {
	if s.ver == 0 {
		put64(b, 0)
		put64(b[8:], 0)
		return
	}
	put64(b, s.ver<<16|uint64(s.tag))
	put64(b[8:], (s.off/entryAlign)<<32|uint64(s.n))
}

// bucketOK checks a bucket's checksum; gen and flags are the caller's.
func bucketOK(b []byte) bool { return le32(b) == crc(b[4:bucketSize]) }

func sealBucket(b []byte) { put32(b, crc(b[4:bucketSize])) }

// entryLen is the arena bytes of an entry with a k-byte key and a v-byte
// value.
func entryLen(k, v int) uint64 { return align(uint64(entryHdr+k+v), 8) + 8 }

// entryCRC is the checksum an entry carries; ver is the version's 8
// bytes (the entry's trailer, which holds it).
func entryCRC(ver, meta, key, val []byte) uint32 {
	c := crc(ver)
	c = crcMore(c, meta)
	c = crcMore(c, key)
	return crcMore(c, val)
}

// writeEntry lays out an entry in e (entryLen bytes) with the value
// already in place at e[entryHdr+len(key):] when val is nil. The header's
// version word is stored last, atomically: a reader that sees the version
// sees the rest.
func writeEntry(e []byte, ver, hash uint64, key, val []byte, vlen int) {
	put32(e[8:], uint32(len(key)))
	put32(e[12:], uint32(vlen))
	put64(e[16:], hash)
	put32(e[28:], 0)
	copy(e[entryHdr:], key)
	if val != nil {
		copy(e[entryHdr+len(key):], val)
	}
	end := entryHdr + len(key) + vlen
	for i := end; i < len(e)-8; i++ {
		e[i] = 0
	}
	put64(e[len(e)-8:], ver)
	put32(e[24:], entryCRC(e[len(e)-8:], e[8:24], key, e[entryHdr+len(key):end]))
	atomicStore64(e, ver)
}

// markDead sets the dead bit of the entry at e.
func markDead(e []byte) { atomicStore64(e, atomicLoad64(e)|deadBit) }

func atomicStore64(b []byte, v uint64) {
	(*atomic.Uint64)(unsafe.Pointer(&b[0])).Store(v)
}

func atomicLoad64(b []byte) uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&b[0])).Load()
}

// entryStatus is what a reader makes of an entry it READ.
type entryStatus uint8

const (
	entryOK    entryStatus = iota
	entryStale             // dead, or another version: look at the bucket again
	entryTorn              // checks failed: READ it again
	entryOther             // intact, another key (a tag collision)
)

// checkEntry validates entry bytes e, READ for version ver and key, and
// returns the value's bytes within e.
func checkEntry(e []byte, ver uint64, key []byte) ([]byte, entryStatus) {
	if len(e) < entryHdr+8 {
		return nil, entryTorn
	}
	h := le64(e)
	if h&^deadBit != ver || le64(e[len(e)-8:]) != ver {
		return nil, entryStale
	}
	if h&deadBit != 0 {
		return nil, entryStale
	}
	k, v := uint64(le32(e[8:])), uint64(le32(e[12:]))
	if entryLen(int(k), int(v)) != uint64(len(e)) {
		return nil, entryTorn
	}
	kb, vb := e[entryHdr:entryHdr+k], e[entryHdr+k:entryHdr+k+v]
	if le32(e[24:]) != entryCRC(e[len(e)-8:], e[8:24], kb, vb) {
		return nil, entryTorn
	}
	if string(kb) != string(key) {
		return nil, entryOther
	}
	return vb, entryOK
}

// keyHash is the key's 64-bit hash under the table's seed: a wyhash-style
// multiply-fold over 8-byte words, seeded so that a client cannot aim
// keys at one bucket without knowing the server's seed.
func keyHash(seed uint64, key []byte) uint64 {
	const p0, p1, p2 = 0xa0761d6478bd642f, 0xe7037ed1a0b428db, 0x8ebc6af09c88c6e3
	h := seed ^ p0 ^ uint64(len(key))*p1
	b := key
	for len(b) >= 8 {
		h = mum(h^p1, le64(b)^p2)
		b = b[8:]
	}
	var t uint64
	for i := len(b) - 1; i >= 0; i-- {
		t = t<<8 | uint64(b[i])
	}
	h = mum(h^p2, t^p1)
	return mum(h, h^p0)
}

func mum(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// place is where a hash may live in a table of n buckets: two buckets
// and a tag.
func place(h, n uint64) (b1, b2 uint64, tag uint16) {
	g := mum(h, 0x589965cc75374cc3)
	b1, b2 = h&(n-1), g&(n-1)
	if b2 == b1 {
		b2 = b1 ^ 1
	}
	return b1, b2, uint16(g >> 48)
}
