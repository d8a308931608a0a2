package coll

import (
	"errors"
	"fmt"
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
// is too, as the link's device places the two writes in order
// (verbs.CapOrderedPlacement: shm0's initiator copies both in PostSend, in
// program order; a udp device's responder writes packets in PSN order);
// and amd64 keeps stores in order (TSO), which is why the path is for
// amd64 alone. A consumed piece is reported, as on the LL path, by a
// write of the count consumed into the sender's flagged credit word.
// Unlike the normal path, no receive is posted, no receive completion is
// made and no credit message is sent: where writes complete at post
// (shm0) a piece costs the copy and the receiver's poll, without a round
// trip through the other process's provider progress.
//
// The flagged area follows the LL area in the landing buffer:
// [slots × chunk bytes of data][slots × 16-byte headers][credit word].
// The sender's headers and credit source follow the LL staging.
const flTag = 4 << 40 // work request ID tag of flagged data writes

// flProto is the flagged path's state: its geometry, one slot of Chunk
// bytes per credit, and its data writes posted, not completed.
type flProto struct {
	c         *Comm
	on        bool // every link of the communicator takes it
	slots     int
	chunk     int
	base      int // offsets in a landing buffer: the data slots,
	hdr, cred int // the headers, the credit word
	stageBase int // the headers' offset in the staging (after LL's)
	out       int
	peers     []flPeer
}

// flPeer is the flagged path's state of the link to one peer: counts of
// pieces sent and received, as for LL; this step's data writes completed;
// a header that did not fit the send queue; the call buffer's key and
// address on the link's device.
type flPeer struct {
	sent, recvd, reported uint32
	done                  int
	hdrPending            bool
	sge                   [2]verbs.SGE
	wr                    [2]verbs.SendWR
	key, srcKey           uint32
	addr, srcAddr         uint64
}

func (p *flProto) init(c *Comm, on bool, base, stageBase int) {
	*p = flProto{c: c, on: on, slots: c.opt.Credits, chunk: c.opt.Chunk, base: base, stageBase: stageBase, peers: make([]flPeer, c.size)}
	p.hdr = p.base + p.slots*p.chunk
	p.cred = p.hdr + 16*p.slots
}

// area is the bytes the flagged path adds to a landing buffer, and
// stageN to the staging.
func (p *flProto) area() int   { return p.slots*p.chunk + 16*p.slots + 64 }
func (p *flProto) stageN() int { return 16*p.slots + 8 }

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

func (p *flProto) pieces(x xfer) int {
	if x.n == 0 {
		return 1
	}
	return (x.n + p.chunk - 1) / p.chunk
}

func (p *flProto) busy() bool            { return p.out > 0 }
func (p *flProto) wantCQ(bool, int) bool { return true } // data completions end steps

// start caches the call buffer's key and address for each link (at the
// call's first step) and clears the step's completed writes.
func (p *flProto) start(cl *call) error {
	for q, l := range p.c.links {
		if l == nil {
			continue
		}
		fp := &p.peers[q]
		if cl.step == 0 {
			fp.key, fp.addr = cl.lkeys[l.dev.name], cl.addrs[l.dev.name]
			if cl.src != nil {
				fp.srcKey, fp.srcAddr = cl.srcKeys[l.dev.name], cl.srcAddrs[l.dev.name]
			}
		}
		fp.done = 0
	}
	return nil
}

// send posts piece k of transfer x if the peer has a free flagged slot
// (and the send queue room).
func (p *flProto) send(cl *call, x xfer, k int) (bool, error) {
	c, fp, l := p.c, &p.peers[x.peer], p.c.links[x.peer]
	if fp.hdrPending {
		// The last piece's header did not fit the send queue.
		if err := l.qp.PostSend(fp.wr[1:]); err != nil {
			if errors.Is(err, verbs.ErrQueueFull) {
				return false, nil
			}
			return false, fmt.Errorf("coll: rank %d: send to rank %d: %w", c.rank, l.peer, err)
		}
		fp.hdrPending = false
		c.stagedOut++
	}
	cred := words(l.land.Bytes()[p.cred:])
	if fp.sent-uint32(atomic.LoadUint64(&cred[0])) >= uint32(p.slots) {
		return false, nil
	}
	slot := int(fp.sent % uint32(p.slots))
	off := x.off + k*p.chunk
	m := min(p.chunk, x.n-k*p.chunk)
	hs := p.stageBase + 16*slot
	stage := l.stage.mr
	h := words(stage.Bytes()[hs : hs+16])
	flag := uint64(fp.sent+1) << 32
	h[0] = uint64(cl.seq<<immSeqShift|cl.desc) | flag
	h[1] = uint64(m) | flag
	fp.sge[1] = verbs.SGE{Addr: stage.Addr() + uint64(hs), Length: 16, LKey: stage.LKey()}
	fp.wr[1] = verbs.SendWR{ID: uint64(l.peer) | llTag, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: fp.sge[1:],
		RemoteAddr: l.rAddr + uint64(p.hdr+16*slot), RKey: l.rKey}
	wrs := fp.wr[1:]
	if m > 0 {
		fp.sge[0] = verbs.SGE{Addr: fp.addr + uint64(off), Length: uint32(m), LKey: fp.key}
		if cl.sendFromSrc(off, off+m) {
			fp.sge[0] = verbs.SGE{Addr: fp.srcAddr + uint64(off), Length: uint32(m), LKey: fp.srcKey}
		}
		fp.wr[0] = verbs.SendWR{ID: uint64(l.peer) | flTag, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: fp.sge[:1],
			RemoteAddr: l.rAddr + uint64(p.base+slot*p.chunk), RKey: l.rKey}
		wrs = fp.wr[:]
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
		fp.hdrPending = true
		p.out++
		fp.sent++
		return true, nil
	}
	if m > 0 {
		p.out++
	}
	c.stagedOut++
	fp.sent++
	return true, nil
}

// written counts a completed data write to l's peer (l nil: unknown QP).
func (p *flProto) written(l *link) {
	p.out--
	if l != nil {
		p.peers[l.peer].done++
	}
}

// header peeks at the first header word of the next flagged piece from
// l's peer: ok when one has landed that no call took yet.
func (p *flProto) header(l *link) (uint64, bool) {
	if !p.on {
		return 0, false // no flagged area
	}
	fp := &p.peers[l.peer]
	slot := int(fp.recvd % uint32(p.slots))
	h := words(l.land.Bytes()[p.hdr+16*slot:])
	h0 := atomic.LoadUint64(&h[0])
	return h0, uint32(h0>>32) == fp.recvd+1
}

// recv applies piece k of receive x if it has landed (and, in a step
// whose receives overlap its sends, the sends over its bytes completed).
func (p *flProto) recv(cl *call, x xfer, k int) (bool, error) {
	c, fp, l := p.c, &p.peers[x.peer], p.c.links[x.peer]
	h0, ok := p.header(l)
	if !ok {
		return false, nil
	}
	slot := int(fp.recvd % uint32(p.slots))
	h := words(l.land.Bytes()[p.hdr+16*slot:])
	h1 := atomic.LoadUint64(&h[1])
	if uint32(h1>>32) != fp.recvd+1 {
		return false, nil
	}
	off := x.off + k*p.chunk
	m := min(p.chunk, x.n-k*p.chunk)
	if err := c.checkPiece(cl, l, h0, int(uint32(h1)), m); err != nil {
		return false, err
	}
	if st := &cl.steps[cl.step]; st.overlap && !p.gated(st, off, m) {
		return false, nil
	}
	at := p.base + slot*p.chunk
	cl.land(off, off+m, l.land.Bytes()[at:at+m], x.reduce)
	fp.recvd++
	return true, nil
}

// gated reports whether every send piece of step st that reads bytes
// [off, off+m) has completed (pieces complete in order per link, and a
// step has one send per link).
func (p *flProto) gated(st *execStep, off, m int) bool {
	for _, s := range st.sends {
		lo, hi := max(off, s.off), min(off+m, s.off+s.n)
		if lo >= hi {
			continue
		}
		if p.peers[s.peer].done <= (hi-1-s.off)/p.chunk {
			return false
		}
	}
	return true
}

// credit tells the peer how many of its flagged pieces we consumed.
func (p *flProto) credit(l *link) error {
	fp := &p.peers[l.peer]
	if l.stage.mr == nil || fp.recvd == fp.reported {
		return nil
	}
	cs := p.stageBase + 16*p.slots
	src := words(l.stage.mr.Bytes()[cs:])
	atomic.StoreUint64(&src[0], uint64(fp.recvd))
	posted, err := p.c.stagePost(l, cs, 8, p.cred, false)
	if err != nil {
		return fmt.Errorf("coll: rank %d: credit to rank %d: %w", p.c.rank, l.peer, err)
	}
	if posted {
		fp.reported = fp.recvd
	}
	return nil
}
