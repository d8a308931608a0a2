package rc

import (
	"fmt"

	"github.com/ibex-rdma/ibex/ib"
)

// State is an engine's protocol state at a quiet point of its requester
// (no request queued): what another engine, in another process, needs to
// carry the connection on where this one stopped. ibexd hands it from a
// running daemon to its replacement during an upgrade; the peer sees at
// most packets lost in between, which go-back-N recovers.
//
// The requester's state is the next PSN and its round-trip estimate; the
// responder's is all of it: the expected PSN and MSN, the message in
// progress (a multi-packet SEND or WRITE half received), the READ and
// atomic resources a duplicate replays from, and the responses not yet
// sent.
type State struct {
	SendPSN         uint32
	SRTT, RTTVar    int64
	RTO             int64
	Cwnd, Ssthresh  int
	RecvPSN, MSN    uint32
	NakSent         bool
	InMsg, MsgWrite bool
	RecvTaken       bool
	Off, Total      uint32
	VA              uint64
	RKey            uint32
	Resources       []ResourceState
	ResNext         int
	Out             []ResponseState
	Stats           Stats
}

// ResourceState is one responder resource (a READ or atomic executed,
// kept for duplicates).
type ResourceState struct {
	Used, Read  bool
	First, Last uint32
	VA          uint64
	RKey, Len   uint32
	Orig        uint64
}

// ResponseState is one response waiting to be sent.
type ResponseState struct {
	Kind     uint8
	Syndrome ib.Syndrome
	PSN, MSN uint32
	Orig     uint64
	VA       uint64
	RKey     uint32
	Len, Off uint32
}

// Export returns the engine's state. It fails while requests are queued:
// their data and completions belong to the process that posted them, so
// the caller first lets them complete.
func (c *Conn) Export() (State, error) {
	r, p := &c.req, &c.resp
	if r.n != 0 {
		return State{}, fmt.Errorf("rc: qp %#x: export with %d requests queued", c.cfg.QPN, r.n)
	}
	if c.dead {
		return State{}, fmt.Errorf("rc: qp %#x: export of a stopped engine", c.cfg.QPN)
	}
	s := State{SendPSN: r.psn, SRTT: r.srtt, RTTVar: r.rttvar, RTO: r.rto, Cwnd: r.cwnd, Ssthresh: r.ssthresh,
		RecvPSN: p.epsn, MSN: p.msn, NakSent: p.nakSent, InMsg: p.inMsg, MsgWrite: p.msgWrite, RecvTaken: p.recvTaken,
		Off: p.off, Total: p.total, VA: p.va, RKey: p.rkey, ResNext: p.resNext, Stats: c.st}
	for _, x := range p.res {
		s.Resources = append(s.Resources, ResourceState{Used: x.used, Read: x.read, First: x.first, Last: x.last,
			VA: x.va, RKey: x.rkey, Len: x.len, Orig: x.orig})
	}
	for i := range p.outN {
		o := &p.out[(p.outHead+i)%len(p.out)]
		s.Out = append(s.Out, ResponseState{Kind: o.kind, Syndrome: o.syn, PSN: o.psn, MSN: o.msn, Orig: o.orig,
			VA: o.va, RKey: o.rkey, Len: o.len, Off: o.off})
	}
	return s, nil
}

// Import continues the connection from s, on an engine made with the same
// Config (New) and started (StartSend), with nothing posted yet. Values
// out of range are refused: s may come from another process.
func (c *Conn) Import(s State) error {
	r, p := &c.req, &c.resp
	switch {
	case r.n != 0:
		return fmt.Errorf("rc: qp %#x: import with %d requests queued", c.cfg.QPN, r.n)
	case s.SendPSN > ib.PSNMask || s.RecvPSN > ib.PSNMask || s.MSN > ib.PSNMask:
		return fmt.Errorf("rc: qp %#x: import: PSNs and MSN are 24 bits", c.cfg.QPN)
	case len(s.Resources) != len(p.res) || s.ResNext < 0 || s.ResNext >= len(p.res):
		return fmt.Errorf("rc: qp %#x: import: %d responder resources (next %d), this engine has %d", c.cfg.QPN, len(s.Resources), s.ResNext, len(p.res))
	case len(s.Out) > len(p.out):
		return fmt.Errorf("rc: qp %#x: import: %d responses pending, room for %d", c.cfg.QPN, len(s.Out), len(p.out))
	case s.Cwnd < 1 || s.Ssthresh < 1 || s.RTO < 0 || s.SRTT < 0 || s.RTTVar < 0:
		return fmt.Errorf("rc: qp %#x: import: window %d/%d or timer %d out of range", c.cfg.QPN, s.Cwnd, s.Ssthresh, s.RTO)
	}
	if err := validResources(s.Resources); err != nil {
		return fmt.Errorf("rc: qp %#x: import: %w", c.cfg.QPN, err)
	}
	if err := validResponses(s.Out, uint32(c.cfg.MTU)); err != nil {
		return fmt.Errorf("rc: qp %#x: import: %w", c.cfg.QPN, err)
	}
	r.psn, r.sentEnd, r.una = s.SendPSN, s.SendPSN, s.SendPSN
	r.srtt, r.rttvar = s.SRTT, s.RTTVar
	if s.RTO > 0 && (r.maxRTO == 0 || s.RTO <= r.maxRTO) {
		r.rto = s.RTO
	}
	r.cwnd, r.ssthresh = min(s.Cwnd, c.cfg.Window), min(s.Ssthresh, c.cfg.Window)
	p.epsn, p.msn, p.nakSent = s.RecvPSN, s.MSN, s.NakSent
	p.inMsg, p.msgWrite, p.recvTaken = s.InMsg, s.MsgWrite, s.RecvTaken
	p.off, p.total, p.va, p.rkey = s.Off, s.Total, s.VA, s.RKey
	for i, x := range s.Resources {
		p.res[i] = resource{used: x.Used, read: x.Read, first: x.First, last: x.Last, va: x.VA, rkey: x.RKey, len: x.Len, orig: x.Orig}
	}
	p.resNext = s.ResNext
	p.outHead, p.outN = 0, 0
	for _, o := range s.Out {
		p.out[p.outN] = outItem{kind: o.Kind, syn: o.Syndrome, psn: o.PSN, msn: o.MSN, orig: o.Orig, va: o.VA, rkey: o.RKey, len: o.Len, off: o.Off}
		p.outN++
	}
	c.st = s.Stats
	return nil
}

func validResources(res []ResourceState) error {
	for i, x := range res {
		if x.First > ib.PSNMask || x.Last > ib.PSNMask {
			return fmt.Errorf("responder resource %d: psns %#x-%#x beyond 24 bits", i, x.First, x.Last)
		}
	}
	return nil
}

func validResponses(out []ResponseState, mtu uint32) error {
	for i, o := range out {
		switch {
		case o.Kind > itemRead:
			return fmt.Errorf("pending response %d of unknown kind %d", i, o.Kind)
		case o.PSN > ib.PSNMask || o.MSN > ib.PSNMask:
			return fmt.Errorf("pending response %d: psn %#x or msn %#x beyond 24 bits", i, o.PSN, o.MSN)
		case o.Kind == itemRead && (o.Off%mtu != 0 || (o.Off >= o.Len && o.Off != 0)):
			return fmt.Errorf("pending READ response %d: offset %d in a READ of %d bytes", i, o.Off, o.Len)
		}
	}
	return nil
}
