package daemon

import (
	"context"
	"fmt"
	"math/bits"

	"github.com/ibex-rdma/ibex/internal/hwq"
	"github.com/ibex-rdma/ibex/internal/ibexdwire"
	"github.com/ibex-rdma/ibex/internal/shmem"
	"github.com/ibex-rdma/ibex/verbs"
)

// handle executes one control request. It returns the response, a
// descriptor to send with it (-1: none) and an error for the process.
// Descriptors that came with the request are consumed or closed.
func (c *client) handle(req *ibexdwire.Request, fds []int) (*ibexdwire.Response, int, error) {
	if req.Op != ibexdwire.OpAddSeg {
		ibexdwire.CloseFDs(fds)
		fds = nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r := &ibexdwire.Response{}
	switch req.Op {
	case ibexdwire.OpAllocPD:
		pd, err := c.ctx.AllocPD()
		if err != nil {
			return nil, -1, err
		}
		r.PD = c.id()
		c.pds[r.PD] = pd
	case ibexdwire.OpAddSeg:
		if len(fds) != 1 {
			ibexdwire.CloseFDs(fds)
			return nil, -1, fmt.Errorf("add_seg: %d descriptors, want one memfd: %w", len(fds), verbs.ErrInvalidArgument)
		}
		seg, err := shmem.Map(fds[0])
		if err != nil {
			return nil, -1, fmt.Errorf("add_seg: %v: %w", err, verbs.ErrInvalidArgument)
		}
		r.Seg = c.id()
		c.segs[r.Seg] = &segment{seg: seg, size: uint64(len(seg.Mem))}
	case ibexdwire.OpDelSeg:
		s := c.segs[req.Seg]
		if s == nil {
			return nil, -1, fmt.Errorf("del_seg: no segment %d: %w", req.Seg, verbs.ErrInvalidArgument)
		}
		if s.nmr > 0 {
			return nil, -1, fmt.Errorf("del_seg: segment %d holds %d MRs: %w", req.Seg, s.nmr, verbs.ErrBusy)
		}
		s.seg.Close()
		delete(c.segs, req.Seg)
	case ibexdwire.OpRegMR:
		return c.regMR(req)
	case ibexdwire.OpDeregMR:
		m := c.mrs[req.MR]
		if m == nil {
			return nil, -1, fmt.Errorf("dereg_mr: no MR %d: %w", req.MR, verbs.ErrInvalidArgument)
		}
		// Dereg waits until the transport's accesses drain; after it the
		// memory is the process's alone again.
		if err := m.mr.Dereg(); err != nil {
			return nil, -1, err
		}
		c.memBytes -= uint64(m.mr.Len())
		c.segs[m.seg].nmr--
		delete(c.mrs, req.MR)
		c.tenant.give(resMR, 1)
		c.tenant.give(resMemory, uint64(m.mr.Len()))
	case ibexdwire.OpCreateCQ:
		return c.createCQ(req)
	case ibexdwire.OpDestroyCQ:
		e := c.cqs[req.CQ]
		if e == nil {
			return nil, -1, fmt.Errorf("destroy_cq: no CQ %d: %w", req.CQ, verbs.ErrInvalidArgument)
		}
		if err := e.cq.Destroy(); err != nil {
			return nil, -1, err
		}
		c.engMu.Lock()
		delete(c.cqs, req.CQ)
		c.publishLocked()
		c.engMu.Unlock()
		e.stop()
		e.seg.Close()
		c.tenant.give(resCQ, 1)
	case ibexdwire.OpCreateQP:
		return c.createQP(req)
	case ibexdwire.OpModifyQP:
		q := c.qps[req.QPN]
		if q == nil || req.Attr == nil {
			return nil, -1, fmt.Errorf("modify_qp: no QP %#x or no attributes: %w", req.QPN, verbs.ErrInvalidArgument)
		}
		if err := c.checkModify(q.qp, req.Attr, req.Mask); err != nil {
			return nil, -1, fmt.Errorf("modify_qp: qp %#x: %w", req.QPN, err)
		}
		if req.Mask&verbs.AttrState != 0 && req.Attr.State == verbs.QPSRTR {
			// The peer's SPI, for the device's encryption policy.
			if err := q.qp.SetPeerSPI(req.SPI); err != nil {
				return nil, -1, fmt.Errorf("modify_qp: %w", err)
			}
		}
		if err := q.qp.Modify(req.Attr, req.Mask); err != nil {
			return nil, -1, err
		}
		if req.Mask&verbs.AttrState != 0 && req.Attr.State == verbs.QPSReset {
			// RESET discards: what the process posted before it must
			// not reach the QP's next life.
			c.engMu.Lock()
			q.discard()
			c.engMu.Unlock()
		}
	case ibexdwire.OpDestroyQP:
		q := c.qps[req.QPN]
		if q == nil {
			return nil, -1, fmt.Errorf("destroy_qp: no QP %#x: %w", req.QPN, verbs.ErrInvalidArgument)
		}
		c.engMu.Lock()
		delete(c.qps, req.QPN)
		c.publishLocked()
		c.engMu.Unlock()
		c.d.qpGone(req.QPN)
		_ = q.qp.Destroy()
		q.seg.Close()
		c.tenant.give(resQP, 1)
	case ibexdwire.OpQPStats:
		q := c.qps[req.QPN]
		if q == nil {
			return nil, -1, fmt.Errorf("qp_stats: no QP %#x: %w", req.QPN, verbs.ErrInvalidArgument)
		}
		st := q.qp.Stats()
		r.Stats = &st
		if err := q.qp.Err(); err != nil {
			r.QPErr = err.Error()
		}
	case ibexdwire.OpQueryPort:
		pa, err := c.ctx.QueryPort(req.Port)
		if err != nil {
			return nil, -1, err
		}
		r.Ports = []verbs.PortAttr{pa}
	case ibexdwire.OpCounters:
		ctrs, err := c.ctx.PortCounters(req.Port)
		if err != nil {
			return nil, -1, err
		}
		r.Counters = ctrs
	case ibexdwire.OpStatus:
		st := c.d.Status()
		r.Status = &st
	default:
		return nil, -1, fmt.Errorf("unknown op %q: %w", req.Op, verbs.ErrInvalidArgument)
	}
	return r, -1, nil
}

func (c *client) id() uint32 {
	c.nextID++
	return c.nextID
}

func (c *client) regMR(req *ibexdwire.Request) (*ibexdwire.Response, int, error) {
	lim := c.d.cfg.Limits
	pd := c.pds[req.PD]
	s := c.segs[req.Seg]
	switch {
	case pd == nil:
		return nil, -1, fmt.Errorf("reg_mr: no PD %d: %w", req.PD, verbs.ErrInvalidArgument)
	case s == nil:
		return nil, -1, fmt.Errorf("reg_mr: no segment %d: %w", req.Seg, verbs.ErrInvalidArgument)
	case req.Len == 0 || req.Off > s.size || req.Len > s.size-req.Off:
		return nil, -1, fmt.Errorf("reg_mr: [%d, +%d) is not inside segment %d of %d bytes: %w", req.Off, req.Len, req.Seg, s.size, verbs.ErrInvalidArgument)
	case len(c.mrs) >= lim.MaxMRs:
		return nil, -1, fmt.Errorf("reg_mr: limits.max_mrs %d reached: %w", lim.MaxMRs, verbs.ErrLimit)
	case c.memBytes+req.Len > c.d.cfg.MaxMemoryBytes():
		return nil, -1, fmt.Errorf("reg_mr: %d bytes more would pass limits.max_memory (%d registered): %w", req.Len, c.memBytes, verbs.ErrLimit)
	}
	if err := c.tenant.take(resMR, 1); err != nil {
		return nil, -1, fmt.Errorf("reg_mr: %w", err)
	}
	if err := c.tenant.take(resMemory, req.Len); err != nil {
		c.tenant.give(resMR, 1)
		return nil, -1, fmt.Errorf("reg_mr: %w", err)
	}
	mr, err := pd.RegMRIOVA(s.seg.Mem[req.Off:req.Off+req.Len], req.IOVA, req.Access)
	if err != nil {
		c.tenant.give(resMR, 1)
		c.tenant.give(resMemory, req.Len)
		return nil, -1, err
	}
	id := c.id()
	c.mrs[id] = &mrEntry{mr: mr, seg: req.Seg}
	s.nmr++
	c.memBytes += req.Len
	return &ibexdwire.Response{MR: id, LKey: mr.LKey(), RKey: mr.RKey()}, -1, nil
}

// ringCount is the ring size for n outstanding entries: a power of two.
func ringCount(n int) int {
	if n < 2 {
		return 2
	}
	return 1 << bits.Len(uint(n-1))
}

func pageRound(n int) int { return (n + 4095) &^ 4095 }

func (c *client) createCQ(req *ibexdwire.Request) (*ibexdwire.Response, int, error) {
	if len(c.cqs) >= c.d.cfg.Limits.MaxCQs {
		return nil, -1, fmt.Errorf("create_cq: limits.max_cqs %d reached: %w", c.d.cfg.Limits.MaxCQs, verbs.ErrLimit)
	}
	if req.Depth < 1 || req.Depth > c.ctx.QueryDevice().MaxCQE {
		return nil, -1, fmt.Errorf("create_cq: depth %d: the device allows 1..%d: %w", req.Depth, c.ctx.QueryDevice().MaxCQE, verbs.ErrInvalidArgument)
	}
	// The daemon's CQ is deeper than the process's by the ring: a
	// process that stops polling overflows its own CQ first (CQ_ERR,
	// then QP_FATAL, in its verbs), as with an HCA.
	if err := c.tenant.take(resCQ, 1); err != nil {
		return nil, -1, fmt.Errorf("create_cq: %w", err)
	}
	r, fd, err := c.newCQ(req)
	if err != nil {
		c.tenant.give(resCQ, 1)
	}
	return r, fd, err
}

func (c *client) newCQ(req *ibexdwire.Request) (*ibexdwire.Response, int, error) {
	cq, err := c.ctx.CreateCQ(min(2*ringCount(req.Depth)+64, c.ctx.QueryDevice().MaxCQE))
	if err != nil {
		return nil, -1, err
	}
	// The ring holds every completion the CQ can: the engine moves only
	// what fits, so a process that does not poll overflows its own CQ,
	// as with an HCA, and nobody else's.
	n := ringCount(req.Depth)
	size, err := hwq.RegionSize(hwq.CQESize, n)
	if err != nil {
		_ = cq.Destroy()
		return nil, -1, err
	}
	seg, err := shmem.Create(fmt.Sprintf("ibexd-cq-%d", c.pid), int64(pageRound(size)))
	if err != nil {
		_ = cq.Destroy()
		return nil, -1, err
	}
	ring, err := hwq.Init(seg.Mem[:size], hwq.Config{EntrySize: hwq.CQESize, Count: n})
	var prod *hwq.Producer
	if err == nil {
		prod, err = ring.Producer()
	}
	if err != nil {
		seg.Close()
		_ = cq.Destroy()
		return nil, -1, err
	}
	id := c.id()
	e := &cqEntry{id: id, depth: req.Depth, cq: cq, seg: seg, prod: prod, wcs: make([]verbs.WC, 64), arm: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	e.stopped = make(chan struct{})
	go e.watch(ctx, c.eng.db.Mem)
	c.engMu.Lock()
	c.cqs[id] = e
	c.publishLocked()
	c.engMu.Unlock()
	return &ibexdwire.Response{CQ: id}, seg.FD, nil
}

func (c *client) createQP(req *ibexdwire.Request) (*ibexdwire.Response, int, error) {
	pd := c.pds[req.PD]
	scq, rcq := c.cqs[req.SendCQ], c.cqs[req.RecvCQ]
	switch {
	case pd == nil:
		return nil, -1, fmt.Errorf("create_qp: no PD %d: %w", req.PD, verbs.ErrInvalidArgument)
	case scq == nil || rcq == nil:
		return nil, -1, fmt.Errorf("create_qp: no CQ %d or %d: %w", req.SendCQ, req.RecvCQ, verbs.ErrInvalidArgument)
	case len(c.qps) >= c.d.cfg.Limits.MaxQPs:
		return nil, -1, fmt.Errorf("create_qp: limits.max_qps %d reached: %w", c.d.cfg.Limits.MaxQPs, verbs.ErrLimit)
	}
	if err := c.tenant.take(resQP, 1); err != nil {
		return nil, -1, fmt.Errorf("create_qp: %w", err)
	}
	qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: scq.cq, RecvCQ: rcq.cq, Cap: req.Cap})
	if err != nil {
		c.tenant.give(resQP, 1)
		return nil, -1, err
	}
	q, err := newQPEntry(qp, scq, rcq, c.pid)
	if err != nil {
		_ = qp.Destroy()
		c.tenant.give(resQP, 1)
		return nil, -1, err
	}
	q.pd = req.PD
	q.tenant = c.tenant
	c.d.qpTenant.Store(qp.Num(), c.tenant)
	c.engMu.Lock()
	c.qps[qp.Num()] = q
	c.publishLocked()
	c.engMu.Unlock()
	return &ibexdwire.Response{QPN: qp.Num(), SQOff: 0, RQOff: q.rqOff, SPI: qp.Info().SPI}, q.seg.FD, nil
}

// publishLocked gives the engine the current QPs and CQs (c.mu and
// c.engMu held).
func (c *client) publishLocked() {
	s := &engineSet{byQPN: make(map[uint32]*qpEntry, len(c.qps))}
	for n, q := range c.qps {
		s.qps = append(s.qps, q)
		s.byQPN[n] = q
	}
	for _, e := range c.cqs {
		s.cqs = append(s.cqs, e)
	}
	c.set.Store(s)
}
