package rc_test

import (
	"testing"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/rc"
)

// TestPollAck: what a QP about to be destroyed still sends. A WRITE's ACK
// and an atomic's ACK (with the original value) leave through PollAck, in
// order; a READ response queued behind them does not start, and PollAck
// stops there.
func TestPollAck(t *testing.T) {
	c, _, cfg := stateEngine(t)
	var pkt rc.Packet
	if c.PollAck(&pkt) {
		t.Fatalf("an idle engine sent %+v", pkt)
	}
	psn := cfg.RecvPSN
	c.Receive(0, &rc.Packet{Opcode: ib.RCWriteOnly, PSN: psn, AckReq: true, VA: scRegion, RKey: scRKey, DMALen: 8, Payload: make([]byte, 8)})
	c.Receive(0, &rc.Packet{Opcode: ib.RCFetchAdd, PSN: psn + 1, AckReq: true, VA: scRegion + 8, RKey: scRKey, SwapAdd: 5})
	c.Receive(0, &rc.Packet{Opcode: ib.RCReadRequest, PSN: psn + 2, AckReq: true, VA: scRegion, RKey: scRKey, DMALen: 64})
	if c.Dead() {
		t.Fatal("the engine stopped on valid requests")
	}
	want := []struct {
		op  ib.Opcode
		psn uint32
	}{{ib.RCAck, psn}, {ib.RCAtomicAck, psn + 1}}
	for i, w := range want {
		if !c.PollAck(&pkt) {
			t.Fatalf("acknowledgement %d: nothing sent", i)
		}
		if pkt.Opcode != w.op || pkt.PSN != w.psn || pkt.Syndrome != ib.SynACK || pkt.DestQPN != cfg.DestQPN {
			t.Errorf("acknowledgement %d: %v psn %#x syndrome %v dest %#x, want %v psn %#x ACK dest %#x",
				i, pkt.Opcode, pkt.PSN, pkt.Syndrome, pkt.DestQPN, w.op, w.psn, cfg.DestQPN)
		}
	}
	if c.PollAck(&pkt) {
		t.Errorf("PollAck started the READ response: %+v", pkt)
	}
	// The READ response is still owed to an engine that lives on.
	if !c.Poll(0, &pkt, make([]byte, cfg.MTU)) || pkt.Opcode != ib.RCReadResponseOnly || pkt.PSN != psn+2 {
		t.Errorf("after PollAck, Poll sent %v psn %#x, want the READ response at %#x", pkt.Opcode, pkt.PSN, psn+2)
	}
}
