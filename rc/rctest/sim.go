package rctest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/rc"
)

// Config is one simulation: QPs a and b post random work requests of
// every opcode to each other over a Network with Faults, and Run checks
// the outcome. One seed draws the workload, the PSNs, the receive timing
// and the faults. Zero fields take the defaults noted.
type Config struct {
	Seed     uint64
	Requests int   // work requests each side posts; 0 = 50
	MTU      int   // path MTU; 0 = 1024
	Window   int   // the engines' window; 0 = rc's default
	Timeout  uint8 // the QP timeout attribute; 0 = 14 (67 ms)
	RetryCnt uint8 // retry_cnt; 0 = 7
	Faults   Faults
	// Pace has the two engines share an rc.Pacer (rc's defaults), as the
	// engines of one device do.
	Pace bool
	// WantFail, when not ib.WCSuccess, is the error the run must end in:
	// a side's last completion has this status (a partition longer than
	// the retry budget ends in ib.WCRetryExcErr).
	WantFail ib.WCStatus
	// Limit is the simulated time after which the run counts as hung;
	// 0 = 120 s.
	Limit int64

	// Check, if set, runs after every packet an engine receives and after
	// it has sent what it could (QP.Check): the engine's own invariants,
	// which only package rc can see. The run fails with its first error.
	Check func(*rc.Conn) error
	// Describe, if set, adds an engine's internal state to a failure.
	Describe func(*rc.Conn) string
	// Trace, if set, is given a line for every packet delivered and every
	// retransmit timeout.
	Trace func(line string)

	// Handover, if set, replaces a's engine Handovers times (0 = once) at
	// quiet points of its requester, as a daemon upgrade hands a QP to a
	// new process: at a point of a's workload drawn from the seed, Run
	// stops posting a's work until a has no request outstanding, then
	// calls Handover with a's QP (q.Conn is the engine to replace, q.Host
	// its host; Handover may set q.Trace, chaining what is there) and the
	// rc.Config the engine was made with, drops every datagram in flight
	// to or from a (the old process's socket is closed) and carries on
	// with the engine returned. The peer must notice nothing but the
	// loss: the run is checked as any other.
	Handover  func(q *QP, cfg rc.Config) (*rc.Conn, error)
	Handovers int
}

func (c Config) String() string {
	return fmt.Sprintf("seed %d: %d requests, mtu %d, window %d, timeout %d, retry_cnt %d, pace %v, faults: %v",
		c.Seed, c.Requests, c.MTU, c.Window, c.Timeout, c.RetryCnt, c.Pace, c.Faults)
}

func (c *Config) setDefaults() {
	if c.Requests == 0 {
		c.Requests = 50
	}
	if c.MTU == 0 {
		c.MTU = 1024
	}
	if c.Timeout == 0 {
		c.Timeout = 14
	}
	if c.RetryCnt == 0 {
		c.RetryCnt = 7
	}
	if c.Limit == 0 {
		c.Limit = 120e9
	}
}

// RandomConfig draws a simulation from seed: 20 to 79 requests a side,
// any path MTU, a window of 4 to 67 PSNs, and faults from none to a few
// percent of loss, duplication and corruption, delay with jitter, in one
// run of four a partition that heals within the retry budget, and in one
// of three a Bottleneck that drops and CE-marks, with a shared rc.Pacer.
func RandomConfig(seed uint64) Config {
	rng := rand.New(rand.NewPCG(seed, 1))
	c := Config{Seed: seed, Requests: 20 + rng.IntN(60), MTU: 256 << rng.IntN(5), Window: 4 + rng.IntN(64), Timeout: 14, RetryCnt: 7}
	c.Faults = Faults{MinDelay: 2_000 + rng.Int64N(50_000), Jitter: rng.Int64N(200_000)}
	switch rng.IntN(4) {
	case 0: // clean
	case 1:
		c.Faults.Loss, c.Faults.Dup = 0.01, 0.01
	default:
		c.Faults.Loss, c.Faults.Dup, c.Faults.Corrupt = rng.Float64()*0.05, rng.Float64()*0.05, rng.Float64()*0.02
	}
	// Seven timeouts of at least MinRTO (200 µs), doubling, last over 25
	// ms: a partition of at most 5 ms heals in time.
	if rng.IntN(4) == 0 {
		start := rng.Int64N(5e6)
		c.Faults.Partitions = []Window{{start, start + rng.Int64N(5e6)}}
	}
	// In one run of three, a bottleneck of 50 MB/s to 1 GB/s before each
	// side, a queue of 8 to 136 KiB that CE-marks above a quarter of it,
	// and a pacer for the retransmissions.
	if rng.IntN(3) == 0 {
		q := 8<<10 + rng.IntN(128<<10)
		c.Faults.Bottleneck = Bottleneck{Rate: 5e7 + rng.Int64N(95e7), Queue: q, MarkAbove: q / 4}
		c.Pace = true
	}
	return c
}

// Result is what a run did.
type Result struct {
	Time int64 // simulated ns at the end
	Net  NetStats
	A, B rc.Stats

	// Handovers is how many times a's engine was replaced (Config.Handover).
	Handovers int
}

// The memory of both sides in Run: the peer WRITEs, READs and runs atomics
// on "target" (the one registered region); a side sends from "source",
// its READ and atomic results land in "sink", and receives in "recv".
const (
	simBase   = 0x10000
	simRKey   = 0x5eed
	simSize   = 1 << 18
	offSource = 0
	offTarget = 1 << 16
	offSink   = 2 << 16
	offRecv   = 3 << 16
	targetLen = 1 << 16
	recvSlot  = 4096
	recvBase  = 1000 // receive IDs
)

// Addresses of the two sides in Run.
var simAddr = [2]netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:4791"), netip.MustParseAddrPort("10.0.0.2:4791")}

// simOps are the opcodes of the workload, in the order the seeds draw
// them.
var simOps = [...]ib.WROpcode{ib.WRSend, ib.WRSendWithImm, ib.WRRDMAWrite, ib.WRRDMAWriteWithImm,
	ib.WRRDMARead, ib.WRAtomicCmpAndSwp, ib.WRAtomicFetchAndAdd}

type work struct {
	req   rc.Request
	local uint64 // address of the local data: source, or sink for results
}

// side is one QP of a run and the work it posts.
type side struct {
	h        *Host
	q        *QP
	peer     *side
	todo     []work
	posted   int
	recvTodo int               // receives still to post at the peer
	model    []byte            // the peer's target after our requests
	results  map[uint64]uint64 // atomic ID: the original value it must return
	reads    map[uint64][]byte // READ ID: the bytes it must return
	wantRecv []RecvCompletion  // at the peer, in order
}

// Run runs one simulation and returns what it did, and an error saying
// what went wrong if the engines hung, broke the Host contract, failed
// where they should not have (or did not fail where cfg.WantFail says they
// must), or left memory, results or completions other than the model's.
func Run(cfg Config) (Result, error) {
	cfg.setDefaults()
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	net := NewNetwork(cfg.Seed, cfg.Faults)
	a := &side{h: NewHost("a", simBase, simSize)}
	b := &side{h: NewHost("b", simBase, simSize)}
	a.peer, b.peer = b, a
	sides := [2]*side{a, b}
	for i := range targetLen {
		a.h.Mem[offTarget+i] = byte(i)
		b.h.Mem[offTarget+i] = byte(i * 3)
	}
	for _, s := range sides {
		s.h.Register(Region{RKey: simRKey, Addr: simBase + offTarget, Len: targetLen,
			Access: ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessRemoteAtomic})
	}
	a.workload(rng, cfg.Requests, cfg.MTU)
	b.workload(rng, cfg.Requests, cfg.MTU)
	psn := [2]uint32{rng.Uint32() & ib.PSNMask, rng.Uint32() & ib.PSNMask}
	var res Result
	ho := newHandover(&cfg, len(a.todo))
	var rcCfg [2]rc.Config
	var pacer *rc.Pacer
	if cfg.Pace {
		pacer = rc.NewPacer(0, 0)
	}
	for i, s := range sides {
		c := rc.Config{QPN: 0x11 + uint32(i), DestQPN: 0x12 - uint32(i), SendPSN: psn[i], RecvPSN: psn[1-i],
			MTU: cfg.MTU, Timeout: cfg.Timeout, RetryCnt: cfg.RetryCnt, RNRRetry: 7, MinRNRTimer: 1,
			MaxRdAtomic: 4, MaxDestRdAtomic: 4, Access: ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessRemoteAtomic,
			Window: cfg.Window, MaxSendWR: 64, MinRTO: 200_000, Pacer: pacer}
		rcCfg[i] = c
		q, err := NewQP(net, simAddr[i], simAddr[1-i], c, s.h)
		if err != nil {
			return res, err
		}
		q.Check = cfg.Check
		if cfg.Trace != nil {
			name := s.h.Name
			q.Trace = func(now int64, p *rc.Packet) {
				cfg.Trace(fmt.Sprintf("%9d -> %s %v psn %#06x ackreq %v syn %#x va %#x len %d plen %d",
					now, name, p.Opcode, p.PSN, p.AckReq, uint8(p.Syndrome), p.VA, p.DMALen, len(p.Payload)))
			}
		}
		s.q = q
	}
	describe := func() string {
		st := fmt.Sprintf("net %+v", net.Stats())
		for _, s := range sides {
			st += fmt.Sprintf("\n %s: %d of %d posted, %d completed, %d receives completed, stop %v, stats %+v",
				s.h.Name, s.posted, len(s.todo), len(s.h.Sends), len(s.h.Recvs), s.h.Stop, s.q.Conn.Stats())
			if cfg.Describe != nil {
				st += "\n  " + cfg.Describe(s.q.Conn)
			}
		}
		return st
	}
	stopped := func(s *side) bool { return s.h.Stop != nil }
	for {
		if err := ho.step(net, a, simAddr[0], rcCfg[0]); err != nil {
			return res, fmt.Errorf("%w\n%s", err, describe())
		}
		// Post work and the receives the peer needs, sometimes late so
		// that RNR NAKs happen.
		for _, s := range sides {
			for s.posted < len(s.todo) && !(s == a && ho.holding(s.posted)) && rng.IntN(4) != 0 {
				w := s.todo[s.posted]
				if s.h.Post(s.q.Conn, w.req, w.local) != nil {
					break // queue full, or stopped
				}
				s.posted++
			}
			if s.recvTodo > 0 && rng.IntN(3) == 0 {
				i := s.peer.h.RecvsPosted() + len(s.peer.h.Recvs)
				s.peer.h.PostRecv(uint64(recvBase+i), simBase+offRecv+uint64(i%16)*recvSlot, recvSlot)
				s.recvTodo--
			}
		}
		for _, s := range sides {
			if _, err := s.q.Flush(); err != nil {
				return res, fmt.Errorf("invariant: %w\n%s", err, describe())
			}
		}
		delivered := 0
		first := rng.IntN(2)
		for k := range 2 {
			s := sides[first^k]
			batch := 1
			if rng.IntN(4) == 0 {
				batch += rng.IntN(8)
			}
			n, err := s.q.Deliver(batch)
			if err != nil {
				return res, fmt.Errorf("invariant: %w\n%s", err, describe())
			}
			delivered += n
		}
		for _, s := range sides {
			if err := s.h.Err(); err != nil {
				return res, fmt.Errorf("%w\n%s", err, describe())
			}
		}
		if delivered > 0 {
			continue
		}
		done := true
		for _, s := range sides {
			if !stopped(s) && (s.posted < len(s.todo) || !s.q.Conn.Idle() || len(s.h.Sends) < len(s.todo)) {
				done = false
			}
		}
		if ho.pending() && !stopped(a) {
			done = false
		}
		if done || (stopped(a) && stopped(b)) || (cfg.WantFail != ib.WCSuccess && (stopped(a) || stopped(b))) {
			break
		}
		// Move time on to the next event.
		now := net.Now()
		next, ok := net.Next()
		for _, s := range sides {
			if d := s.q.Conn.Deadline(); d != 0 && (!ok || d < next) {
				next, ok = d, true
			}
		}
		if next <= now {
			next = now + 1000
		}
		net.Advance(next)
		for _, s := range sides {
			before := s.q.Conn.Stats().Timeouts
			s.q.Tick()
			if cfg.Trace != nil && s.q.Conn.Stats().Timeouts != before {
				line := fmt.Sprintf("%9d timeout at %s", next, s.h.Name)
				if cfg.Describe != nil {
					line += ": " + cfg.Describe(s.q.Conn)
				}
				cfg.Trace(line)
			}
		}
		if next > cfg.Limit {
			return res, fmt.Errorf("hang: %dns of simulated time\n%s", next, describe())
		}
	}
	res = Result{Time: net.Now(), Net: net.Stats(), A: a.q.Conn.Stats(), B: b.q.Conn.Stats()}
	if ho != nil {
		res.Handovers = ho.done
	}
	if cfg.WantFail != ib.WCSuccess {
		for _, s := range sides {
			if !stopped(s) {
				continue
			}
			if n := len(s.h.Sends); n == 0 || s.h.Sends[n-1].Status != cfg.WantFail {
				return res, fmt.Errorf("%s stopped (%v), want a %v completion\n%s", s.h.Name, s.h.Stop, cfg.WantFail, describe())
			}
			return res, nil
		}
		return res, fmt.Errorf("no side failed; want %v\n%s", cfg.WantFail, describe())
	}
	for _, s := range sides {
		if err := s.verify(); err != nil {
			return res, fmt.Errorf("%w\n%s", err, describe())
		}
	}
	return res, nil
}

// workload draws n requests for s and computes, on the model of the
// peer's target, what each must do and return.
func (s *side) workload(rng *rand.Rand, n, mtu int) {
	s.model = bytes.Clone(s.peer.h.Mem[offTarget : offTarget+targetLen])
	s.results, s.reads = map[uint64]uint64{}, map[uint64][]byte{}
	for i := range s.h.Mem[:offTarget] {
		s.h.Mem[offSource+i] = byte(rng.Uint32())
	}
	var reads [][2]uint64
	for i := range n {
		id := uint64(i + 1)
		op := simOps[rng.IntN(len(simOps))]
		size := uint32(rng.IntN(3*mtu + 1))
		if rng.IntN(20) == 0 {
			size = uint32(rng.IntN(16 << 10))
		}
		toff := uint32(rng.IntN(targetLen - int(size) + 1))
		soff := uint32(rng.IntN(targetLen - int(size) + 1))
		w := work{req: rc.Request{ID: id, Op: op, Len: size, RemoteAddr: simBase + offTarget + uint64(toff), RKey: simRKey, Imm: rng.Uint32()}}
		switch op {
		case ib.WRSend, ib.WRSendWithImm:
			size = min(size, recvSlot)
			w.req.Len = size
			w.local = simBase + offSource + uint64(soff)
			s.wantRecv = append(s.wantRecv, RecvCompletion{Len: size, Imm: w.req.Imm, HasImm: op == ib.WRSendWithImm})
		case ib.WRRDMAWrite, ib.WRRDMAWriteWithImm:
			w.local = simBase + offSource + uint64(soff)
			copy(s.model[toff:], s.h.Bytes(w.local, int(size)))
			if op == ib.WRRDMAWriteWithImm {
				s.wantRecv = append(s.wantRecv, RecvCompletion{Len: size, Imm: w.req.Imm, HasImm: true, Write: true})
			}
		case ib.WRRDMARead:
			w.local = simBase + offSink + uint64(soff)
			s.reads[id] = bytes.Clone(s.model[toff : toff+size]) // the model at this point in the order
		case ib.WRAtomicCmpAndSwp, ib.WRAtomicFetchAndAdd:
			slot := uint32(rng.IntN(16)) * 8
			w.req.Len = 8
			w.req.RemoteAddr = simBase + offTarget + uint64(slot)
			w.local = simBase + offSink + uint64(i%4096)*8
			old := binary.LittleEndian.Uint64(s.model[slot:])
			w.req.CompareAdd = uint64(rng.IntN(3))
			if op == ib.WRAtomicCmpAndSwp && rng.IntN(2) == 0 {
				w.req.CompareAdd = old
			}
			w.req.Swap = rng.Uint64()
			if op == ib.WRAtomicFetchAndAdd {
				binary.LittleEndian.PutUint64(s.model[slot:], old+w.req.CompareAdd)
			} else if old == w.req.CompareAdd {
				binary.LittleEndian.PutUint64(s.model[slot:], w.req.Swap)
			}
			s.results[id] = old
		}
		w.req.Fence = rng.IntN(30) == 0
		// A READ that is replayed after a loss reads memory again (IBA
		// 9.4.4): a later WRITE or atomic to the same bytes needs a fence,
		// or the READ may return the newer data. The workload fences such
		// requests, as a correct application must.
		if op == ib.WRRDMAWrite || op == ib.WRRDMAWriteWithImm || op.IsAtomic() {
			lo, hi := w.req.RemoteAddr, w.req.RemoteAddr+uint64(max(w.req.Len, 8))
			for _, r := range reads {
				if r[0] < hi && lo < r[1] {
					w.req.Fence = true
				}
			}
		}
		if op == ib.WRRDMARead {
			reads = append(reads, [2]uint64{w.req.RemoteAddr, w.req.RemoteAddr + uint64(w.req.Len)})
		}
		s.todo = append(s.todo, w)
	}
	s.recvTodo = len(s.wantRecv)
}

// verify checks a successful run's outcome for the requests s posted.
func (s *side) verify() error {
	name := s.h.Name
	if s.h.Stop != nil {
		return fmt.Errorf("%s: stopped: %v (peer: %v)", name, s.h.Stop, s.peer.h.Stop)
	}
	// Every request completed exactly once, in order, successfully.
	if len(s.h.Sends) != len(s.todo) {
		return fmt.Errorf("%s: %d completions for %d requests", name, len(s.h.Sends), len(s.todo))
	}
	for i, c := range s.h.Sends {
		if c.ID != uint64(i+1) || c.Status != ib.WCSuccess {
			return fmt.Errorf("%s: completion %d is request %d with %v", name, i, c.ID, c.Status)
		}
	}
	// The peer's target equals the model.
	if got := s.peer.h.Mem[offTarget : offTarget+targetLen]; !bytes.Equal(got, s.model) {
		i := 0
		for got[i] == s.model[i] {
			i++
		}
		return fmt.Errorf("%s's writes: peer target differs from the model at offset %d", name, i)
	}
	// READs returned the model's bytes at their point in the order, and
	// atomics the original values: linearizable, each executed once.
	for _, w := range s.todo {
		switch {
		case w.req.Op == ib.WRRDMARead:
			if !bytes.Equal(s.h.Bytes(w.local, int(w.req.Len)), s.reads[w.req.ID]) && !s.overwritten(w) {
				return fmt.Errorf("%s: READ %d returned wrong bytes", name, w.req.ID)
			}
		case w.req.Op.IsAtomic():
			if got := binary.LittleEndian.Uint64(s.h.Bytes(w.local, 8)); got != s.results[w.req.ID] && !s.overwritten(w) {
				return fmt.Errorf("%s: %v %d returned %d, want %d", name, w.req.Op, w.req.ID, got, s.results[w.req.ID])
			}
		}
	}
	// Receives at the peer: in order, with the right lengths and immediates.
	got := s.peer.h.Recvs
	if len(got) != len(s.wantRecv) {
		return fmt.Errorf("%s: peer got %d receive completions, want %d", name, len(got), len(s.wantRecv))
	}
	for i, want := range s.wantRecv {
		want.ID = uint64(recvBase + i)
		if g := got[i]; g.Status != ib.WCSuccess || g.Len != want.Len || g.HasImm != want.HasImm ||
			(want.HasImm && g.Imm != want.Imm) || g.Write != want.Write || g.ID != want.ID {
			return fmt.Errorf("%s: receive %d at peer: %+v, want %+v", name, i, g, want)
		}
	}
	return nil
}

// overwritten reports whether a later READ or atomic wrote some of w's
// result bytes (so w's result is no longer there to check).
func (s *side) overwritten(w work) bool {
	end := w.local + uint64(max(w.req.Len, 8))
	for _, v := range s.todo {
		if v.req.ID <= w.req.ID || !v.req.Op.IsRdAtomic() {
			continue
		}
		if v.local < end && w.local < v.local+uint64(max(v.req.Len, 8)) {
			return true
		}
	}
	return false
}
