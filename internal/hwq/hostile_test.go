package hwq

import (
	"bytes"
	"errors"
	"testing"

	"github.com/ibex-rdma/ibex/ib"
)

// hostile drives both ends of one region and its decoders while the test
// scribbles over the region: whatever the bytes, every call must return
// (an error or not) without panicking, reading past the region or writing
// outside it (guard bytes on both sides are checked).
type hostile struct {
	t      testing.TB
	buf    []byte // guard | region | guard
	region []byte
	r      *Ring
	p      *Producer
	c      *Consumer
	seq    uint64
	entry  []byte
	send   SendWQE
	recv   RecvWQE
	cqe    CQE
	errs   int
}

const guard = 256

func newHostile(t testing.TB, count int) *hostile {
	size := SendWQESize(testLim)
	n, _ := RegionSize(size, count)
	h := &hostile{t: t, buf: alignedBuf(n + 2*guard)}
	for i := range h.buf {
		h.buf[i] = 0x5a
	}
	h.region = h.buf[guard : guard+n : guard+n]
	r, err := Init(h.region, Config{EntrySize: size, Count: count})
	if err != nil {
		t.Fatal(err)
	}
	h.r = r
	h.p, _ = r.Producer()
	h.c, _ = r.Consumer(WaitOptions{})
	h.entry = make([]byte, size)
	h.send.SGL = make([]SGE, 0, 255)
	h.send.Inline = make([]byte, 0, maxInline)
	h.recv.SGL = make([]SGE, 0, 255)
	return h
}

func (h *hostile) fail(err error) {
	if err == nil {
		return
	}
	if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrFull) && !errors.Is(err, ErrBadEntry) && !errors.Is(err, ErrBadHeader) {
		h.t.Fatalf("untyped error: %v", err)
	}
	h.errs++
}

// step performs operation op; arg supplies its parameters.
func (h *hostile) step(op byte, arg []byte) {
	a := func(i int) int {
		if i < len(arg) {
			return int(arg[i])
		}
		return 0
	}
	switch op % 6 {
	case 0: // produce a batch of honest WQEs
		if h.p == nil {
			return
		}
		n, err := h.p.Reserve(a(0)%8 + 1)
		h.fail(err)
		for i := range n {
			w := SendWQE{WRID: h.seq, Opcode: ib.WRSend, SGL: []SGE{{Addr: h.seq, Length: 1, LKey: 1}}}
			h.fail(w.Encode(h.p.Entry(i)))
			h.seq++
		}
		h.p.Publish()
	case 1: // consume and decode everything available, as the daemon would
		if h.c == nil {
			return
		}
		n, err := h.c.Available()
		h.fail(err)
		if n > h.r.Count() {
			h.t.Fatalf("Available %d in a ring of %d", n, h.r.Count())
		}
		for i := range n {
			h.c.CopyOut(i, h.entry)
			h.fail(h.send.Decode(h.entry, testLim))
			h.fail(h.recv.Decode(h.entry, Limits{MaxSGE: 255}))
			h.fail(h.cqe.Decode(h.entry))
			h.c.Peek(i)
		}
		h.c.Release(n)
	case 2: // scribble one word anywhere in the region
		off := (a(0) | a(1)<<8 | a(2)<<16) % len(h.region)
		for i := 0; i < 8 && off+i < len(h.region); i++ {
			h.region[off+i] = byte(a(3 + i))
		}
	case 3: // scribble the header and index words
		off := a(0) % offEntries
		for i := 0; i < 8 && off+i < offEntries; i++ {
			h.region[off+i] = byte(a(1 + i))
		}
	case 4: // detach and attach again, to whatever the header says now
		r, err := Attach(h.region)
		h.fail(err)
		if err != nil {
			return
		}
		h.r = r
		h.p, err = r.Producer()
		h.fail(err)
		h.c, err = r.Consumer(WaitOptions{})
		h.fail(err)
	case 5: // wait with a deadline already past
		if h.c == nil {
			return
		}
		ctx, cancel := expiredCtx()
		_, err := h.c.Wait(ctx)
		cancel()
		if err != nil && !errors.Is(err, ErrCorrupt) && ctx.Err() == nil {
			h.t.Fatalf("Wait: %v", err)
		}
	}
	h.checkGuards()
}

func (h *hostile) checkGuards() {
	g := bytes.Repeat([]byte{0x5a}, guard)
	if !bytes.Equal(h.buf[:guard], g) || !bytes.Equal(h.buf[len(h.buf)-guard:], g) {
		h.t.Fatal("a write landed outside the region")
	}
}

// TestHostilePeer runs a seeded random mix of honest traffic and garbage.
func TestHostilePeer(t *testing.T) {
	rng, _ := seeded(t)
	for round := range 50 {
		h := newHostile(t, 8<<(round%4))
		arg := make([]byte, 16)
		for range 2000 {
			for i := range arg {
				arg[i] = byte(rng.Uint32())
			}
			op := byte(rng.IntN(6))
			if op >= 2 && op <= 4 && rng.IntN(4) != 0 {
				op = byte(rng.IntN(2)) // mostly traffic, some garbage
			}
			h.step(op, arg)
		}
		if h.errs == 0 {
			t.Errorf("round %d: 2000 steps with garbage and no error reported", round)
		}
	}
}

// FuzzConsumer: the input is a program of operations over one region,
// garbage writes included; nothing may panic or leave the region. The
// decoders also get the raw input as an entry.
func FuzzConsumer(f *testing.F) {
	f.Add([]byte{0, 3, 1, 0})
	f.Add([]byte{0, 1, 3, 64, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1})
	f.Add([]byte{0, 5, 2, 0, 1, 0, 7, 7, 7, 7, 7, 7, 7, 7, 1, 4, 1, 0})
	f.Add([]byte{3, 16, 0xe8, 3, 0, 0, 0, 0, 0, 0, 4, 1})
	f.Fuzz(func(t *testing.T, prog []byte) {
		var w SendWQE
		var rw RecvWQE
		var e CQE
		_ = w.Decode(prog, Limits{MaxSGE: 255, MaxInline: 1 << 20})
		_ = rw.Decode(prog, Limits{MaxSGE: 255})
		_ = e.Decode(prog)
		_, _ = Attach(append([]byte(nil), prog...))
		ab := alignedBuf(len(prog))
		copy(ab, prog)
		if r, err := Attach(ab); err == nil {
			if p, err := r.Producer(); err == nil {
				p.Reserve(r.Count())
				p.Publish()
			}
			if c, err := r.Consumer(WaitOptions{}); err == nil {
				if n, _ := c.Available(); n > 0 {
					c.CopyOut(n-1, make([]byte, r.EntrySize()))
				}
			}
		}

		h := newHostile(t, 8)
		for i := 0; i < len(prog); {
			op := prog[i]
			arg := prog[i+1 : min(i+12, len(prog))]
			h.step(op, arg)
			if op%6 >= 2 && op%6 <= 3 {
				i += 1 + len(arg)
			} else {
				i += 2
			}
		}
		h.step(1, nil)
	})
}
