package hwq

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

func putSeq(b []byte, v uint64) {
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], v+uint64(i))
	}
}

func checkSeq(t testing.TB, b []byte, v uint64) {
	t.Helper()
	for i := 0; i+8 <= len(b); i += 8 {
		if got := binary.LittleEndian.Uint64(b[i:]); got != v+uint64(i) {
			t.Fatalf("entry %d word %d: got %d, want %d", v, i/8, got, v+uint64(i))
		}
	}
}

// TestRingOrderAndWrap moves entries through a small ring for many laps,
// in batches of every size from 1 to the ring's count, and checks each
// arrives once, in order, intact.
func TestRingOrderAndWrap(t *testing.T) {
	const count, size = 8, 24
	r := newTestRing(t, size, count)
	p, c := ends(t, r, WaitOptions{})
	var sent, got uint64
	buf := make([]byte, size)
	for lap := 0; lap < 200; lap++ {
		batch := lap%count + 1
		n, err := p.Reserve(batch)
		if err != nil || n != batch {
			t.Fatalf("lap %d: Reserve(%d) = %d, %v", lap, batch, n, err)
		}
		for i := range n {
			putSeq(p.Entry(i), sent+uint64(i))
		}
		if avail, _ := c.Available(); avail != 0 {
			t.Fatalf("lap %d: %d entries visible before Publish", lap, avail)
		}
		if pub := p.Publish(); pub != n {
			t.Fatalf("Publish = %d, want %d", pub, n)
		}
		sent += uint64(n)
		avail, err := c.Available()
		if err != nil || avail != n {
			t.Fatalf("lap %d: Available = %d, %v; want %d", lap, avail, err, n)
		}
		// Consume in two halves to release in batches of other sizes.
		for _, k := range []int{avail / 2, avail - avail/2} {
			for i := range k {
				if c.CopyOut(i, buf) != size {
					t.Fatal("short copy")
				}
				checkSeq(t, buf, got+uint64(i))
			}
			c.Release(k)
			got += uint64(k)
			if a, _ := c.Available(); a != avail-k && k != avail-avail/2 {
				t.Fatalf("after Release(%d): Available %d", k, a)
			}
			avail -= k
		}
	}
	if sent != got || got < 100*count {
		t.Fatalf("sent %d, got %d", sent, got)
	}
	if r.producer().Load() != sent || r.consumer().Load() != got {
		t.Fatalf("shared indices %d/%d, want %d", r.producer().Load(), r.consumer().Load(), sent)
	}
}

// TestRingFullEmpty: an empty ring pops nothing, a full one refuses a push
// with ErrFull and keeps every unconsumed entry; one release frees one.
func TestRingFullEmpty(t *testing.T) {
	const count, size = 4, 8
	r := newTestRing(t, size, count)
	p, c := ends(t, r, WaitOptions{})
	buf := make([]byte, size)
	if ok, err := c.Pop(buf); ok || err != nil {
		t.Fatalf("Pop on empty = %v, %v", ok, err)
	}
	for i := range count {
		e := make([]byte, size)
		putSeq(e, uint64(i))
		if err := p.Push(e); err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
	}
	err := p.Push(make([]byte, size))
	if !errors.Is(err, ErrFull) {
		t.Fatalf("push into full ring: %v, want ErrFull", err)
	}
	if n, err := p.Reserve(3); n != 0 || !errors.Is(err, ErrFull) {
		t.Fatalf("Reserve on full = %d, %v", n, err)
	}
	if n, _ := c.Available(); n != count {
		t.Fatalf("Available = %d, want %d", n, count)
	}
	for i := range count {
		c.CopyOut(i, buf)
		checkSeq(t, buf, uint64(i)) // nothing was overwritten
	}
	c.Release(1)
	if n, err := p.Reserve(3); n != 1 || err != nil {
		t.Fatalf("Reserve after one release = %d, %v; want 1", n, err)
	}
	putSeq(p.Entry(0), 99)
	p.Publish()
	for _, want := range []uint64{1, 2, 3, 99} {
		if ok, err := c.Pop(buf); !ok || err != nil {
			t.Fatalf("Pop = %v, %v", ok, err)
		}
		checkSeq(t, buf, want)
	}
	if ok, _ := c.Pop(buf); ok {
		t.Fatal("Pop on drained ring succeeded")
	}
	if err := p.Push(make([]byte, size+1)); !errors.Is(err, ErrBadEntry) {
		t.Fatalf("oversized push: %v", err)
	}
}

// TestCQOverflow: the daemon's CQE producer on a CQ the application does
// not drain gets ErrFull, and the unconsumed completions stay intact.
func TestCQOverflow(t *testing.T) {
	r := newTestRing(t, CQESize, 4)
	p, c := ends(t, r, WaitOptions{})
	for i := range 4 {
		if err := (&CQE{WRID: uint64(i), QPNum: 7}).Push(p); err != nil {
			t.Fatal(err)
		}
	}
	err := (&CQE{WRID: 666}).Push(p)
	if !errors.Is(err, ErrFull) || !strings.Contains(err.Error(), "4 entries unconsumed") {
		t.Fatalf("overflow: %v", err)
	}
	buf := make([]byte, CQESize)
	var e CQE
	for i := range 4 {
		if ok, err := c.Pop(buf); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if err := e.Decode(buf); err != nil || e.WRID != uint64(i) || e.QPNum != 7 {
			t.Fatalf("cqe %d: %+v, %v", i, e, err)
		}
	}
}

// TestIndexValidation: every impossible peer index is ErrCorrupt with a
// message saying what was wrong.
func TestIndexValidation(t *testing.T) {
	const count = 64
	tests := []struct {
		name   string
		setup  func(p *Producer, c *Consumer) // honest traffic first
		poke   func(r *Ring)
		end    string // "consumer" or "producer": whose refresh sees it
		errSub string
	}{
		{"producer far ahead", func(p *Producer, c *Consumer) { advance(p, c, 1000) },
			func(r *Ring) { r.producer().Store(9000) }, "consumer",
			"producer index 9000 is 8000 ahead of consumer 1000 in a ring of 64"},
		{"producer one lap plus one ahead", nil,
			func(r *Ring) { r.producer().Store(count + 1) }, "consumer", "is 65 ahead of consumer 0"},
		{"producer behind consumer", func(p *Producer, c *Consumer) { advance(p, c, 100) },
			func(r *Ring) { r.producer().Store(90) }, "consumer", "producer index 90 is 10 behind consumer 100"},
		{"producer moved back", func(p *Producer, c *Consumer) { p.Reserve(10); p.Publish(); c.Available() },
			func(r *Ring) { r.producer().Store(5) }, "consumer", "producer index 5 moved back from 10"},
		{"consumer moved back", func(p *Producer, c *Consumer) { advance(p, c, 100) },
			func(r *Ring) { r.consumer().Store(50) }, "producer", "consumer index 50 moved back from 100"},
		{"consumer past producer", func(p *Producer, c *Consumer) { advance(p, c, 100) },
			func(r *Ring) { r.consumer().Store(300) }, "producer", "consumer index 300 is 136 past producer 164"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newTestRing(t, 8, count)
			p, c := ends(t, r, WaitOptions{})
			if tt.setup != nil {
				tt.setup(p, c)
			}
			if tt.end == "producer" {
				// Fill the ring so Reserve must load the consumer index.
				p.Reserve(count)
				p.Publish()
			}
			tt.poke(r)
			var err error
			if tt.end == "consumer" {
				_, err = c.Available()
			} else {
				_, err = p.Reserve(1)
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tt.errSub) {
				t.Fatalf("got %v, want ErrCorrupt containing %q", err, tt.errSub)
			}
		})
	}
}

// advance moves n entries through the ring honestly.
func advance(p *Producer, c *Consumer, n int) {
	for n > 0 {
		k, _ := p.Reserve(n)
		p.Publish()
		a, _ := c.Available()
		c.Release(a)
		n -= k
	}
}

// TestHeaderValidation: Init and Attach name the bad field.
func TestHeaderValidation(t *testing.T) {
	le := binary.LittleEndian
	good := func() []byte {
		b := alignedBuf(offEntries + 64*8)
		if _, err := Init(b, Config{EntrySize: 64, Count: 8, Flags: 0xabc}); err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name  string
		mod   func(b []byte) []byte
		field string
	}{
		{"magic", func(b []byte) []byte { b[0] ^= 1; return b }, "hwq: magic 0x"},
		{"version", func(b []byte) []byte { le.PutUint32(b[offVersion:], 2); return b }, "hwq: version 2: want 1"},
		{"count not power of two", func(b []byte) []byte { le.PutUint32(b[offCount:], 1000); return b }, "hwq: entry count 1000: not a power of two"},
		{"count zero", func(b []byte) []byte { le.PutUint32(b[offCount:], 0); return b }, "hwq: entry count 0: outside"},
		{"count huge", func(b []byte) []byte { le.PutUint32(b[offCount:], 1<<31); return b }, "hwq: entry count 2147483648: outside"},
		{"size odd", func(b []byte) []byte { le.PutUint32(b[offSize:], 12); return b }, "hwq: entry size 12: not a multiple of 8"},
		{"size zero", func(b []byte) []byte { le.PutUint32(b[offSize:], 0); return b }, "hwq: entry size 0: outside"},
		{"size past region", func(b []byte) []byte { le.PutUint32(b[offSize:], 128); return b }, "hwq: entry size 128 × count 8: needs 1280 bytes, region has 768"},
		{"region short", func(b []byte) []byte { return b[:100] }, "hwq: region of 100 bytes: needs 256"},
		{"unaligned", func(b []byte) []byte { return b[8:] }, "hwq: region address: 8 bytes past a 64-byte boundary"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Attach(tt.mod(good()))
			if !errors.Is(err, ErrBadHeader) || !strings.HasPrefix(err.Error(), tt.field) && !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("got %v, want ErrBadHeader with %q", err, tt.field)
			}
		})
	}
	r, err := Attach(good())
	if err != nil || r.EntrySize() != 64 || r.Count() != 8 || r.Flags() != 0xabc {
		t.Fatalf("Attach(good) = %+v, %v", r, err)
	}
	for _, cfg := range []struct {
		c     Config
		field string
	}{
		{Config{EntrySize: 64, Count: 1000}, "hwq: entry count 1000: not a power of two"},
		{Config{EntrySize: 1 << 20, Count: 8}, "hwq: entry size 1048576: outside"},
		{Config{EntrySize: 64, Count: 1}, "hwq: entry count 1: outside"},
	} {
		if _, err := Init(alignedBuf(1<<16), cfg.c); !errors.Is(err, ErrBadHeader) || !strings.HasPrefix(err.Error(), cfg.field) {
			t.Errorf("Init(%+v) = %v, want %q", cfg.c, err, cfg.field)
		}
		if _, err := RegionSize(cfg.c.EntrySize, cfg.c.Count); !errors.Is(err, ErrBadHeader) {
			t.Errorf("RegionSize(%+v) = %v", cfg.c, err)
		}
	}
	if _, err := Init(alignedBuf(100), Config{EntrySize: 8, Count: 16}); err == nil || !strings.Contains(err.Error(), "region of 100 bytes: needs 384") {
		t.Errorf("Init into short region: %v", err)
	}
	// The geometry is private after Attach: rewriting the header changes
	// nothing.
	b := good()
	r, _ = Attach(b)
	le.PutUint32(b[offCount:], 1<<20)
	le.PutUint32(b[offSize:], 8)
	if r.Count() != 8 || r.EntrySize() != 64 || len(r.entry(7)) != 64 {
		t.Fatal("Ring followed a rewritten header")
	}
	// Corrupt indices at attach.
	b = good()
	u64(b, offProducer).Store(100)
	r, _ = Attach(b)
	if _, err := r.Consumer(WaitOptions{}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Consumer on corrupt indices: %v", err)
	}
	if _, err := r.Producer(); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Producer on corrupt indices: %v", err)
	}
}

// TestMisusePanics: caller bugs (not peer faults) panic with a message.
func TestMisusePanics(t *testing.T) {
	r := newTestRing(t, 8, 4)
	p, c := ends(t, r, WaitOptions{})
	for name, f := range map[string]func(){
		"Entry without Reserve": func() { p.Entry(0) },
		"Peek on empty":         func() { c.Peek(0) },
		"Release too many":      func() { c.Release(1) },
		"Release negative":      func() { c.Release(-1) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		}()
	}
}
