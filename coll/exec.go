package coll

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

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

// xfer is one transfer of a step: bytes [off, off+n) of the working
// buffer to (send) or from (receive) a peer.
type xfer struct {
	peer   int
	off, n int
	reduce bool // receive: reduce into the buffer instead of overwriting
}

type execStep struct {
	sends, recvs []xfer
}

// imm layout: bit 31 set = a credit return (low bits: how many); else a
// data piece: bits 24..30 the call's sequence number (mismatch check),
// bits 0..23 the piece's sequence number on this link.
const (
	immCredit   = 1 << 31
	immSeqShift = 24
	immSeqMask  = 0x7f
	immPieceMax = 1 << 24
)

// linkRun is a link's state during one call.
type linkRun struct {
	l        *link
	lkey     uint32 // the working buffer's lkey on the link's device
	sendQ    []piece
	recvQ    []piece
	outstand int // sends posted, not completed
}

type piece struct {
	off, n int
	reduce bool
}

// run executes steps on buf (registered as wbuf per device by the caller
// through lkeys), applying reduce to received pieces that reduce.
func (c *Comm) run(ctx context.Context, seq uint32, steps []execStep, buf []byte, lkeys map[string]uint32, bufAddr map[string]uint64,
	reduce func(dst, src []byte)) error {
	pieceMax := c.opt.Landing / c.opt.Credits
	runs := make([]*linkRun, c.size)
	for q, l := range c.links {
		if l != nil {
			runs[q] = &linkRun{l: l, lkey: lkeys[l.dev.name]}
		}
	}
	wc := make([]verbs.WC, 32)
	idle := 0
	for si, st := range steps {
		pendingSends, pendingRecvs := 0, 0
		for _, x := range st.sends {
			r := runs[x.peer]
			for off := x.off; off < x.off+x.n || (x.n == 0 && off == x.off); off += pieceMax {
				n := min(pieceMax, x.off+x.n-off)
				r.sendQ = append(r.sendQ, piece{off: off, n: n})
				pendingSends++
				if x.n == 0 {
					break
				}
			}
		}
		for _, x := range st.recvs {
			r := runs[x.peer]
			for off := x.off; off < x.off+x.n || (x.n == 0 && off == x.off); off += pieceMax {
				n := min(pieceMax, x.off+x.n-off)
				r.recvQ = append(r.recvQ, piece{off: off, n: n, reduce: x.reduce})
				pendingRecvs++
				if x.n == 0 {
					break
				}
			}
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
			k, err := c.match(r, seq, si, buf, reduce)
			if err != nil {
				return err
			}
			pendingRecvs -= k
		}
		for pendingSends > 0 || pendingRecvs > 0 {
			for _, r := range runs {
				if r == nil {
					continue
				}
				for len(r.sendQ) > 0 && r.l.credit > 0 {
					p := r.sendQ[0]
					slot := r.l.sent % c.opt.Credits
					wr := verbs.SendWR{ID: uint64(r.l.peer), Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled,
						Imm:        (seq&immSeqMask)<<immSeqShift | uint32(r.l.sent%immPieceMax),
						RemoteAddr: r.l.rAddr + uint64(slot*pieceMax), RKey: r.l.rKey}
					if p.n > 0 {
						wr.SGL = []verbs.SGE{{Addr: bufAddr[r.l.dev.name] + uint64(p.off), Length: uint32(p.n), LKey: r.lkey}}
					}
					if err := r.l.qp.PostSend([]verbs.SendWR{wr}); err != nil {
						return fmt.Errorf("coll: rank %d: step %d: send to rank %d: %w", c.rank, si, r.l.peer, err)
					}
					r.sendQ = r.sendQ[1:]
					r.l.sent++
					r.l.credit--
					r.outstand++
				}
			}
			progressed := false
			for _, d := range c.devs {
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
						return fmt.Errorf("coll: rank %d: step %d of %d: link to rank %s failed: %v", c.rank, si, len(steps), who, w)
					}
					if r == nil {
						continue
					}
					switch {
					case w.Opcode == verbs.WCRDMAWrite:
						if w.WRID != uint64(r.l.peer) { // a credit return completing
							continue
						}
						r.outstand--
						pendingSends--
					case w.Imm&immCredit != 0:
						r.l.recvsPost--
						r.l.credit += int(w.Imm &^ immCredit)
					default:
						r.l.recvsPost--
						r.l.arrived = append(r.l.arrived, arrival{slot: r.l.recvd % c.opt.Credits, n: int(w.ByteLen), seq: (w.Imm >> immSeqShift) & immSeqMask})
						r.l.recvd++
						k, err := c.match(r, seq, si, buf, reduce)
						if err != nil {
							return err
						}
						pendingRecvs -= k
					}
				}
			}
			if !progressed {
				if err := ctx.Err(); err != nil {
					return c.stuck(ctx, si, len(steps), runs)
				}
				c.idle(&idle)
			} else {
				idle = 0
			}
			for _, r := range runs {
				if r != nil && r.l.recvsPost < 2*c.opt.Credits {
					if err := c.postRecvs(r); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// arrival is a piece in a landing slot, not yet applied.
type arrival struct {
	slot, n int
	seq     uint32
}

// match applies arrived pieces to the receives the current step expects,
// in order, returning the landing slots as credits. It returns how many it
// applied.
func (c *Comm) match(r *linkRun, seq uint32, step int, buf []byte, reduce func(dst, src []byte)) (int, error) {
	pieceMax := c.opt.Landing / c.opt.Credits
	k := 0
	for len(r.recvQ) > 0 && len(r.l.arrived) > 0 {
		a, p := r.l.arrived[0], r.recvQ[0]
		if a.seq != seq&immSeqMask {
			return k, fmt.Errorf("coll: rank %d: call %d, step %d: rank %d sent data of call %d: the ranks called different collectives or in a different order", c.rank, seq&immSeqMask, step, r.l.peer, a.seq)
		}
		if a.n != p.n {
			return k, fmt.Errorf("coll: rank %d: step %d: rank %d sent a piece of %d bytes, expected %d (mismatched count, type or collective?)", c.rank, step, r.l.peer, a.n, p.n)
		}
		r.l.arrived, r.recvQ = r.l.arrived[1:], r.recvQ[1:]
		src := r.l.land.Bytes()[a.slot*pieceMax : a.slot*pieceMax+a.n]
		if p.reduce {
			reduce(buf[p.off:p.off+p.n], src)
		} else {
			copy(buf[p.off:p.off+p.n], src)
		}
		if err := c.returnCredit(r); err != nil {
			return k, err
		}
		k++
	}
	return k, nil
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
		if c.devs["udp0"] != nil {
			// udp0's progress runs on its own thread, which needs a
			// core this spinning thread may hold.
			_, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		}
		return
	}
	for _, d := range c.devs {
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

// returnCredit tells the peer one landing slot is free again.
func (c *Comm) returnCredit(r *linkRun) error {
	wr := verbs.SendWR{ID: uint64(r.l.peer) | 1<<40, Opcode: verbs.WRRDMAWriteWithImm, Imm: immCredit | 1,
		RemoteAddr: r.l.rAddr, RKey: r.l.rKey, Flags: verbs.SendSignaled}
	if err := r.l.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		return fmt.Errorf("coll: rank %d: credit to rank %d: %w", c.rank, r.l.peer, err)
	}
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
		if len(r.recvQ) > 0 {
			from = append(from, fmt.Sprintf("%d (%d pieces)", q, len(r.recvQ)))
		}
		if len(r.sendQ) > 0 || r.outstand > 0 {
			to = append(to, fmt.Sprintf("%d (%d pieces)", q, len(r.sendQ)+r.outstand))
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
