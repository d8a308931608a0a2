package hwq

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/ibex-rdma/ibex/ib"
)

var testLim = Limits{MaxSGE: 4, MaxInline: 100}

func TestEntryRoundTrip(t *testing.T) {
	b := make([]byte, SendWQESize(testLim))
	if len(b) != 64+104 {
		t.Fatalf("SendWQESize = %d", len(b))
	}
	sends := []SendWQE{
		{WRID: 1, Opcode: ib.WRRDMAWrite, Flags: ib.SendSignaled | ib.SendFence, RemoteAddr: 0x1000, RKey: 9,
			SGL: []SGE{{0x10, 100, 3}, {0x20, 28, 4}}, Length: 128},
		{WRID: 2, Opcode: ib.WRSendWithImm, Flags: ib.SendInline, Imm: 0xdeadbeef, Inline: []byte("hello"), Length: 5, SGL: []SGE{}},
		{WRID: 3, Opcode: ib.WRAtomicCmpAndSwp, CompareAdd: 5, Swap: 6, RemoteAddr: 8, RKey: 1, SGL: []SGE{{0x8, 8, 2}}, Length: 8},
		{WRID: 4, Opcode: ib.WRSend, SGL: []SGE{}, Inline: []byte{}},
	}
	for _, w := range sends {
		if err := w.Encode(b); err != nil {
			t.Fatal(err)
		}
		var got SendWQE
		if err := got.Decode(b, testLim); err != nil {
			t.Fatal(err)
		}
		if got.SGL == nil {
			got.SGL = []SGE{}
		}
		if got.Inline == nil {
			got.Inline = []byte{}
		}
		if w.Inline == nil {
			w.Inline = []byte{}
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("send round trip:\n got %+v\nwant %+v", got, w)
		}
	}
	rb := make([]byte, RecvWQESize(testLim))
	rw := RecvWQE{WRID: 77, SGL: []SGE{{1, 2, 3}, {4, 5, 6}, {7, 8, 9}, {10, 11, 12}}}
	if err := rw.Encode(rb); err != nil {
		t.Fatal(err)
	}
	var rgot RecvWQE
	if err := rgot.Decode(rb, testLim); err != nil || !reflect.DeepEqual(rgot, rw) {
		t.Errorf("recv round trip: %+v, %v", rgot, err)
	}
	cb := make([]byte, CQESize)
	ce := CQE{WRID: 5, Status: ib.WCRemAccessErr, Opcode: wcRecvRDMAWithImm, Flags: wcWithImm, ByteLen: 4096, QPNum: 0x11, SrcQP: 0x22, Imm: 0x33}
	if err := ce.Encode(cb); err != nil {
		t.Fatal(err)
	}
	var cgot CQE
	if err := cgot.Decode(cb); err != nil || cgot != ce {
		t.Errorf("cqe round trip: %+v, %v", cgot, err)
	}
}

// TestEntryValidation: each malformed entry is ErrBadEntry naming its field.
func TestEntryValidation(t *testing.T) {
	size := SendWQESize(testLim)
	enc := func(w SendWQE) []byte {
		b := make([]byte, size)
		if err := w.Encode(b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	sgl := SendWQE{Opcode: ib.WRSend, SGL: []SGE{{1, 10, 1}, {2, 20, 2}}}
	inl := SendWQE{Opcode: ib.WRSend, Flags: ib.SendInline, Inline: []byte("abc")}
	send := []struct {
		name  string
		b     func() []byte
		lim   Limits
		field string
	}{
		{"opcode", func() []byte { b := enc(sgl); b[wqeOpcode] = 9; return b }, testLim, "send wqe: opcode 9: unknown"},
		{"flags", func() []byte { b := enc(sgl); b[wqeFlags] = 0x30; return b }, testLim, "send wqe: send flags 0x30: unknown bits 0x30"},
		{"sge count over max", func() []byte { return enc(sgl) }, Limits{MaxSGE: 1}, "send wqe: sge count 2: more than max_sge 1"},
		{"sge count past entry", func() []byte { b := enc(sgl); b[wqeNSGE] = 200; return b }, Limits{MaxSGE: 255}, "send wqe: sge count 200: past the entry's 168 bytes"},
		{"total length", func() []byte { b := enc(sgl); le.PutUint32(b[wqeTotal:], 31); return b }, testLim, "send wqe: total length 31: the SGEs add up to 30"},
		{"inline without flag", func() []byte { b := enc(sgl); le.PutUint32(b[wqeInline:], 3); return b }, testLim, "send wqe: inline length 3: without the inline flag"},
		{"inline over max", func() []byte { return enc(inl) }, Limits{MaxInline: 2}, "send wqe: inline length 3: more than max_inline_data 2"},
		{"inline past entry", func() []byte { b := enc(inl); le.PutUint32(b[wqeInline:], 1000); return b }, Limits{MaxInline: 4096}, "send wqe: inline length 1000: past the entry's 168 bytes"},
		{"inline with sges", func() []byte { b := enc(inl); b[wqeNSGE] = 1; return b }, testLim, "send wqe: sge count 1: an inline request carries no SGEs"},
		{"inline total", func() []byte { b := enc(inl); le.PutUint32(b[wqeTotal:], 4); return b }, testLim, "send wqe: total length 4: inline length is 3"},
		{"short entry", func() []byte { return make([]byte, 10) }, testLim, "send wqe: entry size 10: less than 64"},
	}
	for _, tt := range send {
		t.Run("send/"+tt.name, func(t *testing.T) {
			var w SendWQE
			err := w.Decode(tt.b(), tt.lim)
			if !errors.Is(err, ErrBadEntry) || !strings.HasPrefix(err.Error(), "hwq: "+tt.field) {
				t.Fatalf("got %v, want ErrBadEntry %q", err, tt.field)
			}
		})
	}
	rb := make([]byte, RecvWQESize(testLim))
	(&RecvWQE{SGL: []SGE{{1, 1, 1}, {2, 2, 2}}}).Encode(rb)
	var rw RecvWQE
	if err := rw.Decode(rb, Limits{MaxSGE: 1}); !errors.Is(err, ErrBadEntry) || !strings.HasPrefix(err.Error(), "hwq: recv wqe: sge count 2: more than max_sge 1") {
		t.Errorf("recv sge count: %v", err)
	}
	rb[rqeNSGE] = 9
	if err := rw.Decode(rb, Limits{MaxSGE: 9}); !errors.Is(err, ErrBadEntry) || !strings.HasPrefix(err.Error(), "hwq: recv wqe: sge count 9: past the entry's 80 bytes") {
		t.Errorf("recv past entry: %v", err)
	}
	cqe := []struct {
		off   int
		v     byte
		field string
	}{
		{cqeStatus, 22, "cqe: status 22: unknown"},
		{cqeOpcode, 5, "cqe: opcode 5: unknown"},
		{cqeOpcode, 130, "cqe: opcode 130: unknown"},
		{cqeFlags, 1, "cqe: wc flags 0x1: unknown bits 0x1"},
	}
	for _, tt := range cqe {
		b := make([]byte, CQESize)
		b[tt.off] = tt.v
		var e CQE
		if err := e.Decode(b); !errors.Is(err, ErrBadEntry) || !strings.HasPrefix(err.Error(), "hwq: "+tt.field) {
			t.Errorf("cqe byte %d = %d: %v, want %q", tt.off, tt.v, err, tt.field)
		}
	}
	// Encode refuses what does not fit, and writes nothing then.
	small := make([]byte, 64+16)
	for i := range small {
		small[i] = 0xaa
	}
	if err := sgl.Encode(small); !errors.Is(err, ErrBadEntry) || !strings.Contains(err.Error(), "entry size 80: 96 bytes needed") {
		t.Errorf("encode too big: %v", err)
	}
	if small[0] != 0xaa {
		t.Error("failed Encode wrote into the entry")
	}
	if err := (&SendWQE{Flags: ib.SendInline, Inline: []byte{1}, SGL: []SGE{{}}}).Encode(small); !errors.Is(err, ErrBadEntry) {
		t.Errorf("encode inline with SGEs: %v", err)
	}
	if err := (&CQE{}).Encode(make([]byte, 31)); !errors.Is(err, ErrBadEntry) {
		t.Errorf("encode short cqe: %v", err)
	}
}

// TestNoAllocs: the data path allocates nothing.
func TestNoAllocs(t *testing.T) {
	r := newTestRing(t, SendWQESize(testLim), 64)
	p, c := ends(t, r, WaitOptions{})
	w := SendWQE{WRID: 1, Opcode: ib.WRSend, SGL: []SGE{{1, 2, 3}, {4, 5, 6}}}
	var got SendWQE
	got.SGL = make([]SGE, 0, testLim.MaxSGE)
	got.Inline = make([]byte, 0, testLim.MaxInline)
	buf := make([]byte, r.EntrySize())
	var cerr, derr error
	allocs := testing.AllocsPerRun(1000, func() {
		p.Reserve(4)
		for i := range 4 {
			cerr = w.Encode(p.Entry(i))
		}
		p.Publish()
		n, _ := c.Available()
		for i := range n {
			c.CopyOut(i, buf)
			derr = got.Decode(buf, testLim)
		}
		c.Release(n)
	})
	if cerr != nil || derr != nil {
		t.Fatal(cerr, derr)
	}
	if allocs != 0 {
		t.Errorf("send WQE publish/consume/encode/decode: %v allocs/op", allocs)
	}
	cr := newTestRing(t, CQESize, 64)
	cp, cc := ends(t, cr, WaitOptions{})
	cb := make([]byte, CQESize)
	var ce CQE
	allocs = testing.AllocsPerRun(1000, func() {
		cerr = (&CQE{WRID: 9, ByteLen: 4}).Push(cp)
		cc.Pop(cb)
		derr = ce.Decode(cb)
	})
	if cerr != nil || derr != nil || ce.WRID != 9 {
		t.Fatal(cerr, derr, ce)
	}
	if allocs != 0 {
		t.Errorf("CQE push/pop/decode: %v allocs/op", allocs)
	}
	rw := RecvWQE{SGL: []SGE{{1, 2, 3}}}
	rgot := RecvWQE{SGL: make([]SGE, 0, 4)}
	rb := make([]byte, RecvWQESize(testLim))
	if a := testing.AllocsPerRun(1000, func() { rw.Encode(rb); rgot.Decode(rb, testLim) }); a != 0 {
		t.Errorf("recv WQE encode/decode: %v allocs/op", a)
	}
}
