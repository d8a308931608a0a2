package coll

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/ibex-rdma/ibex/verbs"
)

// What the LL (ll.go) and flagged (fl.go) paths share. Both have the
// receiver poll its own landing buffer for a flagged header instead of
// waiting for a completion, so both need links that place a QP's writes
// in order (verbs.CapOrderedPlacement). Their small writes (LL pieces,
// flagged headers, both paths' credit words) go out of one staging
// buffer per link, [LL staging][flagged headers][flagged credit source],
// signaled one in stageSignalEvery.

// staging is a link's staging buffer and the work request that posts its
// writes.
type staging struct {
	mr    *verbs.MR // nil when the link takes neither path
	unsig int       // writes since the last signaled one
	sge   [1]verbs.SGE
	wr    [1]verbs.SendWR
}

func words(b []byte) []uint64 {
	if len(b) < 8 {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
}

// stageSignalEvery: one staging write in this many per link asks for a
// completion (the ones before it retire with it, in order): fewer
// completions to make and poll, and the send queue still drains.
const stageSignalEvery = llSlots / 2

// stagePost RDMA-WRITEs n bytes at off of l's staging to landOff of the
// peer's landing buffer, signaled every stageSignalEvery writes or when
// signal says so; false when the send queue is full (back-pressure: the
// caller retries).
func (c *Comm) stagePost(l *link, off, n, landOff int, signal bool) (bool, error) {
	s := &l.stage
	signal = signal || s.unsig == stageSignalEvery-1
	s.sge[0] = verbs.SGE{Addr: s.mr.Addr() + uint64(off), Length: uint32(n), LKey: s.mr.LKey()}
	s.wr[0] = verbs.SendWR{ID: uint64(l.peer) | llTag, Opcode: verbs.WRRDMAWrite, SGL: s.sge[:],
		RemoteAddr: l.rAddr + uint64(landOff), RKey: l.rKey}
	if signal {
		s.wr[0].Flags = verbs.SendSignaled
	}
	if err := l.qp.PostSend(s.wr[:]); err != nil {
		if errors.Is(err, verbs.ErrQueueFull) {
			return false, nil
		}
		return false, err
	}
	if signal {
		s.unsig = 0
		c.stagedOut++
	} else {
		s.unsig++
	}
	return true, nil
}

// checkPiece checks a landed LL or flagged piece, whose header word 0 is
// h0 and whose byte count is n, against the call's piece of want bytes.
func (c *Comm) checkPiece(cl *call, l *link, h0 uint64, n, want int) error {
	seq, desc := uint32(h0)>>immSeqShift&immSeqMask, uint32(h0)&immDescMask
	switch {
	case seq != cl.seq:
		return fmt.Errorf("coll: rank %d: %w: step %d, rank %d sent data of call %d, we are in call %d: the ranks made their calls in a different order", c.rank, ErrMismatch, cl.step+1, l.peer, seq, cl.seq)
	case desc != cl.desc:
		return fmt.Errorf("coll: rank %d: %w: rank %d: %s", c.rank, ErrMismatch, l.peer, mismatch(cl.desc, desc))
	case n != want:
		return fmt.Errorf("coll: rank %d: %w: step %d: rank %d sent a piece of %d bytes, expected %d (the count differs)", c.rank, ErrMismatch, cl.step+1, l.peer, n, want)
	}
	return nil
}

// fastLanded reports whether an LL or flagged piece from l's peer has
// landed that no call took.
func (c *Comm) fastLanded(l *link) bool {
	if l.stage.mr == nil {
		return false
	}
	_, ll := c.ll.header(l)
	_, fl := c.fl.header(l)
	return ll || fl
}

// stray reports a mismatch when, during an LL or flagged call, a peer's
// piece of this call has landed that the call will not take: one on the
// other fast path (the ranks' calls differ in size, so they chose
// differently), or one from a rank this call expects nothing more from
// (two ranks that both think they are a broadcast's root, each waiting
// for slots the other never frees).
func (c *Comm) stray(cl *call, p protocol, rdone []int) error {
	if cl.seq == p2pSeq || cl.mode == modeNormal {
		return nil
	}
	for _, l := range c.links {
		if l == nil || l.stage.mr == nil {
			continue
		}
		ll, llOK := c.ll.header(l)
		fl, flOK := c.fl.header(l)
		theirs, ours, h0 := "flagged", "LL", fl
		ok := flOK && cl.mode == modeLL
		if !ok && llOK && cl.mode == modeFL {
			theirs, ours, h0, ok = ours, theirs, ll, true
		}
		if ok && uint32(h0)>>immSeqShift&immSeqMask == cl.seq {
			return fmt.Errorf("coll: rank %d: %w: step %d: rank %d sent this call's data on the %s path, we took the %s path (%s)",
				c.rank, ErrMismatch, cl.step+1, l.peer, theirs, ours, mismatch(cl.desc, uint32(h0)&immDescMask))
		}
		if cl.mode == modeLL {
			h0, ok = ll, llOK
		} else {
			h0, ok = fl, flOK
		}
		if ok && uint32(h0)>>immSeqShift&immSeqMask == cl.seq && !c.expects(cl, p, rdone, l.peer) {
			return fmt.Errorf("coll: rank %d: %w: step %d of %d: rank %d sent data of this call, which expects no more from it (%s)",
				c.rank, ErrMismatch, cl.step+1, len(cl.steps), l.peer, mismatch(cl.desc, uint32(h0)&immDescMask))
		}
	}
	return nil
}

// expects reports whether the call, from its current step on, still has
// a piece to receive from rank q.
func (c *Comm) expects(cl *call, p protocol, rdone []int, q int) bool {
	for j, x := range cl.steps[cl.step].recvs {
		if x.peer == q && rdone[j] < p.pieces(x) {
			return true
		}
	}
	for _, st := range cl.steps[cl.step+1:] {
		for _, x := range st.recvs {
			if x.peer == q {
				return true
			}
		}
	}
	return false
}

// flushStaged waits, until deadline, for our staging writes to complete,
// so that Close does not destroy a QP with a piece or credit the peer is
// waiting for (a call on these paths returns once its writes are
// posted). Links whose last writes asked for no completion get a signaled
// LL credit write (it repeats what the peer knows, or tells it more).
func (c *Comm) flushStaged(deadline time.Time) {
	for _, l := range c.links {
		if l != nil && l.stage.mr != nil && l.stage.unsig > 0 {
			_ = c.ll.credit(l, true)
		}
	}
	c.drain(deadline, func() bool { return c.stagedOut > 0 })
}
