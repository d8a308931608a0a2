package coll

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
)

// The low-latency path (as NCCL's LL protocol). A call whose every
// transfer fits one small piece, on a communicator whose links all place
// writes in order (verbs.CapOrderedPlacement: shm0, udp devices), does
// not wait for completions: the sender encodes each piece into 8-byte
// words of 4 data bytes and a 4-byte flag, and RDMA-WRITEs it into the
// next LL slot of the peer's landing buffer; the receiver polls its own
// memory until every word carries the piece's flag (so the order in which
// the words land does not matter). Consumed pieces are acknowledged by
// writing the count consumed into the sender's credit word, which the
// sender reads in its own memory (credit says when). Where a write
// completes at post (CapCompleteAtPost: shm0) the initiator's copy is the
// delivery, so no step waits for the other process's provider progress;
// elsewhere (udp) no step waits for an acknowledgement or a completion.
//
// Landing buffer layout: [Landing bytes of normal slots][llSlots LL slots
// of slot bytes][credit word: LL pieces the peer consumed of ours]
// [the flagged area, fl.go].
// An LL slot: word 0 = call number<<24 | descriptor, word 1 = byte count,
// each with the flag in its high half; then the data words.
//
// A slot holds the largest LL piece of the communicator (max data
// bytes): slot = 16 + 2*max; the LL area is llSlots of them and the
// credit word (area), the sender's staging the slots and the credit
// source (stageN).
const (
	llSlots   = 8
	llPayload = 16 << 10 // data bytes of the largest LL piece
	llTag     = 3 << 40  // work request ID tag of staging writes: LL pieces, flagged headers, credit words
)

// llProto is the LL path's state.
type llProto struct {
	c       *Comm
	on      bool // every link of the communicator takes it
	max     int  // the largest transfer it takes (llMaxAtPost or llMaxAcked)
	slot    int  // an LL slot's bytes, header and encoded data
	base    int  // the LL area's offset in a landing buffer
	area    int  // its bytes: the slots and the credit word
	stageN  int  // the LL staging's bytes: the slots and the credit source
	scratch [llPayload + 4]byte
	peers   []llPeer
}

// llPeer counts the LL pieces sent to and received from one peer.
type llPeer struct {
	sent, recvd uint32
	reported    uint32 // recvd as last written into the peer's credit word
}

func (p *llProto) init(c *Comm, on bool, max, base int) {
	*p = llProto{c: c, on: on, max: max, slot: 16 + 2*max, base: base, peers: make([]llPeer, c.size)}
	p.area, p.stageN = llSlots*p.slot+64, llSlots*p.slot+8
}

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
// second write; where every write completes at post (shm0) the flagged
// path wins from 2 KiB (2 ranks, rd, `ibex coll all_reduce -b 128 -e
// 4K`: 1 KiB 2.3-3.3 µs on LL against 3.4-3.8 flagged, 2 KiB 4.2-4.5
// against 3.2-3.8). Where it does not (udp0) a flagged step waits for its
// data writes' acknowledgements, an LL step does not, so LL takes all it
// can there.
const (
	llMaxAtPost = 1 << 10
	llMaxAcked  = llPayload
)

func (p *llProto) pieces(xfer) int   { return 1 }
func (p *llProto) start(*call) error { return nil }
func (p *llProto) busy() bool        { return false }

// wantCQ: a waiting LL call looks one round in eight (and in its first,
// or when 64 of its writes are unreaped): its own completions only retire
// writes, and a peer's abort notice can wait that long.
func (p *llProto) wantCQ(first bool, idle int) bool {
	return first || idle&7 == 7 || p.c.stagedOut >= 64
}

// send encodes and posts the piece of x if an LL slot of the peer is
// free.
func (p *llProto) send(cl *call, x xfer, _ int) (bool, error) {
	c, lp, l := p.c, &p.peers[x.peer], p.c.links[x.peer]
	land := words(l.land.Bytes()[p.base:])
	consumed := uint32(atomic.LoadUint64(&land[llSlots*p.slot/8]))
	if lp.sent-consumed >= llSlots {
		return false, nil
	}
	slot := int(lp.sent % llSlots)
	stage := l.stage.mr.Bytes()[slot*p.slot : (slot+1)*p.slot]
	flag := uint64(lp.sent+1) << 32
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
	posted, err := c.stagePost(l, slot*p.slot, 8*k, p.base+slot*p.slot, false)
	if err != nil {
		return false, fmt.Errorf("coll: rank %d: LL send to rank %d: %w", c.rank, l.peer, err)
	}
	if posted {
		lp.sent++
	}
	return posted, nil
}

// recv applies the next LL piece from x.peer if it has fully landed. In
// a step whose receives write what its sends read, only once every send
// is encoded (which copies the data).
func (p *llProto) recv(cl *call, x xfer, _ int) (bool, error) {
	if cl.steps[cl.step].overlap && cl.sendsLeft > 0 {
		return false, nil
	}
	c, lp, l := p.c, &p.peers[x.peer], p.c.links[x.peer]
	slot := int(lp.recvd % llSlots)
	at := p.base + slot*p.slot
	w := words(l.land.Bytes()[at : at+p.slot])
	flag := lp.recvd + 1
	h0 := atomic.LoadUint64(&w[0])
	if uint32(h0>>32) != flag {
		return false, nil
	}
	h1 := atomic.LoadUint64(&w[1])
	if uint32(h1>>32) != flag {
		return false, nil
	}
	if err := c.checkPiece(cl, l, h0, int(uint32(h1)), x.n); err != nil {
		return false, err
	}
	nw := (x.n + 3) / 4
	dst := p.scratch[:4*nw]
	for i := range nw {
		v := atomic.LoadUint64(&w[2+i])
		if uint32(v>>32) != flag {
			return false, nil // still landing
		}
		binary.LittleEndian.PutUint32(dst[4*i:], uint32(v))
	}
	cl.land(x.off, x.off+x.n, dst[:x.n], x.reduce)
	lp.recvd++
	return true, p.credit(l, false)
}

// credit tells the peer how many of its LL pieces we consumed, once half
// the slots are unreported (or now, with force): the peer's sender can be
// stopped only with llSlots pieces unreported, all of which we consume in
// order without waiting for it, so it always hears of them. One credit
// write per llSlots/2 pieces, not one per piece.
func (p *llProto) credit(l *link, force bool) error {
	lp := &p.peers[l.peer]
	if l.stage.mr == nil || !force && lp.recvd-lp.reported < llSlots/2 {
		return nil
	}
	src := words(l.stage.mr.Bytes()[llSlots*p.slot:])
	atomic.StoreUint64(&src[0], uint64(lp.recvd))
	posted, err := p.c.stagePost(l, llSlots*p.slot, 8, p.base+llSlots*p.slot, force)
	if err != nil {
		return fmt.Errorf("coll: rank %d: LL credit to rank %d: %w", p.c.rank, l.peer, err)
	}
	if posted {
		lp.reported = lp.recvd
	}
	return nil
}

// header peeks at the header word of the next LL piece from l's peer: ok
// when one has landed that no call took yet.
func (p *llProto) header(l *link) (uint64, bool) {
	lp := &p.peers[l.peer]
	slot := int(lp.recvd % llSlots)
	w := words(l.land.Bytes()[p.base+slot*p.slot:])
	h0 := atomic.LoadUint64(&w[0])
	return h0, uint32(h0>>32) == lp.recvd+1
}
