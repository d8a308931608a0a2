package coll

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ibex-rdma/ibex/verbs"
)

// The normal path, for links that cannot take the LL and flagged paths
// (and programs with two transfers on one link in a step): each piece of
// a send is an RDMA WRITE_WITH_IMM of the working buffer into the next
// slot of the peer's landing buffer, one credit (landing slot) per piece;
// the receiver learns of it from its receive completion, copies or
// reduces it into its working buffer and returns the credit with a
// zero-byte WRITE_WITH_IMM. Everything is driven by completions, so two
// ranks sending to each other in a step never wait on each other's
// credits in a cycle. Abort notices travel the same way (exec.go).
//
// Landing buffer: [Credits slots of Landing/Credits bytes] at offset 0.

// normalProto is the normal path's state.
type normalProto struct {
	c     *Comm
	slot  int // bytes of a landing slot, the largest piece
	out   int // pieces posted, not completed
	peers []normalPeer
}

// normalPeer is the normal path's state of the link to one peer.
type normalPeer struct {
	credit int // slots of the peer's landing buffer we may still fill
	// Since the connection (both ends count the same way, so landing
	// slot = count mod credits on both sides).
	sent, recvd int
	recvsPost   int           // receives posted and not consumed
	owed        int           // landing slots freed, not yet returned to the peer
	arrived     fifo[arrival] // pieces in landing slots no call has applied yet
	done        int           // this step's pieces to the peer completed

	lkey uint32 // the call's buffer on the link's device
	addr uint64
	sge  [1]verbs.SGE
	wr   [1]verbs.SendWR
	rwr  [1]verbs.RecvWR
}

// arrival is a piece in a landing slot, not yet applied.
type arrival struct {
	slot, n   int
	seq, desc uint32
}

func (p *normalProto) init(c *Comm) {
	p.c = c
	p.slot = c.opt.Landing / c.opt.Credits
	p.peers = make([]normalPeer, c.size)
	for q := range p.peers {
		p.peers[q].credit = c.opt.Credits
	}
}

func (p *normalProto) pieces(x xfer) int {
	if x.n == 0 {
		return 1
	}
	return (x.n + p.slot - 1) / p.slot
}

// start takes the call buffer's key and address for each link's device
// (at the call's first step) and tops up the receives.
func (p *normalProto) start(cl *call) error {
	for q, l := range p.c.links {
		if l == nil {
			continue
		}
		np := &p.peers[q]
		if cl.step == 0 {
			np.lkey, np.addr = cl.lkeys[l.dev.name], cl.addrs[l.dev.name]
		}
		np.done = 0
		if err := p.postRecvs(l); err != nil {
			return err
		}
	}
	return nil
}

func (p *normalProto) busy() bool            { return p.out > 0 }
func (p *normalProto) wantCQ(bool, int) bool { return true } // receives are learned from completions
func (p *normalProto) piece(x xfer, k int) (off, n int) {
	off = x.off + k*p.slot
	return off, min(p.slot, x.off+x.n-off)
}

// send posts piece k of x into the peer's next landing slot if we hold a
// credit for it.
func (p *normalProto) send(cl *call, x xfer, k int) (bool, error) {
	np, l := &p.peers[x.peer], p.c.links[x.peer]
	if np.credit == 0 {
		return false, nil
	}
	off, n := p.piece(x, k)
	slot := np.sent % p.c.opt.Credits
	np.wr[0] = verbs.SendWR{ID: uint64(x.peer), Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled,
		Imm:        cl.seq<<immSeqShift | cl.desc,
		RemoteAddr: l.rAddr + uint64(slot*p.slot), RKey: l.rKey}
	if n > 0 {
		np.sge[0] = verbs.SGE{Addr: np.addr + uint64(off), Length: uint32(n), LKey: np.lkey}
		np.wr[0].SGL = np.sge[:]
	}
	if err := l.qp.PostSend(np.wr[:]); err != nil {
		if errors.Is(err, verbs.ErrQueueFull) {
			return false, nil // completions not yet reaped: back-pressure, retried next round
		}
		return false, fmt.Errorf("coll: rank %d: step %d: send to rank %d: %w", p.c.rank, cl.step+1, x.peer, err)
	}
	np.sent++
	np.credit--
	p.out++
	return true, nil
}

// sent counts a completed piece to peer q.
func (p *normalProto) sent(q int) {
	p.out--
	p.peers[q].done++
}

// recv applies piece k of x from the peer's oldest arrival, checked
// against what the call expects; in a step whose receives overlap its
// sends, only once the send pieces over its bytes completed.
func (p *normalProto) recv(cl *call, x xfer, k int) (bool, error) {
	c, np := p.c, &p.peers[x.peer]
	if np.arrived.len() == 0 {
		return false, nil
	}
	a := np.arrived.front()
	off, n := p.piece(x, k)
	if a.seq != cl.seq {
		what := fmt.Sprintf("call %d", cl.seq)
		if cl.seq == p2pSeq {
			what = "a send/recv"
		}
		theirs := fmt.Sprintf("call %d", a.seq)
		if a.seq == p2pSeq {
			theirs = "a send/recv"
		}
		return false, fmt.Errorf("coll: rank %d: %w: in %s, step %d, rank %d sent data of %s: the ranks made their calls in a different order", c.rank, ErrMismatch, what, cl.step+1, x.peer, theirs)
	}
	if a.desc != cl.desc {
		return false, fmt.Errorf("coll: rank %d: %w: rank %d: %s", c.rank, ErrMismatch, x.peer, mismatch(cl.desc, a.desc))
	}
	if a.n != n {
		return false, fmt.Errorf("coll: rank %d: %w: step %d: rank %d sent a piece of %d bytes, expected %d (the count differs)", c.rank, ErrMismatch, cl.step+1, x.peer, a.n, n)
	}
	if st := &cl.steps[cl.step]; st.overlap && !p.gated(st, off, n) {
		return false, nil // our send of these bytes is still in flight
	}
	np.arrived.pop()
	at := a.slot * p.slot
	cl.land(off, off+n, c.links[x.peer].land.Bytes()[at:at+n], x.reduce)
	np.owed++
	return true, nil
}

// gated reports whether every send piece of step st that reads bytes
// [off, off+n) has completed. Pieces to a peer complete in order, its
// sends' pieces numbered one after the other.
func (p *normalProto) gated(st *execStep, off, n int) bool {
	for i, s := range st.sends {
		lo, hi := max(off, s.off), min(off+n, s.off+s.n)
		if lo >= hi {
			continue
		}
		before := 0
		for _, t := range st.sends[:i] {
			if t.peer == s.peer {
				before += p.pieces(t)
			}
		}
		if p.peers[s.peer].done < before+(hi-1-s.off)/p.slot+1 {
			return false
		}
	}
	return true
}

// received handles a receive completion on link l during call cl: an
// abort notice fails the call; a credit return adds credits; a data piece
// joins the link's arrivals, for recv. A piece of this very call that
// differs from ours is a mismatch, said at once (recv would not see it if
// no receive of this call waits on that link); on the LL and flagged
// paths any normal piece of this call is (its sender took the other
// path). Point-to-point calls all share one number, so theirs are checked
// in order only, by recv.
func (p *normalProto) received(cl *call, l *link, w verbs.WC) error {
	c, np := p.c, &p.peers[l.peer]
	np.recvsPost--
	switch {
	case w.Imm&immAbort == immAbort:
		return fmt.Errorf("coll: rank %d: step %d of %d: rank %d aborted the communicator (its own error says why): %w", c.rank, cl.step+1, len(cl.steps), l.peer, ErrAborted)
	case w.Imm&immCredit != 0:
		np.credit += int(w.Imm &^ immCredit)
	default:
		a := arrival{slot: np.recvd % c.opt.Credits, n: int(w.ByteLen), seq: (w.Imm >> immSeqShift) & immSeqMask, desc: w.Imm & immDescMask}
		fast := cl.mode != modeNormal
		if a.seq == cl.seq && cl.seq != p2pSeq && (fast || a.desc != cl.desc) {
			why := mismatch(cl.desc, a.desc)
			if fast {
				why = strings.TrimPrefix(why+"; it sent this call's data on the normal path, we took the "+pathNames[cl.mode]+" path", "; ")
			}
			return fmt.Errorf("coll: rank %d: %w: rank %d: %s", c.rank, ErrMismatch, l.peer, why)
		}
		np.arrived.push(a)
		np.recvd++
	}
	if np.recvsPost < 2*c.opt.Credits {
		return p.postRecvs(l)
	}
	return nil
}

// postRecvs keeps enough zero-length receives posted on a link for the
// data pieces, credit returns and abort notices that may arrive.
func (p *normalProto) postRecvs(l *link) error {
	np := &p.peers[l.peer]
	np.rwr[0] = verbs.RecvWR{ID: uint64(l.peer)}
	for np.recvsPost < 3*p.c.opt.Credits {
		if err := l.qp.PostRecv(np.rwr[:]); err != nil {
			return fmt.Errorf("coll: rank %d: post receive for rank %d: %w", p.c.rank, l.peer, err)
		}
		np.recvsPost++
	}
	return nil
}

// settle returns the landing slots we owe the peer, and tops up the
// receives.
func (p *normalProto) settle(l *link) error {
	if err := p.returnCredits(l); err != nil {
		return err
	}
	if p.peers[l.peer].recvsPost < 2*p.c.opt.Credits {
		return p.postRecvs(l)
	}
	return nil
}

// returnCredits tells the peer how many landing slots are free again, in
// one zero-byte WRITE_WITH_IMM for all owed so far (the immediate carries
// the count). A full send queue (completions not yet reaped) keeps them
// owed for the next round.
func (p *normalProto) returnCredits(l *link) error {
	np := &p.peers[l.peer]
	if np.owed == 0 {
		return nil
	}
	np.wr[0] = verbs.SendWR{ID: uint64(l.peer) | creditTag, Opcode: verbs.WRRDMAWriteWithImm, Imm: immCredit | uint32(np.owed),
		RemoteAddr: l.rAddr, RKey: l.rKey, Flags: verbs.SendSignaled}
	if err := l.qp.PostSend(np.wr[:]); err != nil {
		if errors.Is(err, verbs.ErrQueueFull) {
			return nil
		}
		return fmt.Errorf("coll: rank %d: credit to rank %d: %w", p.c.rank, l.peer, err)
	}
	np.owed = 0
	return nil
}
