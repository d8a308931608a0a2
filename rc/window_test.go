package rc_test

import (
	"testing"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/rc"
)

// TestForgedAckOutsideWindow: ACKs, NAKs and responses whose PSN is
// outside the requester's outstanding window (older than the oldest
// unacknowledged PSN, or not yet sent) are what an attacker who guesses
// or sniffs a QPN forges. They are counted in Stats.OutOfWindow and
// change nothing: no completion, no error, the engine keeps running, and
// the genuine ACK then completes the request.
func TestForgedAckOutsideWindow(t *testing.T) {
	c, h, cfg := stateEngine(t)
	una := cfg.SendPSN // 0x100: nothing sent yet
	forge := func(what string, p rc.Packet) {
		t.Helper()
		before := c.Stats().OutOfWindow
		c.Receive(0, &p)
		if c.Dead() || len(h.Sends) != 0 {
			t.Fatalf("%s (psn %#x, oldest unacknowledged %#x): engine dead %v, completions %+v", what, p.PSN, una, c.Dead(), h.Sends)
		}
		if got := c.Stats().OutOfWindow; got != before+1 {
			t.Errorf("%s: OutOfWindow %d, want %d", what, got, before+1)
		}
	}
	// A request posted but not yet sent: a NAK one PSN older than the
	// oldest unacknowledged (the one place the range check lets a
	// duplicate ACK through) must not fail it.
	if err := h.Post(c, rc.Request{ID: 1, Op: ib.WRRDMAWrite, Len: 100, RemoteAddr: scRegion, RKey: scRKey}, scLocal); err != nil {
		t.Fatal(err)
	}
	forge("remote access NAK at una-1, request not sent", rc.Packet{Opcode: ib.RCAck, Syndrome: ib.SynNAKRemoteAccess, PSN: una - 1})
	forge("remote op NAK at una-1, request not sent", rc.Packet{Opcode: ib.RCAck, Syndrome: ib.SynNAKRemoteOp, PSN: una - 1})

	var pkt rc.Packet
	if !c.Poll(0, &pkt, make([]byte, 1024)) || pkt.PSN != una {
		t.Fatalf("first packet psn %#x, want %#x", pkt.PSN, una)
	}
	// Now PSN 0x100 is outstanding: the window is [0x100, 0x101).
	forge("remote access NAK at una-1", rc.Packet{Opcode: ib.RCAck, Syndrome: ib.SynNAKRemoteAccess, PSN: una - 1})
	forge("invalid request NAK at una-1", rc.Packet{Opcode: ib.RCAck, Syndrome: ib.SynNAKInvalidRequest, PSN: una - 1})
	forge("sequence NAK at una-1", rc.Packet{Opcode: ib.RCAck, Syndrome: ib.SynNAKPSNSeq, PSN: una - 1})
	forge("RNR NAK at una-1", rc.Packet{Opcode: ib.RCAck, Syndrome: ib.SynRNR(1), PSN: una - 1})
	forge("remote access NAK long ago", rc.Packet{Opcode: ib.RCAck, Syndrome: ib.SynNAKRemoteAccess, PSN: una - 0x1000})
	forge("remote access NAK at the next PSN", rc.Packet{Opcode: ib.RCAck, Syndrome: ib.SynNAKRemoteAccess, PSN: una + 1})
	forge("remote op NAK far ahead", rc.Packet{Opcode: ib.RCAck, Syndrome: ib.SynNAKRemoteOp, PSN: una + 0x7fffff})
	forge("ACK at the next PSN", rc.Packet{Opcode: ib.RCAck, Syndrome: ib.SynACK, PSN: una + 1})
	forge("ACK far ahead", rc.Packet{Opcode: ib.RCAck, Syndrome: ib.SynACK, PSN: una + 0x10000})
	forge("ACK long ago", rc.Packet{Opcode: ib.RCAck, Syndrome: ib.SynACK, PSN: una - 2})
	forge("atomic ACK ahead", rc.Packet{Opcode: ib.RCAtomicAck, Syndrome: ib.SynACK, PSN: una + 5})
	forge("READ response ahead", rc.Packet{Opcode: ib.RCReadResponseOnly, Syndrome: ib.SynACK, PSN: una + 1, Payload: make([]byte, 8)})

	// A duplicate ACK at una-1 is allowed through and acts on nothing.
	c.Receive(0, &rc.Packet{Opcode: ib.RCAck, Syndrome: ib.SynACK, PSN: una - 1})
	if c.Dead() || len(h.Sends) != 0 {
		t.Fatalf("duplicate ACK: engine dead %v, completions %+v", c.Dead(), h.Sends)
	}
	// The genuine ACK completes the WRITE.
	c.Receive(1000, &rc.Packet{Opcode: ib.RCAck, Syndrome: ib.SynACK, PSN: una, MSN: 1})
	if len(h.Sends) != 1 || h.Sends[0].Status != ib.WCSuccess {
		t.Fatalf("after the genuine ACK: completions %+v, want one SUCCESS", h.Sends)
	}
	if err := h.Err(); err != nil {
		t.Errorf("host contract: %v", err)
	}
	if err := rc.Invariants(c); err != nil {
		t.Errorf("invariants: %v", err)
	}
}
