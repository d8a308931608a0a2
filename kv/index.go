package kv

// index is the server's side of the table in the index MR. Only the
// server's worker goroutine writes it; clients READ it at any time, so
// every change is a whole bucket or header rewritten with a new checksum
// (a reader that copies it half-written sees a bad checksum and reads
// again).
type index struct {
	mem        []byte
	arena      []byte // the value MR's bytes: entries hold each key and its hash
	area       uint64 // bytes per table area
	maxBuckets uint64
	hdr        header
	keys       uint64
	scratch    [bucketSize]byte
}

func newIndex(mem, arena []byte, seed uint64, initial uint64) *index {
	x := &index{mem: mem, arena: arena}
	x.area = (uint64(len(mem)) - tableStart) / 2 &^ (bucketSize - 1)
	x.maxBuckets = 1
	for x.maxBuckets*2*bucketSize <= x.area {
		x.maxBuckets *= 2
	}
	n := uint64(minBuckets)
	for n < initial && n < x.maxBuckets {
		n *= 2
	}
	x.hdr = header{gen: 1, buckets: n, table: tableStart, seed: seed}
	x.initTable(x.hdr)
	x.publish()
	return x
}

func (x *index) bucket(h header, i uint64) []byte {
	off := h.table + i*bucketSize
	return x.mem[off : off+bucketSize : off+bucketSize]
}

// initTable writes the empty buckets of a table that no reader's header
// names yet.
func (x *index) initTable(h header) {
	for i := uint64(0); i < h.buckets; i++ {
		b := x.bucket(h, i)
		clear(b)
		put32(b[4:], uint32(h.gen))
		sealBucket(b)
	}
}

func (x *index) publish() {
	var b [hdrSize]byte
	x.hdr.encode(b[:])
	copy(x.mem[:hdrSize], b[:])
}

// entryKey is the key of the entry at off (the server's own memory).
func (x *index) entryKey(off uint64) []byte {
	k := uint64(le32(x.arena[off+8:]))
	return x.arena[off+entryHdr : off+entryHdr+k]
}

// find looks key up: the bucket and slot holding it.
func (x *index) find(h uint64, key []byte) (b []byte, i int, s slot, ok bool) {
	b1, b2, tag := place(h, x.hdr.buckets)
	for _, bi := range [2]uint64{b1, b2} {
		b := x.bucket(x.hdr, bi)
		for i := 0; i < slotsPerBkt; i++ {
			s := decodeSlot(b[slotBase+i*slotSize:])
			if s.ver != 0 && s.tag == tag && le64(x.arena[s.off+16:]) == h && string(x.entryKey(s.off)) == string(key) {
				return b, i, s, true
			}
		}
	}
	return nil, 0, slot{}, false
}

// setSlot rewrites bucket b with slot i set to s (or moved, if moved).
func (x *index) setSlot(b []byte, i int, s slot, moved bool) {
	t := x.scratch[:]
	copy(t, b)
	if i >= 0 {
		s.encode(t[slotBase+i*slotSize:])
	}
	if moved {
		put32(t[8:], le32(t[8:])|flagMoved)
	}
	put32(t[12:], le32(t[12:])+1)
	sealBucket(t)
	copy(b, t)
}

func used(b []byte) (n, free int) {
	free = -1
	for i := 0; i < slotsPerBkt; i++ {
		if le64(b[slotBase+i*slotSize:]) != 0 {
			n++
		} else if free < 0 {
			free = i
		}
	}
	return n, free
}

// choose picks the emptier of a hash's two buckets in table h: the
// bucket and a free slot, or ok false when both are full.
func (x *index) choose(h header, hash uint64) (b []byte, i int, tag uint16, ok bool) {
	b1, b2, tag := place(hash, h.buckets)
	x1, x2 := x.bucket(h, b1), x.bucket(h, b2)
	n1, f1 := used(x1)
	n2, f2 := used(x2)
	switch {
	case f1 >= 0 && (f2 < 0 || n1 <= n2):
		return x1, f1, tag, true
	case f2 >= 0:
		return x2, f2, tag, true
	}
	return nil, 0, 0, false
}

// insert adds a new key's slot to the live table.
func (x *index) insert(hash uint64, s slot) bool {
	b, i, tag, ok := x.choose(x.hdr, hash)
	if !ok {
		return false
	}
	s.tag = tag
	x.setSlot(b, i, s, false)
	x.keys++
	return true
}

// grow builds a table twice the size in the other area, publishes it and
// marks the old table's buckets moved. Readers go on reading the old
// table until they see a moved bucket, and then the new header.
func (x *index) grow() bool {
	old := x.hdr
	if old.buckets*2 > x.maxBuckets {
		return false
	}
	nh := header{gen: old.gen + 1, buckets: old.buckets * 2, seed: old.seed, table: tableStart}
	if old.table == tableStart {
		nh.table = tableStart + x.area
	}
	// A reader whose stale header names this area sees the new
	// generation in every bucket at once, sealed, and re-reads the header.
	x.initTable(nh)
	for bi := uint64(0); bi < old.buckets; bi++ {
		b := x.bucket(old, bi)
		for i := 0; i < slotsPerBkt; i++ {
			s := decodeSlot(b[slotBase+i*slotSize:])
			if s.ver == 0 {
				continue
			}
			hash := le64(x.arena[s.off+16:])
			nb, ni, tag, ok := x.choose(nh, hash)
			if !ok {
				return false // the old table stays live; the new one is unnamed
			}
			s.tag = tag
			s.encode(nb[slotBase+ni*slotSize:])
			sealBucket(nb)
		}
	}
	x.hdr = nh
	x.publish()
	for bi := uint64(0); bi < old.buckets; bi++ {
		x.setSlot(x.bucket(old, bi), -1, slot{}, true)
	}
	return true
}
