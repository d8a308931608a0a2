package coll

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"

	"github.com/ibex-rdma/ibex/verbs"
)

// The flagged path (as NCCL's Simple protocol over shared memory): a call
// too large for the LL path, on a communicator whose links all take it,
// moves each piece with two RDMA WRITEs on the link's QP: the data, from
// the working buffer straight into the next flagged slot of the peer's
// landing buffer, then a 16-byte header (call number, descriptor, byte
// count, each word with the piece's flag) into the slot's header. The
// receiver polls its own memory for the header; once it is there the data
// is too, as the two writes are placed in order: shm0's initiator copies
// both in PostSend, in program order; udp0's responder writes packets in
// PSN order; and amd64 keeps stores in order (TSO), which is why the path
// is for amd64 alone. A consumed piece is reported, as on the LL path, by
// a write of the count consumed into the sender's flagged credit word.
// Unlike the normal path, no receive is posted, no receive completion is
// made and no credit message is sent: on shm0 a piece costs the copy and
// the receiver's poll, without a round trip through the other process's
// provider progress.
//
// The flagged area follows the LL area in the landing buffer:
// [slots × chunk bytes of data][slots × 16-byte headers][credit word].
// The sender's headers and credit source follow the LL staging.
const flTag = 4 << 40 // work request ID tag of flagged data writes

// flCapable reports whether a link's transport takes the flagged path.
func flCapable(dev string) bool { return llCapable(dev) && runtime.GOARCH == "amd64" }

// onePerLink reports whether no step of a program has two sends or two
// receives on one link (the LL and flagged paths count pieces per link
// and step).
func onePerLink(prog []execStep) bool {
	for _, st := range prog {
		for i, x := range st.sends {
			for _, y := range st.sends[:i] {
				if x.peer == y.peer {
					return false
				}
			}
		}
		for i, x := range st.recvs {
			for _, y := range st.recvs[:i] {
				if x.peer == y.peer {
					return false
				}
			}
		}
	}
	return true
}

// flLayout sets the flagged area's geometry: one slot of Chunk bytes per
// credit.
func (c *Comm) flLayout() {
	c.flSlots = c.opt.Credits
	c.flChunk = c.opt.Chunk
	c.flBase = c.opt.Landing + c.llArea
	c.flHdr = c.flBase + c.flSlots*c.flChunk
	c.flCred = c.flHdr + 16*c.flSlots
}

// flArea is the bytes the flagged path adds to a landing buffer, and
// flStage to the staging.
func (c *Comm) flArea() int  { return c.flSlots*c.flChunk + 16*c.flSlots + 64 }
func (c *Comm) flStage() int { return 16*c.flSlots + 8 }

// flBegin caches the call buffer's key and address for each link.
func (c *Comm) flBegin(cl *call) {
	for _, l := range c.links {
		if l != nil {
			l.flKey, l.flAddr = cl.lkeys[l.dev.name], cl.addrs[l.dev.name]
			if cl.src != nil {
				l.flSrcKey, l.flSrcAddr = cl.srcKeys[l.dev.name], cl.srcAddrs[l.dev.name]
			}
		}
	}
}

// flTrySend posts piece k of transfer x if the peer has a free flagged
// slot (and the send queue room).
func (c *Comm) flTrySend(cl *call, x xfer, k int) (bool, error) {
	l := c.links[x.peer]
	if l.flHdrPending {
		// The last piece's header did not fit the send queue.
		if err := l.qp.PostSend(l.flWR[1:]); err != nil {
			if errors.Is(err, verbs.ErrQueueFull) {
				return false, nil
			}
			return false, fmt.Errorf("coll: rank %d: send to rank %d: %w", c.rank, l.peer, err)
		}
		l.flHdrPending = false
		c.llOut++
	}
	cred := words(l.land.Bytes()[c.flCred:])
	if l.flSent-uint32(atomic.LoadUint64(&cred[0])) >= uint32(c.flSlots) {
		return false, nil
	}
	slot := int(l.flSent % uint32(c.flSlots))
	off := x.off + k*c.flChunk
	m := min(c.flChunk, x.n-k*c.flChunk)
	hs := c.llStageN + 16*slot
	h := words(l.llStage.Bytes()[hs : hs+16])
	flag := uint64(l.flSent+1) << 32
	h[0] = uint64(cl.seq<<immSeqShift|cl.desc) | flag
	h[1] = uint64(m) | flag
	l.flSGE[1] = verbs.SGE{Addr: l.llStage.Addr() + uint64(hs), Length: 16, LKey: l.llStage.LKey()}
	l.flWR[1] = verbs.SendWR{ID: uint64(l.peer) | llTag, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: l.flSGE[1:],
		RemoteAddr: l.rAddr + uint64(c.flHdr+16*slot), RKey: l.rKey}
	wrs := l.flWR[1:]
	if m > 0 {
		l.flSGE[0] = verbs.SGE{Addr: l.flAddr + uint64(off), Length: uint32(m), LKey: l.flKey}
		if cl.sendFromSrc(off, off+m) {
			l.flSGE[0] = verbs.SGE{Addr: l.flSrcAddr + uint64(off), Length: uint32(m), LKey: l.flSrcKey}
		}
		l.flWR[0] = verbs.SendWR{ID: uint64(l.peer) | flTag, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: l.flSGE[:1],
			RemoteAddr: l.rAddr + uint64(c.flBase+slot*c.flChunk), RKey: l.rKey}
		wrs = l.flWR[:]
	}
	if err := l.qp.PostSend(wrs); err != nil {
		var pe *verbs.PostError
		if !errors.Is(err, verbs.ErrQueueFull) {
			return false, fmt.Errorf("coll: rank %d: send to rank %d: %w", c.rank, l.peer, err)
		}
		if !errors.As(err, &pe) || pe.Index == 0 || m == 0 {
			return false, nil // nothing posted: retried next round
		}
		// The data went, its header waits for room.
		l.flHdrPending = true
		c.flOut++
		l.flSent++
		return true, nil
	}
	if m > 0 {
		c.flOut++
	}
	c.llOut++
	l.flSent++
	return true, nil
}

// flHeader peeks at the first header word of the next flagged piece from
// l's peer: ok when one has landed that no call took yet.
func (c *Comm) flHeader(l *link) (uint64, bool) {
	slot := int(l.flRecvd % uint32(c.flSlots))
	h := words(l.land.Bytes()[c.flHdr+16*slot:])
	h0 := atomic.LoadUint64(&h[0])
	return h0, uint32(h0>>32) == l.flRecvd+1
}

// flTryRecv applies piece k of receive x if it has landed (and, in a step
// whose receives overlap its sends, the sends over its bytes completed).
func (c *Comm) flTryRecv(cl *call, step int, st execStep, x xfer, k int) (bool, error) {
	l := c.links[x.peer]
	h0, ok := c.flHeader(l)
	if !ok {
		return false, nil
	}
	slot := int(l.flRecvd % uint32(c.flSlots))
	h := words(l.land.Bytes()[c.flHdr+16*slot:])
	h1 := atomic.LoadUint64(&h[1])
	if uint32(h1>>32) != l.flRecvd+1 {
		return false, nil
	}
	off := x.off + k*c.flChunk
	m := min(c.flChunk, x.n-k*c.flChunk)
	if err := c.checkPiece(cl, step, l, h0, int(uint32(h1)), m); err != nil {
		return false, err
	}
	if st.overlap && !c.flGated(st, off, m) {
		return false, nil
	}
	cl.land(off, off+m, l.land.Bytes()[c.flBase+slot*c.flChunk:c.flBase+slot*c.flChunk+m], x.reduce)
	l.flRecvd++
	return true, nil
}

// flGated reports whether every send piece of step st that reads bytes
// [off, off+m) has completed (pieces complete in order per link, and a
// step has one send per link).
func (c *Comm) flGated(st execStep, off, m int) bool {
	for _, s := range st.sends {
		lo, hi := max(off, s.off), min(off+m, s.off+s.n)
		if lo >= hi {
			continue
		}
		if c.links[s.peer].flDone <= (hi-1-s.off)/c.flChunk {
			return false
		}
	}
	return true
}

// flCredit tells the peer how many of its flagged pieces we consumed.
func (c *Comm) flCredit(l *link) error {
	if l.llStage == nil || l.flRecvd == l.flReported {
		return nil
	}
	cs := c.llStageN + 16*c.flSlots
	src := words(l.llStage.Bytes()[cs:])
	atomic.StoreUint64(&src[0], uint64(l.flRecvd))
	posted, err := c.llPost(l, l.llStage.Addr()+uint64(cs), 8, c.flCred, false)
	if err != nil {
		return fmt.Errorf("coll: rank %d: credit to rank %d: %w", c.rank, l.peer, err)
	}
	if posted {
		l.flReported = l.flRecvd
	}
	return nil
}
