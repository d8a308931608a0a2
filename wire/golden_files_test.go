package wire_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"reflect"
	"testing"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/wire"
)

// What each capture contains, from ../shared/testdata/rxe-pcaps/README.md
// and the perftest / rxe-vectors output in its logs/ folder (QPNs, start
// PSNs, rkeys and VAs).

// exp is one expected packet. Payload contents are compared only when data
// is set; otherwise only the length n.
type exp struct {
	from netip.Addr
	p    wire.Packet
	n    int
	data []byte
}

func rcPkt(from netip.Addr, op ib.Opcode, qpn, psn uint32, ack bool, n int) exp {
	return exp{from: from, n: n, p: wire.Packet{BTH: wire.BTH{
		Opcode: op, PKey: 0xffff, DestQP: qpn, PSN: psn & ib.PSNMask, AckReq: ack, PadCnt: uint8(-n & 3),
	}}}
}

func (e exp) reth(va uint64, rkey, length uint32) exp {
	e.p.RETH = wire.RETH{VA: va, RKey: rkey, DMALen: length}
	return e
}

func (e exp) aeth(syn ib.Syndrome, msn uint32) exp {
	e.p.AETH = wire.AETH{Syndrome: syn, MSN: msn}
	return e
}

func (e exp) imm(v uint32) exp { e.p.Imm = v; return e }

func (e exp) atomic(va uint64, rkey uint32, swapAdd, compare uint64) exp {
	e.p.AtomicETH = wire.AtomicETH{VA: va, RKey: rkey, SwapAdd: swapAdd, Compare: compare}
	return e
}

func (e exp) orig(v uint64) exp { e.p.AtomicAck = v; return e }

func (e exp) deth(qkey, srcQP uint32) exp { e.p.DETH = wire.DETH{QKey: qkey, SrcQP: srcQP}; return e }

func (e exp) payload(b []byte) exp { e.data = b; e.n = len(b); return e }

func ack(from netip.Addr, qpn, psn, msn uint32) exp {
	return rcPkt(from, ib.RCAck, qpn, psn, false, 0).aeth(ib.SynACK, msn)
}

// expect compares, for each sender in want, the frames it sent with its
// entries in want, in order. How the two sides interleave is not checked.
func expect(t *testing.T, fs []wire.Frame, want []exp) {
	t.Helper()
	bySender := map[netip.Addr][]exp{}
	for _, w := range want {
		bySender[w.from] = append(bySender[w.from], w)
	}
	for from, w := range bySender {
		var got []*wire.Frame
		for i := range fs {
			if fs[i].Encap.Src.Addr() == from {
				got = append(got, &fs[i])
			}
		}
		compare(t, got, w)
	}
}

// expectInOrder compares all frames with want, in order.
func expectInOrder(t *testing.T, fs []wire.Frame, want []exp) {
	t.Helper()
	got := make([]*wire.Frame, len(fs))
	for i := range fs {
		got[i] = &fs[i]
	}
	compare(t, got, want)
}

func compare(t *testing.T, got []*wire.Frame, want []exp) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d frames, want %d", len(got), len(want))
	}
	for i, w := range want {
		f := got[i]
		g := f.Packet
		if f.Encap.Src.Addr() != w.from {
			t.Errorf("packet %d: from %v, want %v", i+1, f.Encap.Src.Addr(), w.from)
		}
		if len(g.Payload) != w.n || (w.data != nil && !bytes.Equal(g.Payload, w.data)) {
			t.Errorf("packet %d (%v): payload %d bytes %.8x..., want %d bytes %.8x...", i+1, g.BTH.Opcode, len(g.Payload), g.Payload, w.n, w.data)
		}
		g.Payload, g.ICRC = nil, 0
		if !reflect.DeepEqual(g, w.p) {
			t.Errorf("packet %d:\n got %v\nwant %v", i+1, &g, &w.p)
		}
	}
}

// count returns how many frames carry each opcode.
func count(fs []wire.Frame) map[ib.Opcode]int {
	m := map[ib.Opcode]int{}
	for i := range fs {
		m[fs[i].Packet.BTH.Opcode]++
	}
	return m
}

// rxeVectorsPayload is byte i of operation k's message in rxe-vectors.
func rxeVectorsPayload(k, off, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(k*16 + off + i)
	}
	return b
}

// rxeVectorsRead is the server's memory at offset o, which READs return.
func rxeVectorsRead(o, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 0xa5 ^ byte(o+i)
	}
	return b
}

// vectorsSequence is the 34-frame rc_vectors_* exchange: client operation
// k = 1..12, each followed by its response (README "rxe-vectors known values").
func vectorsSequence(client, server netip.Addr, qpn, rkey uint32, va uint64) []exp {
	const psn0 = 0x100
	psn := uint32(psn0)
	var w []exp
	msn := uint32(0)
	req := func(op ib.Opcode, ack bool, k, off, n int) exp {
		e := rcPkt(client, op, qpn, psn, ack, n).payload(rxeVectorsPayload(k, off, n))
		psn++
		return e
	}
	acked := func() {
		msn++
		w = append(w, ack(server, qpn, psn-1, msn))
	}
	// 1 SEND 32, 2 SEND_WITH_IMM 32
	w = append(w, req(ib.RCSendOnly, true, 1, 0, 32))
	acked()
	w = append(w, req(ib.RCSendOnlyImm, true, 2, 0, 32).imm(0x11223344))
	acked()
	// 3 SEND 3000, 4 SEND_WITH_IMM 3000: 1024 + 1024 + 952
	w = append(w, req(ib.RCSendFirst, false, 3, 0, 1024), req(ib.RCSendMiddle, false, 3, 1024, 1024), req(ib.RCSendLast, true, 3, 2048, 952))
	acked()
	w = append(w, req(ib.RCSendFirst, false, 4, 0, 1024), req(ib.RCSendMiddle, false, 4, 1024, 1024), req(ib.RCSendLastImm, true, 4, 2048, 952).imm(0x55667788))
	acked()
	// 5 WRITE 32 at 0x8000, 6 WRITE 3000 at 0x9000
	w = append(w, req(ib.RCWriteOnly, true, 5, 0, 32).reth(va+0x8000, rkey, 32))
	acked()
	w = append(w, req(ib.RCWriteFirst, false, 6, 0, 1024).reth(va+0x9000, rkey, 3000), req(ib.RCWriteMiddle, false, 6, 1024, 1024), req(ib.RCWriteLast, true, 6, 2048, 952))
	acked()
	// 7 WRITE_WITH_IMM 32 at 0xA000, 8 WRITE_WITH_IMM 3000 at 0xB000
	w = append(w, req(ib.RCWriteOnlyImm, true, 7, 0, 32).reth(va+0xa000, rkey, 32).imm(0xaabbccdd))
	acked()
	w = append(w, req(ib.RCWriteFirst, false, 8, 0, 1024).reth(va+0xb000, rkey, 3000), req(ib.RCWriteMiddle, false, 8, 1024, 1024), req(ib.RCWriteLastImm, true, 8, 2048, 952).imm(0xdeadbeef))
	acked()
	// 9 READ 32 at 0xC000: one PSN; the response repeats it.
	w = append(w, rcPkt(client, ib.RCReadRequest, qpn, psn, true, 0).reth(va+0xc000, rkey, 32))
	msn++
	w = append(w, rcPkt(server, ib.RCReadResponseOnly, qpn, psn, false, 32).aeth(ib.SynACK, msn).payload(rxeVectorsRead(0xc000, 32)))
	psn++
	// 10 READ 3000 at 0xD000: three PSNs; First and Last carry the AETH, same MSN.
	w = append(w, rcPkt(client, ib.RCReadRequest, qpn, psn, true, 0).reth(va+0xd000, rkey, 3000))
	msn++
	w = append(w,
		rcPkt(server, ib.RCReadResponseFirst, qpn, psn, false, 1024).aeth(ib.SynACK, msn).payload(rxeVectorsRead(0xd000, 1024)),
		rcPkt(server, ib.RCReadResponseMiddle, qpn, psn+1, false, 1024).payload(rxeVectorsRead(0xd000+1024, 1024)),
		rcPkt(server, ib.RCReadResponseLast, qpn, psn+2, false, 952).aeth(ib.SynACK, msn).payload(rxeVectorsRead(0xd000+2048, 952)))
	psn += 3
	// 11 CMP_AND_SWP, 12 FETCH_AND_ADD at 0xF000.
	const ones, twos = 0x1111111111111111, 0x2222222222222222
	w = append(w, rcPkt(client, ib.RCCompareSwap, qpn, psn, true, 0).atomic(va+0xf000, rkey, twos, ones))
	msn++
	w = append(w, rcPkt(server, ib.RCAtomicAck, qpn, psn, false, 0).aeth(ib.SynACK, msn).orig(ones))
	psn++
	w = append(w, rcPkt(client, ib.RCFetchAdd, qpn, psn, true, 0).atomic(va+0xf000, rkey, 1, 0))
	msn++
	w = append(w, rcPkt(server, ib.RCAtomicAck, qpn, psn, false, 0).aeth(ib.SynACK, msn).orig(twos))
	return w
}

// messages builds count messages of the same shape on one QP: each is the
// opcodes ops with payload sizes ns (the last one requests an ACK), PSNs
// consecutive from psn0; first, if set, decorates message i's first packet.
func messages(from netip.Addr, qpn, psn0 uint32, count int, ops []ib.Opcode, ns []int, ackLast bool, first func(i int, e exp) exp) []exp {
	var w []exp
	psn := psn0
	for i := range count {
		for j, op := range ops {
			e := rcPkt(from, op, qpn, psn, ackLast && j == len(ops)-1, ns[j])
			if j == 0 && first != nil {
				e = first(i, e)
			}
			w = append(w, e)
			psn++
		}
	}
	return w
}

// acks builds count ACKs from `from`, of the PSNs psn0 + stride*i + last,
// with MSN 1, 2, ...
func acks(from netip.Addr, qpn, psn0 uint32, count, stride, last int) []exp {
	var w []exp
	for i := range count {
		w = append(w, ack(from, qpn, psn0+uint32(stride*i+last), uint32(i+1)))
	}
	return w
}

var goldenFiles = map[string]func(t *testing.T, fs []wire.Frame){
	"rc_send_64B": func(t *testing.T, fs []wire.Frame) {
		const qpn, psn = 0x11, 0xd3f8ec
		expect(t, fs, append(
			messages(clientV4, qpn, psn, 5, []ib.Opcode{ib.RCSendOnly}, []int{64}, true, nil),
			acks(serverV4, qpn, psn, 5, 1, 0)...))
	},
	"rc_send_1027B_pad": func(t *testing.T, fs []wire.Frame) {
		const qpn, psn = 0x12, 0x8229a2
		expect(t, fs, append(
			messages(clientV4, qpn, psn, 5, []ib.Opcode{ib.RCSendFirst, ib.RCSendLast}, []int{1024, 3}, true, nil),
			acks(serverV4, qpn, psn, 5, 2, 1)...))
		for i := range fs {
			if p := &fs[i].Packet; p.BTH.Opcode == ib.RCSendLast && p.BTH.PadCnt != 1 {
				t.Errorf("frame %d: SEND Last with 3 bytes has pad count %d, want 1", i+1, p.BTH.PadCnt)
			}
		}
	},
	"rc_send_4096B": func(t *testing.T, fs []wire.Frame) {
		const qpn, psn = 0x13, 0x884df2
		expect(t, fs, append(
			messages(clientV4, qpn, psn, 5, []ib.Opcode{ib.RCSendFirst, ib.RCSendMiddle, ib.RCSendMiddle, ib.RCSendLast}, []int{1024, 1024, 1024, 1024}, true, nil),
			acks(serverV4, qpn, psn, 5, 4, 3)...))
	},
	"rc_write_4096B": func(t *testing.T, fs []wire.Frame) {
		const qpn, psn = 0x14, 0x6663c5
		reth := func(_ int, e exp) exp { return e.reth(0x559447d15000, 0x5b6, 4096) }
		expect(t, fs, append(
			messages(clientV4, qpn, psn, 5, []ib.Opcode{ib.RCWriteFirst, ib.RCWriteMiddle, ib.RCWriteMiddle, ib.RCWriteLast}, []int{1024, 1024, 1024, 1024}, true, reth),
			acks(serverV4, qpn, psn, 5, 4, 3)...))
	},
	"rc_write_1024B_mtu256": func(t *testing.T, fs []wire.Frame) {
		const qpn, psn = 0x1a, 0x79e65b
		// perftest cycles through a 4096-byte remote buffer.
		reth := func(i int, e exp) exp { return e.reth(0x55bb5a320000+uint64(i*1024%4096), 0xbcb, 1024) }
		expect(t, fs, append(
			messages(clientV4, qpn, psn, 5, []ib.Opcode{ib.RCWriteFirst, ib.RCWriteMiddle, ib.RCWriteMiddle, ib.RCWriteLast}, []int{256, 256, 256, 256}, true, reth),
			acks(serverV4, qpn, psn, 5, 4, 3)...))
	},
	"rc_write_lat_32B": func(t *testing.T, fs []wire.Frame) {
		// Ping-pong: each side writes 32 bytes into the other's buffer on
		// its own PSN stream, and ACKs the other's writes.
		const qpn, cpsn, spsn = 0x15, 0x9c6d32, 0x8668fe
		var w []exp
		for i := range uint32(5) {
			w = append(w,
				rcPkt(serverV4, ib.RCWriteOnly, qpn, spsn+i, true, 32).reth(0x5592b3bb4000, 0x6f8, 32),
				ack(clientV4, qpn, spsn+i, i+1),
				rcPkt(clientV4, ib.RCWriteOnly, qpn, cpsn+i, true, 32).reth(0x55a1749ad000, 0x68c, 32),
				ack(serverV4, qpn, cpsn+i, i+1))
		}
		expect(t, fs, w)
	},
	"rc_read_4096B": func(t *testing.T, fs []wire.Frame) {
		// A 4096-byte READ takes 4 PSNs of the requester's space; the
		// responses reuse them, AETH on First and Last.
		const qpn, psn = 0x16, 0xa0b62b
		var reqs, resps []exp
		for i := range uint32(5) {
			p := psn + 4*i
			reqs = append(reqs, rcPkt(clientV4, ib.RCReadRequest, qpn, p, true, 0).reth(0x55a43d15c000, 0x7b8, 4096))
			resps = append(resps,
				rcPkt(serverV4, ib.RCReadResponseFirst, qpn, p, false, 1024).aeth(ib.SynACK, i+1),
				rcPkt(serverV4, ib.RCReadResponseMiddle, qpn, p+1, false, 1024),
				rcPkt(serverV4, ib.RCReadResponseMiddle, qpn, p+2, false, 1024),
				rcPkt(serverV4, ib.RCReadResponseLast, qpn, p+3, false, 1024).aeth(ib.SynACK, i+1))
		}
		expect(t, fs, reqs)
		expect(t, fs, resps)
	},
	"rc_read_lat_32B": func(t *testing.T, fs []wire.Frame) {
		const qpn, psn = 0x17, 0xae140c
		var w []exp
		for i := range uint32(5) {
			w = append(w,
				rcPkt(clientV4, ib.RCReadRequest, qpn, psn+i, true, 0).reth(0x55e24e889000, 0x8a9, 32),
				rcPkt(serverV4, ib.RCReadResponseOnly, qpn, psn+i, false, 32).aeth(ib.SynACK, i+1))
		}
		expect(t, fs, w)
	},
	"rc_atomic_cmp_swap": func(t *testing.T, fs []wire.Frame) {
		checkAtomics(t, fs, 0x18, 0x2de41c, ib.RCCompareSwap, 0, 0)
	},
	"rc_atomic_fetch_add": func(t *testing.T, fs []wire.Frame) {
		checkAtomics(t, fs, 0x19, 0xd48460, ib.RCFetchAdd, 1, 0)
	},
	"uc_send_2048B": func(t *testing.T, fs []wire.Frame) {
		expect(t, fs, messages(clientV4, 0x1b, 0xc9f465, 5, []ib.Opcode{ib.UCSendFirst, ib.UCSendLast}, []int{1024, 1024}, false, nil))
		if len(fs) != 10 {
			t.Errorf("%d frames, want 10 (no ACKs)", len(fs))
		}
	},
	"uc_write_2048B": func(t *testing.T, fs []wire.Frame) {
		reth := func(i int, e exp) exp { return e.reth(0x55dc07ef8000+uint64(i*2048%4096), 0xdc9, 2048) }
		expect(t, fs, messages(clientV4, 0x1c, 0x0898c3, 5, []ib.Opcode{ib.UCWriteFirst, ib.UCWriteLast}, []int{1024, 1024}, false, reth))
		if len(fs) != 10 {
			t.Errorf("%d frames, want 10 (no ACKs)", len(fs))
		}
	},
	"ud_send_64B": func(t *testing.T, fs []wire.Frame) {
		// perftest UD sends have AckReq clear; Q_Key 0x11111111.
		deth := func(_ int, e exp) exp { return e.deth(0x11111111, 0x1d) }
		expect(t, fs, messages(clientV4, 0x1d, 0xe8d238, 5, []ib.Opcode{ib.UDSendOnly}, []int{64}, false, deth))
	},
	"rc_vectors_ipv4": func(t *testing.T, fs []wire.Frame) {
		expectInOrder(t, fs, vectorsSequence(clientV4, serverV4, 0x1e, 0xf29, 0x55c98545a000))
	},
	"rc_vectors_ipv6": func(t *testing.T, fs []wire.Frame) {
		expectInOrder(t, fs, vectorsSequence(clientV6, serverV6, 0x1f, 0x10ab, 0x55b2cd8bd000))
	},
	"rc_naks_rnr_access": func(t *testing.T, fs []wire.Frame) {
		// SEND Only PSN 0x100 RNR-NAKed 4 times (timer 27 = 122.88 ms,
		// MSN 0), ACKed the 5th time; then a WRITE with rkey 0xffee94 gets
		// NAK remote access error.
		const qpn = 0x20
		send := rcPkt(clientV4, ib.RCSendOnly, qpn, 0x100, true, 32).payload(rxeVectorsPayload(1, 0, 32))
		rnr := rcPkt(serverV4, ib.RCAck, qpn, 0x100, false, 0).aeth(ib.SynRNR(27), 0)
		var w []exp
		for range 4 {
			w = append(w, send, rnr)
		}
		w = append(w, send, ack(serverV4, qpn, 0x100, 1),
			// The WRITE's data is op 1's buffer again (0x10, 0x11, ...).
			rcPkt(clientV4, ib.RCWriteOnly, qpn, 0x101, true, 32).reth(0x55e774b3e000+0x8000, 0x00ffee94, 32).payload(rxeVectorsPayload(1, 0, 32)),
			rcPkt(serverV4, ib.RCAck, qpn, 0x101, false, 0).aeth(ib.SynNAKRemoteAccess, 1))
		expectInOrder(t, fs, w)
		if d := ib.RNRTimeout(ib.SynRNR(27).Value()); d.Microseconds() != 122880 {
			t.Errorf("RNR timer 27 = %v, want 122.88ms", d)
		}
	},
	"rdmacm_rping_64B": checkRping,
	"ud_gsi_mad_host_probe": func(t *testing.T, fs []wire.Frame) {
		mad := func(method byte) []byte {
			b := make([]byte, 256)
			b[0], b[1], b[2], b[3] = 1, 0x04, 1, method // base version, PerfMgt, class version, method
			binary.BigEndian.PutUint64(b[8:], 0x0123456789abcdef)
			binary.BigEndian.PutUint16(b[16:], 0x0001) // ClassPortInfo
			return b
		}
		req, resp := mad(0x01), mad(0x81)
		resp[5] = 0x0c // status: unsupported method/attribute
		gsi := wire.QPSourcePort(1)
		expectInOrder(t, fs, []exp{
			rcPkt(hostV4, ib.UDSendOnly, 1, 0, false, 256).deth(0x80010000, 0x42).payload(req),
			rcPkt(serverV4, ib.UDSendOnly, 0x42, 0, true, 256).deth(0x80010000, 1).payload(resp),
		})
		h, r := &fs[0].Encap, &fs[1].Encap
		if h.ID != 0 || !h.DF || h.Src.Port() != wire.UDPPort {
			t.Errorf("host frame: %+v: want ID 0, DF, source port 4791", *h)
		}
		// The host frame's UDP "checksum" is the pseudo-header partial sum
		// a checksum-offloading sender leaves for the NIC (virtio-net passed
		// it on as is): 0x15a0, where the real checksum is 0x7c4f.
		if got, partial, full := h.UDPChecksum, udpPseudoSum(fs[0]), udpChecksum(fs[0]); got != partial || got == full {
			t.Errorf("host frame UDP checksum %#04x: want the partial sum %#04x, not the checksum %#04x", got, partial, full)
		}
		if r.Src.Port() != gsi || gsi != 55410 {
			t.Errorf("rxe GSI source port %d, QPSourcePort(1) = %d, want 55410", r.Src.Port(), gsi)
		}
		if fs[0].Packet.ICRC != 0x3666db5c || fs[1].Packet.ICRC != 0xd4da139f {
			t.Errorf("ICRCs %#08x, %#08x: want the bytes 5cdb6636 and 9f13dad4 the host logged", fs[0].Packet.ICRC, fs[1].Packet.ICRC)
		}
	},
}

// checkAtomics checks a perftest ib_atomic_bw capture: 5 atomics from the
// client on consecutive PSNs and 5 atomic ACKs (MSN 1..5) from the server.
func checkAtomics(t *testing.T, fs []wire.Frame, qpn, psn uint32, op ib.Opcode, swapAdd, compare uint64) {
	t.Helper()
	var reqs, resps []exp
	for i := range uint32(5) {
		var a *wire.AtomicETH
		for j := range fs {
			if p := &fs[j].Packet; p.BTH.Opcode == op && p.BTH.PSN == psn+i {
				a = &p.AtomicETH
			}
		}
		if a == nil {
			t.Fatalf("no %v with PSN %#x", op, psn+i)
		}
		if a.VA%8 != 0 {
			t.Errorf("atomic VA %#x not 8-byte aligned", a.VA)
		}
		reqs = append(reqs, rcPkt(clientV4, op, qpn, psn+i, true, 0).atomic(a.VA, a.RKey, swapAdd, compare))
		resp := rcPkt(serverV4, ib.RCAtomicAck, qpn, psn+i, false, 0).aeth(ib.SynACK, i+1)
		for j := range fs {
			if p := &fs[j].Packet; p.BTH.Opcode == ib.RCAtomicAck && p.BTH.PSN == psn+i {
				resp = resp.orig(p.AtomicAck) // the target holds perftest's random data
			}
		}
		resps = append(resps, resp)
	}
	expect(t, fs, reqs)
	expect(t, fs, resps)
}

// checkRping checks the rdma_cm capture: CM MADs on QP1 around rping's RC
// traffic, whose UDP source port comes from the flow label in the CM REQ.
func checkRping(t *testing.T, fs []wire.Frame) {
	want := map[ib.Opcode]int{ib.UDSendOnly: 5, ib.RCSendOnly: 8, ib.RCReadRequest: 2, ib.RCReadResponseOnly: 2, ib.RCWriteOnly: 2, ib.RCAck: 10}
	if got := count(fs); len(got) != len(want) {
		t.Errorf("opcodes %v, want %v", got, want)
	} else {
		for op, n := range want {
			if got[op] != n {
				t.Errorf("%d × %v, want %d", got[op], op, n)
			}
		}
	}
	// CM: ConnectRequest, ConnectReply, ReadyToUse, DisconnectRequest,
	// DisconnectReply (attribute IDs 0x10, 0x13, 0x14, 0x15, 0x16).
	var attrs []uint16
	var flowLabel uint32
	psns := map[netip.Addr]uint32{}
	for i := range fs {
		p := &fs[i].Packet
		switch {
		case p.BTH.Opcode == ib.UDSendOnly:
			if p.BTH.DestQP != 1 || p.DETH != (wire.DETH{QKey: 0x80010000, SrcQP: 1}) || len(p.Payload) != 256 || p.Payload[1] != 0x07 || !p.BTH.AckReq {
				t.Errorf("frame %d: %v: want a 256-byte CM MAD (class 0x07) from QP1 to QP1, Q_Key 0x80010000, AckReq", i+1, p)
				continue
			}
			attr := binary.BigEndian.Uint16(p.Payload[16:])
			attrs = append(attrs, attr)
			if attr == 0x10 { // REQ: primary flow label at REQ byte 88, after the 24-byte MAD header
				flowLabel = binary.BigEndian.Uint32(p.Payload[24+88:]) >> 12
			}
		case p.BTH.DestQP != 0x21:
			t.Errorf("frame %d: RC QPN %#x, want 0x21", i+1, p.BTH.DestQP)
		case p.BTH.Opcode.Has(ib.MaskRequest):
			// Each side's requests use consecutive PSNs.
			from := fs[i].Encap.Src.Addr()
			if prev, ok := psns[from]; ok && p.BTH.PSN != ib.PSNAdd(prev, 1) {
				t.Errorf("frame %d: PSN %#x after %#x", i+1, p.BTH.PSN, prev)
			}
			psns[from] = p.BTH.PSN
		}
	}
	if want := []uint16{0x10, 0x13, 0x14, 0x15, 0x16}; !equalU16(attrs, want) {
		t.Errorf("CM attributes %#x, want %#x", attrs, want)
	}
	if flowLabel != 0x933ff {
		t.Errorf("CM REQ flow label %#x, want 0x933ff", flowLabel)
	}
	sport := wire.SourcePort(flowLabel)
	for i := range fs {
		if fs[i].Packet.BTH.Opcode.Transport() == ib.RC && fs[i].Encap.Src.Port() != sport {
			t.Errorf("frame %d: RC source port %d, want %d from the CM flow label", i+1, fs[i].Encap.Src.Port(), sport)
		}
	}
}

func equalU16(a, b []uint16) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
