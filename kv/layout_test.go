package kv

import (
	"bytes"
	"testing"
	"time"
)

// TestTornEntry: a reader that copies an entry while the server reuses
// its bytes for another entry (any cut point, either copy direction, the
// new entry longer or shorter) never accepts the mixture; it accepts an
// entry only whole, with the version it expected, and not dead.
func TestTornEntry(t *testing.T) {
	key := []byte("the-key")
	mk := func(ver uint64, k []byte, val []byte, n int) []byte {
		e := make([]byte, n)
		writeEntry(e[:entryLen(len(k), len(val))], ver, 42, k, val, len(val))
		return e
	}
	oldVal := bytes.Repeat([]byte("old value "), 30)
	for _, tc := range []struct {
		name string
		k    []byte
		val  []byte
	}{
		{"same key, same length", key, bytes.Repeat([]byte("NEW value "), 30)},
		{"same key, shorter", key, []byte("short")},
		{"same key, longer", key, bytes.Repeat([]byte("x"), 500)},
		{"other key", []byte("other-key"), bytes.Repeat([]byte("y"), 300)},
	} {
		n := int(max(entryLen(len(key), len(oldVal)), entryLen(len(tc.k), len(tc.val))))
		oldE := mk(5, key, oldVal, n)
		markDead(oldE) // freed entries were marked dead first
		newE := mk(9, tc.k, tc.val, n)
		oldLen := int(entryLen(len(key), len(oldVal)))
		newLen := int(entryLen(len(tc.k), len(tc.val)))
		for cut := 0; cut <= n; cut++ {
			for dir := 0; dir < 2; dir++ {
				m := make([]byte, n)
				a, b := oldE, newE
				if dir == 1 {
					a, b = newE, oldE
				}
				copy(m, a[:cut])
				copy(m[cut:], b[cut:])
				for _, want := range []struct {
					ver uint64
					n   int
				}{{5, oldLen}, {9, newLen}} {
					v, st := checkEntry(m[:want.n], want.ver, key)
					whole := bytes.Equal(m[:want.n], newE[:want.n]) && want.ver == 9 && bytes.Equal(tc.k, key)
					if st == entryOK && !whole {
						t.Fatalf("%s: cut %d dir %d: a mixture accepted for version %d: %q", tc.name, cut, dir, want.ver, v)
					}
				}
			}
		}
	}
	// Whole and live: accepted; dead: stale; another key: other.
	e := mk(7, key, []byte("v"), int(entryLen(len(key), 1)))
	if v, st := checkEntry(e, 7, key); st != entryOK || string(v) != "v" {
		t.Fatalf("whole entry: %v %q", st, v)
	}
	if _, st := checkEntry(e, 7, []byte("the-kez")); st != entryOther {
		t.Fatalf("other key: %v", st)
	}
	if _, st := checkEntry(e, 6, key); st != entryStale {
		t.Fatalf("other version: %v", st)
	}
	markDead(e)
	if _, st := checkEntry(e, 7, key); st != entryStale {
		t.Fatalf("dead entry: %v", st)
	}
}

// TestTornBucket: a bucket copied while it is rewritten fails its
// checksum at every cut point.
func TestTornBucket(t *testing.T) {
	x := &index{mem: make([]byte, tableStart+2*bucketSize*minBuckets*2), arena: make([]byte, 4096)}
	a := make([]byte, bucketSize)
	put32(a[4:], 3)
	slot{ver: 10, tag: 7, off: 640, n: 100}.encode(a[slotBase:])
	sealBucket(a)
	b := make([]byte, bucketSize)
	copy(b, a)
	x.setSlot(b, 1, slot{ver: 11, tag: 9, off: 1280, n: 200}, false)
	for cut := 1; cut < bucketSize; cut++ {
		for _, m := range [][]byte{append(append([]byte{}, a[:cut]...), b[cut:]...), append(append([]byte{}, b[:cut]...), a[cut:]...)} {
			if bucketOK(m) && !bytes.Equal(m, a) && !bytes.Equal(m, b) {
				t.Fatalf("cut %d: a torn bucket passed its checksum", cut)
			}
		}
	}
}

// TestHeader: the header round-trips and anything out of range, or a
// flipped bit, is refused.
func TestHeader(t *testing.T) {
	h := header{gen: 3, buckets: 64, table: tableStart, seed: 99}
	b := make([]byte, hdrSize)
	h.encode(b)
	got, ok := decodeHeader(b, 1<<20)
	if !ok || got != h {
		t.Fatalf("decode: %+v %v", got, ok)
	}
	for i := 0; i < hdrSize*8; i++ {
		c := append([]byte{}, b...)
		c[i/8] ^= 1 << (i % 8)
		if _, ok := decodeHeader(c, 1<<20); ok {
			t.Fatalf("bit %d flipped: accepted", i)
		}
	}
	if _, ok := decodeHeader(b, tableStart+64*bucketSize-1); ok {
		t.Fatal("a table past the index accepted")
	}
}

// TestArena: classes fit, freed entries wait out the quarantine, a full
// arena says so, and pressure reuses quarantined entries early.
func TestArena(t *testing.T) {
	now := time.Unix(0, 0)
	a := newArena(64*1024, 16*1024, time.Second)
	a.now = func() time.Time { return now }
	var offs []uint64
	for {
		off, c, ok := a.alloc(1000)
		if !ok {
			break
		}
		if a.classes[c] < 1000 || off%entryAlign != 0 {
			t.Fatalf("alloc 1000: class %d bytes at %d", a.classes[c], off)
		}
		offs = append(offs, off)
	}
	if len(offs) != 64 {
		t.Fatalf("%d entries of 1 KiB in 64 KiB", len(offs))
	}
	a.release(offs[0], a.classOf(1000))
	// Quarantined, but under pressure taken back at once.
	if off, _, ok := a.alloc(1000); !ok || off != offs[0] {
		t.Fatalf("pressure: %d %v", off, ok)
	}
	a.release(offs[1], a.classOf(1000))
	a.release(offs[2], a.classOf(1000))
	now = now.Add(2 * time.Second)
	a.reclaim(false)
	if a.qbytes != 0 || len(a.free[a.classOf(1000)]) != 2 {
		t.Fatalf("after the quarantine: %d quarantined, %d free", a.qbytes, len(a.free[a.classOf(1000)]))
	}
	if _, _, ok := a.alloc(20000); ok {
		t.Fatal("an entry larger than the largest class allocated")
	}
}

// TestIndexGrow: a table grown twice still finds every key, its old
// buckets are marked moved, and a reader of a reused area sees another
// generation.
func TestIndexGrow(t *testing.T) {
	arena := make([]byte, 1<<20)
	x := newIndex(make([]byte, tableStart+2*bucketSize*1024), arena, 1234, 16)
	var off uint64
	put := func(k string) {
		key := []byte(k)
		h := keyHash(x.hdr.seed, key)
		n := entryLen(len(key), 1)
		writeEntry(arena[off:off+n], uint64(x.keys+1), h, key, []byte{1}, 1)
		if !x.insert(h, slot{ver: x.keys + 1, off: off, n: uint32(n)}) {
			t.Fatalf("insert %s", k)
		}
		off += align(n, entryAlign)
	}
	for i := 0; i < 60; i++ {
		put(string(rune('a'+i%26)) + string(rune('A'+i/26)))
	}
	first := x.hdr
	for i := 0; i < 2; i++ {
		if !x.grow() {
			t.Fatalf("grow %d", i+1)
		}
	}
	if x.hdr.gen != 3 || x.hdr.buckets != 64 || x.hdr.table != tableStart {
		t.Fatalf("after two grows: %+v", x.hdr)
	}
	for i := 0; i < 60; i++ {
		k := string(rune('a'+i%26)) + string(rune('A'+i/26))
		if _, _, _, ok := x.find(keyHash(x.hdr.seed, []byte(k)), []byte(k)); !ok {
			t.Fatalf("%s lost", k)
		}
	}
	// The first table's area now holds the third table: a reader with
	// the first header sees generation 3 in its buckets.
	b := x.bucket(first, 0)
	if !bucketOK(b) || le32(b[4:]) == uint32(first.gen) {
		t.Fatalf("a stale reader's bucket: ok %v gen %d", bucketOK(b), le32(b[4:]))
	}
	h, ok := decodeHeader(x.mem, uint64(len(x.mem)))
	if !ok || h != x.hdr {
		t.Fatalf("published header %+v %v", h, ok)
	}
}

// FuzzDecodeRequest: the server's request decoder never panics, and what
// it accepts is within the limits and within the buffer.
func FuzzDecodeRequest(f *testing.F) {
	b := make([]byte, 128)
	n := encodeRequest(b, opPut, false, 7, []byte("key"), 5, 0, 0)
	n += copy(b[n:], "value")
	f.Add(b[:n])
	n = encodeRequest(b, opPut, true, 8, []byte("key"), 1<<20, 0x1234, 0x10000)
	f.Add(b[:n])
	n = encodeRequest(b, opDelete, false, 9, []byte("key"), 0, 0, 0)
	f.Add(b[:n])
	n = encodeRequest(b, opStats, false, 10, nil, 0, 0, 0)
	f.Add(b[:n])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, st, err := decodeRequest(b, 64, 1<<20)
		if st == stOK {
			if err != nil {
				t.Fatalf("ok with error %v", err)
			}
			if r.op != opStats && (len(r.key) == 0 || len(r.key) > 64) {
				t.Fatalf("key of %d bytes accepted", len(r.key))
			}
			if r.vlen > 1<<20 || (!r.remote && len(r.val) != int(r.vlen)) {
				t.Fatalf("value %d/%d accepted", len(r.val), r.vlen)
			}
		} else if err == nil {
			t.Fatalf("status %d without a reason", st)
		}
	})
}
