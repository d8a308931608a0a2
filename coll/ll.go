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
// shm0, does not wait for completions: the sender encodes each piece into
// 8-byte words of 4 data bytes and a 4-byte flag, and RDMA-WRITEs it into
// the next LL slot of the peer's landing buffer; the receiver polls its
// own memory until every word carries the piece's flag (so the order in
// which the words land does not matter). A consumed piece is acknowledged
// by writing the count consumed into the sender's credit word, which the
// sender reads in its own memory. On shm0 the initiator's copy is the
// delivery, so no step waits for the other process's provider progress;
// on udp0 no step waits for an acknowledgement or a completion.
//
// Landing buffer layout: [Landing bytes of normal slots][llSlots LL slots
// of llSlot bytes][credit word: LL pieces the peer consumed of ours].
// An LL slot: word 0 = call number<<24 | descriptor, word 1 = byte count,
// each with the flag in its high half; then the data words.
const (
	llSlots   = 8
	llPayload = 16 << 10            // data bytes of one LL piece
	llSlot    = 16 + 2*llPayload    // header + encoded data
	llArea    = llSlots*llSlot + 64 // the slots and the credit word
	llStage   = llSlots*llSlot + 8  // the sender's staging: slots and the credit source
	llTag     = 3 << 40             // work request ID tag of LL writes
)

// llCapable reports whether a link's transport delivers an RDMA WRITE
// into the target's memory outside the Go heap, where the target may poll
// it: shm0's pool (the initiator copies), udp0's mmapped buffers (the
// target's provider writes each packet's words as they arrive).
func llCapable(dev string) bool { return dev == "shm0" || dev == "udp0" }

// llOK reports whether a program can run on the LL path: every transfer
// fits one LL piece, and no step has two sends or two receives on one
// link (so a step never needs more LL slots than there are).
func llOK(prog []execStep) bool {
	for _, st := range prog {
		seenS, seenR := map[int]bool{}, map[int]bool{}
		for _, x := range st.sends {
			if x.n > llPayload || seenS[x.peer] {
				return false
			}
			seenS[x.peer] = true
		}
		for _, x := range st.recvs {
			if x.n > llPayload || seenR[x.peer] {
				return false
			}
			seenR[x.peer] = true
		}
	}
	return true
}

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
	consumed := uint32(atomic.LoadUint64(&land[llSlots*llSlot/8]))
	if l.llSent-consumed >= llSlots {
		return false, nil
	}
	slot := int(l.llSent % llSlots)
	stage := l.llStage.Bytes()[slot*llSlot : (slot+1)*llSlot]
	flag := uint64(l.llSent+1) << 32
	w := words(stage)
	w[0] = uint64(cl.seq<<immSeqShift|cl.desc) | flag
	w[1] = uint64(x.n) | flag
	src := cl.buf[x.off : x.off+x.n]
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
	l.llSGE[0] = verbs.SGE{Addr: l.llStage.Addr() + uint64(slot*llSlot), Length: uint32(8 * k), LKey: l.llStage.LKey()}
	l.llWR[0] = verbs.SendWR{ID: uint64(l.peer) | llTag, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: l.llSGE[:],
		RemoteAddr: l.rAddr + uint64(c.opt.Landing+slot*llSlot), RKey: l.rKey}
	if err := l.qp.PostSend(l.llWR[:]); err != nil {
		if errors.Is(err, verbs.ErrQueueFull) {
			return false, nil
		}
		return false, fmt.Errorf("coll: rank %d: LL send to rank %d: %w", c.rank, l.peer, err)
	}
	l.llSent++
	c.llOut++
	return true, nil
}

// llTryRecv applies the next LL piece from x.peer if it has fully landed.
func (c *Comm) llTryRecv(cl *call, step int, x xfer) (bool, error) {
	l := c.links[x.peer]
	slot := int(l.llRecvd % llSlots)
	w := words(l.land.Bytes()[c.opt.Landing+slot*llSlot : c.opt.Landing+(slot+1)*llSlot])
	flag := l.llRecvd + 1
	h0 := atomic.LoadUint64(&w[0])
	if uint32(h0>>32) != flag {
		return false, nil
	}
	h1 := atomic.LoadUint64(&w[1])
	if uint32(h1>>32) != flag {
		return false, nil
	}
	seq, desc := uint32(h0)>>immSeqShift&immSeqMask, uint32(h0)&immDescMask
	switch {
	case seq != cl.seq:
		return false, fmt.Errorf("coll: rank %d: %w: step %d, rank %d sent data of call %d, we are in call %d: the ranks made their calls in a different order", c.rank, ErrMismatch, step+1, l.peer, seq, cl.seq)
	case desc != cl.desc:
		return false, fmt.Errorf("coll: rank %d: %w: rank %d: %s", c.rank, ErrMismatch, l.peer, mismatch(cl.desc, desc))
	case int(uint32(h1)) != x.n:
		return false, fmt.Errorf("coll: rank %d: %w: step %d: rank %d sent a piece of %d bytes, expected %d (the count differs)", c.rank, ErrMismatch, step+1, l.peer, uint32(h1), x.n)
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
	if x.reduce {
		cl.reduce(cl.buf[x.off:x.off+x.n], dst[:x.n])
	} else {
		copy(cl.buf[x.off:x.off+x.n], dst[:x.n])
	}
	l.llRecvd++
	l.llCreditDirty = true
	return true, c.llCredit(l)
}

// llCredit tells the peer how many of its LL pieces we consumed.
func (c *Comm) llCredit(l *link) error {
	if !l.llCreditDirty {
		return nil
	}
	src := words(l.llStage.Bytes()[llSlots*llSlot:])
	atomic.StoreUint64(&src[0], uint64(l.llRecvd))
	l.llSGE[0] = verbs.SGE{Addr: l.llStage.Addr() + llSlots*llSlot, Length: 8, LKey: l.llStage.LKey()}
	l.llWR[0] = verbs.SendWR{ID: uint64(l.peer) | llTag, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: l.llSGE[:],
		RemoteAddr: l.rAddr + uint64(c.opt.Landing+llSlots*llSlot), RKey: l.rKey}
	if err := l.qp.PostSend(l.llWR[:]); err != nil {
		if errors.Is(err, verbs.ErrQueueFull) {
			return nil // retried next round
		}
		return fmt.Errorf("coll: rank %d: LL credit to rank %d: %w", c.rank, l.peer, err)
	}
	l.llCreditDirty = false
	c.llOut++
	return nil
}

// execLL runs a call on the LL path: steps in order; in each, sends are
// encoded as slots free up and receives applied as they land (in a step
// whose receives write what its sends read, only once every send is
// encoded, which copies the data).
func (c *Comm) execLL(ctx context.Context, cl *call) error {
	if c.wc == nil {
		c.wc = make([]verbs.WC, 64)
	}
	wc := c.wc
	idle := 0
	for si, st := range cl.steps {
		sdone := c.llDone[:0]
		for range st.sends {
			sdone = append(sdone, false)
		}
		rdone := c.llDone2[:0]
		for range st.recvs {
			rdone = append(rdone, false)
		}
		c.llDone, c.llDone2 = sdone, rdone
		sendsLeft, recvsLeft := len(st.sends), len(st.recvs)
		for sendsLeft > 0 || recvsLeft > 0 {
			if c.abortReq.Load() {
				return fmt.Errorf("coll: rank %d: step %d of %d: %w by Abort", c.rank, si+1, len(cl.steps), ErrAborted)
			}
			progressed := false
			for i, x := range st.sends {
				if !sdone[i] {
					ok, err := c.llTrySend(cl, x)
					if err != nil {
						return err
					}
					if ok {
						sdone[i], sendsLeft, progressed = true, sendsLeft-1, true
					}
				}
			}
			if !st.overlap || sendsLeft == 0 {
				for j, x := range st.recvs {
					if !rdone[j] {
						ok, err := c.llTryRecv(cl, si, x)
						if err != nil {
							return err
						}
						if ok {
							rdone[j], recvsLeft, progressed = true, recvsLeft-1, true
						}
					}
				}
			}
			// Completions: LL writes finishing, and what the normal path
			// or a failing peer sends.
			for _, d := range c.devList {
				n, err := d.cq.Poll(wc)
				if err != nil {
					return fmt.Errorf("coll: rank %d: %w", c.rank, err)
				}
				for _, w := range wc[:n] {
					if err := c.llCompletion(cl, si, len(cl.steps), w); err != nil {
						return err
					}
				}
			}
			for _, l := range c.links {
				if l != nil && l.llCreditDirty {
					if err := c.llCredit(l); err != nil {
						return err
					}
				}
			}
			if !progressed {
				if err := ctx.Err(); err != nil {
					return c.stuckLL(ctx, si, len(cl.steps), st, sdone, rdone)
				}
				c.idle(&idle)
			} else {
				idle = 0
			}
		}
	}
	return nil
}

// llCompletion handles a completion during an LL call.
func (c *Comm) llCompletion(cl *call, step, steps int, w verbs.WC) error {
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
		if wrTag(w.WRID) == 3 {
			c.llOut--
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

// stuckLL is the deadline error of the LL path.
func (c *Comm) stuckLL(ctx context.Context, step, steps int, st execStep, sdone, rdone []bool) error {
	var from, to []string
	for j, x := range st.recvs {
		if !rdone[j] {
			from = append(from, fmt.Sprint(x.peer))
		}
	}
	for i, x := range st.sends {
		if !sdone[i] {
			to = append(to, fmt.Sprint(x.peer))
		}
	}
	sort.Strings(from)
	msg := fmt.Sprintf("coll: rank %d: %v at step %d of %d", c.rank, ctx.Err(), step+1, steps)
	if len(from) > 0 {
		msg += "; not heard from rank " + strings.Join(from, ", ")
	}
	if len(to) > 0 {
		msg += "; no free slot at rank " + strings.Join(to, ", ")
	}
	return fmt.Errorf("%s: %w", msg, ctx.Err())
}

// llLanded reports whether an LL piece from l's peer has landed that no
// call took.
func (c *Comm) llLanded(l *link) bool {
	if l.llStage == nil {
		return false
	}
	slot := int(l.llRecvd % llSlots)
	w := words(l.land.Bytes()[c.opt.Landing+slot*llSlot:])
	return uint32(atomic.LoadUint64(&w[0])>>32) == l.llRecvd+1
}

// flushLL waits, until deadline, for our LL writes to complete, so that
// Close does not destroy a QP with a piece the peer is waiting for (a
// call on the LL path returns once its writes are posted).
func (c *Comm) flushLL(deadline time.Time) {
	c.drain(deadline, func() bool { return c.llOut > 0 })
}
