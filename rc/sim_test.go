package rc

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// The deterministic simulation: two engines joined by a seeded network
// that loses, duplicates, reorders, delays, corrupts and partitions, under
// a random workload of every opcode in both directions. One seed drives
// everything; a failure prints it, and -rc.seed replays it.
var (
	flagSeed  = flag.Uint64("rc.seed", 0, "run only this simulation seed")
	flagSeeds = flag.Int("rc.seeds", 2000, "number of simulation seeds")
	flagLong  = flag.Bool("rc.long", false, "long mode: 50,000 seeds")
	flagTrace = flag.Bool("rc.trace", false, "print every packet delivered")
)

const (
	simBase   = 0x10000 // VA of each side's region
	simRKey   = 0x5eed
	regionLen = 1 << 18
	// Region layout (both sides): the peer writes and reads "target", we
	// send from "source" and READ/atomic results land in "sink"; receives
	// land in "recv".
	offSource = 0
	offTarget = 1 << 16
	offSink   = 2 << 16
	offRecv   = 3 << 16
	recvSlot  = 4096
)

type simReq struct {
	req  Request
	loff uint32 // local offset of the data (source or sink)
}

type simRecv struct {
	id   uint64
	off  uint32
	size uint32
}

type recvDone struct {
	id            uint64
	st            Status
	n, imm        uint32
	hasImm, write bool
}

// simHost is one side's memory, receive queue and completion log.
type simHost struct {
	t        *testing.T
	name     string
	mem      []byte
	reqs     map[uint64]simReq
	done     []uint64 // send completions, in order
	status   map[uint64]Status
	recvQ    []simRecv
	recvCur  int
	recvs    []recvDone
	fatal    error
	violated string
}

func newSimHost(t *testing.T, name string) *simHost {
	return &simHost{t: t, name: name, mem: make([]byte, regionLen), reqs: map[uint64]simReq{}, status: map[uint64]Status{}}
}

func (h *simHost) Payload(id uint64, off uint32, dst []byte) bool {
	r := h.reqs[id]
	copy(dst, h.mem[r.loff+off:])
	return true
}

func (h *simHost) ReadResponse(id uint64, off uint32, src []byte) bool {
	r := h.reqs[id]
	copy(h.mem[r.loff+off:], src)
	return true
}

func (h *simHost) AtomicResult(id uint64, orig uint64) bool {
	r := h.reqs[id]
	binary.LittleEndian.PutUint64(h.mem[r.loff:], orig)
	return true
}

func (h *simHost) SendComplete(id uint64, st Status, n uint32) {
	if _, dup := h.status[id]; dup {
		h.violated = fmt.Sprintf("%s: request %d completed twice", h.name, id)
	}
	h.status[id] = st
	h.done = append(h.done, id)
}

func (h *simHost) RecvBegin() bool { return h.recvCur < len(h.recvQ) }

func (h *simHost) RecvPlace(off uint32, src []byte) Status {
	r := h.recvQ[h.recvCur]
	if off+uint32(len(src)) > r.size {
		return LocLenErr
	}
	copy(h.mem[r.off+off:], src)
	return Success
}

func (h *simHost) RecvComplete(st Status, n uint32, imm uint32, hasImm, write bool) {
	h.recvs = append(h.recvs, recvDone{id: h.recvQ[h.recvCur].id, st: st, n: n, imm: imm, hasImm: hasImm, write: write})
	h.recvCur++
}

func (h *simHost) RemoteCheck(rkey uint32, va uint64, n uint32, need Access) Status {
	if rkey != simRKey || va < simBase+offTarget || va+uint64(n) > simBase+offTarget+1<<16 {
		return RemAccessErr
	}
	return Success
}

func (h *simHost) RemoteWrite(rkey uint32, va uint64, src []byte) bool {
	copy(h.mem[va-simBase:], src)
	return true
}

func (h *simHost) RemoteRead(rkey uint32, va uint64, dst []byte) bool {
	copy(dst, h.mem[va-simBase:])
	return true
}

func (h *simHost) RemoteAtomic(rkey uint32, va uint64, op Op, cmp, swap uint64) (uint64, bool) {
	p := h.mem[va-simBase:]
	old := binary.LittleEndian.Uint64(p)
	switch {
	case op == OpFetchAdd:
		binary.LittleEndian.PutUint64(p, old+cmp)
	case old == cmp:
		binary.LittleEndian.PutUint64(p, swap)
	}
	return old, true
}

func (h *simHost) Fatal(cause error) { h.fatal = cause }

// faults are a run's network misbehaviour, drawn from its seed.
type faults struct {
	loss, dup, corrupt float64
	minDelay, jitter   int64 // ns
	partitions         [][2]int64
}

type inflight struct {
	at   int64
	seq  uint64
	to   int
	pkt  Packet
	data []byte
	sum  uint32
}

type simNet struct {
	rng   *rand.Rand
	f     faults
	q     []inflight
	seq   uint64
	stats struct{ sent, lost, dup, corrupted, partitioned uint64 }
}

func checksum(p *Packet) uint32 {
	var b [64]byte
	binary.LittleEndian.PutUint32(b[0:], uint32(p.Opcode)|p.PSN<<8)
	binary.LittleEndian.PutUint64(b[4:], p.VA)
	binary.LittleEndian.PutUint32(b[12:], p.RKey)
	binary.LittleEndian.PutUint32(b[16:], p.DMALen)
	binary.LittleEndian.PutUint32(b[20:], uint32(p.Syndrome)|p.MSN<<8)
	binary.LittleEndian.PutUint64(b[24:], p.SwapAdd)
	binary.LittleEndian.PutUint64(b[32:], p.Compare)
	binary.LittleEndian.PutUint64(b[40:], p.Orig)
	binary.LittleEndian.PutUint32(b[48:], p.Imm)
	if p.AckReq {
		b[52] = 1
	}
	return crc32.Update(crc32.ChecksumIEEE(b[:53]), crc32.IEEETable, p.Payload)
}

func (n *simNet) send(now int64, to int, p *Packet) {
	n.stats.sent++
	for _, w := range n.f.partitions {
		if now >= w[0] && now < w[1] {
			n.stats.partitioned++
			return
		}
	}
	if n.rng.Float64() < n.f.loss {
		n.stats.lost++
		return
	}
	copies := 1
	if n.rng.Float64() < n.f.dup {
		copies = 2
		n.stats.dup++
	}
	for range copies {
		c := inflight{at: now + n.f.minDelay + n.rng.Int64N(n.f.jitter+1), seq: n.seq, to: to, pkt: *p}
		n.seq++
		c.data = append([]byte(nil), p.Payload...)
		c.pkt.Payload = c.data
		c.sum = checksum(&c.pkt)
		if n.rng.Float64() < n.f.corrupt {
			n.stats.corrupted++
			if len(c.data) > 0 && n.rng.IntN(2) == 0 {
				c.data[n.rng.IntN(len(c.data))] ^= 1 << n.rng.IntN(8)
			} else {
				c.pkt.PSN ^= 1 << n.rng.IntN(24)
			}
		}
		n.q = append(n.q, c)
	}
}

// nextDelivery pops the earliest packet due at or before now.
func (n *simNet) next(now int64) (inflight, bool) {
	best := -1
	for i := range n.q {
		if n.q[i].at <= now && (best < 0 || n.q[i].at < n.q[best].at || (n.q[i].at == n.q[best].at && n.q[i].seq < n.q[best].seq)) {
			best = i
		}
	}
	if best < 0 {
		return inflight{}, false
	}
	p := n.q[best]
	n.q[best] = n.q[len(n.q)-1]
	n.q = n.q[:len(n.q)-1]
	return p, true
}

func (n *simNet) earliest() int64 {
	var t int64
	for i := range n.q {
		if t == 0 || n.q[i].at < t {
			t = n.q[i].at
		}
	}
	return t
}

// side is one QP: its engine, host and the workload it posts.
type side struct {
	h        *simHost
	c        *Conn
	peer     *side
	todo     []simReq // requests to post, in order
	posted   int
	recvTodo int
	model    []byte // the oracle of the peer's target region after our requests
	expect   map[uint64]uint64
	sendImm  []recvDone // expected receive completions at the peer
}

type simConfig struct {
	seed     uint64
	nreq     int
	mtu      int
	window   int
	f        faults
	wantFail Status // 0: everything must succeed
	timeout  uint8
	retry    uint8
}

func makeWorkload(rng *rand.Rand, s *side, n, mtu int) {
	s.model = make([]byte, 1<<16)
	copy(s.model, s.peer.h.mem[offTarget:offTarget+1<<16])
	s.expect = map[uint64]uint64{}
	for i := range s.h.mem[:offTarget] {
		s.h.mem[i] = byte(rng.Uint32())
	}
	var reads [][2]uint64
	for i := range n {
		id := uint64(i + 1)
		op := Op(rng.IntN(7))
		size := uint32(rng.IntN(3*mtu + 1))
		if rng.IntN(20) == 0 {
			size = uint32(rng.IntN(16 << 10))
		}
		toff := uint32(rng.IntN(1<<16 - int(size) + 1))
		soff := uint32(rng.IntN(1<<16 - int(size) + 1))
		r := simReq{req: Request{ID: id, Op: op, Len: size, RemoteAddr: simBase + offTarget + uint64(toff), RKey: simRKey, Imm: rng.Uint32()}}
		switch op {
		case OpSend, OpSendImm:
			size = min(size, recvSlot)
			r.req.Len = size
			r.loff = offSource + soff
			s.sendImm = append(s.sendImm, recvDone{n: size, imm: r.req.Imm, hasImm: op == OpSendImm})
		case OpWrite, OpWriteImm:
			r.loff = offSource + soff
			copy(s.model[toff:], s.h.mem[r.loff:r.loff+size])
			if op == OpWriteImm {
				s.sendImm = append(s.sendImm, recvDone{n: size, imm: r.req.Imm, hasImm: true, write: true})
			}
		case OpRead:
			r.loff = offSink + soff
		case OpCmpSwap, OpFetchAdd:
			slot := uint32(rng.IntN(16)) * 8
			r.req.Len = 8
			r.req.RemoteAddr = simBase + offTarget + uint64(slot)
			r.loff = offSink + uint32(i%4096)*8
			old := binary.LittleEndian.Uint64(s.model[slot:])
			r.req.CompareAdd = uint64(rng.IntN(3))
			if op == OpCmpSwap && rng.IntN(2) == 0 {
				r.req.CompareAdd = old
			}
			r.req.Swap = rng.Uint64()
			if op == OpFetchAdd {
				binary.LittleEndian.PutUint64(s.model[slot:], old+r.req.CompareAdd)
			} else if old == r.req.CompareAdd {
				binary.LittleEndian.PutUint64(s.model[slot:], r.req.Swap)
			}
			s.expect[id] = old
		}
		r.req.Fence = rng.IntN(30) == 0
		// A READ that is replayed after a loss reads memory again (IBA
		// 9.4.4): a later WRITE or atomic to the same bytes needs a fence,
		// or the READ may return the newer data. The workload fences such
		// requests, as a correct application must.
		if op == OpWrite || op == OpWriteImm || op.isAtomic() {
			lo, hi := r.req.RemoteAddr, r.req.RemoteAddr+uint64(max(r.req.Len, 8))
			for _, q := range reads {
				if q[0] < hi && lo < q[1] {
					r.req.Fence = true
				}
			}
		}
		if op == OpRead {
			reads = append(reads, [2]uint64{r.req.RemoteAddr, r.req.RemoteAddr + uint64(r.req.Len)})
		}
		s.todo = append(s.todo, r)
		if op == OpRead {
			// What the READ must return: the model at this point.
			snap := append([]byte(nil), s.model[toff:toff+size]...)
			readSnap[readKey{s.h.name, id}] = snap
		}
	}
	s.recvTodo = len(s.sendImm)
}

type readKey struct {
	side string
	id   uint64
}

var readSnap = map[readKey][]byte{}

func runSim(t *testing.T, sc simConfig) (err error) {
	rng := rand.New(rand.NewPCG(sc.seed, sc.seed^0x9e3779b97f4a7c15))
	clear(readSnap)
	ha, hb := newSimHost(t, "a"), newSimHost(t, "b")
	a, b := &side{h: ha}, &side{h: hb}
	a.peer, b.peer = b, a
	for i := range ha.mem[offTarget : offTarget+1<<16] {
		ha.mem[offTarget+i] = byte(i)
		hb.mem[offTarget+i] = byte(i * 3)
	}
	makeWorkload(rng, a, sc.nreq, sc.mtu)
	makeWorkload(rng, b, sc.nreq, sc.mtu)
	psnA, psnB := rng.Uint32()&psnMask, rng.Uint32()&psnMask
	mk := func(h *simHost, qpn, dqpn, spsn, rpsn uint32) *Conn {
		c, err := New(Config{QPN: qpn, DestQPN: dqpn, SendPSN: spsn, RecvPSN: rpsn, MTU: sc.mtu, Timeout: sc.timeout,
			RetryCnt: sc.retry, RNRRetry: 7, MinRNRTimer: 1, MaxRdAtomic: 4, MaxDestRdAtomic: 4,
			Access: RemoteWrite | RemoteRead | RemoteAtomic, Window: sc.window, MaxSendWR: 64, MinRTO: 200_000}, h)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a.c = mk(ha, 0x11, 0x12, psnA, psnB)
	b.c = mk(hb, 0x12, 0x11, psnB, psnA)
	net := &simNet{rng: rng, f: sc.f}
	sides := []*side{a, b}
	var now int64
	buf := make([]byte, 4096)
	const limit = int64(120e9) // simulated time; beyond it the run hung
	for steps := 0; ; steps++ {
		// Post work and receives, sometimes late so RNR happens.
		for _, s := range sides {
			for s.posted < len(s.todo) && rng.IntN(4) != 0 {
				r := s.todo[s.posted]
				s.h.reqs[r.req.ID] = r
				if err := s.c.Post(r.req); err != nil {
					break
				}
				s.posted++
			}
			// The receives the peer needs for our SENDs and WRITE_WITH_IMMs.
			if s.recvTodo > 0 && rng.IntN(3) == 0 {
				peer := s.peer.h
				i := len(peer.recvQ)
				peer.recvQ = append(peer.recvQ, simRecv{id: uint64(1000 + i), off: offRecv + uint32(i%16)*recvSlot, size: recvSlot})
				s.recvTodo--
			}
		}
		for i, s := range sides {
			var pkt Packet
			for s.c.Poll(now, &pkt, buf) {
				net.send(now, 1-i, &pkt)
			}
		}
		if p, ok := net.next(now); ok {
			if checksum(&p.pkt) != p.sum {
				continue // the ICRC catches the corruption; dropped
			}
			if *flagTrace {
				t.Logf("%9d -> %s op %#02x psn %#06x ackreq %v syn %#x va %#x len %d plen %d", now, sides[p.to].h.name, p.pkt.Opcode, p.pkt.PSN, p.pkt.AckReq, p.pkt.Syndrome, p.pkt.VA, p.pkt.DMALen, len(p.pkt.Payload))
			}
			sides[p.to].c.Receive(now, &p.pkt)
			if c := sides[p.to].c; c.req.n > 0 && c.req.at(0).started && psnDiff(c.req.at(0).firstPSN, c.req.una) > 0 && !c.dead {
				return fmt.Errorf("invariant: %s una %#x behind head psn %#x after packet op %#x psn %#x: %s", sides[p.to].h.name, c.req.una, c.req.at(0).firstPSN, p.pkt.Opcode, p.pkt.PSN, c.debugState())
			}
			continue
		}
		for _, s := range sides {
			if s.h.violated != "" {
				return fmt.Errorf("%s", s.h.violated)
			}
		}
		doneAll := true
		for _, s := range sides {
			if s.h.fatal != nil {
				continue
			}
			if s.posted < len(s.todo) || !s.c.Idle() || len(s.h.done) < len(s.todo) {
				doneAll = false
			}
		}
		if doneAll || (a.h.fatal != nil && b.h.fatal != nil) || (sc.wantFail != 0 && (a.h.fatal != nil || b.h.fatal != nil)) {
			break
		}
		// Advance time to the next event.
		next := net.earliest()
		for _, s := range sides {
			if d := s.c.Deadline(); d != 0 && (next == 0 || d < next) {
				next = d
			}
		}
		if next == 0 || next <= now {
			next = now + 1000
		}
		now = next
		for _, s := range sides {
			before := s.c.st.Timeouts
			s.c.Tick(now)
			if *flagTrace && s.c.st.Timeouts != before {
				t.Logf("%9d timeout at %s: %s", now, s.h.name, s.c.debugState())
			}
		}
		if now > limit {
			return fmt.Errorf("hang: %v of simulated time; a %d/%d done, b %d/%d done, net %+v, a %+v, b %+v",
				now, len(a.h.done), len(a.todo), len(b.h.done), len(b.todo), net.stats, a.c.Stats(), b.c.Stats())
		}
	}
	if sc.wantFail != 0 {
		for _, s := range sides {
			if s.h.fatal != nil {
				last := s.h.done[len(s.h.done)-1]
				if st := s.h.status[last]; st != sc.wantFail {
					return fmt.Errorf("%s failed with %v (%v), want %v", s.h.name, st, s.h.fatal, sc.wantFail)
				}
				return nil
			}
		}
		return fmt.Errorf("no side failed; want %v", sc.wantFail)
	}
	for _, s := range sides {
		if s.h.fatal != nil {
			return fmt.Errorf("%s: fatal: %v (peer fatal: %v; net %+v)\n a: %s\n b: %s\n recvs: a got %d of %d posted (b expects %d), b got %d of %d (a expects %d)",
				s.h.name, s.h.fatal, s.peer.h.fatal, net.stats, a.c.debugState(), b.c.debugState(),
				len(a.h.recvs), len(a.h.recvQ), len(b.sendImm), len(b.h.recvs), len(b.h.recvQ), len(a.sendImm))
		}
		// Every request completed exactly once, in order, successfully.
		if len(s.h.done) != len(s.todo) {
			return fmt.Errorf("%s: %d completions for %d requests", s.h.name, len(s.h.done), len(s.todo))
		}
		for i, id := range s.h.done {
			if id != uint64(i+1) || s.h.status[id] != Success {
				return fmt.Errorf("%s: completion %d is request %d with %v", s.h.name, i, id, s.h.status[id])
			}
		}
		// The peer's target region equals the oracle.
		if got := s.peer.h.mem[offTarget : offTarget+1<<16]; !bytes.Equal(got, s.model) {
			i := 0
			for got[i] == s.model[i] {
				i++
			}
			return fmt.Errorf("%s's writes: peer target differs from the model at offset %d", s.h.name, i)
		}
		// READs returned the model's bytes at their point in the order,
		// and atomics the original values (linearizable).
		for _, r := range s.todo {
			switch r.req.Op {
			case OpRead:
				if got := s.h.mem[r.loff : r.loff+r.req.Len]; !bytes.Equal(got, readSnap[readKey{s.h.name, r.req.ID}]) {
					// A later READ may have overwritten the same sink; only
					// the last READ per sink byte is checkable. Check
					// non-overlapped reads only.
					if !overlappedLater(s, r) {
						return fmt.Errorf("%s: READ %d returned wrong bytes", s.h.name, r.req.ID)
					}
				}
			case OpCmpSwap, OpFetchAdd:
				if got := binary.LittleEndian.Uint64(s.h.mem[r.loff:]); got != s.expect[r.req.ID] && !overlappedLater(s, r) {
					return fmt.Errorf("%s: %v %d returned %d, want %d", s.h.name, r.req.Op, r.req.ID, got, s.expect[r.req.ID])
				}
			}
		}
		// Receives at the peer: in order, the right lengths and immediates.
		peer := s.peer.h
		if len(peer.recvs) != len(s.sendImm) {
			return fmt.Errorf("%s: peer got %d receive completions, want %d", s.h.name, len(peer.recvs), len(s.sendImm))
		}
		for i, want := range s.sendImm {
			got := peer.recvs[i]
			if got.st != Success || got.n != want.n || got.hasImm != want.hasImm || (want.hasImm && got.imm != want.imm) || got.write != want.write || got.id != uint64(1000+i) {
				return fmt.Errorf("%s: receive %d at peer: %+v, want %+v", s.h.name, i, got, want)
			}
		}
	}
	return nil
}

// overlappedLater reports whether a later READ or atomic wrote the same
// sink bytes as r (so r's result is no longer in memory to check).
func overlappedLater(s *side, r simReq) bool {
	end := r.loff + max(r.req.Len, 8)
	for _, q := range s.todo {
		if q.req.ID <= r.req.ID || (q.req.Op != OpRead && !q.req.Op.isAtomic()) {
			continue
		}
		qend := q.loff + max(q.req.Len, 8)
		if q.loff < end && r.loff < qend {
			return true
		}
	}
	return false
}

func drawFaults(rng *rand.Rand) faults {
	f := faults{minDelay: 2_000 + rng.Int64N(50_000), jitter: rng.Int64N(200_000)}
	switch rng.IntN(4) {
	case 0: // clean
	case 1:
		f.loss, f.dup = 0.01, 0.01
	default:
		f.loss, f.dup, f.corrupt = rng.Float64()*0.05, rng.Float64()*0.05, rng.Float64()*0.02
	}
	// Partitions that heal within the retry budget (7 timeouts of at least
	// MinRTO, doubling: over 25 ms); TestSimulationPartition covers longer.
	if rng.IntN(4) == 0 {
		start := rng.Int64N(5e6)
		f.partitions = append(f.partitions, [2]int64{start, start + rng.Int64N(5e6)})
	}
	return f
}

func TestSimulation(t *testing.T) {
	seeds := *flagSeeds
	if *flagLong {
		seeds = 50000
	}
	if testing.Short() {
		seeds = 200
	}
	if raceEnabled && !*flagLong {
		seeds /= 4
	}
	run := func(seed uint64) {
		rng := rand.New(rand.NewPCG(seed, 1))
		sc := simConfig{seed: seed, nreq: 20 + rng.IntN(60), mtu: 256 << rng.IntN(5), window: 4 + rng.IntN(64),
			f: drawFaults(rng), timeout: 14, retry: 7}
		if err := runSim(t, sc); err != nil {
			t.Fatalf("seed %d (replay: go test ./rc -run TestSimulation -rc.seed=%d): mtu %d window %d faults %+v: %v",
				seed, seed, sc.mtu, sc.window, sc.f, err)
		}
	}
	if *flagSeed != 0 {
		run(*flagSeed)
		return
	}
	for s := range seeds {
		run(uint64(s + 1))
	}
}

// TestSimulationPartition: a partition longer than the retry budget ends in
// RETRY_EXC_ERR, never a hang.
func TestSimulationPartition(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		sc := simConfig{seed: seed, nreq: 30, mtu: 1024, window: 32, timeout: 8, retry: 3,
			f: faults{minDelay: 5_000, jitter: 10_000, partitions: [][2]int64{{100_000, 1 << 62}}}}
		sc.wantFail = RetryExcErr
		if err := runSim(t, sc); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

func (c *Conn) debugState() string {
	r := &c.req
	s := fmt.Sprintf("req: una %#x psn %#x sentEnd %#x next %d off %d n %d retrying %v retryPSN %#x retryLeft %d rto %d;",
		r.una, r.psn, r.sentEnd, r.next, r.off, r.n, r.retrying, r.retryPSN, r.retryLeft, r.rto)
	for i := 0; i < min(r.n, 4); i++ {
		w := r.at(i)
		s += fmt.Sprintf(" [%d %v first %#x npkts %d len %d recvd %d done %v started %v]", w.ID, w.Op, w.firstPSN, w.npkts, w.Len, w.recvd, w.done, w.started)
	}
	s += fmt.Sprintf("; resp: epsn %#x inMsg %v nakSent %v outN %d res:", c.resp.epsn, c.resp.inMsg, c.resp.nakSent, c.resp.outN)
	for _, x := range c.resp.res {
		s += fmt.Sprintf(" {%v %#x-%#x va %#x len %d}", x.read, x.first, x.last, x.va, x.len)
	}
	return s
}
