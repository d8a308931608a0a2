package rc_test

// Tests of Conn.Export and Conn.Import (state.go): a daemon upgrade hands
// a QP's engine, at a quiet point of its requester, to a new engine in
// another process, and the peer must notice nothing but the packets lost
// in between.
//
//   - TestStateSimulation: the seeded two-engine simulation (rctest.Run)
//     with a's engine replaced at random quiet points, every datagram in
//     flight to or from it dropped; the run's model checks hold as in
//     TestSimulation.
//   - TestStateHandoverMidMessage, TestStateHandoverReplay: scripted
//     handovers in the middle of a multi-packet WRITE or SEND from b, with
//     an atomic's acknowledgement lost or pending, with a READ response
//     partly sent.
//   - TestStateExportRefuses, TestStateImportRefuses: what Export and
//     Import turn down, and that a refused Import changes nothing.
//   - TestStateRoundTrip: Export, Import, Export gives the same State.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/rc"
	"github.com/ibex-rdma/ibex/rc/rctest"
)

// handOver is what a new daemon does with a QP it takes over: an engine
// made with the same Config (New), started (StartSend with the QP's
// attributes), given the state exported by the old one. It checks that
// the new engine exports the state it was given.
func handOver(old *rc.Conn, cfg rc.Config, h rc.Host) (*rc.Conn, rc.State, error) {
	st, err := old.Export()
	if err != nil {
		return nil, st, err
	}
	c, err := rc.New(cfg, h)
	if err != nil {
		return nil, st, err
	}
	if err := c.StartSend(cfg.SendPSN, cfg.Timeout, cfg.RetryCnt, cfg.RNRRetry, cfg.MaxRdAtomic); err != nil {
		return nil, st, err
	}
	if err := c.Import(st); err != nil {
		return nil, st, err
	}
	again, err := c.Export()
	if err != nil {
		return nil, st, fmt.Errorf("export after import: %w", err)
	}
	if !reflect.DeepEqual(st, again) {
		return nil, st, fmt.Errorf("export after import differs:\n exported %+v\n imported %+v", st, again)
	}
	return c, st, nil
}

// handoverCoverage counts what the handovers of the simulations carried
// over, to show that the seeds exercise every part of the state.
type handoverCoverage struct {
	handovers      int
	inWrite        int // a multi-packet WRITE from b half received
	inSend         int // a multi-packet SEND from b half received
	responses      int // responses not yet sent
	atomicRes      int // atomic resources carried over
	atomicReplays  int // duplicate atomics from b reaching a new engine, executed by an old one
	readReplays    int // duplicate READ requests from b reaching a new engine, executed by an old one
	backToBack     int // a handover to an engine that had received nothing
	droppedInFight uint64
}

func (c *handoverCoverage) String() string {
	return fmt.Sprintf("%d handovers: %d in a WRITE, %d in a SEND, %d with responses pending, "+
		"%d atomic resources carried; %d atomic and %d READ duplicates reached a new engine; %d back to back; %d datagrams dropped",
		c.handovers, c.inWrite, c.inSend, c.responses, c.atomicRes, c.atomicReplays, c.readReplays, c.backToBack, c.droppedInFight)
}

// hook returns the rctest.Config.Handover of one run.
func (c *handoverCoverage) hook() func(q *rctest.QP, cfg rc.Config) (*rc.Conn, error) {
	traced := false
	var atomics, reads map[uint32]bool // PSNs of the resources the new engine imported
	var lastRecv uint64 = 1<<64 - 1
	return func(q *rctest.QP, cfg rc.Config) (*rc.Conn, error) {
		if err := rc.Invariants(q.Conn); err != nil {
			return nil, fmt.Errorf("old engine: %w", err)
		}
		if q.Conn.Stats().PktsRecv == lastRecv {
			c.backToBack++
		}
		c2, st, err := handOver(q.Conn, cfg, q.Host)
		if err != nil {
			return nil, err
		}
		lastRecv = st.Stats.PktsRecv
		c.handovers++
		if st.InMsg && st.MsgWrite {
			c.inWrite++
		}
		if st.InMsg && !st.MsgWrite {
			c.inSend++
		}
		if len(st.Out) > 0 {
			c.responses++
		}
		atomics, reads = map[uint32]bool{}, map[uint32]bool{}
		for _, r := range st.Resources {
			switch {
			case r.Used && r.Read:
				for p := r.First; ; p = ib.PSNAdd(p, 1) {
					reads[p] = true
					if p == r.Last {
						break
					}
				}
			case r.Used:
				c.atomicRes++
				atomics[r.First] = true
			}
		}
		if !traced {
			traced = true
			prev := q.Trace
			q.Trace = func(now int64, p *rc.Packet) {
				switch p.Opcode {
				case ib.RCCompareSwap, ib.RCFetchAdd:
					if atomics[p.PSN] {
						c.atomicReplays++
					}
				case ib.RCReadRequest:
					if reads[p.PSN] {
						c.readReplays++
					}
				}
				if prev != nil {
					prev(now, p)
				}
			}
		}
		if err := rc.Invariants(c2); err != nil {
			return nil, fmt.Errorf("new engine: %w", err)
		}
		return c2, nil
	}
}

// TestStateSimulation: TestSimulation's random runs, with a's engine
// handed over to a new one one to four times, at quiet points of its
// requester drawn from the seed, every datagram in flight to or from a
// dropped each time. Every request of both sides completes exactly once,
// successfully and in order, memory equals the model, READs and atomics
// return the model's values (atomics executed once, a duplicate answered
// from the resource the new engine imported), receives complete in order.
func TestStateSimulation(t *testing.T) {
	seeds := 300
	if *flagLong {
		seeds = 20000
	}
	if testing.Short() {
		seeds = 100
	}
	if rc.RaceEnabled && !*flagLong {
		seeds /= 20 // as TestSimulation: one goroutine, nothing for the detector to find
	}
	var cov handoverCoverage
	run := func(seed uint64) {
		cfg := rctest.RandomConfig(seed)
		cfg.Handovers = 1 + int(seed%4)
		cfg.Handover = cov.hook()
		cfg.Check, cfg.Describe = check, rc.DebugState
		if *flagTrace {
			cfg.Trace = func(line string) { t.Log(line) }
		}
		res, err := rctest.Run(cfg)
		if err == nil && res.Handovers != cfg.Handovers {
			err = fmt.Errorf("%d handovers, want %d", res.Handovers, cfg.Handovers)
		}
		if err != nil {
			t.Fatalf("%v, %d handovers (replay: go test ./rc -run 'TestStateSimulation$' -rc.seed=%d): %v", cfg, cfg.Handovers, seed, err)
		}
		cov.droppedInFight += res.Net.Dropped // DropInFlight's: the network holds nothing
	}
	if *flagSeed != 0 {
		run(*flagSeed)
		t.Log(&cov)
		return
	}
	for s := range seeds {
		run(uint64(s + 1))
	}
	t.Logf("seeds 1 to %d: %v", seeds, &cov)
	if seeds >= 200 && (cov.inWrite == 0 || cov.inSend == 0 || cov.responses == 0 || cov.atomicRes == 0 ||
		cov.atomicReplays == 0 || cov.readReplays == 0 || cov.droppedInFight == 0) {
		t.Errorf("the seeds do not exercise every part of the handover: %v", &cov)
	}
}

// stateScenario is a scenario (scenario_test.go) driven from Go, with the
// engines' Configs kept for handovers.
type stateScenario struct {
	*scenario
	cfg [2]rc.Config
}

// newStateScenario connects a and b over a network that holds every
// datagram, as the scenarios' connect does, with path MTU 256 and the
// window given (0: rc's default).
func newStateScenario(t *testing.T, window int) *stateScenario {
	t.Helper()
	s := &stateScenario{scenario: &scenario{t: t}}
	s.net = rctest.NewNetwork(1, rctest.Faults{Hold: true})
	s.net.Tap(s.tap)
	psn := [2]uint32{0xfffffd, 0xfffffe} // a's wrap in warmUp, b's in its first message
	for i := range 2 {
		h := rctest.NewHost(sideName(i), scBase, scMemSize)
		for k := range scRecv - scLocal {
			h.Mem[k] = byte(k*7 + i*101)
		}
		for k := scRegion - scBase; k < scMemSize; k++ {
			h.Mem[k] = byte(k*13 + i*29 + 1)
		}
		h.Register(rctest.Region{RKey: scRKey, Addr: scRegion, Len: scBase + scMemSize - scRegion,
			Access: ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessRemoteAtomic})
		s.cfg[i] = rc.Config{QPN: 0x11 + uint32(i), DestQPN: 0x12 - uint32(i), SendPSN: psn[i], RecvPSN: psn[1-i],
			MTU: 256, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 1, MaxRdAtomic: 4, MaxDestRdAtomic: 4,
			Access: ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessRemoteAtomic,
			Window: window, MinRTO: time.Millisecond.Nanoseconds()}
		q, err := rctest.NewQP(s.net, scAddr[i], scAddr[1-i], s.cfg[i], h)
		if err != nil {
			t.Fatal(err)
		}
		s.q[i] = q
	}
	return s
}

// do runs scenario commands.
func (s *stateScenario) do(cmds ...string) {
	s.t.Helper()
	for _, c := range cmds {
		if err := s.run(c); err != nil {
			s.t.Fatalf("%s: %v\n%s", c, err, s.out.String())
		}
	}
}

// receive hands the held datagrams ids to side i's engine, without
// letting any engine send (scenario.deliver settles after delivering).
func (s *stateScenario) receive(i int, ids ...uint64) {
	s.t.Helper()
	for _, id := range ids {
		if !s.net.Deliver(id) {
			s.t.Fatalf("#%d is not held", id)
		}
	}
	if _, err := s.q[i].Deliver(len(ids)); err != nil {
		s.t.Fatal(err)
	}
	s.printf("%s <- %v (raw)", sideName(i), ids)
}

// flush has side i's engine send what it has (scenario.settle lets both
// engines send and checks them).
func (s *stateScenario) flush(i int) {
	s.t.Helper()
	if _, err := s.q[i].Flush(); err != nil {
		s.t.Fatal(err)
	}
}

// held returns the IDs of the datagrams held from side i.
func (s *stateScenario) held(from int) []uint64 {
	var ids []uint64
	for _, d := range s.net.Held() {
		if d.From == scAddr[from] {
			ids = append(ids, d.ID)
		}
	}
	return ids
}

// handover replaces a's engine with a new one (handOver) and drops every
// datagram held to or from a. It returns the state carried over.
func (s *stateScenario) handover() rc.State {
	s.t.Helper()
	q := s.q[0]
	if err := check(q.Conn); err != nil {
		s.t.Fatalf("before the handover: %v", err)
	}
	c, st, err := handOver(q.Conn, s.cfg[0], q.Host)
	if err != nil {
		s.t.Fatalf("handover: %v\n%s", err, s.out.String())
	}
	q.Conn = c
	n := s.net.DropInFlight(scAddr[0])
	s.printf("a handed over (%d datagrams dropped): %+v", n, st)
	return st
}

// recover lets the engines exchange, with time passing, until done says
// so; it fails the test if that takes more than a second.
func (s *stateScenario) recover(done func() bool) {
	s.t.Helper()
	for range 200 {
		s.do("stabilize")
		if done() {
			return
		}
		s.do("tick 5ms")
	}
	s.t.Fatalf("not done after a second\n%s\n%s\n%s", rc.DebugState(s.q[0].Conn), rc.DebugState(s.q[1].Conn), s.out.String())
}

// wantSends checks side i's send completions: the IDs given, in order,
// each successful.
func (s *stateScenario) wantSends(i int, ids ...uint64) {
	s.t.Helper()
	got := s.q[i].Host.Sends
	ok := len(got) == len(ids)
	for k := 0; ok && k < len(ids); k++ {
		ok = got[k].ID == ids[k] && got[k].Status == ib.WCSuccess
	}
	if !ok {
		s.t.Fatalf("%s: send completions %+v, want %v successful\n%s", sideName(i), got, ids, s.out.String())
	}
}

func (s *stateScenario) word(i int, addr uint64) uint64 {
	return binary.LittleEndian.Uint64(s.q[i].Host.Bytes(addr, 8))
}

// warmUp has a post a WRITE and a READ to b and complete them, so that
// the requester a hands over has moved on from its initial PSN (across
// the 24-bit wrap) and measured the round trip.
func (s *stateScenario) warmUp() {
	s.t.Helper()
	s.do("post a write id=100 len=600 addr=0x18800 local=0x10000",
		"post a read id=101 len=300 addr=0x18800 local=0x12000",
		"stabilize")
	s.wantSends(0, 100, 101)
	if !bytes.Equal(s.q[0].Host.Bytes(0x12000, 300), s.q[0].Host.Bytes(0x10000, 300)) {
		s.t.Fatal("warm-up READ returned the wrong bytes")
	}
}

// TestStateHandoverMidMessage: a is handed over while b's multi-packet
// WRITE or SEND (1000 bytes: four packets of MTU 256) is half received,
// after 1, 2 or 3 of its packets; the rest, and whatever a had sent
// (ACKs), are lost; with rc's default window (no ACK before the last
// packet) or a window of 8 (an ACK every few packets), sent before the
// handover or still queued in the state. b's message completes once and
// successfully, the bytes land where they must, a's receive completes
// once with the right length and immediate, and the new engine carries
// on (its MSN follows the old one's).
func TestStateHandoverMidMessage(t *testing.T) {
	for _, op := range []string{"write", "write_imm", "send", "send_imm"} {
		for k := 1; k <= 3; k++ {
			for _, window := range []int{0, 8} {
				for _, flushed := range []bool{false, true} {
					name := fmt.Sprintf("%s/after%d/window%d/flushed=%v", op, k, window, flushed)
					t.Run(name, func(t *testing.T) { midMessage(t, op, k, window, flushed) })
				}
			}
		}
	}
}

func midMessage(t *testing.T, op string, k, window int, flushed bool) {
	const (
		n      = 1000
		local  = 0x10400
		remote = 0x18040
		imm    = 0xabcdef
	)
	s := newStateScenario(t, window)
	s.warmUp()
	s.do("recv a id=7 len=4096",
		fmt.Sprintf("post b %s id=1 len=%d addr=%#x local=%#x imm=%#x", op, n, remote, local, imm))
	ids := s.held(1)
	if len(ids) != 4 {
		t.Fatalf("b sent %d packets, want 4\n%s", len(ids), s.out.String())
	}
	s.receive(0, ids[:k]...)
	if flushed {
		s.flush(0)
	}
	write := strings.HasPrefix(op, "write")
	st := s.handover()
	if !st.InMsg || st.MsgWrite != write || st.Off != uint32(k*256) {
		t.Fatalf("exported state: in message %v (write %v), offset %d; want a %s in progress at %d", st.InMsg, st.MsgWrite, st.Off, op, k*256)
	}
	if len(s.net.Held()) != 0 {
		t.Fatalf("%d datagrams held after the handover", len(s.net.Held()))
	}
	s.recover(func() bool { return len(s.q[1].Host.Sends) > 0 })
	s.wantSends(1, 1)
	s.wantSends(0, 100, 101)
	want := s.q[1].Host.Bytes(local, n)
	got := s.q[0].Host.Bytes(remote, n)
	if !write {
		got = s.q[0].Host.Bytes(scRecv, n)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("a's memory differs from b's message\n%s", s.out.String())
	}
	recvs := s.q[0].Host.Recvs
	if op == "write" {
		if len(recvs) != 0 {
			t.Fatalf("a WRITE without immediate took receives: %+v", recvs)
		}
	} else {
		hasImm := strings.HasSuffix(op, "_imm")
		if len(recvs) != 1 || recvs[0].ID != 7 || recvs[0].Status != ib.WCSuccess || recvs[0].Len != n ||
			recvs[0].HasImm != hasImm || (hasImm && recvs[0].Imm != imm) || recvs[0].Write != write {
			t.Fatalf("a's receive completions %+v, want receive 7 of %d bytes (imm %v)", recvs, n, hasImm)
		}
	}
	end, err := s.q[0].Conn.Export()
	if err != nil {
		t.Fatal(err)
	}
	if end.InMsg || end.MSN != ib.PSNAdd(st.MSN, 1) || end.RecvPSN != ib.PSNAdd(st.RecvPSN, 4-k) {
		t.Fatalf("after the message: in message %v, msn %#x, epsn %#x; want none, %#x, %#x",
			end.InMsg, end.MSN, end.RecvPSN, ib.PSNAdd(st.MSN, 1), ib.PSNAdd(st.RecvPSN, 4-k))
	}
	// The ACK the state carried (window 8: the third packet asks for
	// one), sent by the new engine, spares b retransmitting what it
	// covers; without it, b goes back to the start of the message.
	acked := len(st.Out) > 0 && st.Out[len(st.Out)-1].Kind == rc.ResponseAck && st.Out[len(st.Out)-1].PSN == ib.PSNAdd(st.RecvPSN, -1)
	if d := s.q[0].Conn.Stats().Duplicates - st.Stats.Duplicates; (d == 0) != acked {
		t.Errorf("the new engine received %d duplicates; the state carried the ACK of all received: %v", d, acked)
	}
	// Both directions still work after the handover.
	s.do("post a write id=102 len=700 addr=0x19000 local=0x10800",
		"post b fetch_add id=2 addr=0x18008 local=0x11000 add=3",
		"stabilize")
	s.wantSends(0, 100, 101, 102)
	s.wantSends(1, 1, 2)
	if !bytes.Equal(s.q[1].Host.Bytes(0x19000, 700), s.q[0].Host.Bytes(0x10800, 700)) {
		t.Fatal("a's WRITE after the handover: wrong bytes at b")
	}
	s.do("expect a running", "expect b running")
}

// TestStateHandoverReplay: READs and atomics b sent a before the handover
// are answered by the new engine from the responder resources it
// imported, never executed again: the atomic's acknowledgement lost in
// flight or still queued in the state, a READ's responses lost in flight
// or partly sent (the state holds a READ response at an offset).
func TestStateHandoverReplay(t *testing.T) {
	const (
		target = 0x18010 // in a's region
		result = 0x11000 // in b's local memory
	)
	tests := []struct {
		name string
		post string
		// what a does after receiving b's request, before the handover
		lose   func(s *stateScenario)
		atomic bool // b's request is an atomic (else a READ)
	}{
		{"fetch_add/ack lost", fmt.Sprintf("post b fetch_add id=1 addr=%#x local=%#x add=5", target, result),
			func(s *stateScenario) { s.flush(0) }, true},
		{"fetch_add/ack queued", fmt.Sprintf("post b fetch_add id=1 addr=%#x local=%#x add=5", target, result),
			func(s *stateScenario) {}, true},
		{"cmp_swap/ack lost", fmt.Sprintf("post b cmp_swap id=1 addr=%#x local=%#x compare=%#x swap=0x1234", target, result, wordAt(0, target)),
			func(s *stateScenario) { s.flush(0) }, true},
		{"read/responses lost", fmt.Sprintf("post b read id=1 len=1000 addr=%#x local=%#x", target, result),
			func(s *stateScenario) { s.flush(0) }, false},
		{"read/half delivered", fmt.Sprintf("post b read id=1 len=1000 addr=%#x local=%#x", target, result),
			func(s *stateScenario) {
				s.flush(0)
				s.receive(1, s.held(0)[:2]...)
			}, false},
		{"read/half sent", fmt.Sprintf("post b read id=1 len=1000 addr=%#x local=%#x", target, result),
			func(s *stateScenario) {
				// The old process sent two response packets, which are
				// lost, and stopped.
				var pkt rc.Packet
				buf := make([]byte, 256)
				for range 2 {
					if !s.q[0].Conn.Poll(s.net.Now(), &pkt, buf) || pkt.Opcode == ib.RCAck {
						s.t.Fatalf("no READ response to poll: %v", pkt.Opcode)
					}
				}
			}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStateScenario(t, 0)
			s.warmUp()
			orig := s.word(0, target)
			region := bytes.Clone(s.q[0].Host.Bytes(target, 1000))
			s.do(tc.post)
			s.receive(0, s.held(1)...)
			tc.lose(s)
			st := s.handover()
			if tc.name == "read/half sent" && (len(st.Out) == 0 || st.Out[0].Kind != rc.ResponseRead || st.Out[0].Off != 512) {
				t.Fatalf("exported responses %+v, want a READ response at offset 512", st.Out)
			}
			if tc.name == "fetch_add/ack queued" && (len(st.Out) != 1 || st.Out[0].Kind != rc.ResponseAtomicAck || st.Out[0].Orig != orig) {
				t.Fatalf("exported responses %+v, want the atomic acknowledgement of %#x", st.Out, orig)
			}
			s.recover(func() bool { return len(s.q[1].Host.Sends) > 0 })
			s.wantSends(1, 1)
			if tc.atomic {
				want := orig + 5
				if strings.HasPrefix(tc.name, "cmp_swap") {
					want = 0x1234
				}
				if got := s.word(1, result); got != orig {
					t.Errorf("b's atomic returned %#x, want %#x", got, orig)
				}
				if got := s.word(0, target); got != want {
					t.Errorf("a's word is %#x after the atomic, want %#x (executed once)", got, want)
				}
			} else if !bytes.Equal(s.q[1].Host.Bytes(result, 1000), region) {
				t.Errorf("b's READ returned the wrong bytes\n%s", s.out.String())
			}
			if !strings.HasSuffix(tc.name, "queued") && s.q[0].Conn.Stats().Duplicates == st.Stats.Duplicates {
				t.Errorf("no duplicate reached the new engine: nothing was replayed")
			}
			// The responder resources go on in the new engine, round
			// their ring of four: four more atomics, then a fifth whose
			// acknowledgement a second handover loses, answered by the
			// third engine.
			for i := range 4 {
				s.do(fmt.Sprintf("post b fetch_add id=%d addr=0x18100 local=%#x add=1", i+2, result+8+uint64(i)*8))
			}
			s.do("stabilize")
			s.wantSends(1, 1, 2, 3, 4, 5)
			s.do(fmt.Sprintf("post b fetch_add id=6 addr=0x18100 local=%#x add=1", result+40))
			s.receive(0, s.held(1)...)
			s.flush(0)
			st = s.handover()
			s.recover(func() bool { return len(s.q[1].Host.Sends) == 6 })
			s.wantSends(1, 1, 2, 3, 4, 5, 6)
			w := wordAt(0, 0x18100)
			if got := s.word(0, 0x18100); got != w+5 {
				t.Errorf("a's word after five fetch_adds of 1: %#x, want %#x", got, w+5)
			}
			if got := s.word(1, result+40); got != w+4 {
				t.Errorf("the fifth fetch_add returned %#x, want %#x", got, w+4)
			}
			if s.q[0].Conn.Stats().Duplicates == st.Stats.Duplicates {
				t.Errorf("the fifth fetch_add was not replayed by the third engine")
			}
			s.do("expect a running", "expect b running")
		})
	}
}

// wordAt is the initial 64-bit word at addr of side i's region in a
// stateScenario.
func wordAt(i int, addr uint64) uint64 {
	var b [8]byte
	for k := range b {
		off := int(addr-scBase) + k
		b[k] = byte(off*13 + i*29 + 1)
	}
	return binary.LittleEndian.Uint64(b[:])
}

// stateEngine returns a started engine with a recording host: the
// Config of side a in the scenarios.
func stateEngine(t *testing.T) (*rc.Conn, *rctest.Host, rc.Config) {
	t.Helper()
	h := rctest.NewHost("a", scBase, scMemSize)
	h.Register(rctest.Region{RKey: scRKey, Addr: scRegion, Len: scBase + scMemSize - scRegion,
		Access: ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessRemoteAtomic})
	cfg := rc.Config{QPN: 0x11, DestQPN: 0x12, SendPSN: 0x100, RecvPSN: 0x200, MTU: 1024, Timeout: 14, RetryCnt: 7, RNRRetry: 7,
		MaxRdAtomic: 4, MaxDestRdAtomic: 4, Access: ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessRemoteAtomic}
	c, err := rc.New(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.StartSend(cfg.SendPSN, cfg.Timeout, cfg.RetryCnt, cfg.RNRRetry, cfg.MaxRdAtomic); err != nil {
		t.Fatal(err)
	}
	return c, h, cfg
}

// TestStateExportRefuses: Export turns down an engine with requests
// queued (their data and completions are the old process's) and a
// stopped one; Import one with requests queued.
func TestStateExportRefuses(t *testing.T) {
	c, h, _ := stateEngine(t)
	st, err := c.Export()
	if err != nil {
		t.Fatalf("export of an idle engine: %v", err)
	}
	if err := h.Post(c, rc.Request{ID: 1, Op: ib.WRRDMAWrite, Len: 100, RemoteAddr: 0x1000, RKey: 1}, scLocal); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Export(); err == nil || !strings.Contains(err.Error(), "1 requests queued") {
		t.Errorf("export with a request queued: %v, want an error saying 1 requests queued", err)
	}
	var pkt rc.Packet
	if !c.Poll(0, &pkt, make([]byte, 1024)) {
		t.Fatal("nothing to send")
	}
	if _, err := c.Export(); err == nil || !strings.Contains(err.Error(), "requests queued") {
		t.Errorf("export with a request in flight: %v, want an error saying requests queued", err)
	}
	if err := c.Import(st); err == nil || !strings.Contains(err.Error(), "requests queued") {
		t.Errorf("import with a request in flight: %v, want an error saying requests queued", err)
	}
	// Acknowledged, it completes: Export works again.
	c.Receive(1000, &rc.Packet{Opcode: ib.RCAck, Syndrome: ib.SynACK, PSN: pkt.PSN, MSN: 1})
	if len(h.Sends) != 1 || h.Sends[0].Status != ib.WCSuccess {
		t.Fatalf("completions %+v", h.Sends)
	}
	if _, err := c.Export(); err != nil {
		t.Errorf("export once the request completed: %v", err)
	}

	// A stopped engine (a WRITE outside every region: a class C error).
	c2, _, cfg := stateEngine(t)
	c2.Receive(0, &rc.Packet{Opcode: ib.RCWriteOnly, PSN: cfg.RecvPSN, VA: 0x1, RKey: 0x999, DMALen: 8, Payload: make([]byte, 8)})
	if !c2.Dead() {
		t.Fatal("the engine did not stop")
	}
	if _, err := c2.Export(); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Errorf("export of a stopped engine: %v, want an error saying stopped", err)
	}
}

// TestStateImportRefuses: Import turns down a state out of range, with an
// error naming what is wrong, and leaves the engine as it was.
func TestStateImportRefuses(t *testing.T) {
	c, _, _ := stateEngine(t)
	base, err := c.Export()
	if err != nil {
		t.Fatal(err)
	}
	// An atomic at psn 0x1ff and a READ of three packets at 0x200 were
	// executed; the atomic's acknowledgement and the READ's responses
	// are still to be sent.
	base.Resources[0] = rc.ResourceState{Used: true, First: 0x1ff, Last: 0x1ff, Orig: 7}
	base.Resources[1] = rc.ResourceState{Used: true, Read: true, First: 0x200, Last: 0x202, VA: scRegion, RKey: scRKey, Len: 3000}
	base.ResNext = 2
	base.Out = []rc.ResponseState{{Kind: rc.ResponseAtomicAck, Syndrome: ib.SynACK, PSN: 0x1ff, MSN: 1, Orig: 7},
		{Kind: rc.ResponseRead, PSN: 0x200, MSN: 2, VA: scRegion, RKey: scRKey, Len: 3000}}
	base.RecvPSN, base.MSN = 0x203, 2
	if refused, err := checkImport(t, base); err != nil {
		t.Fatalf("the base state: refused %v: %v", refused, err)
	}
	const psn24 = 1 << 24
	tests := []struct {
		name string
		edit func(s *rc.State)
		want string // in the error
	}{
		{"send psn", func(s *rc.State) { s.SendPSN = psn24 }, "24 bits"},
		{"recv psn", func(s *rc.State) { s.RecvPSN = psn24 | 0x200 }, "24 bits"},
		{"msn", func(s *rc.State) { s.MSN = 0xffffffff }, "24 bits"},
		{"resource psn", func(s *rc.State) { s.Resources[0].First, s.Resources[0].Last = psn24|0x1ff, psn24|0x1ff }, "24 bits"},
		{"response psn", func(s *rc.State) { s.Out[0].PSN = psn24 | 0x1ff }, "24 bits"},
		{"response msn", func(s *rc.State) { s.Out[1].MSN = psn24 }, "24 bits"},
		{"too few resources", func(s *rc.State) { s.Resources = s.Resources[:3] }, "3 responder resources"},
		{"too many resources", func(s *rc.State) { s.Resources = append(s.Resources, rc.ResourceState{}) }, "5 responder resources"},
		{"no resources", func(s *rc.State) { s.Resources, s.ResNext = nil, 0 }, "0 responder resources"},
		{"next resource negative", func(s *rc.State) { s.ResNext = -1 }, "next -1"},
		{"next resource past the end", func(s *rc.State) { s.ResNext = 4 }, "next 4"},
		{"too many responses", func(s *rc.State) { s.Out = make([]rc.ResponseState, 100) }, "100 responses pending"},
		{"unknown response kind", func(s *rc.State) { s.Out[1].Kind = rc.ResponseRead + 1 }, "unknown kind"},
		{"response kind 255", func(s *rc.State) { s.Out[0].Kind = 255 }, "unknown kind"},
		{"READ response past its end", func(s *rc.State) { s.Out[1].Off = 4096 }, "offset"},
		{"window 0", func(s *rc.State) { s.Cwnd = 0 }, "window 0"},
		{"window negative", func(s *rc.State) { s.Cwnd = -5 }, "window -5"},
		{"ssthresh 0", func(s *rc.State) { s.Ssthresh = 0 }, "window"},
		{"rto negative", func(s *rc.State) { s.RTO = -1 }, "timer -1"},
		{"srtt negative", func(s *rc.State) { s.SRTT = -1 }, "out of range"},
		{"rttvar negative", func(s *rc.State) { s.RTTVar = -1 }, "out of range"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := cloneState(base)
			tc.edit(&s)
			refused, err := checkImport(t, s)
			if !refused {
				if err == nil {
					err = errors.New("nothing visible at once")
				}
				t.Fatalf("import accepted a state out of range (%s); what the engine did with it: %v", tc.name, err)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "qp 0x11") {
				t.Errorf("error %q does not say %q (and name the qp)", err, tc.want)
			}
		})
	}
}

// checkImport imports s into a new engine. When Import refuses, it
// checks that the engine is unchanged and returns the error. When it
// accepts, it has the engine send what the state holds, as a new daemon
// would, then a duplicate of the request of every resource in use, and
// reports in err what goes wrong: a packet no wire carries (PSN or MSN
// beyond 24 bits), responses that do not run dry or name a PSN not
// received, a duplicate not answered, a breach of the Host contract, the
// engine stopping.
func checkImport(t *testing.T, s rc.State) (refused bool, err error) {
	t.Helper()
	c, h, cfg := stateEngine(t)
	before, err := c.Export()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Import(s); err != nil {
		after, err2 := c.Export()
		if err2 != nil || !reflect.DeepEqual(before, after) {
			t.Errorf("a refused import changed the engine: %+v, was %+v (%v)", after, before, err2)
		}
		return true, err
	}
	// The old process's host checked the READs it executed.
	for _, o := range s.Out {
		if o.Kind == rc.ResponseRead {
			h.RemoteCheck(o.RKey, o.VA, o.Len, ib.AccessRemoteRead)
		}
	}
	for _, r := range s.Resources {
		if r.Used && r.Read {
			h.RemoteCheck(r.RKey, r.VA, r.Len, ib.AccessRemoteRead)
		}
	}
	var pkt rc.Packet
	buf := make([]byte, cfg.MTU)
	drain := func() (int, error) {
		k := 0
		for ; c.Poll(0, &pkt, buf); k++ {
			switch {
			case k == 100:
				return k, fmt.Errorf("the engine still polls packets after %d (the last: %v psn %#x)", k, pkt.Opcode, pkt.PSN)
			case pkt.PSN > ib.PSNMask || pkt.MSN > ib.PSNMask:
				return k, fmt.Errorf("the engine polls %v with psn %#x msn %#x: no wire carries it", pkt.Opcode, pkt.PSN, pkt.MSN)
			case pkt.Opcode.Has(ib.MaskResponse) && ib.PSNDiff(pkt.PSN, s.RecvPSN) >= 0:
				return k, fmt.Errorf("the engine polls %v with psn %#x, at or past the next expected %#x", pkt.Opcode, pkt.PSN, s.RecvPSN)
			}
		}
		return k, nil
	}
	if _, err := drain(); err != nil {
		return false, err
	}
	for _, r := range s.Resources {
		if !r.Used {
			continue
		}
		dup := rc.Packet{Opcode: ib.RCFetchAdd, PSN: r.First & ib.PSNMask, VA: scRegion, RKey: scRKey, SwapAdd: 1}
		if r.Read {
			dup = rc.Packet{Opcode: ib.RCReadRequest, PSN: r.First & ib.PSNMask, VA: r.VA, RKey: r.RKey, DMALen: r.Len}
		}
		c.Receive(0, &dup)
		if n, err := drain(); err != nil || n == 0 {
			return false, fmt.Errorf("a duplicate of the %v at psn %#x: %d packets in answer (%v)", dup.Opcode, dup.PSN, n, err)
		}
	}
	if err := h.Err(); err != nil {
		return false, err
	}
	if c.Dead() {
		return false, fmt.Errorf("the engine stopped: %v", h.Stop)
	}
	return false, nil
}

func cloneState(s rc.State) rc.State {
	c := s
	c.Resources = append([]rc.ResourceState(nil), s.Resources...)
	c.Out = append([]rc.ResponseState(nil), s.Out...)
	return c
}

// TestStateRoundTrip: a state imported is exported unchanged, for random
// states in range and for the states of engines in the middle of things
// (the handovers of the scripted tests and of the simulation check it
// too: handOver).
func TestStateRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	_, _, cfg := stateEngine(t)
	maxRTO := ib.AckTimeout(cfg.Timeout).Nanoseconds()
	psn := func() uint32 { return rng.Uint32() & ib.PSNMask }
	for i := range 2000 {
		s := rc.State{SendPSN: psn(), SRTT: rng.Int64N(1e9), RTTVar: rng.Int64N(1e9), RTO: 1 + rng.Int64N(maxRTO),
			Cwnd: 1 + rng.IntN(128), Ssthresh: 1 + rng.IntN(128), RecvPSN: psn(), MSN: psn(),
			NakSent: rng.IntN(2) == 0, InMsg: rng.IntN(2) == 0, MsgWrite: rng.IntN(2) == 0, RecvTaken: rng.IntN(2) == 0,
			Off: rng.Uint32N(1 << 20), Total: rng.Uint32N(1 << 20), VA: rng.Uint64(), RKey: rng.Uint32(),
			ResNext: rng.IntN(4),
			Stats:   rc.Stats{PktsSent: rng.Uint64(), Retransmits: rng.Uint64(), Duplicates: rng.Uint64(), Paced: rng.Uint64()}}
		for range 4 {
			first := psn()
			s.Resources = append(s.Resources, rc.ResourceState{Used: rng.IntN(2) == 0, Read: rng.IntN(2) == 0,
				First: first, Last: ib.PSNAdd(first, rng.IntN(64)), VA: rng.Uint64(), RKey: rng.Uint32(), Len: rng.Uint32N(1 << 16), Orig: rng.Uint64()})
		}
		for range rng.IntN(25) {
			r := rc.ResponseState{Kind: uint8(rng.IntN(rc.ResponseRead + 1)), Syndrome: ib.Syndrome(rng.IntN(0x80)), PSN: psn(), MSN: psn(), Orig: rng.Uint64()}
			if r.Kind == rc.ResponseRead {
				r.VA, r.RKey, r.Len = rng.Uint64(), rng.Uint32(), rng.Uint32N(1<<16)
				if mtu := uint32(cfg.MTU); r.Len > 0 {
					r.Off = rng.Uint32N((r.Len+mtu-1)/mtu) * mtu // a packet boundary inside the READ
				}
			}
			s.Out = append(s.Out, r)
		}
		c, _, _ := stateEngine(t)
		if err := c.Import(s); err != nil {
			t.Fatalf("state %d: import: %v\n%+v", i, err, s)
		}
		got, err := c.Export()
		if err != nil {
			t.Fatalf("state %d: export: %v", i, err)
		}
		if !reflect.DeepEqual(got, s) {
			t.Fatalf("state %d: exported\n%+v\nafter importing\n%+v", i, got, s)
		}
	}
	// An engine's state in the middle of b's WRITE with responses queued,
	// carried twice: the second new engine exports what the first did.
	s := newStateScenario(t, 8)
	s.warmUp()
	s.do("post b write id=1 len=1000 addr=0x18040 local=0x10400", "post b fetch_add id=2 addr=0x18008 local=0x11000 add=1")
	ids := s.held(1)
	s.receive(0, ids[:3]...)
	first := s.handover()
	second := s.handover()
	if !reflect.DeepEqual(first, second) || !first.InMsg || len(first.Out) == 0 {
		t.Fatalf("handed over twice:\n%+v\n%+v", first, second)
	}
}
