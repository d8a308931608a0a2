package coll

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/coll/reduce"
	"github.com/ibex-rdma/ibex/verbs"
)

// The executor runs a rank's program over the links: each step's sends
// become RDMA WRITE_WITH_IMM of pieces of the working buffer into the
// peer's landing buffer, one credit (landing slot) per piece; the receiver
// copies or reduces a piece into its working buffer and returns the credit
// with a zero-byte WRITE_WITH_IMM. Everything is driven by completions, so
// two ranks sending to each other in a step never wait on each other's
// credits in a cycle. A step ends when its sends completed and its
// receives were applied; a send in step i reads what steps < i left.

// ErrAborted is wrapped by the error of every call on a communicator that
// was aborted: by Abort, by a peer that aborted or failed, or by an
// earlier failed call (after which the links' state is unknown).
var ErrAborted = errors.New("communicator aborted")

// ErrMismatch is wrapped by the error of a call whose peers made a
// different call: another collective, count, type, op, root or algorithm,
// or the same calls in another order.
var ErrMismatch = errors.New("mismatched calls")

// xfer is one transfer of a step: bytes [off, off+n) of the working
// buffer to (send) or from (receive) a peer.
type xfer struct {
	peer   int
	off, n int
	reduce bool // receive: reduce into the buffer instead of overwriting
}

type execStep struct {
	sends, recvs []xfer
	// overlap: a receive writes bytes a send of the same step reads (rd
	// all-reduce); such a receive piece waits for those send pieces.
	overlap bool
}

// The immediate of a WRITE_WITH_IMM. Bit 31 clear: a data piece, bits
// 24..30 the call's number (mod 127; 127 marks point-to-point), bits
// 0..23 the call's descriptor. Bits 31 and 30 set: the sender aborted the
// communicator. Bit 31 alone: a credit return, the low bits how many.
const (
	immCredit   = 1 << 31
	immAbort    = 1<<31 | 1<<30
	immSeqShift = 24
	immSeqMask  = 0x7f
	immDescMask = 1<<24 - 1
	p2pSeq      = immSeqMask // the call number point-to-point pieces carry
	callSeqMod  = immSeqMask // collectives number their calls mod 127
)

// The call descriptor (24 bits) every data piece carries, so that a rank
// that receives a piece of another call says so instead of reducing it:
//
//	bits 21..23 collective (7: point-to-point), 18..20 algorithm,
//	15..17 op, 11..14 dtype, 7..10 root mod 16, 0..6 a hash of the count
func descriptor(kind algo.Collective, a algo.Algorithm, count int, dt reduce.DType, op reduce.Op, root int) uint32 {
	h := uint32(uint64(count)*0x9E3779B97F4A7C15>>57) & 0x7f
	return uint32(kind&7)<<21 | uint32(a&7)<<18 | uint32(op&7)<<15 | uint32(dt&15)<<11 | uint32(root&15)<<7 | h
}

const p2pKind = 7

// describe names what a descriptor says for a mismatch error.
func describe(d uint32) string {
	kind := algo.Collective(d >> 21 & 7)
	dt, op := reduce.DType(d>>11&15), reduce.Op(d>>15&7)
	if kind == p2pKind {
		return fmt.Sprintf("send/recv of %v", dt)
	}
	return fmt.Sprintf("%v of %v %v (%v)", kind, dt, op, algo.Algorithm(d>>18&7))
}

// mismatch explains how descriptor theirs differs from ours.
func mismatch(ours, theirs uint32) string {
	var diff []string
	if ours>>11 != theirs>>11 {
		diff = append(diff, fmt.Sprintf("it called %s, we %s", describe(theirs), describe(ours)))
	}
	if ours>>7&15 != theirs>>7&15 {
		diff = append(diff, "the root differs")
	}
	if ours&0x7f != theirs&0x7f {
		diff = append(diff, "the count differs")
	}
	return strings.Join(diff, "; ")
}

// call is one collective or point-to-point call for the executor.
type call struct {
	seq   uint32 // call number mod 127, or p2pSeq
	desc  uint32
	steps []execStep
	buf   []byte            // the working buffer
	lkeys map[string]uint32 // its keys and addresses per device
	addrs map[string]uint64
	dt    reduce.DType // receives that reduce apply op on dt
	op    reduce.Op
	rerr  error // the first reduction error
	mode  int   // the path: modeNormal, modeLL or modeFL

	// An out-of-place all-reduce on a fast path reads the caller's input
	// (src, registered: srcKeys, srcAddrs) for the bytes of buf no
	// receive has written yet; inited lists those written, sorted and
	// disjoint. A send of such bytes reads src; a receive that reduces
	// into them writes buf = src op piece.
	src      []byte
	srcKeys  map[string]uint32
	srcAddrs map[string]uint64
	inited   []span
}

// span is the bytes [lo, hi) of a call's buffer.
type span struct{ lo, hi int }

// coverage reports whether [lo, hi) was written in full, or not at all.
func (cl *call) coverage(lo, hi int) (full, none bool) {
	for _, s := range cl.inited {
		if s.hi <= lo || s.lo >= hi {
			continue
		}
		return s.lo <= lo && s.hi >= hi, false
	}
	return false, true
}

// mark records [lo, hi) as written, merging it with the spans it touches.
func (cl *call) mark(lo, hi int) {
	if lo >= hi {
		return
	}
	i := 0
	for i < len(cl.inited) && cl.inited[i].hi < lo {
		i++
	}
	j := i
	for j < len(cl.inited) && cl.inited[j].lo <= hi {
		lo, hi = min(lo, cl.inited[j].lo), max(hi, cl.inited[j].hi)
		j++
	}
	// Spans i..j-1 merge into [lo, hi), which takes index i.
	if i == j {
		cl.inited = append(cl.inited, span{})
		copy(cl.inited[i+1:], cl.inited[i:])
	} else {
		cl.inited = append(cl.inited[:i+1], cl.inited[j:]...)
	}
	cl.inited[i] = span{lo, hi}
}

// fill copies the input into the bytes of [lo, hi) not written yet, and
// marks them written.
func (cl *call) fill(lo, hi int) {
	if cl.src == nil {
		return
	}
	at := lo
	for _, s := range cl.inited {
		if s.hi <= at || s.lo >= hi {
			continue
		}
		if s.lo > at {
			copy(cl.buf[at:s.lo], cl.src[at:s.lo])
		}
		at = max(at, s.hi)
	}
	if at < hi {
		copy(cl.buf[at:hi], cl.src[at:hi])
	}
	cl.mark(lo, hi)
}

// sendFromSrc reports whether a send of [lo, hi) reads the input: when
// none of it was written. Partly written, it is completed from the input
// first, and the send reads buf.
func (cl *call) sendFromSrc(lo, hi int) bool {
	if cl.src == nil || lo >= hi {
		return false
	}
	full, none := cl.coverage(lo, hi)
	if !full && !none {
		cl.fill(lo, hi)
	}
	return none
}

// land applies a received piece to buf[lo:hi]: reduced into it, or
// copied; reduced with the input when the bytes were not written yet.
func (cl *call) land(lo, hi int, piece []byte, reduceIt bool) {
	dst := cl.buf[lo:hi]
	switch {
	case !reduceIt:
		copy(dst, piece)
	case cl.src == nil:
		cl.apply(dst, piece)
	default:
		full, none := cl.coverage(lo, hi)
		switch {
		case none:
			if err := reduce.Reduce3(dst, cl.src[lo:hi], piece, cl.dt, cl.op); err != nil && cl.rerr == nil {
				cl.rerr = err
			}
		case !full:
			cl.fill(lo, hi)
			fallthrough
		default:
			cl.apply(dst, piece)
		}
	}
	if cl.src != nil {
		cl.mark(lo, hi)
	}
}

// The paths a call can take: the normal one (exec), LL (ll.go), flagged
// (fl.go).
const (
	modeNormal = iota
	modeLL
	modeFL
)

// apply reduces src into dst, keeping the first error for the caller.
func (cl *call) apply(dst, src []byte) {
	if err := reduce.Reduce(dst, src, cl.dt, cl.op); err != nil && cl.rerr == nil {
		cl.rerr = err
	}
}

// pathFor is the path of a program, one every rank decides alike: LL if
// every rank's program fits it (progs gives rank q's), else flagged if the
// communicator's links take it, else normal.
func (c *Comm) pathFor(progs func(q int) []execStep) int {
	ll, fl := !c.noLL, !c.noFL
	for q := 0; (ll || fl) && q < c.size; q++ {
		p := progs(q)
		ll = ll && llOK(p, c.llMax)
		fl = fl && onePerLink(p)
	}
	switch {
	case ll:
		return modeLL
	case fl:
		return modeFL
	}
	return modeNormal
}

// linkRun is a link's state during one call.
type linkRun struct {
	l        *link
	lkey     uint32 // the working buffer's lkey and address on the link's device
	addr     uint64
	sendQ    fifo[piece]
	recvQ    fifo[piece]
	outstand int // sends posted, not completed
	done     int // this step's sends completed
	sge      [1]verbs.SGE
	wr       [1]verbs.SendWR
}

type piece struct {
	off, n int
	reduce bool
	gates  []gate // overlap steps: sends that must complete before this receive applies
}

// gate: the first n send pieces of this step to rank q.
type gate struct{ q, n int }

// run executes one call. Any error leaves the links in an unknown state:
// the communicator is then aborted (the error wraps ErrAborted as well as
// its cause), and the peers are told.
func (c *Comm) run(ctx context.Context, cl *call) error {
	if c.broken != nil {
		return c.broken
	}
	exec := c.exec
	if cl.mode != modeNormal {
		exec = c.execFast
	}
	if err := exec(ctx, cl); err != nil {
		c.breakComm(err)
		return c.broken
	}
	return nil
}

// breakComm aborts the communicator after err: later calls fail at once,
// and every peer gets an abort notice so that its calls fail too instead
// of waiting for their deadlines (best effort: a dead link cannot carry
// it; Close gives the notices time to land).
func (c *Comm) breakComm(err error) {
	if !errors.Is(err, ErrAborted) {
		err = fmt.Errorf("%w (%w)", err, ErrAborted)
	}
	c.broken = err
	for _, l := range c.links {
		if l == nil {
			continue
		}
		wr := verbs.SendWR{ID: uint64(l.peer) | noticeTag, Opcode: verbs.WRRDMAWriteWithImm, Imm: immAbort,
			RemoteAddr: l.rAddr, RKey: l.rKey, Flags: verbs.SendSignaled}
		if l.qp.PostSend([]verbs.SendWR{wr}) == nil {
			c.notices++
		}
	}
}

// Work request IDs: a data piece's is the peer's rank; a credit return's
// and an abort notice's are tagged.
const (
	creditTag = 1 << 40
	noticeTag = 2 << 40
)

// wrTag is the tag of a send work request ID: 0 data, 1 credit return,
// 2 abort notice, 3 LL write (or flagged header or credit), 4 flagged data.
func wrTag(id uint64) uint64 { return id >> 40 & 7 }

// flushNotices gives the abort notices up to noticeWait to complete before
// Close destroys the QPs that carry them.
func (c *Comm) flushNotices() {
	c.drain(time.Now().Add(noticeWait), func() bool { return c.notices > 0 })
}

// drain polls the CQs until pending reports false or deadline passes,
// counting our abort notices and LL writes as they complete and keeping
// what peers send (pieces, abort notices) for Close's report.
func (c *Comm) drain(deadline time.Time, pending func() bool) {
	wc := make([]verbs.WC, 32)
	for pending() && time.Now().Before(deadline) {
		got := 0
		for _, d := range c.devList {
			n, _ := d.cq.Poll(wc)
			for _, w := range wc[:n] {
				if w.Opcode < verbs.WCRecv || w.Status != verbs.WCSuccess {
					switch wrTag(w.WRID) {
					case 2:
						c.notices--
					case 3:
						c.llOut--
					}
					continue
				}
				for _, l := range c.links {
					if l == nil || l.qp.Num() != w.QPNum {
						continue
					}
					switch {
					case w.Imm&immAbort == immAbort:
						c.peerAborted = l.peer
					case w.Imm&immCredit == 0:
						l.arrived.push(arrival{n: int(w.ByteLen)})
					}
				}
			}
			got += n
		}
		if got == 0 {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

const noticeWait = time.Second

func (c *Comm) exec(ctx context.Context, cl *call) error {
	pieceMax := c.opt.Landing / c.opt.Credits
	if c.runs == nil {
		c.runs = make([]*linkRun, c.size)
		for q, l := range c.links {
			if l != nil {
				c.runs[q] = &linkRun{l: l}
			}
		}
		c.wc = make([]verbs.WC, 64)
	}
	runs := c.runs
	for _, r := range runs {
		if r != nil {
			r.lkey = cl.lkeys[r.l.dev.name]
			r.addr = cl.addrs[r.l.dev.name]
			r.sendQ.reset()
			r.recvQ.reset()
			r.outstand = 0
		}
	}
	cut := func(x xfer, emit func(off, n int)) {
		for off := x.off; off < x.off+x.n || (x.n == 0 && off == x.off); off += pieceMax {
			emit(off, min(pieceMax, x.off+x.n-off))
			if x.n == 0 {
				break
			}
		}
	}
	wc := c.wc
	idle := 0
	for si, st := range cl.steps {
		pendingSends, pendingRecvs := 0, 0
		c.gateBuf = c.gateBuf[:0]
		for _, r := range runs {
			if r != nil {
				r.done = 0
			}
		}
		for _, x := range st.sends {
			r := runs[x.peer]
			cut(x, func(off, n int) {
				r.sendQ.push(piece{off: off, n: n})
				pendingSends++
			})
		}
		for _, x := range st.recvs {
			r := runs[x.peer]
			cut(x, func(off, n int) {
				p := piece{off: off, n: n, reduce: x.reduce}
				if st.overlap {
					p.gates = gates(runs, off, n, &c.gateBuf)
				}
				r.recvQ.push(p)
				pendingRecvs++
			})
		}
		// Receives for what will arrive: data pieces and credit returns;
		// and pieces that arrived early (the peer was a step ahead).
		for _, r := range runs {
			if r == nil {
				continue
			}
			if err := c.postRecvs(r); err != nil {
				return err
			}
			k, err := c.match(runs, r, cl, si)
			if err != nil {
				return err
			}
			pendingRecvs -= k
		}
		for pendingSends > 0 || pendingRecvs > 0 {
			if c.abortReq.Load() {
				return fmt.Errorf("coll: rank %d: step %d of %d: %w by Abort", c.rank, si+1, len(cl.steps), ErrAborted)
			}
			for _, r := range runs {
				if r == nil {
					continue
				}
				for r.sendQ.len() > 0 && r.l.credit > 0 {
					p := r.sendQ.front()
					slot := r.l.sent % c.opt.Credits
					wr := verbs.SendWR{ID: uint64(r.l.peer), Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled,
						Imm:        cl.seq<<immSeqShift | cl.desc,
						RemoteAddr: r.l.rAddr + uint64(slot*pieceMax), RKey: r.l.rKey}
					if p.n > 0 {
						r.sge[0] = verbs.SGE{Addr: r.addr + uint64(p.off), Length: uint32(p.n), LKey: r.lkey}
						wr.SGL = r.sge[:]
					}
					r.wr[0] = wr
					if err := r.l.qp.PostSend(r.wr[:]); err != nil {
						if errors.Is(err, verbs.ErrQueueFull) {
							break // completions not yet reaped: back-pressure, retried next round
						}
						return fmt.Errorf("coll: rank %d: step %d: send to rank %d: %w", c.rank, si+1, r.l.peer, err)
					}
					r.sendQ.pop()
					r.l.sent++
					r.l.credit--
					r.outstand++
				}
			}
			progressed, sendDone := false, false
			for _, d := range c.devList {
				n, err := d.cq.Poll(wc)
				if err != nil {
					return fmt.Errorf("coll: rank %d: %w", c.rank, err)
				}
				for _, w := range wc[:n] {
					progressed = true
					r := c.runByQPN(runs, w.QPNum)
					if w.Status != verbs.WCSuccess {
						who := "?"
						if r != nil {
							who = fmt.Sprint(r.l.peer)
						}
						if wrTag(w.WRID) == 2 {
							continue // an abort notice of ours that could not be delivered
						}
						return fmt.Errorf("coll: rank %d: step %d of %d: link to rank %s failed: %v", c.rank, si+1, len(cl.steps), who, w)
					}
					if r == nil {
						continue
					}
					switch {
					case w.Opcode == verbs.WCRDMAWrite:
						if w.WRID != uint64(r.l.peer) { // a credit return, notice or LL write completing
							if wrTag(w.WRID) == 3 {
								c.llOut--
							}
							continue
						}
						r.outstand--
						r.done++
						pendingSends--
						sendDone = true
					default:
						data, err := c.received(r.l, w, cl, si, len(cl.steps), false)
						if err != nil {
							return err
						}
						if !data {
							continue
						}
						k, err := c.match(runs, r, cl, si)
						if err != nil {
							return err
						}
						pendingRecvs -= k
					}
				}
			}
			if sendDone && st.overlap {
				for _, r := range runs {
					if r != nil {
						k, err := c.match(runs, r, cl, si)
						if err != nil {
							return err
						}
						pendingRecvs -= k
					}
				}
			}
			if !progressed {
				if err := ctx.Err(); err != nil {
					return c.stuck(ctx, si, len(cl.steps), runs)
				}
				c.idle(&idle)
			} else {
				idle = 0
			}
			for _, r := range runs {
				if r == nil {
					continue
				}
				if err := c.returnCredits(r.l); err != nil {
					return err
				}
				if r.l.recvsPost < 2*c.opt.Credits {
					if err := c.postRecvs(r); err != nil {
						return err
					}
				}
			}
		}
	}
	// Landing slots this call freed go back now, not at the next call: a
	// peer may be ahead, waiting for them.
	for _, r := range runs {
		if r != nil {
			if err := c.returnCredits(r.l); err != nil {
				return err
			}
		}
	}
	return nil
}

// gates lists, per link, how many of the step's send pieces (already cut,
// in the links' sendQ) must complete before a receive into [off, off+n)
// may be applied: up to the last one that reads those bytes.
//
// The lists are appended to buf (one array for the step, reset with it,
// so a call allocates nothing once it grew); each is capped at its end.
func gates(runs []*linkRun, off, n int, buf *[]gate) []gate {
	start := len(*buf)
	g := *buf
	for q, r := range runs {
		if r == nil {
			continue
		}
		last := -1
		for i, s := range r.sendQ.items() {
			if s.off < off+n && off < s.off+s.n {
				last = i
			}
		}
		if last >= 0 {
			g = append(g, gate{q: q, n: last + 1})
		}
	}
	*buf = g
	return g[start:len(g):len(g)]
}

// arrival is a piece in a landing slot, not yet applied.
type arrival struct {
	slot, n   int
	seq, desc uint32
}

// match applies arrived pieces to the receives the current step expects,
// in order, returning the landing slots as credits. It returns how many it
// applied.
func (c *Comm) match(runs []*linkRun, r *linkRun, cl *call, step int) (int, error) {
	pieceMax := c.opt.Landing / c.opt.Credits
	k := 0
	for r.recvQ.len() > 0 && r.l.arrived.len() > 0 {
		a, p := r.l.arrived.front(), r.recvQ.front()
		if a.seq != cl.seq {
			what := fmt.Sprintf("call %d", cl.seq)
			if cl.seq == p2pSeq {
				what = "a send/recv"
			}
			theirs := fmt.Sprintf("call %d", a.seq)
			if a.seq == p2pSeq {
				theirs = "a send/recv"
			}
			return k, fmt.Errorf("coll: rank %d: %w: in %s, step %d, rank %d sent data of %s: the ranks made their calls in a different order", c.rank, ErrMismatch, what, step+1, r.l.peer, theirs)
		}
		if a.desc != cl.desc {
			return k, fmt.Errorf("coll: rank %d: %w: rank %d: %s", c.rank, ErrMismatch, r.l.peer, mismatch(cl.desc, a.desc))
		}
		if a.n != p.n {
			return k, fmt.Errorf("coll: rank %d: %w: step %d: rank %d sent a piece of %d bytes, expected %d (the count differs)", c.rank, ErrMismatch, step+1, r.l.peer, a.n, p.n)
		}
		for _, g := range p.gates {
			if runs[g.q].done < g.n {
				return k, nil // our send of these bytes is still in flight
			}
		}
		r.l.arrived.pop()
		r.recvQ.pop()
		src := r.l.land.Bytes()[a.slot*pieceMax : a.slot*pieceMax+a.n]
		if p.reduce {
			cl.apply(cl.buf[p.off:p.off+p.n], src)
		} else {
			copy(cl.buf[p.off:p.off+p.n], src)
		}
		r.l.owed++
		k++
	}
	return k, nil
}

// received handles a receive completion on link l during call cl: an
// abort notice fails the call; a credit return adds credits; a data piece
// joins the link's arrivals (data reports it). A piece of this very call
// that differs from ours is a mismatch, said at once (match would not see
// it if no receive of this call waits on that link); on the LL path any
// normal piece of this call is (its sender took the other path).
// Point-to-point calls all share one number, so theirs are checked in
// order only, by match.
func (c *Comm) received(l *link, w verbs.WC, cl *call, step, steps int, ll bool) (data bool, err error) {
	l.recvsPost--
	switch {
	case w.Imm&immAbort == immAbort:
		return false, fmt.Errorf("coll: rank %d: step %d of %d: rank %d aborted the communicator (its own error says why): %w", c.rank, step+1, steps, l.peer, ErrAborted)
	case w.Imm&immCredit != 0:
		l.credit += int(w.Imm &^ immCredit)
		return false, nil
	}
	a := arrival{slot: l.recvd % c.opt.Credits, n: int(w.ByteLen), seq: (w.Imm >> immSeqShift) & immSeqMask, desc: w.Imm & immDescMask}
	if a.seq == cl.seq && cl.seq != p2pSeq && (ll || a.desc != cl.desc) {
		why := mismatch(cl.desc, a.desc)
		if ll {
			why = strings.TrimPrefix(why+"; it sent this call's data on the normal path, we took the LL path", "; ")
		}
		return false, fmt.Errorf("coll: rank %d: %w: rank %d: %s", c.rank, ErrMismatch, l.peer, why)
	}
	l.arrived.push(a)
	l.recvd++
	return true, nil
}

// idle is called after a round that found no completion. Like NCCL, a
// rank spins while a collective is in progress — yielding to other
// goroutines (ranks of one process, providers' goroutines) — measured: a
// two-process all-reduce of 8 bytes on shm0 takes ~100 µs this way and
// ~1-4 ms when it also yields the thread or naps. After spinFor without a
// completion (a slow or stuck peer) it sleeps on a CQ in short naps.
func (c *Comm) idle(n *int) {
	*n++
	if *n == 1 {
		c.idleSince = time.Now()
	}
	if *n%256 != 0 || time.Since(c.idleSince) < spinFor {
		runtime.Gosched()
		if c.yieldThread {
			// udp0's progress runs on its own thread, which needs a core
			// this spinning thread may hold; and with more ranks on this
			// host than cores, the rank that has work may need it too.
			_, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		}
		return
	}
	for _, d := range c.devList {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		_ = d.cq.Wait(ctx)
		cancel()
	}
}

// spinFor is how long a waiting rank spins before it naps.
const spinFor = 50 * time.Millisecond

func (c *Comm) runByQPN(runs []*linkRun, qpn uint32) *linkRun {
	for _, r := range runs {
		if r != nil && r.l.qp.Num() == qpn {
			return r
		}
	}
	return nil
}

// postRecvs keeps enough zero-length receives posted on a link for the
// data pieces and credit returns that may arrive.
func (c *Comm) postRecvs(r *linkRun) error {
	want := 3 * c.opt.Credits
	rw := []verbs.RecvWR{{ID: uint64(r.l.peer)}}
	for r.l.recvsPost < want {
		if err := r.l.qp.PostRecv(rw); err != nil {
			return fmt.Errorf("coll: rank %d: post receive for rank %d: %w", c.rank, r.l.peer, err)
		}
		r.l.recvsPost++
	}
	return nil
}

// returnCredits tells the peer how many landing slots are free again, in
// one zero-byte WRITE_WITH_IMM for all owed so far (the immediate carries
// the count). A full send queue (completions not yet reaped) keeps them
// owed for the next round.
func (c *Comm) returnCredits(l *link) error {
	if l.owed == 0 {
		return nil
	}
	wr := verbs.SendWR{ID: uint64(l.peer) | creditTag, Opcode: verbs.WRRDMAWriteWithImm, Imm: immCredit | uint32(l.owed),
		RemoteAddr: l.rAddr, RKey: l.rKey, Flags: verbs.SendSignaled}
	if err := l.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		if errors.Is(err, verbs.ErrQueueFull) {
			return nil
		}
		return fmt.Errorf("coll: rank %d: credit to rank %d: %w", c.rank, l.peer, err)
	}
	l.owed = 0
	return nil
}

// stuck builds the deadline error: which ranks we still wait for, and at
// which step.
func (c *Comm) stuck(ctx context.Context, step, steps int, runs []*linkRun) error {
	var from, to []string
	for q, r := range runs {
		if r == nil {
			continue
		}
		if r.recvQ.len() > 0 {
			from = append(from, fmt.Sprintf("%d (%d pieces)", q, r.recvQ.len()))
		}
		if r.sendQ.len() > 0 || r.outstand > 0 {
			to = append(to, fmt.Sprintf("%d (%d pieces)", q, r.sendQ.len()+r.outstand))
		}
	}
	sort.Strings(from)
	msg := fmt.Sprintf("coll: rank %d: %v at step %d of %d", c.rank, ctx.Err(), step+1, steps)
	if len(from) > 0 {
		msg += "; not heard from rank " + strings.Join(from, ", ")
	}
	if len(to) > 0 {
		msg += "; not delivered to rank " + strings.Join(to, ", ")
	}
	return fmt.Errorf("%s: %w", msg, ctx.Err())
}

// fifo is a queue that reuses its array: it rewinds when emptied, so a
// queue that is drained every step never grows its array again.
type fifo[T any] struct {
	s    []T
	head int
}

func (q *fifo[T]) push(v T)   { q.s = append(q.s, v) }
func (q *fifo[T]) len() int   { return len(q.s) - q.head }
func (q *fifo[T]) front() T   { return q.s[q.head] }
func (q *fifo[T]) items() []T { return q.s[q.head:] }
func (q *fifo[T]) reset()     { q.s, q.head = q.s[:0], 0 }

func (q *fifo[T]) pop() {
	q.head++
	if q.head == len(q.s) {
		q.reset()
	}
}
