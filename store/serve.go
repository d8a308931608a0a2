package store

import (
	"context"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/ibex-rdma/ibex/internal/cm"
	"github.com/ibex-rdma/ibex/verbs"
)

// Work request ids on a server QP: the kind in the top byte, a slot or
// buffer index below.
const (
	kindShift = 56
	kindRecv  = 1 << kindShift
	kindResp  = 2 << kindShift
	kindWrite = 3 << kindShift
	kindRead  = 4 << kindShift // client: the last RDMA READ of a slot
	kindSend  = 5 << kindShift // client: a request SEND
	idMask    = 1<<kindShift - 1
)

// sconn is one client of the server. Its goroutine (run) owns every field
// below s, id and st: it receives the client's requests, reads the files
// into pool buffers, posts WRITEs and responses, and on the way out gives
// back every buffer the client held.
type sconn struct {
	s  *Server
	id int32

	cmc    *cm.Conn
	qp     *verbs.QP // requests and responses
	dqp    *verbs.QP // WRITEs (see hello)
	cq     *verbs.CQ
	mr     *verbs.MR // receive buffers, then response buffers
	ctx    context.Context
	cancel context.CancelFunc

	nslots   int
	maxHeld  int
	reqs     []request
	status   []msgStatus
	rst      [][MaxBatchLimit]rangeStatus
	bufs     [][MaxBatchLimit]int32
	pre      [][MaxBatchLimit]int32 // offset of the data in its buffer (O_DIRECT)
	writes   []int                  // WRITEs in flight per slot
	answer   []bool                 // per slot: respond when its WRITEs complete
	fifo     []int                  // slots received and not yet answered, in order
	fhead    int
	flen     int
	cur      int  // WRITE: next range of the head request
	allocked bool // READ: the head request has its buffers
	held     int  // READ buffers the client holds, or WRITE buffers in flight
	failed   bool

	wcs  [64]verbs.WC
	wr   [1]verbs.SendWR
	sge  [1]verbs.SGE
	rwr  [1]verbs.RecvWR
	rsge [1]verbs.SGE
	tmp  [MaxBatchLimit]int32

	wake  chan struct{}
	timer *time.Timer

	jobs       chan writeJob // to the poster goroutine
	postFailed atomic.Bool
}

// poolWaitTick bounds a wait for pool buffers: the client's own releases
// arrive on its CQ, which the wait does not watch.
const poolWaitTick = 500 * time.Microsecond

func (c *sconn) run(req *cm.Request) {
	s := c.s
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c.id)
		s.mu.Unlock()
	}()
	c.ctx, c.cancel = context.WithCancel(s.ctx)
	defer c.cancel()
	if err := c.accept(req); err != nil {
		s.st.rejected.Add(1)
		c.teardown()
		return
	}
	s.st.clientsTotal.Add(1)
	stop := context.AfterFunc(c.ctx, func() { _ = c.cmc.Close() })
	defer stop()
	go func() {
		select {
		case <-c.cmc.Done():
			c.cancel()
		case <-c.ctx.Done():
		}
	}()
	c.jobs = make(chan writeJob, c.maxHeld+1)
	posted := make(chan struct{})
	go c.poster(posted)
	c.loop()
	close(c.jobs)
	<-posted
	if c.postFailed.Load() && !c.failed {
		c.failed = true
		c.s.st.qpFailed.Add(1)
	}
	c.teardown()
}

func (c *sconn) accept(req *cm.Request) error {
	s := c.s
	h, err := decodeHello(req.Private)
	if err != nil {
		_ = req.Reject(c.ctx, "store: "+err.Error())
		return err
	}
	depth := min(max(h.depth, 1), s.cfg.MaxDepth)
	c.maxHeld = s.cfg.MaxHeld
	// Twice the client's depth in receives: a slot is posted again only
	// when its response SEND completes, which may come after the client
	// already sent its next request.
	c.nslots = 2 * depth
	c.reqs = make([]request, c.nslots)
	c.status = make([]msgStatus, c.nslots)
	c.rst = make([][MaxBatchLimit]rangeStatus, c.nslots)
	c.bufs = make([][MaxBatchLimit]int32, c.nslots)
	c.pre = make([][MaxBatchLimit]int32, c.nslots)
	c.fifo = make([]int, c.nslots)
	c.writes = make([]int, c.nslots)
	c.answer = make([]bool, c.nslots)
	c.wake = make(chan struct{}, 1)
	c.timer = time.NewTimer(time.Hour)
	c.timer.Stop()
	if c.cq, err = s.vc.CreateCQ(2*c.nslots + c.maxHeld + 16); err != nil {
		_ = req.Reject(c.ctx, "store: "+err.Error())
		return err
	}
	if c.qp, err = s.pd.CreateQP(verbs.QPInitAttr{SendCQ: c.cq, RecvCQ: c.cq,
		Cap: verbs.QPCap{MaxSendWR: c.nslots + c.maxHeld + 8, MaxRecvWR: c.nslots, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		_ = req.Reject(c.ctx, "store: "+err.Error())
		return err
	}
	if c.dqp, err = s.pd.CreateQP(verbs.QPInitAttr{SendCQ: c.cq, RecvCQ: c.cq,
		Cap: verbs.QPCap{MaxSendWR: c.maxHeld + 8, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		_ = req.Reject(c.ctx, "store: "+err.Error())
		return err
	}
	if err = c.dqp.Connect(h.data, verbs.ConnectOptions{}); err != nil {
		_ = req.Reject(c.ctx, "store: data QP: "+err.Error())
		return err
	}
	if c.mr, err = s.pd.AllocMR(c.nslots*(reqBufLen+respBufLen), verbs.AccessLocalWrite); err != nil {
		_ = req.Reject(c.ctx, "store: "+err.Error())
		return err
	}
	s.st.clientBytes.Add(int64(c.mr.Len()))
	w := welcome{depth: depth, chunk: s.cfg.ChunkBytes, maxBatch: s.cfg.MaxBatch, maxHeld: c.maxHeld,
		nfiles: len(s.files), catAddr: s.catMR.Addr(), catRKey: s.catMR.RKey(), catLen: s.catMR.Len(), data: c.dqp.Info()}
	wb, err := w.encode()
	if err != nil {
		_ = req.Reject(c.ctx, "store: "+err.Error())
		return err
	}
	c.cmc, err = req.Accept(c.ctx, c.qp, wb, cm.Options{Ready: func(*verbs.QP) error {
		for i := 0; i < c.nslots; i++ {
			if err := c.postRecv(i); err != nil {
				return err
			}
		}
		return nil
	}})
	return err
}

func (c *sconn) teardown() {
	s := c.s
	// Destroy the QPs first: no transport touches the pool for this
	// client after them, so its buffers can go back.
	if c.qp != nil {
		_ = c.qp.Destroy()
	}
	if c.dqp != nil {
		_ = c.dqp.Destroy()
	}
	s.pool.putAll(c.id)
	if c.cq != nil {
		_ = c.cq.Destroy()
	}
	if c.mr != nil {
		s.st.clientBytes.Add(-int64(c.mr.Len()))
		_ = c.mr.Dereg()
	}
	if c.cmc != nil {
		_ = c.cmc.Close()
	}
}

func (c *sconn) recvBuf(slot int) []byte {
	return c.mr.Bytes()[slot*reqBufLen : (slot+1)*reqBufLen]
}

func (c *sconn) respOff(slot int) int { return c.nslots*reqBufLen + slot*respBufLen }

func (c *sconn) respBuf(slot int) []byte {
	o := c.respOff(slot)
	return c.mr.Bytes()[o : o+respBufLen]
}

func (c *sconn) postRecv(slot int) error {
	c.rsge[0] = verbs.SGE{Addr: c.mr.Addr() + uint64(slot*reqBufLen), Length: reqBufLen, LKey: c.mr.LKey()}
	c.rwr[0] = verbs.RecvWR{ID: kindRecv | uint64(slot), SGL: c.rsge[:]}
	return c.qp.PostRecv(c.rwr[:])
}

// loop serves the client until it goes, its QP fails or the server closes.
func (c *sconn) loop() {
	spin := spins(c.s.vc)
	last := time.Now()
	for !c.failed {
		n, err := c.cq.Poll(c.wcs[:])
		if err != nil {
			c.fail()
			return
		}
		for i := 0; i < n && !c.failed; i++ {
			c.completion(&c.wcs[i])
		}
		if c.failed {
			return
		}
		progressed, blockedOnPool := c.advance()
		if c.failed || c.ctx.Err() != nil {
			return
		}
		if n > 0 || progressed {
			if spin {
				last = time.Now()
			}
			continue
		}
		if blockedOnPool {
			c.s.pool.wait(c.wake)
			c.timer.Reset(poolWaitTick)
			select {
			case <-c.wake:
			case <-c.timer.C:
			case <-c.ctx.Done():
				return
			}
			c.timer.Stop()
			continue
		}
		if spin && time.Since(last) < spinFor {
			runtime.Gosched()
			continue
		}
		if err := c.cq.Wait(c.ctx); err != nil && c.ctx.Err() != nil {
			return
		}
		last = time.Now()
	}
}

// spinFor is how long a loop keeps polling after its last completion
// before it sleeps in CQ.Wait, on a device whose peers are other processes
// (spins): polling drives the device's transport in the poller (CQ.Poll
// calls Context.Progress), while a sleeper hears of a completion only when
// the device's own progress loop next looks (shm0: after a nap of up to
// 200 µs), which would add that to every round trip after a pause.
const spinFor = 100 * time.Microsecond

// spins says whether waits on vc's CQs should poll a while first: its
// peers are other processes (on loop0 the peer's post completes in this
// process, and a sleeper is woken at once).
// IBEX_STORE_SPIN=0 turns the polling off (every wait sleeps at once).
func spins(vc *verbs.Context) bool {
	if os.Getenv("IBEX_STORE_SPIN") == "0" {
		return false
	}
	return vc.QueryDevice().Caps&(verbs.CapSameHost|verbs.CapOtherHosts) != 0
}

// fail marks the client's QP as failed: the loop ends and teardown frees
// its buffers.
func (c *sconn) fail() {
	if c.failed {
		return
	}
	c.failed = true
	select {
	case <-c.cmc.Done():
		// The client closed: its QP's end is no failure of its own.
	case <-c.ctx.Done():
	default:
		c.s.st.qpFailed.Add(1)
	}
}

func (c *sconn) completion(wc *verbs.WC) {
	if wc.Status != verbs.WCSuccess {
		c.fail()
		return
	}
	id := wc.WRID & idMask
	switch wc.WRID &^ idMask {
	case kindRecv:
		c.received(int(id), c.recvBuf(int(id))[:wc.ByteLen])
	case kindResp:
		if err := c.postRecv(int(id)); err != nil {
			c.fail()
		}
	case kindWrite:
		slot := int(id >> 32)
		c.s.pool.put(c.id, uint32(id))
		c.held--
		c.writes[slot]--
		if c.writes[slot] == 0 && c.answer[slot] {
			// Completed WRITEs are placed: the response may go.
			c.answer[slot] = false
			c.respond(slot, c.reqs[slot].n)
		}
	}
}

// received decodes a request in slot, applies its releases and queues it.
func (c *sconn) received(slot int, b []byte) {
	s := c.s
	s.st.requests.Add(1)
	r := &c.reqs[slot]
	st := decodeRequest(b, s.cfg.MaxBatch, c.maxHeld, r)
	if st == msgOK {
		for i := 0; i < r.nrel; i++ {
			if !s.pool.put(c.id, r.rel[i]) {
				st = msgBadRelease
				s.st.badRelease.Add(1)
				break
			}
			c.held--
		}
	}
	if st != msgOK {
		s.st.malformed.Add(1)
	} else {
		for i := 0; i < r.n; i++ {
			rs := checkRange(&r.ranges[i], s.sizes, s.cfg.ChunkBytes)
			c.rst[slot][i] = rs
			s.st.rangeErr(rs)
		}
	}
	c.status[slot] = st
	c.fifo[(c.fhead+c.flen)%len(c.fifo)] = slot
	c.flen++
}

// advance serves queued requests in order as far as the pool allows.
func (c *sconn) advance() (progressed, blockedOnPool bool) {
	for c.flen > 0 && !c.failed {
		slot := c.fifo[c.fhead]
		var done bool
		done, blockedOnPool = c.serve(slot)
		if !done {
			return progressed, blockedOnPool
		}
		progressed = true
		c.fhead = (c.fhead + 1) % len(c.fifo)
		c.flen--
		c.cur, c.allocked = 0, false
	}
	return progressed, false
}

// serve works on the request in slot; done when its response is posted.
func (c *sconn) serve(slot int) (done, blockedOnPool bool) {
	r := &c.reqs[slot]
	if c.status[slot] != msgOK {
		c.respond(slot, 0)
		return true, false
	}
	if r.op == opRead {
		if !c.allocked {
			if !c.allocRead(slot) {
				return false, true
			}
			c.allocked = true
		}
		c.fillRead(slot)
		c.respond(slot, r.n)
		return true, false
	}
	for ; c.cur < r.n; c.cur++ {
		if c.rst[slot][c.cur] != rangeOK {
			continue
		}
		if c.held >= c.maxHeld {
			// Wait for this client's own WRITEs to complete.
			return false, false
		}
		b := c.tmp[:1]
		if !c.s.pool.alloc(c.id, b) {
			return false, true
		}
		c.held++
		if !c.write(slot, c.cur, b[0]) {
			return false, false
		}
	}
	if c.writes[slot] > 0 {
		c.answer[slot] = true // by completion: the WRITEs are on dqp
		return true, false
	}
	c.respond(slot, r.n)
	return true, false
}

// allocRead takes the pool buffers of a READ request, all or none, after
// marking the ranges that would pass the client's cap.
func (c *sconn) allocRead(slot int) bool {
	r := &c.reqs[slot]
	k := 0
	for i := 0; i < r.n; i++ {
		if c.rst[slot][i] != rangeOK {
			continue
		}
		if c.held+k >= c.maxHeld {
			c.rst[slot][i] = rangeHeld
			c.s.st.rangeErr(rangeHeld)
			continue
		}
		k++
	}
	if !c.s.pool.alloc(c.id, c.tmp[:k]) {
		return false
	}
	c.held += k
	j := 0
	for i := 0; i < r.n; i++ {
		if c.rst[slot][i] == rangeOK {
			c.bufs[slot][i] = c.tmp[j]
			j++
		}
	}
	return true
}

func (c *sconn) fillRead(slot int) {
	s := c.s
	r := &c.reqs[slot]
	for i := 0; i < r.n; i++ {
		if c.rst[slot][i] != rangeOK {
			continue
		}
		rr := &r.ranges[i]
		b := c.bufs[slot][i]
		pre, err := s.pread(int(rr.file), int64(rr.off), int(rr.n), s.pool.buf(b))
		if err != nil {
			c.rst[slot][i] = rangeIO
			s.st.rangeErr(rangeIO)
			s.pool.put(c.id, uint32(b))
			c.held--
			continue
		}
		c.pre[slot][i] = int32(pre)
		s.st.ranges.Add(1)
		s.st.bytes.Add(uint64(rr.n))
	}
}

// write reads range i of slot into buffer b and posts its WRITE.
func (c *sconn) write(slot, i int, b int32) bool {
	s := c.s
	rr := &c.reqs[slot].ranges[i]
	pre, err := s.pread(int(rr.file), int64(rr.off), int(rr.n), s.pool.buf(b))
	if err != nil {
		c.rst[slot][i] = rangeIO
		s.st.rangeErr(rangeIO)
		s.pool.put(c.id, uint32(b))
		c.held--
		return true
	}
	c.writes[slot]++
	// The poster posts it (and on shm0 and loop0 copies it) while this
	// goroutine reads the next range: two cores for one client.
	c.jobs <- writeJob{id: kindWrite | uint64(slot)<<32 | uint64(uint32(b)), addr: s.pool.bufAddr(b) + uint64(pre),
		n: rr.n, dst: rr.dst, rkey: rr.rkey}
	s.st.ranges.Add(1)
	s.st.bytes.Add(uint64(rr.n))
	return true
}

// writeJob is one WRITE for the poster.
type writeJob struct {
	id   uint64
	addr uint64
	n    uint32
	dst  uint64
	rkey uint32
}

// poster posts the client's WRITEs in order, on dqp. It ends when jobs is
// closed; a failed post ends the client.
func (c *sconn) poster(done chan<- struct{}) {
	defer close(done)
	var wr [1]verbs.SendWR
	var sge [1]verbs.SGE
	lkey := c.s.pool.mr.LKey()
	for j := range c.jobs {
		if c.postFailed.Load() {
			continue
		}
		sge[0] = verbs.SGE{Addr: j.addr, Length: j.n, LKey: lkey}
		wr[0] = verbs.SendWR{ID: j.id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: sge[:], RemoteAddr: j.dst, RKey: j.rkey}
		if err := c.dqp.PostSend(wr[:]); err != nil {
			c.postFailed.Store(true)
			c.cancel()
		}
	}
}

// respond posts slot's response with n entries.
func (c *sconn) respond(slot, n int) {
	s := c.s
	r := &c.reqs[slot]
	b := c.respBuf(slot)
	encodeResponseHeader(b, r.op, c.status[slot], r.tag, n)
	for i := 0; i < n; i++ {
		e := respEntry{status: c.rst[slot][i]}
		if e.status == rangeOK {
			e.n = r.ranges[i].n
			if r.op == opRead {
				bi := c.bufs[slot][i]
				e.addr = s.pool.bufAddr(bi) + uint64(c.pre[slot][i])
				e.rkey = s.pool.mr.RKey()
				e.buf = uint32(bi)
			}
		}
		encodeEntry(b, i, e)
	}
	c.sge[0] = verbs.SGE{Addr: c.mr.Addr() + uint64(c.respOff(slot)), Length: uint32(respLen(n)), LKey: c.mr.LKey()}
	c.wr[0] = verbs.SendWR{ID: kindResp | uint64(slot), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: c.sge[:]}
	if err := c.qp.PostSend(c.wr[:]); err != nil {
		c.fail()
	}
}
