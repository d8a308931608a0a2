package kv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/ibex-rdma/ibex/verbs"
)

// The client's engine runs a batch of operations on one QP: GETs as
// chains of READs (buckets, then the entry; or the entry alone from the
// location cache), PUTs and DELETEs as request SENDs answered by reply
// SENDs. It starts operations in order while it has GET slots and
// request credits, polls completions in batches and moves each GET on
// from its completion. It allocates nothing once the client is set up
// (the shared large buffers come at their first use).

func (c *Client) setup(ctx context.Context) error {
	si := c.si
	credits := int(si.credits)
	var err error
	if c.rpcMem, err = allocRegion(c.pd, credits*int(si.reqSize)+credits*repLen, verbs.AccessLocalWrite); err != nil {
		return err
	}
	for j := 0; j < credits; j++ {
		if err := c.postReply(j); err != nil {
			return err
		}
	}
	c.gs = make([]getState, c.cfg.Pipeline)
	c.freeG = make([]int, 0, c.cfg.Pipeline)
	for i := c.cfg.Pipeline - 1; i >= 0; i-- {
		c.freeG = append(c.freeG, i)
	}
	c.credits = make([]int, 0, credits)
	for i := credits - 1; i >= 0; i-- {
		c.credits = append(c.credits, i)
	}
	c.rpcOp = make([]int, credits)
	c.rpcID = make([]uint64, credits)
	c.wcs = make([]verbs.WC, 2*c.cfg.Pipeline+2*credits+2)
	c.pend = make([]verbs.SendWR, 0, 2*c.cfg.Pipeline+credits+1)
	c.psge = make([]verbs.SGE, cap(c.pend))
	if c.cfg.Cache > 0 {
		c.cache = make([]cacheEnt, c.cfg.Cache)
	}
	// The first header.
	for {
		c.postHeader()
		if c.err != nil {
			return c.err
		}
		for c.hdrBusy {
			if err := c.pollOnce(ctx); err != nil {
				return err
			}
		}
		if c.hdr.gen != 0 {
			return nil
		}
		if c.stats.HeaderReads > 1000 {
			return fmt.Errorf("%w: no valid index header in %d reads", ErrProtocol, c.stats.HeaderReads)
		}
	}
}

func (c *Client) postReply(j int) error {
	off := uint64(int(c.si.credits)*int(c.si.reqSize) + j*repLen)
	c.rsge[0] = verbs.SGE{Addr: c.rpcMem.mr.Addr() + off, Length: repLen, LKey: c.rpcMem.mr.LKey()}
	c.rwr[0] = verbs.RecvWR{ID: uint64(cwRecv)<<56 | uint64(j), SGL: c.rsge[:]}
	return c.qp.PostRecv(c.rwr[:])
}

func (c *Client) slotMem(gi int) []byte {
	off := hdrSize + gi*c.cfg.SlotSize
	return c.stage.bytes()[off : off+c.cfg.SlotSize]
}

// queue adds a work request to the ones the next flush posts, with its
// one SGE (if any) kept beside it.
func (c *Client) queue(wr verbs.SendWR, sge verbs.SGE, hasSGE bool) {
	if len(c.pend) == cap(c.pend) {
		c.flush()
	}
	i := len(c.pend)
	c.pend = c.pend[:i+1]
	c.pend[i] = wr
	if hasSGE {
		c.psge[i] = sge
		c.pend[i].SGL = c.psge[i : i+1]
	}
	c.inflight++
}

// flush posts the queued work requests with one PostSend: the READs of
// every GET that moved on since the last flush go out together.
func (c *Client) flush() {
	if len(c.pend) == 0 {
		return
	}
	if err := c.qp.PostSend(c.pend); err != nil {
		c.fail(fmt.Errorf("kv: post: %w", err))
	}
	clear(c.pend)
	c.pend = c.pend[:0]
}

// read queues one READ of n bytes at remote into local (an MR offset).
func (c *Client) read(id uint64, local *verbs.MR, loff uint64, rkey uint32, raddr uint64, n uint32) {
	c.queue(verbs.SendWR{ID: id, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, RemoteAddr: raddr, RKey: rkey},
		verbs.SGE{Addr: local.Addr() + loff, Length: n, LKey: local.LKey()}, true)
	c.stats.Reads++
}

func (c *Client) postHeader() {
	if c.hdrBusy {
		return
	}
	c.hdrBusy = true
	c.read(uint64(cwHdr)<<56, c.stage.mr, 0, c.si.indexRKey, c.si.indexAddr, hdrSize)
	c.flush()
}

func (c *Client) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// Do runs ops as one pipelined batch: every GET's READs are posted before
// the client waits, as many at once as Pipeline allows; PUTs and DELETEs
// go out as requests, as many as the server's credits allow. It returns
// when all are done; each op's outcome is in the op. The error is the
// client's: its connection failed, or ctx ended (ops not started have Err
// set to it).
func (c *Client) Do(ctx context.Context, ops []Op) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exec(ctx, ops)
}

func (c *Client) exec(ctx context.Context, ops []Op) error {
	if c.err != nil {
		return c.err
	}
	if cap(c.ost) < len(ops) {
		c.ost = make([]uint8, len(ops))
	}
	c.ost = c.ost[:len(ops)]
	clear(c.ost)
	c.done, c.cancel = 0, nil
	nextGet := 0
	c.curOps = ops
	defer func() { c.curOps = nil }()
	next := 0
	for c.done < len(ops) {
		if c.cancel == nil && ctx.Err() != nil {
			c.cancel = ctx.Err()
		}
		// GETs first: on a transport where a READ waits for the SENDs
		// posted before it (shm), a batch's READs must not queue behind
		// its PUTs. Ops of one batch are concurrent: their order is not
		// an order of effects.
		for ; nextGet < len(ops) && c.cancel == nil && c.err == nil && len(c.freeG) > 0; nextGet++ {
			if ops[nextGet].Kind == OpGet && c.ost[nextGet] == osNew {
				c.start(ops, nextGet)
			}
		}
		for next < len(ops) && c.cancel == nil && c.err == nil {
			if c.ost[next] == osNew && !c.start(ops, next) {
				break
			}
			next++
		}
		c.flush()
		if c.cancel != nil {
			for ; next < len(ops); next++ {
				c.finish(ops, next, c.cancel)
			}
		}
		if c.err != nil {
			break
		}
		if c.done == len(ops) {
			break
		}
		if err := c.pollOnce(ctx); err != nil {
			c.fail(err)
			break
		}
	}
	if c.err != nil {
		for i := range ops {
			if c.ost[i] != osDone {
				ops[i].Err = c.err
				c.ost[i] = osDone
			}
		}
		return c.err
	}
	return c.cancel
}

// pollOnce waits for and handles at least one completion. It spins on the
// CQ (which drives a software transport in this goroutine) and sleeps in
// PollWait only after a while without any.
func (c *Client) pollOnce(ctx context.Context) error {
	var n int
	var err error
	var start time.Time
	for i := 0; ; i++ {
		if n, err = c.cq.Poll(c.wcs); n > 0 || err != nil {
			break
		}
		// Spin a while before sleeping: a software transport delivers
		// to a goroutine that polls at once, and may deliver to one that
		// sleeps only when its own loop next looks (shm naps up to
		// 200 µs while an application polls). Not on a device whose
		// peers are in this process (see Server.await).
		if i&63 == 63 {
			if !c.spin {
				break
			}
			if start.IsZero() {
				start = time.Now()
			} else if time.Since(start) > spinWait {
				break
			}
			runtime.Gosched()
		}
	}
	if n == 0 && err == nil {
		wctx := ctx
		if ctx.Err() != nil {
			// Draining after a cancel: what is in flight still completes
			// (or the connection fails, and the watcher flushes it).
			var cancel context.CancelFunc
			wctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
		}
		n, err = c.cq.PollWait(wctx, c.wcs)
	}
	if err != nil {
		return fmt.Errorf("kv: poll: %w", err)
	}
	for i := range c.wcs[:n] {
		c.complete(&c.wcs[i])
	}
	c.flush()
	return nil
}

// spinWait is how long a client polls for completions before it sleeps.
const spinWait = 200 * time.Microsecond

func (c *Client) finish(ops []Op, i int, err error) {
	if c.ost[i] == osDone {
		return
	}
	c.ost[i] = osDone
	c.done++
	if err != nil {
		ops[i].Err = err
	}
}

// start starts op i, or says it must wait for a free GET slot or credit.
func (c *Client) start(ops []Op, i int) bool {
	o := &ops[i]
	o.N, o.Found, o.Err = 0, false, nil
	if o.Kind != opStatsKind {
		if len(o.Key) == 0 {
			c.finish(ops, i, errors.New("kv: empty key"))
			return true
		}
		if len(o.Key) > int(c.si.maxKey) {
			c.finish(ops, i, fmt.Errorf("%w: key of %d bytes, the server takes at most %d", ErrTooLarge, len(o.Key), c.si.maxKey))
			return true
		}
	}
	switch o.Kind {
	case OpGet:
		if len(c.freeG) == 0 {
			return false
		}
		gi := c.freeG[len(c.freeG)-1]
		c.freeG = c.freeG[:len(c.freeG)-1]
		c.ost[i] = osBusy
		g := &c.gs[gi]
		// Field by field: zeroing the whole state (its candidate array)
		// per GET showed in profiles.
		g.op, g.hash, g.retries, g.big, g.fromCache, g.nc, g.ci, g.pending = i, keyHash(c.hdr.seed, o.Key), 0, false, false, 0, 0, 0
		c.stats.Gets++
		if c.cache != nil {
			if e := &c.cache[g.hash&uint64(len(c.cache)-1)]; e.hash == g.hash && e.s.ver != 0 {
				c.stats.CacheHits++
				g.fromCache = true
				c.readEntry(ops, gi, e.s)
				return true
			}
		}
		c.readBuckets(ops, gi)
		return true
	case OpPut, OpDelete, opStatsKind:
		if o.Kind == OpPut && len(o.Value) > int(c.si.maxValue) {
			c.finish(ops, i, fmt.Errorf("%w: value of %d bytes, the server takes at most %d", ErrTooLarge, len(o.Value), c.si.maxValue))
			return true
		}
		remote := o.Kind == OpPut && reqHdr+len(o.Key)+len(o.Value) > int(c.si.reqSize)
		if len(c.credits) == 0 || (remote && c.putBusy) {
			return false
		}
		c.request(ops, i, remote)
		return true
	}
	c.finish(ops, i, fmt.Errorf("kv: op kind %d", o.Kind))
	return true
}

func (c *Client) request(ops []Op, i int, remote bool) {
	o := &ops[i]
	r := c.credits[len(c.credits)-1]
	var rkey uint32
	var raddr uint64
	if remote {
		if c.bigPut == nil {
			var err error
			if c.bigPut, err = allocRegion(c.pd, int(c.si.maxValue), verbs.AccessLocalWrite|verbs.AccessRemoteRead); err != nil {
				c.finish(ops, i, fmt.Errorf("kv: put: buffer for values of %d bytes: %w", c.si.maxValue, err))
				return
			}
		}
		copy(c.bigPut.bytes(), o.Value)
		rkey, raddr = c.bigPut.mr.RKey(), c.bigPut.mr.Addr()
		c.putBusy, c.putSlot = true, r
	}
	c.credits = c.credits[:len(c.credits)-1]
	c.nextID++
	id := c.nextID<<16 | uint64(r)
	c.rpcID[r], c.rpcOp[r] = id, i
	c.ost[i] = osBusy
	kind := uint8(o.Kind)
	if o.Kind == opStatsKind {
		kind = opStats
	}
	buf := c.rpcMem.bytes()[r*int(c.si.reqSize) : (r+1)*int(c.si.reqSize)]
	vlen := uint32(0)
	if o.Kind == OpPut {
		vlen = uint32(len(o.Value))
	}
	n := encodeRequest(buf, kind, remote, id, o.Key, vlen, rkey, raddr)
	if o.Kind == OpPut && !remote {
		n += copy(buf[n:], o.Value)
	}
	wr := verbs.SendWR{ID: uint64(cwSend) << 56, Opcode: verbs.WRSend, Flags: verbs.SendSignaled}
	if n <= 256 {
		wr.Flags |= verbs.SendInline
		wr.Inline = buf[:n]
		c.queue(wr, verbs.SGE{}, false)
	} else {
		c.queue(wr, verbs.SGE{Addr: c.rpcMem.mr.Addr() + uint64(r*int(c.si.reqSize)), Length: uint32(n), LKey: c.rpcMem.mr.LKey()}, true)
	}
	c.rpcOut++
}

func (c *Client) readBuckets(ops []Op, gi int) {
	g := &c.gs[gi]
	if c.cancel != nil {
		c.endGet(ops, gi, c.cancel)
		return
	}
	g.phase, g.fromCache, g.gen = phBuckets, false, c.hdr.gen
	g.b1, g.b2, g.tag = place(g.hash, c.hdr.buckets)
	base := c.si.indexAddr + c.hdr.table
	mr := c.stage.mr
	loff := uint64(hdrSize + gi*c.cfg.SlotSize)
	for w, b := range [2]uint64{g.b1, g.b2} {
		c.read(uint64(cwBucket)<<56|uint64(gi), mr, loff+uint64(w*bucketSize), c.si.indexRKey, base+b*bucketSize, bucketSize)
	}
	g.pending = 2
}

func (c *Client) maxEntry() uint64 { return entryLen(int(c.si.maxKey), int(c.si.maxValue)) }

func (c *Client) readEntry(ops []Op, gi int, s slot) {
	g := &c.gs[gi]
	if c.cancel != nil {
		c.endGet(ops, gi, c.cancel)
		return
	}
	g.exp, g.phase = s, phEntry
	if int(s.n) <= c.cfg.SlotSize {
		c.read(uint64(cwEntry)<<56|uint64(gi), c.stage.mr, uint64(hdrSize+gi*c.cfg.SlotSize), c.si.arenaRKey, c.si.arenaAddr+s.off, s.n)
		g.pending = 1
		return
	}
	if c.bigBusy {
		g.phase = phWaitBig
		return
	}
	if c.big == nil {
		var err error
		if c.big, err = allocRegion(c.pd, int(c.maxEntry()), verbs.AccessLocalWrite); err != nil {
			c.endGet(ops, gi, fmt.Errorf("kv: get: buffer for entries of %d bytes: %w", c.maxEntry(), err))
			return
		}
	}
	c.bigBusy, g.big = true, true
	c.read(uint64(cwEntry)<<56|uint64(gi), c.big.mr, 0, c.si.arenaRKey, c.si.arenaAddr+s.off, s.n)
	g.pending = 1
}

func (c *Client) endGet(ops []Op, gi int, err error) {
	g := &c.gs[gi]
	g.phase = 0
	c.finish(ops, g.op, err)
	c.freeG = append(c.freeG, gi)
}

// retry counts a GET's retries; false: it gave up (and is finished).
func (c *Client) retry(ops []Op, gi int) bool {
	g := &c.gs[gi]
	g.retries++
	if g.retries > maxRetries {
		c.endGet(ops, gi, fmt.Errorf("%w: get: %d retries, the index never read whole", ErrProtocol, g.retries))
		return false
	}
	return true
}

func (c *Client) complete(wc *verbs.WC) {
	kind, idx := uint8(wc.WRID>>56), int(wc.WRID&0xffffffff)
	if kind != cwRecv {
		c.inflight--
	}
	if wc.Status != verbs.WCSuccess {
		if err := c.qp.Err(); err != nil && wc.Status == verbs.WCWRFlushErr {
			c.fail(fmt.Errorf("%w: %v", ErrClosed, err))
		} else {
			c.fail(fmt.Errorf("%w: %v", ErrClosed, wc))
		}
		return
	}
	ops := c.curOps
	switch kind {
	case cwHdr:
		c.hdrBusy = false
		c.stats.HeaderReads++
		h, ok := decodeHeader(c.stage.bytes()[:hdrSize], c.si.indexLen)
		if !ok || h.seed != c.hdr.seed && c.hdr.gen != 0 {
			c.postHeader()
			return
		}
		c.hdr = h
		for gi := range c.gs {
			if c.gs[gi].phase == phWaitHdr {
				c.readBuckets(ops, gi)
			}
		}
	case cwBucket:
		g := &c.gs[idx]
		if g.pending--; g.pending == 0 {
			c.bucketsRead(ops, idx)
		}
	case cwEntry:
		c.gs[idx].pending = 0
		c.entryRead(ops, idx)
	case cwSend:
	case cwRecv:
		c.replied(idx, int(wc.ByteLen))
	}
}

func (c *Client) bucketsRead(ops []Op, gi int) {
	g := &c.gs[gi]
	mem := c.slotMem(gi)
	for w := 0; w < 2; w++ {
		if !bucketOK(mem[w*bucketSize : (w+1)*bucketSize]) {
			c.stats.TornBuckets++
			if c.retry(ops, gi) {
				c.readBuckets(ops, gi)
			}
			return
		}
	}
	for w := 0; w < 2; w++ {
		b := mem[w*bucketSize:]
		if le32(b[4:]) != uint32(g.gen) || le32(b[8:])&flagMoved != 0 {
			// A newer table: the header says where.
			if !c.retry(ops, gi) {
				return
			}
			if c.hdr.gen != g.gen {
				c.readBuckets(ops, gi)
				return
			}
			g.phase = phWaitHdr
			c.postHeader()
			return
		}
	}
	g.nc, g.ci = 0, 0
	maxE := c.maxEntry()
	for w := 0; w < 2; w++ {
		b := mem[w*bucketSize:]
		for i := 0; i < slotsPerBkt; i++ {
			s := decodeSlot(b[slotBase+i*slotSize:])
			if s.ver == 0 || s.tag != g.tag {
				continue
			}
			if s.n < entryHdr+8 || uint64(s.n) > maxE || s.off+uint64(s.n) > c.si.arenaLen {
				c.fail(fmt.Errorf("%w: bucket names an entry of %d bytes at %#x", ErrProtocol, s.n, s.off))
				return
			}
			g.cands[g.nc] = s
			g.nc++
		}
	}
	if g.nc == 0 {
		c.endGet(ops, gi, nil)
		return
	}
	c.readEntry(ops, gi, g.cands[0])
}

func (c *Client) entryRead(ops []Op, gi int) {
	g := &c.gs[gi]
	o := &ops[g.op]
	var e []byte
	if g.big {
		e = c.big.bytes()[:g.exp.n]
	} else {
		e = c.slotMem(gi)[:g.exp.n]
	}
	v, st := checkEntry(e, g.exp.ver, o.Key)
	if st == entryOK {
		o.Found = true
		o.N = len(v)
		var err error
		if copy(o.Value, v) < len(v) {
			err = fmt.Errorf("kv: get: value of %d bytes, buffer of %d: %w", len(v), len(o.Value), io.ErrShortBuffer)
		}
		if !g.fromCache && c.cache != nil {
			c.cache[g.hash&uint64(len(c.cache)-1)] = cacheEnt{hash: g.hash, s: g.exp}
		}
		c.stats.Found++
		c.releaseBig(ops, gi)
		c.endGet(ops, gi, err)
		return
	}
	c.releaseBig(ops, gi)
	switch {
	case g.fromCache:
		// Dead, reused or another key's: the buckets say where it is now.
		c.stats.CacheStale++
		c.cache[g.hash&uint64(len(c.cache)-1)] = cacheEnt{}
		c.readBuckets(ops, gi)
	case st == entryStale:
		c.stats.StaleEntries++
		if c.retry(ops, gi) {
			c.readBuckets(ops, gi)
		}
	case st == entryTorn:
		c.stats.TornEntries++
		if c.retry(ops, gi) {
			c.readEntry(ops, gi, g.exp)
		}
	case st == entryOther:
		c.stats.TagCollisions++
		if g.ci++; g.ci < g.nc {
			c.readEntry(ops, gi, g.cands[g.ci])
		} else {
			c.endGet(ops, gi, nil)
		}
	}
}

func (c *Client) releaseBig(ops []Op, gi int) {
	g := &c.gs[gi]
	if !g.big {
		return
	}
	g.big, c.bigBusy = false, false
	for wi := range c.gs {
		if c.gs[wi].phase == phWaitBig && !c.bigBusy {
			c.readEntry(ops, wi, c.gs[wi].exp)
		}
	}
}

// replied handles reply buffer j.
func (c *Client) replied(j int, n int) {
	off := int(c.si.credits)*int(c.si.reqSize) + j*repLen
	b := c.rpcMem.bytes()[off : off+n]
	if n < repHdr {
		c.fail(fmt.Errorf("%w: reply of %d bytes", ErrProtocol, n))
		return
	}
	st, id := b[0], le64(b[8:])
	r := int(id & 0xffff)
	if r >= len(c.rpcID) || c.rpcID[r] != id {
		c.fail(fmt.Errorf("%w: reply to request %#x, which is not outstanding", ErrProtocol, id))
		return
	}
	ops := c.curOps
	i := c.rpcOp[r]
	o := &ops[i]
	var err error
	arg := le64(b[16:])
	switch st {
	case stOK:
		o.Found = true
		if o.Kind == opStatsKind {
			if n != repLen {
				err = fmt.Errorf("%w: stats reply of %d bytes", ErrProtocol, n)
			} else {
				c.lastStat = statsFrom(b[repHdr:])
			}
		}
		if o.Kind == OpPut {
			c.stats.Puts++
		}
		if o.Kind == OpDelete {
			c.stats.Deletes++
		}
	case stNotFound:
	case stTooLarge:
		err = fmt.Errorf("%w: key of %d bytes, value of %d: the server takes keys to %d bytes, values to %d", ErrTooLarge, len(o.Key), len(o.Value), c.si.maxKey, c.si.maxValue)
	case stArena:
		err = fmt.Errorf("%w: no room for a %d-byte entry in the server's %d-byte value arena (kv serve --values)", ErrArenaFull, entryLen(len(o.Key), len(o.Value)), arg)
	case stIndex:
		err = fmt.Errorf("%w: the key's buckets are full and the index is at its largest for %d bytes (kv serve --index)", ErrIndexFull, arg)
	case stReadErr:
		err = errors.New("kv: put: the server could not READ the value")
	default:
		err = fmt.Errorf("%w: reply status %d", ErrProtocol, st)
	}
	c.rpcID[r] = 0
	c.credits = append(c.credits, r)
	if c.putBusy && c.putSlot == r {
		c.putBusy = false
	}
	c.rpcOut--
	if e := c.postReply(j); e != nil {
		c.fail(fmt.Errorf("kv: repost reply buffer: %w", e))
	}
	c.finish(ops, i, err)
}
