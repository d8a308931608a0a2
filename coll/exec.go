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

// The executor runs a rank's program over the links, step by step, on
// the protocol of the call's path (protocol: normal.go, ll.go, fl.go):
// in each round it posts the sends' pieces the protocol has room for,
// applies the receives' pieces that have landed, polls the completion
// queues, and settles what the protocols owe the peers (credits). A step
// ends when its sends completed and its receives were applied; a send in
// step i reads what steps < i left.

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
	rerr  error    // the first reduction error
	mode  int      // the path: modeNormal, modeLL or modeFL
	info  callInfo // what the flight recorder keeps of it (recorder.go)

	// Where the executor is: the step, and its send pieces not yet posted.
	step, sendsLeft int

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

// The paths a call can take: the normal one (normal.go), LL (ll.go),
// flagged (fl.go).
const (
	modeNormal = iota
	modeLL
	modeFL
)

var pathNames = [...]string{modeNormal: "normal", modeLL: "LL", modeFL: "flagged"}

// protocol is how a call's pieces move over a link and how the receiver
// learns they landed, one implementation per path, as NCCL's primitives
// (prims_ll.h, prims_simple.h): the normal path (normalProto), LL
// (llProto), flagged (flProto). Each keeps its own state: its geometry in
// the landing buffers and its counts per link. The executor drives any
// of them through a call's steps; every rank of a call uses the same one
// (pathFor).
type protocol interface {
	// pieces is how many pieces transfer x takes.
	pieces(x xfer) int
	// start readies the links for step cl.step (at step 0, for the call).
	start(cl *call) error
	// send posts piece k of send x of the step; false if the link has no
	// room for it yet (the executor retries next round, and tries no
	// later piece to that peer in this one).
	send(cl *call, x xfer, k int) (bool, error)
	// recv applies piece k of receive x if it has landed and may be
	// applied; false to retry next round (likewise in order per peer).
	recv(cl *call, x xfer, k int) (bool, error)
	// busy reports writes of the step in flight that it must wait for.
	busy() bool
	// wantCQ reports whether this round should poll the completion
	// queues: first is the call's first round, idle the rounds since the
	// last progress.
	wantCQ(first bool, idle int) bool
}

// protocol returns the protocol of a path.
func (c *Comm) protocol(mode int) protocol {
	switch mode {
	case modeLL:
		return &c.ll
	case modeFL:
		return &c.fl
	}
	return &c.normal
}

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
	ll, fl := c.ll.on, c.fl.on
	for q := 0; (ll || fl) && q < c.size; q++ {
		p := progs(q)
		ll = ll && llOK(p, c.ll.max)
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

// run executes one call. Any error leaves the links in an unknown state:
// the communicator is then aborted (the error wraps ErrAborted as well as
// its cause), and the peers are told.
func (c *Comm) run(ctx context.Context, cl *call) error {
	if c.broken != nil {
		return c.broken
	}
	c.rec.begin(cl, c.calls)
	if err := c.execute(ctx, cl); err != nil {
		c.breakComm(err)
		return c.broken
	}
	c.rec.end()
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
	c.broken = c.healthAbort(c.broken) // the status of the ranks, the flight record's dump (health.go)
}

// Work request IDs: a data piece's is the peer's rank; a credit return's
// and an abort notice's are tagged.
const (
	creditTag = 1 << 40
	noticeTag = 2 << 40
)

// wrTag is the tag of a send work request ID: 0 normal data, 1 credit
// return, 2 abort notice, 3 staging write (LL piece, flagged header, LL
// or flagged credit), 4 flagged data.
func wrTag(id uint64) uint64 { return id >> 40 & 7 }

// flushNotices gives the abort notices up to noticeWait to complete before
// Close destroys the QPs that carry them.
func (c *Comm) flushNotices() {
	c.drain(time.Now().Add(noticeWait), func() bool { return c.notices > 0 })
}

// drain polls the CQs until pending reports false or deadline passes,
// counting our abort notices and staging writes as they complete and keeping
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
						c.stagedOut--
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
						c.normal.peers[l.peer].arrived.push(arrival{n: int(w.ByteLen)})
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

// execute runs a call's steps on its path's protocol.
func (c *Comm) execute(ctx context.Context, cl *call) error {
	p := c.protocol(cl.mode)
	if c.wc == nil {
		c.wc = make([]verbs.WC, 64)
		c.blockS, c.blockR = make([]uint32, c.size), make([]uint32, c.size)
	}
	wc := c.wc
	idle, first := 0, true
	for si, st := range cl.steps {
		cl.step = si
		c.rec.step(si)
		if err := p.start(cl); err != nil {
			return err
		}
		sdone, rdone := c.sDone[:0], c.rDone[:0]
		sendsLeft, recvsLeft := 0, 0
		for _, x := range st.sends {
			sdone = append(sdone, 0)
			sendsLeft += p.pieces(x)
		}
		for _, x := range st.recvs {
			rdone = append(rdone, 0)
			recvsLeft += p.pieces(x)
		}
		c.sDone, c.rDone = sdone, rdone
		for sendsLeft > 0 || recvsLeft > 0 || p.busy() {
			if c.abortReq.Load() {
				return fmt.Errorf("coll: rank %d: step %d of %d: %w by Abort", c.rank, si+1, len(cl.steps), ErrAborted)
			}
			// A peer refused in this round gets nothing more in it, so the
			// pieces of two transfers on one link go in order.
			c.rounds++
			progressed := false
			for i, x := range st.sends {
				for sdone[i] < p.pieces(x) && c.blockS[x.peer] != c.rounds {
					ok, err := p.send(cl, x, sdone[i])
					if err != nil {
						return err
					}
					if !ok {
						c.blockS[x.peer] = c.rounds
						break
					}
					sdone[i], sendsLeft, progressed = sdone[i]+1, sendsLeft-1, true
				}
			}
			cl.sendsLeft = sendsLeft
			for j, x := range st.recvs {
				for rdone[j] < p.pieces(x) && c.blockR[x.peer] != c.rounds {
					ok, err := p.recv(cl, x, rdone[j])
					if err != nil {
						return err
					}
					if !ok {
						c.blockR[x.peer] = c.rounds
						break
					}
					rdone[j], recvsLeft, progressed = rdone[j]+1, recvsLeft-1, true
				}
			}
			// Completions: our writes finishing, and what the normal path
			// or a failing peer sends. A device whose writes complete only
			// when the target's transport has run them (no
			// CapCompleteAtPost: udp) delivers in this goroutine, so it is
			// driven every round the CQ is not polled: what LL and flagged
			// wait for lands by it.
			if p.wantCQ(first, idle) {
				for _, d := range c.devList {
					n, err := d.cq.Poll(wc)
					if err != nil {
						return fmt.Errorf("coll: rank %d: %w", c.rank, err)
					}
					for _, w := range wc[:n] {
						if err := c.completion(cl, w); err != nil {
							return err
						}
					}
					progressed = progressed || n > 0
				}
			} else {
				for _, d := range c.progressList {
					d.ctx.Progress()
				}
			}
			first = false
			if err := c.settle(); err != nil {
				return err
			}
			if !progressed {
				if err := ctx.Err(); err != nil {
					return c.stuck(ctx, cl, p, sdone, rdone)
				}
				if idle%64 == 0 {
					if err := c.stray(cl, p, rdone); err != nil {
						return err
					}
				}
				c.idle(&idle)
			} else {
				idle = 0
			}
		}
	}
	// Landing slots this call freed go back now, not at the next call: a
	// peer may be ahead, waiting for them.
	for _, l := range c.links {
		if l != nil {
			if err := c.normal.returnCredits(l); err != nil {
				return err
			}
		}
	}
	return nil
}

// completion handles a completion during call cl.
func (c *Comm) completion(cl *call, w verbs.WC) error {
	var l *link
	for _, k := range c.links {
		if k != nil && k.qp.Num() == w.QPNum {
			l = k
		}
	}
	if w.Status != verbs.WCSuccess {
		if wrTag(w.WRID) == 2 {
			return nil // an abort notice of ours that could not be delivered
		}
		who := "?"
		if l != nil {
			who = fmt.Sprint(l.peer)
			c.noteWaiting(map[int]int{l.peer: 1}, nil)
		}
		return fmt.Errorf("coll: rank %d: step %d of %d: link to rank %s failed: %v", c.rank, cl.step+1, len(cl.steps), who, w)
	}
	if l == nil || w.Opcode == verbs.WCRDMAWrite {
		switch wrTag(w.WRID) {
		case 0:
			if l != nil {
				c.normal.sent(l.peer)
			}
		case 3:
			c.stagedOut--
		case 4:
			c.fl.written(l)
		}
		return nil
	}
	return c.normal.received(cl, l, w)
}

// settle gives every link what the protocols owe its peer: LL and flagged
// credit words for pieces consumed, the normal path's landing slots
// freed, and receives for its messages.
func (c *Comm) settle() error {
	for _, l := range c.links {
		if l == nil {
			continue
		}
		if err := c.ll.credit(l, false); err != nil {
			return err
		}
		if err := c.fl.credit(l); err != nil {
			return err
		}
		if err := c.normal.settle(l); err != nil {
			return err
		}
	}
	return nil
}

// stuck builds the deadline error: which ranks we still wait for, and at
// which step.
func (c *Comm) stuck(ctx context.Context, cl *call, p protocol, sdone, rdone []int) error {
	st := cl.steps[cl.step]
	from, to := map[int]int{}, map[int]int{}
	for j, x := range st.recvs {
		if n := p.pieces(x) - rdone[j]; n > 0 {
			from[x.peer] += n
		}
	}
	for i, x := range st.sends {
		if n := p.pieces(x) - sdone[i]; n > 0 {
			to[x.peer] += n
		}
	}
	list := func(m map[int]int) string {
		qs := make([]int, 0, len(m))
		for q := range m {
			qs = append(qs, q)
		}
		sort.Ints(qs)
		s := make([]string, len(qs))
		for i, q := range qs {
			s[i] = fmt.Sprintf("%d (%d pieces)", q, m[q])
		}
		return strings.Join(s, ", ")
	}
	msg := fmt.Sprintf("coll: rank %d: %v at step %d of %d (%s path)", c.rank, ctx.Err(), cl.step+1, len(cl.steps), pathNames[cl.mode])
	if len(from) > 0 {
		msg += "; not heard from rank " + list(from)
	}
	if len(to) > 0 {
		msg += "; not delivered to rank " + list(to)
	} else if p.busy() {
		msg += "; writes not completed"
	}
	c.noteWaiting(from, to)
	return fmt.Errorf("%s: %w", msg, ctx.Err())
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
			// A device with a progress thread (udp) needs a core this
			// spinning thread may hold; and with more ranks on this host
			// than cores, the rank that has work may need it too.
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

// fifo is a queue that reuses its array: it rewinds when emptied, so a
// queue that is drained every step never grows its array again.
type fifo[T any] struct {
	s    []T
	head int
}

func (q *fifo[T]) push(v T) { q.s = append(q.s, v) }
func (q *fifo[T]) len() int { return len(q.s) - q.head }
func (q *fifo[T]) front() T { return q.s[q.head] }
func (q *fifo[T]) reset()   { q.s, q.head = q.s[:0], 0 }

func (q *fifo[T]) pop() {
	q.head++
	if q.head == len(q.s) {
		q.reset()
	}
}
