package rc_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"testing"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/rc"
	"github.com/ibex-rdma/ibex/rc/rctest"
)

// FuzzReceive feeds two connected engines, with requests of every opcode
// posted on both, arbitrary packets as they would arrive past the ICRC
// check (any opcode byte, PSN, syndrome, MSN, lengths, payload), between
// steps of their genuine exchange, then lets them run on until quiet. It
// checks that nothing panics, that the engines' invariants hold after
// every packet and every flush (rc.Invariants, and rc.Armed: never PSNs
// unacknowledged without a timer), that every Host call is one the
// contract allows (rctest.Host), and that Poll runs dry.
//
// The input is a sequence of records, one per injected packet, short
// (Go's minimizer is quadratic in the input length, so short inputs keep
// the fuzzer fuzzing rather than minimizing):
//
//	ctl     target (bit 0: a or b), genuine steps before it (bits 1-2),
//	        advance the clock first (bit 3), wide fields (bit 4), post a
//	        receive at the target first (bit 5)
//	opcode  any byte
//	flags   SE (bit 0), AckReq (bit 1)
//	fields  compact: PSN as a signed 2-byte offset from what the target
//	        expects, VA as a 2-byte offset into the registered memory, an
//	        rkey selector (0, 1: the two regions, else the byte itself),
//	        DMA length 2, syndrome 1, MSN 1, swap/add, compare, orig and
//	        imm 1 byte each; wide: PSN 3, VA 8, rkey 4, DMA length 4,
//	        syndrome 1, MSN 3, swap/add, compare, orig 8 each, imm 4
//	plen    2 bytes of payload length, then the payload's first byte
//	        (each next byte adds 7)
//
// Missing bytes read as zero. At most fuzzRecords records are read, and
// none that starts past the first fuzzBytes bytes: the rest of the input
// is ignored, so the minimizer cuts it at once.
func FuzzReceive(f *testing.F) {
	for _, seed := range fuzzSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var logf func(string, ...any)
		if *flagFuzzTrace {
			logf = t.Logf
		}
		if err := fuzzReceive(data, logf); err != nil {
			t.Fatal(err)
		}
	})
}

// fuzzPSN are the initial PSNs: a's requests (b's responder) start at
// psnA, b's at psnB; psnA is close to the 24-bit wrap.
const (
	fuzzPSNA = ib.PSNMask - 5
	fuzzPSNB = 0x100
	fuzzBase = 0x10000
	fuzzRKey = 0x77
	fuzzMem  = 1 << 14
	// fuzzRegion is the memory rkey fuzzRKey grants: fuzzMem/4 bytes;
	// rkey fuzzRKey+1 grants READ of 64 bytes at fuzzRegion+fuzzMem/4.
	fuzzRegion = fuzzBase + fuzzMem/2
)

// fuzzRecords and fuzzBytes bound what one input injects.
const (
	fuzzRecords = 12
	fuzzBytes   = 256
)

var fuzzAddr = [2]netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:4791"), netip.MustParseAddrPort("10.0.0.2:4791")}

type fuzzRig struct {
	net *rctest.Network
	q   [2]*rctest.QP
	psn [2]uint32 // each side's initial send PSN
}

// newFuzzRig connects a and b and posts their requests: small MTU, window
// and resources, so that messages span packets and the limits are reached.
func newFuzzRig() (*fuzzRig, error) {
	r := &fuzzRig{net: rctest.NewNetwork(1, rctest.Faults{}), psn: [2]uint32{fuzzPSNA, fuzzPSNB}}
	for i := range 2 {
		h := rctest.NewHost(string(rune('a'+i)), fuzzBase, fuzzMem)
		h.Register(rctest.Region{RKey: fuzzRKey, Addr: fuzzRegion, Len: fuzzMem / 4, Access: ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessRemoteAtomic})
		h.Register(rctest.Region{RKey: fuzzRKey + 1, Addr: fuzzRegion + fuzzMem/4, Len: 64, Access: ib.AccessRemoteRead})
		for k := range h.Mem {
			h.Mem[k] = byte(k*7 + i)
		}
		cfg := rc.Config{QPN: 0x11 + uint32(i), DestQPN: 0x12 - uint32(i), SendPSN: r.psn[i], RecvPSN: r.psn[1-i],
			MTU: 256, Timeout: 10, RetryCnt: 2, RNRRetry: 3, MinRNRTimer: 1, MaxRdAtomic: 2, MaxDestRdAtomic: 2,
			Access: ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessRemoteAtomic, Window: 8, MaxSendWR: 16, MinRTO: 100_000}
		q, err := rctest.NewQP(r.net, fuzzAddr[i], fuzzAddr[1-i], cfg, h)
		if err != nil {
			return nil, err
		}
		q.Check = check
		r.q[i] = q
	}
	remote := uint64(fuzzRegion)
	post := func(i int, local uint64, reqs ...rc.Request) error {
		for k, req := range reqs {
			req.ID = uint64(k + 1)
			if req.RKey == 0 {
				req.RKey = fuzzRKey
			}
			if err := r.q[i].Host.Post(r.q[i].Conn, req, local+uint64(k)*1024); err != nil {
				return err
			}
		}
		return nil
	}
	if err := post(0, fuzzBase,
		rc.Request{Op: ib.WRRDMAWrite, Len: 600, RemoteAddr: remote},
		rc.Request{Op: ib.WRSend, Len: 300},
		rc.Request{Op: ib.WRRDMARead, Len: 700, RemoteAddr: remote + 64},
		rc.Request{Op: ib.WRAtomicCmpAndSwp, Len: 8, RemoteAddr: remote + 8, CompareAdd: 0x0f0e0d0c0b0a0908, Swap: 5},
		rc.Request{Op: ib.WRAtomicFetchAndAdd, Len: 8, RemoteAddr: remote + 16, CompareAdd: 3},
		rc.Request{Op: ib.WRRDMAWriteWithImm, Len: 0, RemoteAddr: remote, Imm: 9},
		rc.Request{Op: ib.WRSendWithImm, Len: 513, Imm: 7, Fence: true},
		rc.Request{Op: ib.WRRDMARead, Len: 2048 + 100, RemoteAddr: remote},
	); err != nil {
		return nil, err
	}
	if err := post(1, fuzzBase,
		rc.Request{Op: ib.WRSend, Len: 40},
		rc.Request{Op: ib.WRRDMARead, Len: 300, RemoteAddr: remote + 100},
		rc.Request{Op: ib.WRRDMAWrite, Len: 256, RemoteAddr: remote + 512},
		rc.Request{Op: ib.WRRDMARead, Len: 16, RemoteAddr: fuzzRegion + fuzzMem/4, RKey: fuzzRKey + 1},
	); err != nil {
		return nil, err
	}
	// Two receives for b, so a's third message that needs one meets RNR
	// NAKs until the run posts more; a has room for b's SEND.
	r.q[1].Host.PostRecv(1, fuzzBase+8192, 1024)
	r.q[1].Host.PostRecv(2, fuzzBase+8192, 1024)
	r.q[0].Host.PostRecv(1, fuzzBase+8192, 64)
	return r, nil
}

// step runs the genuine exchange once: both flush, both deliver all that
// has arrived, both flush what that produced.
func (r *fuzzRig) step() error {
	for round := range 2 {
		for _, q := range r.q {
			if _, err := q.Flush(); err != nil {
				return err
			}
		}
		if round == 1 {
			break
		}
		for _, q := range r.q {
			if _, err := q.Deliver(64); err != nil {
				return err
			}
		}
	}
	return r.hostErr()
}

// settle steps until nothing is in flight (at most n steps).
func (r *fuzzRig) settle(n int) error {
	for range n {
		if err := r.step(); err != nil {
			return err
		}
		if _, ok := r.net.Next(); !ok {
			break
		}
	}
	return nil
}

func (r *fuzzRig) hostErr() error {
	return errors.Join(r.q[0].Host.Err(), r.q[1].Host.Err())
}

// advance moves the clock to the next timer or arrival (at least by 1 µs)
// and ticks both engines.
func (r *fuzzRig) advance() {
	now := r.net.Now()
	next, ok := r.net.Next()
	for _, q := range r.q {
		if d := q.Conn.Deadline(); d != 0 && (!ok || d < next) {
			next, ok = d, true
		}
	}
	r.net.Advance(max(next, now+1000))
	for _, q := range r.q {
		q.Tick()
	}
}

// expected is the base of the target's PSN space for op: its own send
// PSNs for a response, the peer's for a request.
func (r *fuzzRig) expected(target int, op ib.Opcode) uint32 {
	if op.Has(ib.MaskResponse) {
		return r.psn[target]
	}
	return r.psn[1-target]
}

type fuzzReader struct{ b []byte }

func (f *fuzzReader) bytes(n int) []byte {
	n = min(n, len(f.b))
	v := f.b[:n]
	f.b = f.b[n:]
	return v
}

func (f *fuzzReader) uint(n int) uint64 {
	var v uint64
	for _, c := range f.bytes(n) {
		v = v<<8 | uint64(c)
	}
	return v
}

var flagFuzzTrace = flag.Bool("rc.fuzztrace", false, "FuzzReceive: log every packet (replay a crasher with -run FuzzReceive/ID -v)")

// fuzzReceive runs one input; logf, if set, sees every packet.
func fuzzReceive(data []byte, logf func(string, ...any)) error {
	r, err := newFuzzRig()
	if err != nil {
		return err
	}
	if logf != nil {
		for _, q := range r.q {
			q.Trace = func(now int64, p *rc.Packet) {
				logf("%8d -> %s %v psn %#x syn %v len %d plen %d | %s", now, q.Host.Name, p.Opcode, p.PSN, p.Syndrome, p.DMALen, len(p.Payload), rc.DebugState(q.Conn))
			}
		}
	}
	in := &fuzzReader{data}
	var pkt rc.Packet
	var payload []byte
	for n := 0; len(in.b) > 0 && n < fuzzRecords && len(data)-len(in.b) < fuzzBytes; n++ {
		ctl := in.uint(1)
		target := int(ctl & 1)
		for range ctl >> 1 & 3 {
			if err := r.step(); err != nil {
				return fmt.Errorf("packet %d: genuine step: %w", n, err)
			}
		}
		if ctl&8 != 0 {
			r.advance()
		}
		if ctl&32 != 0 {
			r.q[target].Host.PostRecv(uint64(100+n), fuzzBase+8192, 1024)
		}
		pkt = rc.Packet{Opcode: ib.Opcode(in.uint(1)), DestQPN: 0x11 + uint32(target)}
		flags := in.uint(1)
		pkt.SE, pkt.AckReq = flags&1 != 0, flags&2 != 0
		if ctl&16 == 0 {
			// Compact: near the PSNs and memory the target expects.
			pkt.PSN = ib.PSNAdd(r.expected(target, pkt.Opcode), int(int16(in.uint(2))))
			pkt.VA = fuzzRegion + in.uint(2)
			switch k := uint32(in.uint(1)); k {
			case 0, 1:
				pkt.RKey = fuzzRKey + k
			default:
				pkt.RKey = k
			}
			pkt.DMALen = uint32(in.uint(2))
			pkt.Syndrome = ib.Syndrome(in.uint(1))
			pkt.MSN = uint32(in.uint(1))
			pkt.SwapAdd, pkt.Compare, pkt.Orig = in.uint(1), in.uint(1), in.uint(1)
			pkt.Imm = uint32(in.uint(1))
		} else {
			pkt.PSN = uint32(in.uint(3))
			pkt.VA = in.uint(8)
			pkt.RKey = uint32(in.uint(4))
			pkt.DMALen = uint32(in.uint(4))
			pkt.Syndrome = ib.Syndrome(in.uint(1))
			pkt.MSN = uint32(in.uint(3))
			pkt.SwapAdd, pkt.Compare, pkt.Orig = in.uint(8), in.uint(8), in.uint(8)
			pkt.Imm = uint32(in.uint(4))
		}
		plen, fill := int(in.uint(2)), byte(in.uint(1))
		payload = payload[:0]
		for k := range plen {
			payload = append(payload, fill+byte(7*k))
		}
		pkt.Payload = payload
		q := r.q[target]
		if logf != nil {
			logf("inject %d to %s: %+v", n, q.Host.Name, pkt)
		}
		q.Conn.Receive(r.net.Now(), &pkt)
		if err := check(q.Conn); err != nil {
			return fmt.Errorf("packet %d (%v psn %#x syn %#x to %s): %w\n%s", n, pkt.Opcode, pkt.PSN, uint8(pkt.Syndrome), q.Host.Name, err, rc.DebugState(q.Conn))
		}
		if err := r.hostErr(); err != nil {
			return fmt.Errorf("packet %d (%v psn %#x to %s): %w", n, pkt.Opcode, pkt.PSN, q.Host.Name, err)
		}
		if _, err := q.Flush(); err != nil {
			return fmt.Errorf("packet %d (%v psn %#x syn %#x to %s): %w\n%s", n, pkt.Opcode, pkt.PSN, uint8(pkt.Syndrome), q.Host.Name, err, rc.DebugState(q.Conn))
		}
	}
	// Run on until quiet: receives for whatever SENDs are coming, then the
	// genuine exchange with the clock moving to every timer.
	for i, q := range r.q {
		for k := range 4 {
			q.Host.PostRecv(uint64(10+k), fuzzBase+uint64(4096*(1+i)), 1024)
		}
	}
	for range 400 {
		if err := r.settle(16); err != nil {
			return fmt.Errorf("running on: %w\n a: %s\n b: %s", err, rc.DebugState(r.q[0].Conn), rc.DebugState(r.q[1].Conn))
		}
		if _, ok := r.net.Next(); !ok && r.q[0].Conn.Deadline() == 0 && r.q[1].Conn.Deadline() == 0 {
			return nil
		}
		r.advance()
	}
	return nil
}

// fuzzSeeds are inputs of real packet shapes: the packets the genuine
// exchange delivers (SEND, WRITE and READ of one and several packets,
// atomics, ACKs, READ responses, RNR NAKs), recorded in order in runs of
// six, so that the fuzzer starts from conversations the engines actually
// have; then single records of the shapes a network makes of them (a
// duplicate READ request, a stale ACK, a NAK of each kind, a stale RNR
// NAK, an atomic ACK for the wrong PSN, unknown opcodes) and one in wide
// form.
func fuzzSeeds() [][]byte {
	r, err := newFuzzRig()
	if err != nil {
		panic(err)
	}
	var conv [][]byte
	for i, q := range r.q {
		q.Trace = func(_ int64, p *rc.Packet) { conv = append(conv, r.record(i, 0, p)) }
	}
	for i := range 60 {
		if i == 2 {
			r.q[1].Host.PostRecv(3, fuzzBase+8192, 1024) // ends the RNR NAKs
		}
		if r.settle(16) != nil {
			break
		}
		r.advance()
	}
	var seeds [][]byte
	for i := 0; i < len(conv); i += 4 {
		seeds = append(seeds, bytes.Join(conv[i:min(i+6, len(conv))], nil))
	}
	a, b := uint32(fuzzPSNA), uint32(fuzzPSNB)
	for _, s := range []struct {
		target int
		steps  int
		p      rc.Packet
	}{
		{1, 1, rc.Packet{Opcode: ib.RCReadRequest, PSN: ib.PSNAdd(a, 5), VA: fuzzRegion + 64, RKey: fuzzRKey, DMALen: 700, AckReq: true}},
		{1, 3, rc.Packet{Opcode: ib.RCReadRequest, PSN: ib.PSNAdd(a, 5), VA: fuzzRegion + 64, RKey: fuzzRKey, DMALen: 256, AckReq: true}},
		{1, 3, rc.Packet{Opcode: ib.RCFetchAdd, PSN: ib.PSNAdd(a, 9), VA: fuzzRegion + 16, RKey: fuzzRKey, SwapAdd: 3, AckReq: true}},
		{1, 0, rc.Packet{Opcode: ib.RCWriteFirst, PSN: a, VA: fuzzRegion, RKey: fuzzRKey, DMALen: 600, Payload: make([]byte, 256)}},
		{1, 0, rc.Packet{Opcode: ib.RCWriteMiddle, PSN: ib.PSNAdd(a, 1), Payload: make([]byte, 256)}},
		{1, 0, rc.Packet{Opcode: ib.RCSendOnly, PSN: ib.PSNAdd(a, 3), Payload: make([]byte, 100)}},
		{0, 1, rc.Packet{Opcode: ib.RCAck, PSN: ib.PSNAdd(a, 2), Syndrome: ib.SynACK, MSN: 1}},
		{0, 1, rc.Packet{Opcode: ib.RCAck, PSN: ib.PSNAdd(a, 1), Syndrome: ib.SynNAKPSNSeq}},
		{0, 1, rc.Packet{Opcode: ib.RCAck, PSN: ib.PSNAdd(a, 3), Syndrome: ib.SynRNR(1)}},
		{0, 2, rc.Packet{Opcode: ib.RCAck, PSN: ib.PSNAdd(a, -1), Syndrome: ib.SynRNR(1)}},
		{0, 1, rc.Packet{Opcode: ib.RCAck, PSN: a, Syndrome: ib.SynNAKRemoteAccess}},
		{0, 1, rc.Packet{Opcode: ib.RCAck, PSN: a, Syndrome: ib.SynNAKInvalidRequest}},
		{0, 1, rc.Packet{Opcode: ib.RCAck, PSN: a, Syndrome: ib.SynNAKRemoteOp}},
		{0, 2, rc.Packet{Opcode: ib.RCAtomicAck, PSN: ib.PSNAdd(a, 8), Syndrome: ib.SynACK, Orig: 42}},
		{0, 2, rc.Packet{Opcode: ib.RCReadResponseFirst, PSN: ib.PSNAdd(a, 5), Syndrome: ib.SynACK, Payload: make([]byte, 256)}},
		{0, 2, rc.Packet{Opcode: ib.RCReadResponseOnly, PSN: ib.PSNAdd(b, 1), Syndrome: ib.SynACK, Payload: make([]byte, 44)}},
		{1, 2, rc.Packet{Opcode: ib.RCReadResponseLast, PSN: ib.PSNAdd(b, 1), Syndrome: ib.SynACK, Payload: make([]byte, 44)}},
		{1, 1, rc.Packet{Opcode: ib.RCCompareSwap, PSN: ib.PSNAdd(a, 8), VA: fuzzRegion + 3, RKey: fuzzRKey}},
		{1, 0, rc.Packet{Opcode: 0x15, PSN: a}},
		{0, 0, rc.Packet{Opcode: 0xff, PSN: a}},
	} {
		seeds = append(seeds, r.record(s.target, s.steps, &s.p))
	}
	seeds = append(seeds, wideRecord(1, 0, &rc.Packet{Opcode: ib.RCWriteOnly, PSN: a, VA: fuzzRegion + 8, RKey: fuzzRKey, DMALen: 8, Payload: make([]byte, 8)}))
	return seeds
}

// record encodes p as a compact input record for target, after steps
// genuine steps.
func (r *fuzzRig) record(target, steps int, p *rc.Packet) []byte {
	rkey := byte(p.RKey)
	if p.RKey == fuzzRKey || p.RKey == fuzzRKey+1 {
		rkey = byte(p.RKey - fuzzRKey)
	}
	b := []byte{byte(target) | byte(steps&3)<<1, byte(p.Opcode), flagsOf(p)}
	b = binary.BigEndian.AppendUint16(b, uint16(ib.PSNDiff(p.PSN, r.expected(target, p.Opcode))))
	b = binary.BigEndian.AppendUint16(b, uint16(p.VA-fuzzRegion))
	b = append(b, rkey)
	b = binary.BigEndian.AppendUint16(b, uint16(p.DMALen))
	b = append(b, byte(p.Syndrome), byte(p.MSN), byte(p.SwapAdd), byte(p.Compare), byte(p.Orig), byte(p.Imm))
	return appendPayload(b, p)
}

// wideRecord encodes p as a wide input record.
func wideRecord(target, steps int, p *rc.Packet) []byte {
	b := []byte{byte(target) | byte(steps&3)<<1 | 16, byte(p.Opcode), flagsOf(p), byte(p.PSN >> 16), byte(p.PSN >> 8), byte(p.PSN)}
	b = binary.BigEndian.AppendUint64(b, p.VA)
	b = binary.BigEndian.AppendUint32(b, p.RKey)
	b = binary.BigEndian.AppendUint32(b, p.DMALen)
	b = append(b, byte(p.Syndrome), byte(p.MSN>>16), byte(p.MSN>>8), byte(p.MSN))
	b = binary.BigEndian.AppendUint64(b, p.SwapAdd)
	b = binary.BigEndian.AppendUint64(b, p.Compare)
	b = binary.BigEndian.AppendUint64(b, p.Orig)
	b = binary.BigEndian.AppendUint32(b, p.Imm)
	return appendPayload(b, p)
}

func flagsOf(p *rc.Packet) byte {
	f := byte(0)
	if p.SE {
		f |= 1
	}
	if p.AckReq {
		f |= 2
	}
	return f
}

func appendPayload(b []byte, p *rc.Packet) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(p.Payload)))
	fill := byte(0)
	if len(p.Payload) > 0 {
		fill = p.Payload[0]
	}
	return append(b, fill)
}
