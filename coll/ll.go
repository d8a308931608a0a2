package coll

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ibex-rdma/ibex/verbs"
)

// The low-latency path (as NCCL's LL protocol). A call whose every
// transfer fits one small piece, on a communicator whose links are all on
// shm0 or udp0, does not wait for completions: the sender encodes each piece into
// 8-byte words of 4 data bytes and a 4-byte flag, and RDMA-WRITEs it into
// the next LL slot of the peer's landing buffer; the receiver polls its
// own memory until every word carries the piece's flag (so the order in
// which the words land does not matter). Consumed pieces are acknowledged
// by writing the count consumed into the sender's credit word, which the
// sender reads in its own memory (llCredit says when). On shm0 the initiator's copy is the
// delivery, so no step waits for the other process's provider progress;
// on udp0 no step waits for an acknowledgement or a completion.
//
// Landing buffer layout: [Landing bytes of normal slots][llSlots LL slots
// of c.llSlot bytes][credit word: LL pieces the peer consumed of ours]
// [the flagged area, fl.go].
// An LL slot: word 0 = call number<<24 | descriptor, word 1 = byte count,
// each with the flag in its high half; then the data words.
//
// A slot holds the largest LL piece of the communicator (llMax data
// bytes): c.llSlot = 16 + 2*llMax; the LL area is llSlots of them and the
// credit word (c.llArea), the sender's staging the slots and the credit
// source (c.llStageN).
const (
	llSlots   = 8
	llPayload = 16 << 10 // data bytes of the largest LL piece
	llTag     = 3 << 40  // work request ID tag of LL writes
)

// llCapable reports whether a link's transport delivers an RDMA WRITE
// into the target's memory outside the Go heap, where the target may poll
// it: shm0's pool (the initiator copies), udp0's mmapped buffers (the
// target's provider writes each packet's words as they arrive).
func llCapable(dev string) bool { return dev == "shm0" || dev == "udp0" }

// llOK reports whether a program can run on the LL path: every transfer
// fits max bytes (at most one LL piece), and no step has two sends or two
// receives on one link (so a step never needs more LL slots than there
// are).
func llOK(prog []execStep, max int) bool {
	for _, st := range prog {
		for _, x := range st.sends {
			if x.n > max {
				return false
			}
		}
		for _, x := range st.recvs {
			if x.n > max {
				return false
			}
		}
	}
	return onePerLink(prog)
}

// The largest transfer the LL path takes. Encoding and decoding cost
// about a nanosecond per 4 bytes each, while a flagged piece costs a
// second write; on shm0 the flagged path wins from 2 KiB (2 ranks, rd,
// `ibex coll all_reduce -b 128 -e 4K`: 1 KiB 2.3-3.3 µs on LL against
// 3.4-3.8 flagged, 2 KiB 4.2-4.5 against 3.2-3.8). On udp0 a flagged step
// waits for its data writes' acknowledgements, an LL step does not, so
// LL takes all it can there.
const (
	llMaxShm = 1 << 10
	llMaxUDP = llPayload
)

func words(b []byte) []uint64 {
	if len(b) < 8 {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
}

// llTrySend encodes and posts one piece to x.peer if an LL slot is free.
func (c *Comm) llTrySend(cl *call, x xfer) (bool, error) {
	l := c.links[x.peer]
	land := words(l.land.Bytes()[c.opt.Landing:])
	consumed := uint32(atomic.LoadUint64(&land[llSlots*c.llSlot/8]))
	if l.llSent-consumed >= llSlots {
		return false, nil
	}
	slot := int(l.llSent % llSlots)
	stage := l.llStage.Bytes()[slot*c.llSlot : (slot+1)*c.llSlot]
	flag := uint64(l.llSent+1) << 32
	w := words(stage)
	w[0] = uint64(cl.seq<<immSeqShift|cl.desc) | flag
	w[1] = uint64(x.n) | flag
	src := cl.buf[x.off : x.off+x.n]
	if cl.sendFromSrc(x.off, x.off+x.n) {
		src = cl.src[x.off : x.off+x.n]
	}
	k := 2
	for len(src) >= 4 {
		w[k] = uint64(binary.LittleEndian.Uint32(src)) | flag
		src, k = src[4:], k+1
	}
	if len(src) > 0 {
		var t [4]byte
		copy(t[:], src)
		w[k] = uint64(binary.LittleEndian.Uint32(t[:])) | flag
		k++
	}
	posted, err := c.llPost(l, l.llStage.Addr()+uint64(slot*c.llSlot), 8*k, c.opt.Landing+slot*c.llSlot, false)
	if err != nil {
		return false, fmt.Errorf("coll: rank %d: LL send to rank %d: %w", c.rank, l.peer, err)
	}
	if posted {
		l.llSent++
	}
	return posted, nil
}

// llSignalEvery: one LL write in this many per link asks for a completion
// (the ones before it retire with it, in order): fewer completions to
// make and poll, and the send queue still drains.
const llSignalEvery = llSlots / 2

// llPost RDMA-WRITEs n bytes at addr of the staging MR to off of the
// peer's landing buffer (an LL piece or the credit word), signaled every
// llSignalEvery writes or when signal says so; false when the send queue
// is full (back-pressure: the caller retries).
func (c *Comm) llPost(l *link, addr uint64, n, off int, signal bool) (bool, error) {
	signal = signal || l.llUnsig == llSignalEvery-1
	l.llSGE[0] = verbs.SGE{Addr: addr, Length: uint32(n), LKey: l.llStage.LKey()}
	l.llWR[0] = verbs.SendWR{ID: uint64(l.peer) | llTag, Opcode: verbs.WRRDMAWrite, SGL: l.llSGE[:],
		RemoteAddr: l.rAddr + uint64(off), RKey: l.rKey}
	if signal {
		l.llWR[0].Flags = verbs.SendSignaled
	}
	if err := l.qp.PostSend(l.llWR[:]); err != nil {
		if errors.Is(err, verbs.ErrQueueFull) {
			return false, nil
		}
		return false, err
	}
	if signal {
		l.llUnsig = 0
		c.llOut++
	} else {
		l.llUnsig++
	}
	return true, nil
}

// llTryRecv applies the next LL piece from x.peer if it has fully landed.
func (c *Comm) llTryRecv(cl *call, step int, x xfer) (bool, error) {
	l := c.links[x.peer]
	slot := int(l.llRecvd % llSlots)
	w := words(l.land.Bytes()[c.opt.Landing+slot*c.llSlot : c.opt.Landing+(slot+1)*c.llSlot])
	flag := l.llRecvd + 1
	h0 := atomic.LoadUint64(&w[0])
	if uint32(h0>>32) != flag {
		return false, nil
	}
	h1 := atomic.LoadUint64(&w[1])
	if uint32(h1>>32) != flag {
		return false, nil
	}
	if err := c.checkPiece(cl, step, l, h0, int(uint32(h1)), x.n); err != nil {
		return false, err
	}
	nw := (x.n + 3) / 4
	dst := c.llScratch[:4*nw]
	for i := range nw {
		v := atomic.LoadUint64(&w[2+i])
		if uint32(v>>32) != flag {
			return false, nil // still landing
		}
		binary.LittleEndian.PutUint32(dst[4*i:], uint32(v))
	}
	cl.land(x.off, x.off+x.n, dst[:x.n], x.reduce)
	l.llRecvd++
	return true, c.llCredit(l, false)
}

// llCredit tells the peer how many of its LL pieces we consumed, once
// half the slots are unreported (or now, with force): the peer's
// sender can be stopped only with llSlots pieces unreported, all of which
// we consume in order without waiting for it, so it always hears of them.
// One credit write per llSlots/2 pieces, not one per piece.
func (c *Comm) llCredit(l *link, force bool) error {
	if l.llStage == nil || !force && l.llRecvd-l.llReported < llSlots/2 {
		return nil
	}
	src := words(l.llStage.Bytes()[llSlots*c.llSlot:])
	atomic.StoreUint64(&src[0], uint64(l.llRecvd))
	posted, err := c.llPost(l, l.llStage.Addr()+uint64(llSlots*c.llSlot), 8, c.opt.Landing+llSlots*c.llSlot, force)
	if err != nil {
		return fmt.Errorf("coll: rank %d: LL credit to rank %d: %w", c.rank, l.peer, err)
	}
	if posted {
		l.llReported = l.llRecvd
	}
	return nil
}

// llHeader peeks at the header word of the next LL piece from l's peer:
// ok when one has landed that no call took yet.
func (c *Comm) llHeader(l *link) (uint64, bool) {
	slot := int(l.llRecvd % llSlots)
	w := words(l.land.Bytes()[c.opt.Landing+slot*c.llSlot:])
	h0 := atomic.LoadUint64(&w[0])
	return h0, uint32(h0>>32) == l.llRecvd+1
}

// checkPiece checks a landed LL or flagged piece, whose header word 0 is
// h0 and whose byte count is n, against the call's piece of want bytes.
func (c *Comm) checkPiece(cl *call, step int, l *link, h0 uint64, n, want int) error {
	seq, desc := uint32(h0)>>immSeqShift&immSeqMask, uint32(h0)&immDescMask
	switch {
	case seq != cl.seq:
		return fmt.Errorf("coll: rank %d: %w: step %d, rank %d sent data of call %d, we are in call %d: the ranks made their calls in a different order", c.rank, ErrMismatch, step+1, l.peer, seq, cl.seq)
	case desc != cl.desc:
		return fmt.Errorf("coll: rank %d: %w: rank %d: %s", c.rank, ErrMismatch, l.peer, mismatch(cl.desc, desc))
	case n != want:
		return fmt.Errorf("coll: rank %d: %w: step %d: rank %d sent a piece of %d bytes, expected %d (the count differs)", c.rank, ErrMismatch, step+1, l.peer, n, want)
	}
	return nil
}

// fastLanded reports whether an LL or flagged piece from l's peer has
// landed that no call took.
func (c *Comm) fastLanded(l *link) bool {
	if l.llStage == nil {
		return false
	}
	_, ll := c.llHeader(l)
	_, fl := c.flHeader(l)
	return ll || fl
}

// execFast runs a call on the LL or the flagged path (fl.go): steps in
// order; in each, sends go out piece by piece as the peers' slots free up
// and receives are applied as their pieces land, each piece checked
// against what this call expects. A receive in a step whose receives
// write what its sends read waits for those sends: on the LL path until
// every send is encoded (which copies the data), on the flagged path
// until the send pieces over its bytes completed. A step ends when its
// sends completed (the flagged path's data writes read the buffer until
// then) and its receives were applied.
func (c *Comm) execFast(ctx context.Context, cl *call) error {
	if c.wc == nil {
		c.wc = make([]verbs.WC, 64)
	}
	wc := c.wc
	ll := cl.mode == modeLL
	if !ll {
		c.flBegin(cl)
	}
	idle, first := 0, true
	for si, st := range cl.steps {
		sdone, rdone := c.sDone[:0], c.rDone[:0]
		sendsLeft, recvsLeft := 0, 0
		for _, x := range st.sends {
			sdone = append(sdone, 0)
			sendsLeft += c.pieces(cl, x)
		}
		for _, x := range st.recvs {
			rdone = append(rdone, 0)
			recvsLeft += c.pieces(cl, x)
		}
		c.sDone, c.rDone = sdone, rdone
		for _, l := range c.links {
			if l != nil {
				l.flDone = 0
			}
		}
		for sendsLeft > 0 || recvsLeft > 0 || c.flOut > 0 {
			if c.abortReq.Load() {
				return fmt.Errorf("coll: rank %d: step %d of %d: %w by Abort", c.rank, si+1, len(cl.steps), ErrAborted)
			}
			progressed := false
			for i, x := range st.sends {
				for sdone[i] < c.pieces(cl, x) {
					var ok bool
					var err error
					if ll {
						ok, err = c.llTrySend(cl, x)
					} else {
						ok, err = c.flTrySend(cl, x, sdone[i])
					}
					if err != nil {
						return err
					}
					if !ok {
						break
					}
					sdone[i], sendsLeft, progressed = sdone[i]+1, sendsLeft-1, true
				}
			}
			if !ll || !st.overlap || sendsLeft == 0 {
				for j, x := range st.recvs {
					for rdone[j] < c.pieces(cl, x) {
						var ok bool
						var err error
						if ll {
							ok, err = c.llTryRecv(cl, si, x)
						} else {
							ok, err = c.flTryRecv(cl, si, st, x, rdone[j])
						}
						if err != nil {
							return err
						}
						if !ok {
							break
						}
						rdone[j], recvsLeft, progressed = rdone[j]+1, recvsLeft-1, true
					}
				}
			}
			// Completions: our writes finishing, and what the normal path
			// or a failing peer sends. A waiting LL call looks one round in
			// eight (and in its first, or when 64 of its writes are
			// unreaped): its own
			// completions only retire writes, and a peer's abort notice
			// can wait that long; the flagged path's data
			// completions end steps, so it looks every round.
			polls := c.devList
			if ll && idle&7 != 7 && c.llOut < 64 && !first {
				polls = nil
			}
			first = false
			for _, d := range polls {
				n, err := d.cq.Poll(wc)
				if err != nil {
					return fmt.Errorf("coll: rank %d: %w", c.rank, err)
				}
				for _, w := range wc[:n] {
					if err := c.fastCompletion(cl, si, len(cl.steps), w); err != nil {
						return err
					}
				}
				progressed = progressed || n > 0
			}
			for _, l := range c.links {
				if l == nil {
					continue
				}
				if err := c.llCredit(l, false); err != nil {
					return err
				}
				if err := c.flCredit(l); err != nil {
					return err
				}
			}
			if !progressed {
				if err := ctx.Err(); err != nil {
					return c.stuckFast(ctx, cl, si, st, sdone, rdone)
				}
				if idle%64 == 0 {
					if err := c.stray(cl, si, rdone); err != nil {
						return err
					}
				}
				c.idle(&idle)
			} else {
				idle = 0
			}
		}
	}
	return nil
}

// pieces is how many pieces transfer x takes on the call's path.
func (c *Comm) pieces(cl *call, x xfer) int {
	if cl.mode == modeLL || x.n == 0 {
		return 1
	}
	return (x.n + c.flChunk - 1) / c.flChunk
}

// fastCompletion handles a completion during an LL or flagged call.
func (c *Comm) fastCompletion(cl *call, step, steps int, w verbs.WC) error {
	var l *link
	for _, k := range c.links {
		if k != nil && k.qp.Num() == w.QPNum {
			l = k
		}
	}
	if w.Status != verbs.WCSuccess {
		if wrTag(w.WRID) == 2 {
			return nil
		}
		who := "?"
		if l != nil {
			who = fmt.Sprint(l.peer)
		}
		return fmt.Errorf("coll: rank %d: step %d of %d: link to rank %s failed: %v", c.rank, step+1, steps, who, w)
	}
	if l == nil || w.Opcode == verbs.WCRDMAWrite {
		switch wrTag(w.WRID) {
		case 3:
			c.llOut--
		case 4:
			c.flOut--
			if l != nil {
				l.flDone++
			}
		}
		return nil
	}
	if _, err := c.received(l, w, cl, step, steps, true); err != nil {
		return err
	}
	if l.recvsPost < 2*c.opt.Credits {
		rcv := verbs.RecvWR{ID: uint64(l.peer)}
		for l.recvsPost < 3*c.opt.Credits {
			if err := l.qp.PostRecv([]verbs.RecvWR{rcv}); err != nil {
				return fmt.Errorf("coll: rank %d: post receive for rank %d: %w", c.rank, l.peer, err)
			}
			l.recvsPost++
		}
	}
	return nil
}

// stuckFast is the deadline error of the LL and flagged paths.
func (c *Comm) stuckFast(ctx context.Context, cl *call, step int, st execStep, sdone, rdone []int) error {
	var from, to []string
	for j, x := range st.recvs {
		if rdone[j] < c.pieces(cl, x) {
			from = append(from, fmt.Sprint(x.peer))
		}
	}
	for i, x := range st.sends {
		if sdone[i] < c.pieces(cl, x) {
			to = append(to, fmt.Sprint(x.peer))
		}
	}
	sort.Strings(from)
	msg := fmt.Sprintf("coll: rank %d: %v at step %d of %d", c.rank, ctx.Err(), step+1, len(cl.steps))
	if len(from) > 0 {
		msg += "; not heard from rank " + strings.Join(from, ", ")
	}
	if len(to) > 0 {
		msg += "; no free slot at rank " + strings.Join(to, ", ")
	}
	return fmt.Errorf("%s: %w", msg, ctx.Err())
}

// stray reports a mismatch when a peer's piece of this call has landed
// that the call will not take: one on the other fast path (the ranks'
// calls differ in size, so they chose differently), or one from a rank
// this call expects nothing more from (two ranks that both think they are
// a broadcast's root, each waiting for slots the other never frees).
func (c *Comm) stray(cl *call, step int, rdone []int) error {
	if cl.seq == p2pSeq {
		return nil
	}
	for _, l := range c.links {
		if l == nil || l.llStage == nil {
			continue
		}
		ll, llOK := c.llHeader(l)
		fl, flOK := c.flHeader(l)
		theirs, ours, h0 := "flagged", "LL", fl
		ok := flOK && cl.mode == modeLL
		if !ok && llOK && cl.mode == modeFL {
			theirs, ours, h0, ok = ours, theirs, ll, true
		}
		if ok && uint32(h0)>>immSeqShift&immSeqMask == cl.seq {
			return fmt.Errorf("coll: rank %d: %w: step %d: rank %d sent this call's data on the %s path, we took the %s path (%s)",
				c.rank, ErrMismatch, step+1, l.peer, theirs, ours, mismatch(cl.desc, uint32(h0)&immDescMask))
		}
		if cl.mode == modeLL {
			h0, ok = ll, llOK
		} else {
			h0, ok = fl, flOK
		}
		if ok && uint32(h0)>>immSeqShift&immSeqMask == cl.seq && !c.expects(cl, step, rdone, l.peer) {
			return fmt.Errorf("coll: rank %d: %w: step %d of %d: rank %d sent data of this call, which expects no more from it (%s)",
				c.rank, ErrMismatch, step+1, len(cl.steps), l.peer, mismatch(cl.desc, uint32(h0)&immDescMask))
		}
	}
	return nil
}

// expects reports whether the call, from step on, still has a piece to
// receive from rank q.
func (c *Comm) expects(cl *call, step int, rdone []int, q int) bool {
	for j, x := range cl.steps[step].recvs {
		if x.peer == q && rdone[j] < c.pieces(cl, x) {
			return true
		}
	}
	for _, st := range cl.steps[step+1:] {
		for _, x := range st.recvs {
			if x.peer == q {
				return true
			}
		}
	}
	return false
}

// flushLL waits, until deadline, for our LL and flagged writes to
// complete, so that Close does not destroy a QP with a piece or credit the
// peer is waiting for (a call on these paths returns once its writes are
// posted). Links whose last writes asked for no completion get a signaled
// credit write (it repeats what the peer knows, or tells it more).
func (c *Comm) flushLL(deadline time.Time) {
	for _, l := range c.links {
		if l != nil && l.llStage != nil && l.llUnsig > 0 {
			_ = c.llCredit(l, true)
		}
	}
	c.drain(deadline, func() bool { return c.llOut > 0 })
}
