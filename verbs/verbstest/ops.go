package verbstest

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/ibex-rdma/ibex/verbs"
)

var allRemote = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

func defaultPair(t *testing.T, cfg Config) (a, b *end) {
	return pair(t, cfg, endOpts{}, endOpts{}, verbs.ConnectOptions{})
}

func testSend(t *testing.T, cfg Config) {
	a, b := defaultPair(t, cfg)
	fill(a.buf[:1000], 1)
	b.recv(verbs.RecvWR{ID: 0xbeef, SGL: []verbs.SGE{b.sge(100, 2000)}})
	a.post(verbs.SendWR{ID: 0xfeed, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.sge(0, 1000)}})
	expectWC(t, a.wait1(), 0xfeed, verbs.WCSuccess, verbs.WCSend)
	wc := b.wait1()
	expectWC(t, wc, 0xbeef, verbs.WCSuccess, verbs.WCRecv)
	if wc.ByteLen != 1000 || wc.QPNum != b.qp.Num() || wc.SrcQP != a.qp.Num() || wc.Flags&verbs.WCWithImm != 0 {
		t.Fatalf("recv completion %v: want byte_len 1000 qp %#x src_qp %#x, no imm", wc, b.qp.Num(), a.qp.Num())
	}
	if !bytes.Equal(b.read(100, 1000), a.buf[:1000]) {
		t.Fatal("received bytes differ from sent bytes")
	}
	if b.byteAt(1100) != 0 || b.byteAt(99) != 0 {
		t.Fatal("receive wrote outside the message")
	}
}

func testSendImm(t *testing.T, cfg Config) {
	a, b := defaultPair(t, cfg)
	b.recv(verbs.RecvWR{ID: 2, SGL: []verbs.SGE{b.sge(0, 64)}})
	a.post(verbs.SendWR{ID: 1, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, Imm: 0xdeadbeef, SGL: []verbs.SGE{a.sge(0, 8)}})
	expectWC(t, a.wait1(), 1, verbs.WCSuccess, verbs.WCSend)
	wc := b.wait1()
	expectWC(t, wc, 2, verbs.WCSuccess, verbs.WCRecv)
	if wc.Flags&verbs.WCWithImm == 0 || wc.Imm != 0xdeadbeef || wc.ByteLen != 8 {
		t.Fatalf("recv completion %v: want imm 0xdeadbeef byte_len 8", wc)
	}
}

func testWrite(t *testing.T, cfg Config) {
	a, b := defaultPair(t, cfg)
	fill(a.buf[:3000], 3)
	a.post(verbs.SendWR{ID: 7, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.sge(0, 3000)},
		RemoteAddr: b.mr.Addr() + 500, RKey: b.mr.RKey()})
	expectWC(t, a.wait1(), 7, verbs.WCSuccess, verbs.WCRDMAWrite)
	if !bytes.Equal(b.read(500, 3000), a.buf[:3000]) || b.byteAt(499) != 0 || b.byteAt(3500) != 0 {
		t.Fatal("RDMA WRITE placed the wrong bytes")
	}
	expectNoWC(t, b.cq, 0)
}

func testWriteImm(t *testing.T, cfg Config) {
	a, b := defaultPair(t, cfg)
	fill(a.buf[:256], 5)
	b.recv(verbs.RecvWR{ID: 11})
	a.post(verbs.SendWR{ID: 10, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, Imm: 42, SGL: []verbs.SGE{a.sge(0, 256)},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	expectWC(t, a.wait1(), 10, verbs.WCSuccess, verbs.WCRDMAWrite)
	wc := b.wait1()
	expectWC(t, wc, 11, verbs.WCSuccess, verbs.WCRecvRDMAWithImm)
	if wc.Imm != 42 || wc.Flags&verbs.WCWithImm == 0 || wc.ByteLen != 256 || wc.SrcQP != a.qp.Num() {
		t.Fatalf("recv completion %v: want imm 42 byte_len 256", wc)
	}
	if !bytes.Equal(b.read(0, 256), a.buf[:256]) {
		t.Fatal("WRITE_WITH_IMM bytes differ")
	}
}

func testRead(t *testing.T, cfg Config) {
	a, b := defaultPair(t, cfg)
	b.write(0, pattern(5000, 9))
	a.post(verbs.SendWR{ID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.sge(10, 5000)},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	wc := a.wait1()
	expectWC(t, wc, 3, verbs.WCSuccess, verbs.WCRDMARead)
	if wc.ByteLen != 5000 {
		t.Fatalf("READ byte_len %d, want 5000", wc.ByteLen)
	}
	if !bytes.Equal(a.buf[10:5010], b.read(0, 5000)) {
		t.Fatal("RDMA READ returned the wrong bytes")
	}
}

func atomicWR(a, b *end, id uint64, op verbs.Opcode, roff, loff int, cmpAdd, swap uint64) verbs.SendWR {
	return verbs.SendWR{ID: id, Opcode: op, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.sge(loff, 8)},
		RemoteAddr: b.mr.Addr() + uint64(roff), RKey: b.mr.RKey(), CompareAdd: cmpAdd, Swap: swap}
}

func u64(b []byte) uint64 { return binary.NativeEndian.Uint64(b) }

func testFetchAdd(t *testing.T, cfg Config) {
	a, b := defaultPair(t, cfg)
	b.putU64(64, 1000)
	a.post(atomicWR(a, b, 1, verbs.WRAtomicFetchAndAdd, 64, 0, 5, 0))
	wc := a.wait1()
	expectWC(t, wc, 1, verbs.WCSuccess, verbs.WCFetchAdd)
	if got := u64(a.buf[0:]); got != 1000 {
		t.Fatalf("FETCH_AND_ADD returned %d, want the original 1000", got)
	}
	if got := b.u64(64); got != 1005 {
		t.Fatalf("FETCH_AND_ADD left %d, want 1005", got)
	}
	// Wrap-around is modulo 2^64.
	b.putU64(64, ^uint64(0))
	a.post(atomicWR(a, b, 2, verbs.WRAtomicFetchAndAdd, 64, 8, 2, 0))
	expectWC(t, a.wait1(), 2, verbs.WCSuccess, verbs.WCFetchAdd)
	if got := b.u64(64); got != 1 || u64(a.buf[8:]) != ^uint64(0) {
		t.Fatalf("FETCH_AND_ADD wrap: memory %d returned %#x", got, u64(a.buf[8:]))
	}
}

func testCmpSwap(t *testing.T, cfg Config) {
	a, b := defaultPair(t, cfg)
	b.putU64(8, 77)
	a.post(atomicWR(a, b, 1, verbs.WRAtomicCmpAndSwp, 8, 0, 76, 99)) // compare fails
	expectWC(t, a.wait1(), 1, verbs.WCSuccess, verbs.WCCompSwap)
	if got := b.u64(8); u64(a.buf) != 77 || got != 77 {
		t.Fatalf("failed CMP_AND_SWP: returned %d memory %d, want 77 and 77", u64(a.buf), got)
	}
	a.post(atomicWR(a, b, 2, verbs.WRAtomicCmpAndSwp, 8, 16, 77, 99)) // compare matches
	expectWC(t, a.wait1(), 2, verbs.WCSuccess, verbs.WCCompSwap)
	if got := b.u64(8); u64(a.buf[16:]) != 77 || got != 99 {
		t.Fatalf("CMP_AND_SWP: returned %d memory %d, want 77 and 99", u64(a.buf[16:]), got)
	}
}

// testAtomicExactlyOnce: n fetch-adds of 1 leave n and return each of
// 0..n-1 exactly once, including when they are posted back to back.
func testAtomicExactlyOnce(t *testing.T, cfg Config) {
	const n = 200
	a, b := pair(t, cfg, endOpts{cap: verbs.QPCap{MaxSendWR: n}}, endOpts{}, verbs.ConnectOptions{})
	wrs := make([]verbs.SendWR, n)
	for i := range wrs {
		wrs[i] = atomicWR(a, b, uint64(i), verbs.WRAtomicFetchAndAdd, 0, 8*i, 1, 0)
	}
	a.post(wrs...)
	for i, wc := range a.wait(n) {
		expectWC(t, wc, uint64(i), verbs.WCSuccess, verbs.WCFetchAdd)
	}
	if got := b.u64(0); got != n {
		t.Fatalf("after %d fetch-adds memory holds %d", n, got)
	}
	seen := make([]bool, n)
	for i := range n {
		v := u64(a.buf[8*i:])
		if v >= n || seen[v] {
			t.Fatalf("fetch-add %d returned %d: not a distinct value in 0..%d", i, v, n-1)
		}
		seen[v] = true
	}
}

func testAtomicMisaligned(t *testing.T, cfg Config) {
	a, b := defaultPair(t, cfg)
	a.post(atomicWR(a, b, 1, verbs.WRAtomicFetchAndAdd, 4, 0, 1, 0))
	expectWC(t, a.wait1(), 1, verbs.WCRemInvReqErr, 0)
	waitState(t, a.qp, verbs.QPSErr)
	if b.u64(0) != 0 || b.u64(8) != 0 {
		t.Fatal("misaligned atomic modified memory")
	}
	// The atomic's local SGE must be exactly 8 bytes.
	errContains(t, b.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRAtomicCmpAndSwp, SGL: []verbs.SGE{b.sge(0, 4)}, RemoteAddr: a.mr.Addr(), RKey: a.mr.RKey()}}),
		verbs.ErrInvalidArgument, "8-byte SGE")
}

func testSGEList(t *testing.T, cfg Config) {
	caps := verbs.QPCap{MaxSendSGE: 4, MaxRecvSGE: 4}
	a, b := pair(t, cfg, endOpts{cap: caps}, endOpts{cap: caps}, verbs.ConnectOptions{})
	fill(a.buf[:4096], 11)
	mr2 := a.regMR(4096, verbs.AccessLocalWrite)
	mr2.Write(0, pattern(4096, 13))
	// Gather from two MRs, scatter into three receive SGEs of other sizes.
	src := []verbs.SGE{a.sge(0, 100), sgeOf(mr2, 50, 300), a.sge(1000, 0), a.sge(2000, 600)}
	var want []byte
	want = append(want, a.buf[:100]...)
	want = append(want, mr2.Read(50, 300)...)
	want = append(want, a.buf[2000:2600]...)
	b.recv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{b.sge(0, 250), b.sge(1000, 10), b.sge(3000, 900)}})
	a.post(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: src})
	expectWC(t, a.wait1(), 2, verbs.WCSuccess, verbs.WCSend)
	wc := b.wait1()
	expectWC(t, wc, 1, verbs.WCSuccess, verbs.WCRecv)
	got := append(append(b.read(0, 250), b.read(1000, 10)...), b.read(3000, 1000-260)...)
	if wc.ByteLen != 1000 || !bytes.Equal(got, want) {
		t.Fatalf("SEND with SGE lists: byte_len %d, bytes differ %v", wc.ByteLen, !bytes.Equal(got, want))
	}
	// WRITE gathers; READ scatters.
	a.post(verbs.SendWR{ID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: src, RemoteAddr: b.mr.Addr() + 8192, RKey: b.mr.RKey()})
	expectWC(t, a.wait1(), 3, verbs.WCSuccess, verbs.WCRDMAWrite)
	if !bytes.Equal(b.read(8192, 1000), want) {
		t.Fatal("WRITE with an SGE list placed the wrong bytes")
	}
	dst := []verbs.SGE{a.sge(10000, 1), sgeOf(mr2, 0, 499), a.sge(20000, 500)}
	a.post(verbs.SendWR{ID: 4, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: dst, RemoteAddr: b.mr.Addr() + 8192, RKey: b.mr.RKey()})
	expectWC(t, a.wait1(), 4, verbs.WCSuccess, verbs.WCRDMARead)
	got = append(append(append([]byte{}, a.buf[10000:10001]...), mr2.Read(0, 499)...), a.buf[20000:20500]...)
	if !bytes.Equal(got, want) {
		t.Fatal("READ into an SGE list scattered the wrong bytes")
	}
	// More SGEs than the QP allows is refused at post time.
	errContains(t, a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, SGL: make([]verbs.SGE, 5)}}), verbs.ErrInvalidArgument, "max_sge 4")
}

func testInline(t *testing.T, cfg Config) {
	caps := verbs.QPCap{MaxInlineData: 64}
	a, b := pair(t, cfg, endOpts{cap: caps}, endOpts{}, verbs.ConnectOptions{})
	payload := []byte("inline payload: copied at post time")
	b.recv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{b.sge(0, 64)}})
	a.post(verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, Inline: payload})
	want := string(payload)
	copy(payload, "XXXXXXXXXXXXXXXX") // reusing the buffer at once is allowed
	expectWC(t, a.wait1(), 2, verbs.WCSuccess, verbs.WCSend)
	wc := b.wait1()
	if got := b.read(0, 64); wc.ByteLen != uint32(len(want)) || string(got[:len(want)]) != want {
		t.Fatalf("inline SEND delivered %q (%d bytes), want %q", got[:min(wc.ByteLen, 64)], wc.ByteLen, want)
	}
	a.post(verbs.SendWR{ID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled | verbs.SendInline, Inline: []byte("inline write"),
		RemoteAddr: b.mr.Addr() + 100, RKey: b.mr.RKey()})
	expectWC(t, a.wait1(), 3, verbs.WCSuccess, verbs.WCRDMAWrite)
	if got := b.read(100, 12); string(got) != "inline write" {
		t.Fatalf("inline WRITE placed %q", got)
	}
	errContains(t, a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendInline, Inline: make([]byte, 65)}}),
		verbs.ErrInvalidArgument, "max_inline_data 64")
	errContains(t, a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMARead, Flags: verbs.SendInline, Inline: make([]byte, 8)}}),
		verbs.ErrInvalidArgument, "cannot be inline")
}

func testUnsignaled(t *testing.T, cfg Config) {
	a, b := defaultPair(t, cfg)
	for i := range 10 {
		a.post(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(i, 1)}, RemoteAddr: b.mr.Addr() + uint64(i), RKey: b.mr.RKey()})
	}
	a.post(verbs.SendWR{ID: 10, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.sge(10, 1)}, RemoteAddr: b.mr.Addr() + 10, RKey: b.mr.RKey()})
	expectWC(t, a.wait1(), 10, verbs.WCSuccess, verbs.WCRDMAWrite)
	expectNoWC(t, a.cq, 0)
	if a.qp.Stats().Sends != 11 {
		t.Fatalf("sends completed: %d, want 11", a.qp.Stats().Sends)
	}
}

func testSigAll(t *testing.T, cfg Config) {
	a, b := pair(t, cfg, endOpts{sigAll: true}, endOpts{}, verbs.ConnectOptions{})
	for i := range 5 {
		a.post(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	}
	for i, wc := range a.wait(5) {
		expectWC(t, wc, uint64(i), verbs.WCSuccess, verbs.WCRDMAWrite)
	}
}

func testBatch(t *testing.T, cfg Config) {
	const n = 64
	a, b := pair(t, cfg, endOpts{cap: verbs.QPCap{MaxSendWR: n}}, endOpts{cap: verbs.QPCap{MaxRecvWR: n}}, verbs.ConnectOptions{})
	rwrs := make([]verbs.RecvWR, n)
	wrs := make([]verbs.SendWR, n)
	for i := range n {
		rwrs[i] = verbs.RecvWR{ID: uint64(1000 + i), SGL: []verbs.SGE{b.sge(i*64, 64)}}
		a.buf[i*64] = byte(i)
		wrs[i] = verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.sge(i*64, 64)}}
	}
	b.recv(rwrs...)
	a.post(wrs...)
	for i, wc := range a.wait(n) {
		expectWC(t, wc, uint64(i), verbs.WCSuccess, verbs.WCSend)
	}
	rwcs := b.wait(n)
	got := b.read(0, n*64)
	for i, wc := range rwcs {
		expectWC(t, wc, uint64(1000+i), verbs.WCSuccess, verbs.WCRecv)
		if got[i*64] != byte(i) {
			t.Fatalf("message %d landed in the wrong receive", i)
		}
	}
	// A full send queue refuses the rest, naming the first refused WR. SQD
	// holds the queue so nothing drains meanwhile.
	modify(t, a.qp, verbs.QPAttr{State: verbs.QPSSQD}, verbs.AttrState)
	big := make([]verbs.SendWR, n+5)
	for i := range big {
		big[i] = verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	}
	err := a.qp.PostSend(big)
	errContains(t, err, verbs.ErrQueueFull, "wr[64]", "max_send_wr 64")
	modify(t, a.qp, verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState)
}

func testBadWRInBatch(t *testing.T, cfg Config) {
	a, b := defaultPair(t, cfg)
	wrs := make([]verbs.SendWR, 8)
	for i := range wrs {
		wrs[i] = verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	}
	wrs[5].SGL = []verbs.SGE{{Addr: a.mr.Addr(), Length: 8, LKey: a.mr.LKey() ^ 0x5a5a}}
	err := a.qp.PostSend(wrs)
	var pe *verbs.PostError
	if !errorsAs(err, &pe) || pe.Index != 5 {
		t.Fatalf("post error %v: want *PostError at index 5", err)
	}
	errContains(t, err, verbs.ErrInvalidLKey, "wr[5]", "sge[0]", "not registered in this PD")
	for i, wc := range a.wait(5) {
		expectWC(t, wc, uint64(i), verbs.WCSuccess, verbs.WCRDMAWrite)
	}
	expectNoWC(t, a.cq, 0)
}

// testOrdering posts a mix of operations and checks completions come back
// in posting order on both sides.
func testOrdering(t *testing.T, cfg Config) {
	const n = 120
	a, b := pair(t, cfg, endOpts{cap: verbs.QPCap{MaxSendWR: n}}, endOpts{cap: verbs.QPCap{MaxRecvWR: n}}, verbs.ConnectOptions{})
	var wrs []verbs.SendWR
	var recvs []verbs.RecvWR
	for i := range n {
		w := verbs.SendWR{ID: uint64(i), Flags: verbs.SendSignaled, RemoteAddr: b.mr.Addr() + uint64(8*i), RKey: b.mr.RKey(), SGL: []verbs.SGE{a.sge(8*i, 8)}}
		switch i % 5 {
		case 0:
			w.Opcode = verbs.WRSend
		case 1:
			w.Opcode = verbs.WRRDMAWrite
		case 2:
			w.Opcode = verbs.WRRDMARead
		case 3:
			w.Opcode = verbs.WRAtomicFetchAndAdd
			w.CompareAdd = 1
		case 4:
			w.Opcode = verbs.WRRDMAWriteWithImm
			w.Imm = uint32(i)
		}
		if w.Opcode == verbs.WRSend || w.Opcode == verbs.WRRDMAWriteWithImm {
			recvs = append(recvs, verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{b.sge(4096+8*i, 8)}})
		}
		wrs = append(wrs, w)
	}
	b.recv(recvs...)
	a.post(wrs...)
	for i, wc := range a.wait(n) {
		if wc.WRID != uint64(i) || wc.Status != verbs.WCSuccess {
			t.Fatalf("completion %d: %v (out of posting order or failed)", i, wc)
		}
	}
	for i, wc := range b.wait(len(recvs)) {
		if wc.WRID != recvs[i].ID || wc.Status != verbs.WCSuccess {
			t.Fatalf("receive completion %d: %v, want wr_id %d", i, wc, recvs[i].ID)
		}
	}
}

// testSendAfterWrite: when the receive completion of a SEND posted after a
// WRITE arrives, the WRITE's bytes are already in place.
func testSendAfterWrite(t *testing.T, cfg Config) {
	const rounds = 50
	a, b := pair(t, cfg, endOpts{bufSize: 1 << 20}, endOpts{bufSize: 1 << 20}, verbs.ConnectOptions{})
	for r := range rounds {
		fill(a.buf[:256<<10], byte(r))
		b.recv(verbs.RecvWR{ID: uint64(r), SGL: []verbs.SGE{b.sge(512<<10, 8)}})
		a.post(
			verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, 256<<10)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
			verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.sge(0, 8)}},
		)
		b.wait1()
		if !bytes.Equal(b.read(0, 256<<10), a.buf[:256<<10]) {
			t.Fatalf("round %d: the SEND arrived before the WRITE's bytes", r)
		}
		a.wait1()
	}
}

// testFence: a fenced SEND of the buffer a READ fills carries the READ's data.
func testFence(t *testing.T, cfg Config) {
	a, b := defaultPair(t, cfg)
	b.write(0, pattern(512, 21))
	b.recv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{b.sge(4096, 512)}})
	a.post(
		verbs.SendWR{ID: 1, Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{a.sge(0, 512)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		verbs.SendWR{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendFence, SGL: []verbs.SGE{a.sge(0, 512)}},
	)
	expectWC(t, a.wait1(), 2, verbs.WCSuccess, verbs.WCSend)
	b.wait1()
	if !bytes.Equal(b.read(4096, 512), b.read(0, 512)) {
		t.Fatal("fenced SEND did not carry the data of the READ before it")
	}
}

func testZeroByte(t *testing.T, cfg Config) {
	a, b := defaultPair(t, cfg)
	b.recv(verbs.RecvWR{ID: 1}, verbs.RecvWR{ID: 2, SGL: []verbs.SGE{b.sge(0, 16)}}, verbs.RecvWR{ID: 3})
	a.post(
		verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled},
		verbs.SendWR{ID: 2, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, Imm: 5},
		// Zero-length RDMA does not check the rkey (IBA 9.7.4.1.5).
		verbs.SendWR{ID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, RemoteAddr: 1, RKey: 0x12345},
		verbs.SendWR{ID: 4, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		verbs.SendWR{ID: 5, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, Imm: 6, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
	)
	for i, wc := range a.wait(5) {
		if wc.WRID != uint64(i+1) || wc.Status != verbs.WCSuccess {
			t.Fatalf("zero-byte request %d: %v", i+1, wc)
		}
	}
	for i, wc := range b.wait(3) {
		if wc.WRID != uint64(i+1) || wc.Status != verbs.WCSuccess || wc.ByteLen != 0 {
			t.Fatalf("zero-byte receive %d: %v", i+1, wc)
		}
	}
}

func testLarge(t *testing.T, cfg Config) {
	if cfg.Short {
		t.Skip(cfg.ShortReason)
	}
	const size = 64 << 20
	a, b := pair(t, cfg, endOpts{bufSize: size}, endOpts{bufSize: size}, verbs.ConnectOptions{})
	fill(a.buf, 31)
	a.post(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.sge(0, size)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	expectWC(t, a.wait1(), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
	if !bytes.Equal(a.buf, b.read(0, size)) {
		t.Fatal("64 MiB WRITE: bytes differ")
	}
	clear(a.buf)
	a.post(verbs.SendWR{ID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.sge(0, size)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	if wc := a.wait1(); wc.ByteLen != size {
		t.Fatalf("64 MiB READ: %v", wc)
	}
	if !bytes.Equal(a.buf, b.read(0, size)) {
		t.Fatal("64 MiB READ: bytes differ")
	}
	fill(a.buf, 37)
	b.recv(verbs.RecvWR{ID: 3, SGL: []verbs.SGE{b.sge(0, size)}})
	a.post(verbs.SendWR{ID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{a.sge(0, size)}})
	expectWC(t, a.wait1(), 3, verbs.WCSuccess, verbs.WCSend)
	if wc, got := b.wait1(), b.read(0, size); wc.ByteLen != size || !bytes.Equal(a.buf, got) {
		t.Fatalf("64 MiB SEND: %v, bytes equal %v", wc, bytes.Equal(a.buf, got))
	}
}
