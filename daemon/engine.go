package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/internal/hwq"
	"github.com/ibex-rdma/ibex/internal/ibexdwire"
	"github.com/ibex-rdma/ibex/internal/shmem"
	"github.com/ibex-rdma/ibex/verbs"
)

// engineSet is what an engine serves: replaced whole by the control path
// (under engMu), read by the engine without a lock.
type engineSet struct {
	qps   []*qpEntry
	cqs   []*cqEntry
	byQPN map[uint32]*qpEntry
}

// cqEntry is a daemon CQ and the process's completion ring it feeds.
type cqEntry struct {
	id      uint32
	depth   int // the process's CQ depth
	cq      *verbs.CQ
	seg     *shmem.Segment
	prod    *hwq.Producer
	wcs     []verbs.WC
	cqe     hwq.CQE
	arm     chan struct{} // the engine is going to sleep: watch waits on the CQ
	backlog []hwq.CQE     // completions to move before the CQ's (an upgrade)
	cancel  context.CancelFunc
	stopped chan struct{}
}

// watch wakes a sleeping engine when the daemon CQ gets a completion (a
// response from the network, an incoming SEND): the engine sleeps on the
// doorbell word, which only its processes and these goroutines ring. A
// watcher waits on its CQ only while the engine sleeps (it is armed just
// before): CQ.Wait hands the device to its own progress goroutine, which
// is right for a sleeping engine and slow for a polling one (every
// message then paid a hand-over back to the engine).
func (e *cqEntry) watch(ctx context.Context, db []byte) {
	defer close(e.stopped)
	for {
		select {
		case <-e.arm:
		case <-ctx.Done():
			return
		}
		if err := e.cq.Wait(ctx); err != nil {
			// ctx ended, or the CQ overflowed and nothing more will
			// come on it.
			return
		}
		ibexdwire.Ring(db)
	}
}

func (e *cqEntry) stop() {
	e.cancel()
	<-e.stopped
}

// qpEntry is a daemon QP and the process's send and receive rings.
type qpEntry struct {
	pd       uint32 // the process's id of the QP's PD
	tenant   *tenant
	qp       *verbs.QP
	seg      *shmem.Segment
	rqOff    int
	sq, rq   *hwq.Consumer
	sendCQ   *cqEntry
	recvCQ   *cqEntry
	slim     hwq.Limits
	rlim     hwq.Limits
	buf      []byte // one entry, copied out of the ring before decoding
	swqe     hwq.SendWQE
	rwqe     hwq.RecvWQE
	swrs     []verbs.SendWR
	rwrs     []verbs.RecvWR
	sgls     [][]verbs.SGE
	inls     [][]byte
	maxBatch int

	// The receives posted to the daemon's QP and not yet completed, in
	// order (a completion of the QP's receive pops the head): what an
	// upgrade hands to the next daemon to post again.
	posted recvShadow
}

// recvShadow is a FIFO of posted receives with preallocated storage.
type recvShadow struct {
	rsn     []uint64
	sgl     [][]verbs.SGE
	head, n int
}

func (r *recvShadow) init(depth, maxSGE int) {
	r.rsn = make([]uint64, depth)
	r.sgl = make([][]verbs.SGE, depth)
	for i := range r.sgl {
		r.sgl[i] = make([]verbs.SGE, 0, maxSGE)
	}
}

func (r *recvShadow) push(rsn uint64, sgl []verbs.SGE) {
	if r.n == len(r.rsn) {
		return // cannot happen: the daemon's RQ is as deep
	}
	i := (r.head + r.n) % len(r.rsn)
	r.rsn[i], r.sgl[i] = rsn, append(r.sgl[i][:0], sgl...)
	r.n++
}

// pop removes the receive rsn completed (the head, in order).
func (r *recvShadow) pop(rsn uint64) {
	if r.n > 0 && r.rsn[r.head] == rsn {
		r.head = (r.head + 1) % len(r.rsn)
		r.n--
	}
}

func (r *recvShadow) clear() { r.head, r.n = 0, 0 }

// list returns the receives in order.
func (r *recvShadow) list() []verbs.RecvWR {
	out := make([]verbs.RecvWR, 0, r.n)
	for i := range r.n {
		j := (r.head + i) % len(r.rsn)
		out = append(out, verbs.RecvWR{ID: r.rsn[j], SGL: append([]verbs.SGE(nil), r.sgl[j]...)})
	}
	return out
}

func newQPEntry(qp *verbs.QP, scq, rcq *cqEntry, pid int) (*qpEntry, error) {
	cp := qp.Cap()
	slim, rlim := hwq.Limits{MaxSGE: cp.MaxSendSGE, MaxInline: cp.MaxInlineData}, hwq.Limits{MaxSGE: cp.MaxRecvSGE}
	ssize, rsize := hwq.SendWQESize(slim), hwq.RecvWQESize(rlim)
	sn, rn := ringCount(cp.MaxSendWR), ringCount(cp.MaxRecvWR)
	sbytes, err := hwq.RegionSize(ssize, sn)
	if err != nil {
		return nil, err
	}
	rbytes, err := hwq.RegionSize(rsize, rn)
	if err != nil {
		return nil, err
	}
	rqOff := (sbytes + hwq.Align - 1) &^ (hwq.Align - 1)
	seg, err := shmem.Create(fmt.Sprintf("ibexd-qp-%d", pid), int64(pageRound(rqOff+rbytes)))
	if err != nil {
		return nil, err
	}
	_, err = hwq.Init(seg.Mem[:sbytes], hwq.Config{EntrySize: ssize, Count: sn})
	if err == nil {
		_, err = hwq.Init(seg.Mem[rqOff:rqOff+rbytes], hwq.Config{EntrySize: rsize, Count: rn})
	}
	if err == nil {
		var q *qpEntry
		if q, err = attachQPEntry(qp, scq, rcq, seg, rqOff); err == nil {
			return q, nil
		}
	}
	seg.Close()
	return nil, err
}

// attachQPEntry serves qp from the rings in seg (made by newQPEntry, here
// or in the daemon this one took over from), consuming from where the
// shared indices say. The geometry is checked against the QP's caps.
func attachQPEntry(qp *verbs.QP, scq, rcq *cqEntry, seg *shmem.Segment, rqOff int) (*qpEntry, error) {
	cp := qp.Cap()
	q := &qpEntry{qp: qp, sendCQ: scq, recvCQ: rcq, seg: seg, rqOff: rqOff,
		slim: hwq.Limits{MaxSGE: cp.MaxSendSGE, MaxInline: cp.MaxInlineData},
		rlim: hwq.Limits{MaxSGE: cp.MaxRecvSGE}}
	if rqOff <= 0 || rqOff >= len(seg.Mem) {
		return nil, fmt.Errorf("qp %#x: receive ring at %d of a %d-byte segment", qp.Num(), rqOff, len(seg.Mem))
	}
	sr, err := hwq.Attach(seg.Mem[:rqOff])
	if err != nil {
		return nil, err
	}
	rr, err := hwq.Attach(seg.Mem[rqOff:])
	if err != nil {
		return nil, err
	}
	if sr.EntrySize() < hwq.SendWQESize(q.slim) || sr.Count() < cp.MaxSendWR ||
		rr.EntrySize() < hwq.RecvWQESize(q.rlim) || rr.Count() < cp.MaxRecvWR {
		return nil, fmt.Errorf("qp %#x: rings smaller than the QP's capabilities", qp.Num())
	}
	if q.sq, err = sr.Consumer(hwq.WaitOptions{}); err != nil {
		return nil, err
	}
	if q.rq, err = rr.Consumer(hwq.WaitOptions{}); err != nil {
		return nil, err
	}
	q.buf = make([]byte, max(sr.EntrySize(), rr.EntrySize()))
	q.maxBatch = 32
	q.swrs = make([]verbs.SendWR, q.maxBatch)
	q.rwrs = make([]verbs.RecvWR, q.maxBatch)
	q.sgls = make([][]verbs.SGE, q.maxBatch)
	q.inls = make([][]byte, q.maxBatch)
	for i := range q.maxBatch {
		q.sgls[i] = make([]verbs.SGE, max(cp.MaxSendSGE, cp.MaxRecvSGE))
		q.inls[i] = make([]byte, cp.MaxInlineData)
	}
	q.swqe.SGL = make([]hwq.SGE, 0, cp.MaxSendSGE)
	q.swqe.Inline = make([]byte, 0, cp.MaxInlineData)
	q.rwqe.SGL = make([]hwq.SGE, 0, cp.MaxRecvSGE)
	q.posted.init(cp.MaxRecvWR, cp.MaxRecvSGE)
	return q, nil
}

// discard drops what the rings hold (the QP was reset).
func (q *qpEntry) discard() {
	if n, err := q.sq.Available(); err == nil {
		q.sq.Release(n)
	}
	if n, err := q.rq.Available(); err == nil {
		q.rq.Release(n)
	}
	q.posted.clear()
}

// errHostile marks a process that broke the ring protocol.
var errHostile = errors.New("ring protocol violated")

// pumpSQ moves send WQEs from the ring to the daemon QP. Every request is
// posted signaled: the process's verbs needs a completion for each to
// free its queue slot, and decides itself which the application sees.
func (q *qpEntry) pumpSQ() (int, error) {
	avail, err := q.sq.Available()
	if err != nil {
		return 0, fmt.Errorf("qp %#x send queue: %w: %w", q.qp.Num(), errHostile, err)
	}
	if avail == 0 {
		return 0, nil
	}
	k := min(avail, q.maxBatch)
	for i := range k {
		q.sq.CopyOut(i, q.buf)
		if err := q.swqe.Decode(q.buf, q.slim); err != nil {
			return 0, fmt.Errorf("qp %#x send queue: %w: %w", q.qp.Num(), errHostile, err)
		}
		w := &q.swqe
		wr := &q.swrs[i]
		*wr = verbs.SendWR{ID: w.WRID, Opcode: verbs.Opcode(w.Opcode), Flags: verbs.SendFlags(w.Flags) | verbs.SendSignaled,
			Imm: w.Imm, RemoteAddr: w.RemoteAddr, RKey: w.RKey, CompareAdd: w.CompareAdd, Swap: w.Swap}
		if w.Flags&ib.SendInline != 0 {
			wr.Inline = q.inls[i][:copy(q.inls[i], w.Inline)]
		} else {
			sgl := q.sgls[i][:len(w.SGL)]
			for j, s := range w.SGL {
				sgl[j] = verbs.SGE{Addr: s.Addr, Length: s.Length, LKey: s.LKey}
			}
			wr.SGL = sgl
		}
	}
	if q.tenant != nil && q.tenant.bucket != nil {
		// The tenant's rate: what the bucket does not let through
		// stays in the ring (not released) for a later pass.
		if k = q.tenant.bucket.admit(q.swrs[:k], time.Now()); k == 0 {
			return 0, nil
		}
	}
	done := 0
	for done < k {
		err := q.qp.PostSend(q.swrs[done:k])
		if err == nil {
			done = k
			break
		}
		var pe *verbs.PostError
		if !errors.As(err, &pe) {
			return 0, fmt.Errorf("qp %#x: post send: %w", q.qp.Num(), err)
		}
		done += pe.Index
		switch {
		case errors.Is(err, verbs.ErrInvalidState) || errors.Is(err, verbs.ErrClosed):
			// Reset or destroyed since the process posted: RESET
			// discards without completions.
			done = k
		case errors.Is(err, verbs.ErrInvalidLKey):
			// The MR went away between the post and now: the
			// request fails as an HCA fails it, with LOC_PROT_ERR,
			// and the QP moves to ERR (the rest are flushed).
			if err := q.failAt(done, verbs.WCLocProtErr); err != nil {
				return 0, err
			}
			done++
		case errors.Is(err, verbs.ErrInvalidArgument) && q.qp.Query().MaxQPRdAtomic == 0 &&
			(q.swrs[done].Opcode == verbs.WRRDMARead || q.swrs[done].Opcode.IsAtomic()):
			// max_rd_atomic was set to 0 after the process posted (in
			// SQD): LOC_QP_OP_ERR, as its own verbs reports it.
			if err := q.failAt(done, verbs.WCLocQPOpErr); err != nil {
				return 0, err
			}
			done++
		default:
			return 0, fmt.Errorf("qp %#x: %w: the process posted what its own verbs should have refused: %w", q.qp.Num(), errHostile, err)
		}
	}
	q.sq.Release(k)
	return k, nil
}

// failAt completes request i of the batch with st and moves the QP to
// ERR (the requests after it are flushed), as a local error does.
func (q *qpEntry) failAt(i int, st verbs.WCStatus) error {
	_ = q.qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.AttrState)
	q.sendCQ.cqe = hwq.CQE{WRID: q.swrs[i].ID, Status: ib.WCStatus(st), QPNum: q.qp.Num()}
	if err := q.sendCQ.cqe.Push(q.sendCQ.prod); err != nil && !errors.Is(err, hwq.ErrFull) {
		return fmt.Errorf("qp %#x send cq: %w: %w", q.qp.Num(), errHostile, err)
	}
	return nil
}

// pumpRQ moves receive WQEs from the ring to the daemon QP; the wr_id is
// the process's receive sequence number.
func (q *qpEntry) pumpRQ() (int, error) {
	avail, err := q.rq.Available()
	if err != nil {
		return 0, fmt.Errorf("qp %#x receive queue: %w: %w", q.qp.Num(), errHostile, err)
	}
	if avail == 0 {
		return 0, nil
	}
	k := min(avail, q.maxBatch)
	for i := range k {
		q.rq.CopyOut(i, q.buf)
		if err := q.rwqe.Decode(q.buf, q.rlim); err != nil {
			return 0, fmt.Errorf("qp %#x receive queue: %w: %w", q.qp.Num(), errHostile, err)
		}
		sgl := q.sgls[i][:len(q.rwqe.SGL)]
		for j, s := range q.rwqe.SGL {
			sgl[j] = verbs.SGE{Addr: s.Addr, Length: s.Length, LKey: s.LKey}
		}
		q.rwrs[i] = verbs.RecvWR{ID: q.rwqe.WRID, SGL: sgl}
	}
	posted := k
	if err := q.qp.PostRecv(q.rwrs[:k]); err != nil {
		if !errors.Is(err, verbs.ErrInvalidState) && !errors.Is(err, verbs.ErrClosed) && !errors.Is(err, verbs.ErrInvalidLKey) {
			return 0, fmt.Errorf("qp %#x: %w: post recv: %w", q.qp.Num(), errHostile, err)
		}
		// Reset since, or an MR gone: dropped as the RESET or the
		// process's own dereg decided.
		posted = 0
		var pe *verbs.PostError
		if errors.As(err, &pe) {
			posted = pe.Index
		}
	}
	for i := range posted {
		q.posted.push(q.rwrs[i].ID, q.rwrs[i].SGL)
	}
	q.rq.Release(k)
	return k, nil
}

// pump moves completions from the daemon CQ to the process's ring, as
// many as the ring has room for. Polling drives the device's progress.
func (e *cqEntry) pump(byQPN map[uint32]*qpEntry) (n, sends int, _ error) {
	room, err := e.prod.Reserve(len(e.wcs))
	if err != nil && !errors.Is(err, hwq.ErrFull) {
		return 0, 0, fmt.Errorf("cq %d: %w: %w", e.id, errHostile, err)
	}
	if room == 0 {
		return 0, 0, nil
	}
	room = min(room, len(e.wcs))
	if len(e.backlog) > 0 {
		// Completions the daemon this one took over from could not
		// move before it stopped: they go first, in order.
		k := min(room, len(e.backlog))
		for i := range k {
			if err := e.backlog[i].Encode(e.prod.Entry(i)); err != nil {
				return 0, 0, err
			}
		}
		e.backlog = e.backlog[k:]
		e.prod.Trim(k)
		e.prod.Publish()
		return k, 0, nil
	}
	n, perr := e.cq.Poll(e.wcs[:room])
	for i := range n {
		wc := &e.wcs[i]
		if wc.Opcode < verbs.WCRecv {
			sends++
		} else if q := byQPN[wc.QPNum]; q != nil {
			q.posted.pop(wc.WRID)
		}
		e.cqe = hwq.CQE{WRID: wc.WRID, Status: ib.WCStatus(wc.Status), Opcode: uint8(wc.Opcode), Flags: uint8(wc.Flags),
			ByteLen: wc.ByteLen, QPNum: wc.QPNum, SrcQP: wc.SrcQP, Imm: wc.Imm}
		if err := e.cqe.Encode(e.prod.Entry(i)); err != nil {
			return 0, 0, err
		}
	}
	// Publish only what was written; the reservation of the rest is
	// kept for the next pass.
	e.prod.Trim(n)
	if n > 0 {
		e.prod.Publish()
	}
	if perr != nil && n == 0 {
		// The daemon CQ overflowed: the process's QPs on it were moved
		// to ERR by verbs; nothing more will come.
		return 0, 0, nil
	}
	return n, sends, nil
}

// takeAll moves what the daemon CQ still holds into the backlog (an
// upgrade: the process's ring is full and the CQ is about to go away).
func (e *cqEntry) takeAll(byQPN map[uint32]*qpEntry) {
	for {
		n, _ := e.cq.Poll(e.wcs)
		if n == 0 {
			return
		}
		for _, wc := range e.wcs[:n] {
			if wc.Opcode >= verbs.WCRecv {
				if q := byQPN[wc.QPNum]; q != nil {
					q.posted.pop(wc.WRID)
				}
			}
			e.backlog = append(e.backlog, hwq.CQE{WRID: wc.WRID, Status: ib.WCStatus(wc.Status), Opcode: uint8(wc.Opcode),
				Flags: uint8(wc.Flags), ByteLen: wc.ByteLen, QPNum: wc.QPNum, SrcQP: wc.SrcQP, Imm: wc.Imm})
		}
	}
}

// yield gives the CPU to another thread of the machine (the processes
// the daemon serves may be waiting for this core).
func yield() { _, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// pass is one pass over every ring and CQ of the process.
func (c *client) pass() (int, error) {
	c.engMu.Lock()
	defer c.engMu.Unlock()
	if c.off {
		return 0, nil // left its engine, or broke the protocol
	}
	s := c.set.Load()
	total := 0
	quiet := c.quiesce.Load()
	for _, q := range s.qps {
		if !quiet { // an upgrade takes no new requests (receives still)
			n, err := q.pumpSQ()
			if err != nil {
				return 0, err
			}
			c.posted.Add(uint64(n))
			c.inflight.Add(int64(n))
			total += n
		}
		n, err := q.pumpRQ()
		if err != nil {
			return 0, err
		}
		total += n
	}
	for _, e := range s.cqs {
		n, sends, err := e.pump(s.byQPN)
		c.inflight.Add(-int64(sends))
		if err != nil {
			return 0, err
		}
		c.completed.Add(uint64(n))
		total += n
	}
	return total, nil
}
