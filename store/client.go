package store

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ibex-rdma/ibex/internal/cm"
	"github.com/ibex-rdma/ibex/verbs"
)

// Mode is how a client's ranges travel.
type Mode uint8

const (
	// ModeRead: the server reads each range into a buffer of its pool and
	// answers its address; the client RDMA READs it and then releases the
	// buffer (in its next request).
	ModeRead Mode = iota
	// ModeWrite: the client names its destination (address, rkey) per
	// range; the server RDMA WRITEs the data there, then answers.
	ModeWrite
)

func (m Mode) String() string {
	switch m {
	case ModeRead:
		return "read"
	case ModeWrite:
		return "write"
	}
	return "mode(" + strconv.Itoa(int(m)) + ")"
}

// ParseMode parses "read" or "write".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "read", "READ":
		return ModeRead, nil
	case "write", "WRITE":
		return ModeWrite, nil
	}
	return 0, fmt.Errorf("store: mode %q: want read or write", s)
}

// ClientConfig configures Dial. Every zero field takes the default named
// beside it.
type ClientConfig struct {
	// Server is the server's "host:port" (required; a missing port is
	// DefaultPort).
	Server string
	// Device is the verbs device (default: the first device, verbs.Open("")).
	Device string
	// Mode is ModeRead (the default) or ModeWrite.
	Mode Mode
	// Depth is the most request messages in flight (default 8, at most
	// 1024; the server may grant fewer). Every ReadBatch call in flight
	// uses at least one.
	Depth int
}

// Client reads ranges of a server's files. It is safe for concurrent use:
// several goroutines may each have a ReadBatch in flight.
type Client struct {
	cfg   ClientConfig
	w     welcome
	files []FileInfo

	vc    *verbs.Context
	pd    *verbs.PD
	cq    *verbs.CQ
	qp    *verbs.QP // requests and responses
	dqp   *verbs.QP // RDMA READs (see hello)
	conn  *cm.Conn
	msg   *verbs.MR // send buffers (depth × reqBufLen), then receive buffers
	depth int
	nrecv int
	per   int // pieces per request

	slots     []cslot
	freeSlots chan int
	batches   chan *batch

	allocMu sync.Mutex
	regions atomic.Pointer[[]region]
	stage   atomic.Pointer[verbs.MR] // READ mode's staging, per*chunk bytes per slot, made at first need

	sendMu   sync.Mutex // orders requests: taking releases and posting
	mu       sync.Mutex // guards rel, err, every batch's fields and slot.b
	rel      []uint32   // READ: buffers read and not yet released
	inflight int        // requests sent and not finished
	relBatch *batch     // the batch of release-only requests (never done)
	err      error
	done     chan struct{} // closed when the client fails or closes
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	// Owned by the poller goroutine.
	wcs  [64]verbs.WC
	rwr  [1]verbs.RecvWR
	rsge [1]verbs.SGE
}

type region struct {
	base uintptr
	n    int
	addr uint64
	lkey uint32
	rkey uint32
	mr   *verbs.MR
}

// piece is one range (or one chunk of a range) of a request.
type piece struct {
	file  int
	off   int64
	n     int
	laddr uint64
	lkey  uint32
	rkey  uint32
	// READ mode into memory not from Alloc: the READ lands in the slot's
	// staging buffer and the poller copies it to copyTo.
	copyTo []byte
}

// cslot is one request message in flight and what its answer needs.
type cslot struct {
	b      *batch // guarded by Client.mu once sent
	n      int
	pieces [MaxBatchLimit]piece
	bufs   [MaxBatchLimit]uint32
	nbufs  int
	wrs    [MaxBatchLimit]verbs.SendWR
	sges   [MaxBatchLimit]verbs.SGE
	swr    [1]verbs.SendWR
	ssge   [1]verbs.SGE
}

// batch is one ReadBatch call; its fields are guarded by Client.mu.
type batch struct {
	remaining int // slots sent and not finished
	allSent   bool
	abandoned bool // the caller gave up (ctx); the last slot frees it
	err       error
	done      chan struct{}
}

// Dial connects to a server, reads its file list, and starts the
// client's poller. ctx bounds the connection and the file list's read.
func Dial(ctx context.Context, cfg ClientConfig) (_ *Client, err error) {
	switch {
	case cfg.Server == "":
		return nil, configErr("Server: empty (the server's host:port)")
	case cfg.Mode > ModeWrite:
		return nil, configErr("Mode %d: want ModeRead or ModeWrite", cfg.Mode)
	case cfg.Depth < 0 || cfg.Depth > 1024:
		return nil, configErr("Depth %d: want 1 to 1024", cfg.Depth)
	}
	if cfg.Depth == 0 {
		cfg.Depth = 8
	}
	if _, _, err := net.SplitHostPort(cfg.Server); err != nil {
		cfg.Server = net.JoinHostPort(cfg.Server, strconv.Itoa(DefaultPort))
	}
	c := &Client{cfg: cfg, done: make(chan struct{})}
	defer func() {
		if err != nil {
			c.release()
		}
	}()
	if c.vc, err = verbs.Open(cfg.Device); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if c.pd, err = c.vc.AllocPD(); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	depth := cfg.Depth
	c.nrecv = 2 * depth
	sq := depth*MaxBatchLimit + 8
	if c.cq, err = c.vc.CreateCQ(sq + depth + c.nrecv + 16); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if c.qp, err = c.pd.CreateQP(verbs.QPInitAttr{SendCQ: c.cq, RecvCQ: c.cq,
		Cap: verbs.QPCap{MaxSendWR: depth + 8, MaxRecvWR: c.nrecv, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if c.dqp, err = c.pd.CreateQP(verbs.QPInitAttr{SendCQ: c.cq, RecvCQ: c.cq,
		Cap: verbs.QPCap{MaxSendWR: sq, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if c.msg, err = c.pd.AllocMR(depth*reqBufLen+c.nrecv*respBufLen, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	c.depth = depth
	hb, err := hello{depth: depth, data: c.dqp.Info()}.encode()
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	c.conn, err = cm.Dial(ctx, cfg.Server, c.qp, hb, cm.Options{Ready: func(*verbs.QP) error {
		for i := 0; i < c.nrecv; i++ {
			if err := c.postRecv(i); err != nil {
				return err
			}
		}
		return nil
	}})
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if c.w, err = decodeWelcome(c.conn.Private()); err != nil {
		return nil, err
	}
	if err := c.dqp.Connect(c.w.data, verbs.ConnectOptions{}); err != nil {
		return nil, fmt.Errorf("store: data QP: %w", err)
	}
	c.depth = min(depth, c.w.depth)
	c.per = c.w.maxBatch
	if cfg.Mode == ModeRead {
		// Whatever is in flight fits the server's cap on held buffers:
		// depth requests of per pieces each (see send).
		// Not fewer than 8 ranges per request when the cap allows:
		// fewer, larger requests rather than many small ones.
		c.depth = min(c.depth, c.w.maxHeld)
		c.per = min(c.per, c.w.maxHeld/c.depth)
		if c.per < 8 {
			c.per = min(8, c.w.maxHeld, c.w.maxBatch)
			c.depth = min(c.depth, c.w.maxHeld/c.per)
		}
	}
	if c.files, err = c.readCatalog(ctx); err != nil {
		return nil, err
	}
	c.slots = make([]cslot, c.depth)
	c.freeSlots = make(chan int, c.depth)
	for i := range c.depth {
		c.freeSlots <- i
	}
	nb := 4 * c.depth
	c.batches = make(chan *batch, nb)
	for range nb {
		c.batches <- &batch{done: make(chan struct{}, 1)}
	}
	c.rel = make([]uint32, 0, MaxHeldLimit)
	c.relBatch = &batch{done: make(chan struct{}, 1)}
	c.regions.Store(&[]region{})
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(2)
	go c.poll()
	go func() {
		defer c.wg.Done()
		select {
		case <-c.conn.Done():
			c.fail(fmt.Errorf("store: %w: %w", ErrClosed, c.conn.Err()))
		case <-c.ctx.Done():
		}
	}()
	return c, nil
}

// readCatalog RDMA READs the server's file list.
func (c *Client) readCatalog(ctx context.Context) ([]FileInfo, error) {
	mr, err := c.pd.AllocMR(c.w.catLen, verbs.AccessLocalWrite)
	if err != nil {
		return nil, fmt.Errorf("store: file list of %d bytes: %w", c.w.catLen, err)
	}
	defer mr.Dereg()
	err = c.dqp.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: mr.Addr(), Length: uint32(c.w.catLen), LKey: mr.LKey()}}, RemoteAddr: c.w.catAddr, RKey: c.w.catRKey}})
	if err != nil {
		return nil, fmt.Errorf("store: file list: %w", err)
	}
	wc := make([]verbs.WC, 1)
	if _, err := c.cq.PollWait(ctx, wc); err != nil {
		return nil, fmt.Errorf("store: file list: %w", err)
	}
	if wc[0].Status != verbs.WCSuccess {
		return nil, fmt.Errorf("store: file list: RDMA READ: %v", wc[0].Status)
	}
	return decodeCatalog(mr.Bytes(), c.w.nfiles)
}

func (c *Client) sendOff(slot int) int { return slot * reqBufLen }

// recvOff: the layout is fixed at the depth asked for (cfg.Depth), before
// the server's grant.
func (c *Client) recvOff(i int) int { return c.cfg.Depth*reqBufLen + i*respBufLen }

func (c *Client) postRecv(i int) error {
	off := c.recvOff(i)
	c.rsge[0] = verbs.SGE{Addr: c.msg.Addr() + uint64(off), Length: respBufLen, LKey: c.msg.LKey()}
	c.rwr[0] = verbs.RecvWR{ID: kindRecv | uint64(i), SGL: c.rsge[:]}
	return c.qp.PostRecv(c.rwr[:])
}

// Files is the server's file list; Extent.File indexes it. The slice is
// shared: do not modify it.
func (c *Client) Files() []FileInfo { return c.files }

// Mode is the client's mode.
func (c *Client) Mode() Mode { return c.cfg.Mode }

// ChunkBytes is the most one range of a request moves; ReadBatch splits
// longer ranges.
func (c *Client) ChunkBytes() int { return c.w.chunk }

// Alloc allocates n bytes registered for the server's data to land in
// (the RDMA READs of ModeRead, the server's WRITEs in ModeWrite). ReadBatch's
// destinations must lie in memory from Alloc. It stays valid until Close.
func (c *Client) Alloc(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("store: alloc %d bytes: want more than 0", n)
	}
	c.allocMu.Lock()
	defer c.allocMu.Unlock()
	select {
	case <-c.done:
		return nil, c.failure()
	default:
	}
	mr, err := c.pd.AllocMR(n, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		return nil, fmt.Errorf("store: alloc %d bytes: %w", n, err)
	}
	b := mr.Bytes()
	old := *c.regions.Load()
	regs := append(append(make([]region, 0, len(old)+1), old...),
		region{base: addrOf(b), n: len(b), addr: mr.Addr(), lkey: mr.LKey(), rkey: mr.RKey(), mr: mr})
	c.regions.Store(&regs)
	return b, nil
}

// lookup finds the Alloc'd region holding b.
func (c *Client) lookup(b []byte) (laddr uint64, lkey, rkey uint32, ok bool) {
	p := addrOf(b)
	for _, r := range *c.regions.Load() {
		if p >= r.base && p-r.base <= uintptr(r.n) && uintptr(len(b)) <= uintptr(r.n)-(p-r.base) {
			return r.addr + uint64(p-r.base), r.lkey, r.rkey, true
		}
	}
	return 0, 0, 0, false
}

// ReadBatch reads exts[i] into dst[i] for every i (len(dst[i]) ==
// exts[i].Len), many ranges per request, and returns when all have
// landed. In ModeWrite dst[i] must lie in memory from Alloc (the server
// writes there); in ModeRead it should (the READ lands there), and other
// memory costs a copy from staging buffers registered at the first such
// call. A range the server refuses or cannot read
// is a *RangeError naming the file, offset and cause (the first such;
// the other ranges are still read). If ctx ends first, ReadBatch returns
// its error at once, and ranges already requested may still land in dst
// until the server has answered them.
func (c *Client) ReadBatch(ctx context.Context, exts []Extent, dst [][]byte) error {
	if len(exts) != len(dst) {
		return fmt.Errorf("store: read batch: %d extents, %d destinations", len(exts), len(dst))
	}
	for i := range exts {
		if err := c.checkExtent(i, exts[i], dst[i]); err != nil {
			return err
		}
	}
	var b *batch
	select {
	case b = <-c.batches:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return c.failure()
	}
	si := -1
	var s *cslot
	for i := range exts {
		e := exts[i]
		laddr, lkey, rkey, direct := c.lookup(dst[i])
		for done := 0; done < e.Len; {
			if si < 0 {
				select {
				case si = <-c.freeSlots:
				case <-ctx.Done():
					return c.abandon(b, ctx.Err())
				case <-c.done:
					return c.failure()
				}
				s = &c.slots[si]
				s.b, s.n, s.nbufs = b, 0, 0
			}
			n := min(e.Len-done, c.w.chunk)
			p := piece{file: e.File, off: e.Off + int64(done), n: n, laddr: laddr + uint64(done), lkey: lkey, rkey: rkey}
			if !direct {
				st := c.stage.Load()
				p.laddr, p.lkey = st.Addr()+uint64((si*c.per+s.n)*c.w.chunk), st.LKey()
				p.copyTo = dst[i][done : done+n]
			}
			s.pieces[s.n] = p
			s.n++
			done += n
			if s.n == c.per {
				if err := c.send(si); err != nil {
					return err
				}
				si = -1
			}
		}
	}
	if si >= 0 {
		if err := c.send(si); err != nil {
			return err
		}
	}
	c.mu.Lock()
	b.allSent = true
	if b.remaining == 0 {
		err := b.err
		c.mu.Unlock()
		c.putBatch(b)
		return err
	}
	c.mu.Unlock()
	select {
	case <-b.done:
		err := b.err // written before done was signalled
		c.putBatch(b)
		return err
	case <-ctx.Done():
		return c.abandon(b, ctx.Err())
	case <-c.done:
		return c.failure()
	}
}

func (c *Client) checkExtent(i int, e Extent, d []byte) error {
	switch {
	case e.File < 0 || e.File >= len(c.files):
		return fmt.Errorf("store: extent %d: file index %d of %d files", i, e.File, len(c.files))
	case e.Len < 0 || e.Off < 0 || e.Off > c.files[e.File].Size || int64(e.Len) > c.files[e.File].Size-e.Off:
		return fmt.Errorf("store: extent %d: %s offset %d length %d: past the end of the file (%d bytes)", i, c.files[e.File].Name, e.Off, e.Len, c.files[e.File].Size)
	case len(d) != e.Len:
		return fmt.Errorf("store: extent %d: destination of %d bytes for a range of %d", i, len(d), e.Len)
	}
	if e.Len == 0 {
		return nil
	}
	if _, _, _, ok := c.lookup(d); ok {
		return nil
	}
	if c.cfg.Mode == ModeWrite {
		return fmt.Errorf("store: extent %d: destination not in memory from Alloc (ModeWrite writes there)", i)
	}
	return c.staging()
}

// staging makes READ mode's staging buffers at their first need: a
// destination not from Alloc is read into them and copied.
func (c *Client) staging() error {
	if c.stage.Load() != nil {
		return nil
	}
	c.allocMu.Lock()
	defer c.allocMu.Unlock()
	if c.stage.Load() != nil {
		return nil
	}
	mr, err := c.pd.AllocMR(c.depth*c.per*c.w.chunk, verbs.AccessLocalWrite)
	if err != nil {
		return fmt.Errorf("store: staging buffers for memory not from Alloc: %w", err)
	}
	c.stage.Store(mr)
	return nil
}

// abandon gives up on b after ctx ended: the poller frees it when the
// requests already sent are answered.
func (c *Client) abandon(b *batch, err error) error {
	c.mu.Lock()
	b.allSent = true
	if b.remaining == 0 {
		c.mu.Unlock()
		select {
		case <-b.done:
		default:
		}
		c.putBatch(b)
		return err
	}
	b.abandoned = true
	c.mu.Unlock()
	return err
}

func (c *Client) putBatch(b *batch) {
	b.remaining, b.allSent, b.abandoned, b.err = 0, false, false, nil
	c.batches <- b
}

// send posts slot si's request, with the releases pending. It is posted
// under sendMu so that requests leave in the order their releases were
// taken: the server then never sees a client hold more than depth × per
// buffers. Not under mu: the post may run the READs queued before it (the
// QP's send token), and the poller must not wait for them.
func (c *Client) send(si int) error {
	s := &c.slots[si]
	buf := c.msg.Bytes()[c.sendOff(si) : c.sendOff(si)+reqBufLen]
	op := uint8(opRead)
	if c.cfg.Mode == ModeWrite {
		op = opWrite
	}
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return c.err
	}
	nrel := 0
	if op == opRead {
		nrel = min(len(c.rel), c.w.maxHeld)
		for i := 0; i < nrel; i++ {
			encodeRelease(buf, i, c.rel[i])
		}
		c.rel = c.rel[:copy(c.rel, c.rel[nrel:])]
	}
	encodeRequestHeader(buf, op, uint64(si), s.n, nrel)
	for i := 0; i < s.n; i++ {
		p := &s.pieces[i]
		rr := reqRange{file: uint32(p.file), n: uint32(p.n), off: uint64(p.off)}
		if op == opWrite {
			rr.dst, rr.rkey = p.laddr, p.rkey
		}
		encodeRange(buf, nrel, i, rr)
	}
	s.b.remaining++
	c.inflight++
	c.mu.Unlock()
	s.ssge[0] = verbs.SGE{Addr: c.msg.Addr() + uint64(c.sendOff(si)), Length: uint32(requestLen(s.n, nrel)), LKey: c.msg.LKey()}
	s.swr[0] = verbs.SendWR{ID: kindSend | uint64(si), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: s.ssge[:]}
	if err := c.qp.PostSend(s.swr[:]); err != nil {
		err = fmt.Errorf("store: post request: %w", err)
		c.fail(err)
		return err
	}
	return nil
}

// poll is the client's one goroutine on its CQ: answers, READ completions.
func (c *Client) poll() {
	defer c.wg.Done()
	spin := spins(c.vc)
	last := time.Now()
	for {
		n, err := c.cq.Poll(c.wcs[:])
		if n == 0 && err == nil {
			if spin && time.Since(last) < spinFor {
				runtime.Gosched()
				continue
			}
			// Going quiet: releases that no request took along go
			// on their own (a busy client's next request carries them).
			if c.flushReleases() {
				continue
			}
			n, err = c.cq.PollWait(c.ctx, c.wcs[:])
		}
		if spin {
			last = time.Now()
		}
		if err != nil {
			if c.ctx.Err() == nil {
				c.fail(fmt.Errorf("store: poll: %w", err))
			}
			return
		}
		for i := 0; i < n; i++ {
			if err := c.completion(&c.wcs[i]); err != nil {
				c.fail(err)
				return
			}
		}
	}
}

func (c *Client) completion(wc *verbs.WC) error {
	if wc.Status != verbs.WCSuccess {
		return fmt.Errorf("store: %w: QP failed: %v (%v)", ErrClosed, wc.Status, c.qp.Err())
	}
	id := int(wc.WRID & idMask)
	switch wc.WRID &^ idMask {
	case kindRecv:
		off := c.recvOff(id)
		err := c.answer(c.msg.Bytes()[off : off+int(wc.ByteLen)])
		if err != nil {
			return err
		}
		if err := c.postRecv(id); err != nil {
			return fmt.Errorf("store: post receive: %w", err)
		}
	case kindRead:
		s := &c.slots[id]
		if st := c.stage.Load(); st != nil {
			for i := 0; i < s.n; i++ {
				if p := &s.pieces[i]; p.copyTo != nil {
					o := (id*c.per + i) * c.w.chunk
					copy(p.copyTo, st.Bytes()[o:o+p.n])
					p.copyTo = nil
				}
			}
		}
		c.mu.Lock()
		c.rel = append(c.rel, s.bufs[:s.nbufs]...)
		c.finishLocked(id)
		c.mu.Unlock()
	}
	return nil
}

// flushReleases sends the pending releases in a request of their own
// when no request is in flight to carry them, and says whether it did: an
// idle client holds no pool buffers.
func (c *Client) flushReleases() bool {
	c.mu.Lock()
	idle := c.inflight == 0 && len(c.rel) > 0 && c.err == nil
	c.mu.Unlock()
	if !idle {
		return false
	}
	select {
	case si := <-c.freeSlots:
		s := &c.slots[si]
		s.b, s.n, s.nbufs = c.relBatch, 0, 0
		_ = c.send(si) // a failure fails the client
		return true
	default:
		return false
	}
}

// answer handles a response: errors noted, READ mode's READs posted.
func (c *Client) answer(m []byte) error {
	_, st, tag, n, ok := decodeResponseHeader(m)
	if !ok || tag >= uint64(len(c.slots)) {
		return fmt.Errorf("store: %w: bad response of %d bytes", ErrProtocol, len(m))
	}
	si := int(tag)
	s := &c.slots[si]
	c.mu.Lock()
	b := s.b
	abandoned := b != nil && b.abandoned
	c.mu.Unlock()
	if b == nil {
		return fmt.Errorf("store: %w: response to request %d, not in flight", ErrProtocol, si)
	}
	if st != msgOK && s.n == 0 {
		// Only releases: the server disagrees about what this client
		// holds, which a correct client never causes.
		return fmt.Errorf("store: %w: server rejected a release: %v", ErrProtocol, st)
	}
	if st != msgOK {
		c.mu.Lock()
		if b.err == nil {
			p := &s.pieces[0]
			b.err = &RangeError{File: c.files[p.file].Name, Off: p.off, Len: p.n, Cause: "server rejected the request: " + st.String()}
		}
		c.finishLocked(si)
		c.mu.Unlock()
		return nil
	}
	if n != s.n {
		return fmt.Errorf("store: %w: response with %d ranges for a request of %d", ErrProtocol, n, s.n)
	}
	s.nbufs = 0
	nw := 0
	for i := 0; i < n; i++ {
		e := decodeEntry(m, i)
		p := &s.pieces[i]
		if e.status != rangeOK {
			p.copyTo = nil
			c.mu.Lock()
			if b.err == nil {
				b.err = &RangeError{File: c.files[p.file].Name, Off: p.off, Len: p.n, Cause: e.status.String()}
			}
			c.mu.Unlock()
			continue
		}
		if int(e.n) != p.n {
			return fmt.Errorf("store: %w: range of %d bytes answered with %d", ErrProtocol, p.n, e.n)
		}
		if c.cfg.Mode != ModeRead {
			continue
		}
		s.bufs[s.nbufs] = e.buf
		s.nbufs++
		s.sges[nw] = verbs.SGE{Addr: p.laddr, Length: uint32(p.n), LKey: p.lkey}
		s.wrs[nw] = verbs.SendWR{ID: kindRead | uint64(si), Opcode: verbs.WRRDMARead, SGL: s.sges[nw : nw+1], RemoteAddr: e.addr, RKey: e.rkey}
		nw++
	}
	if nw == 0 || abandoned {
		c.mu.Lock()
		c.rel = append(c.rel, s.bufs[:s.nbufs]...)
		c.finishLocked(si)
		c.mu.Unlock()
		return nil
	}
	s.wrs[nw-1].Flags = verbs.SendSignaled
	if err := c.dqp.PostSend(s.wrs[:nw]); err != nil {
		return fmt.Errorf("store: post RDMA READ: %w", err)
	}
	return nil
}

// finishLocked ends slot si: its batch may be done, the slot is free.
func (c *Client) finishLocked(si int) {
	s := &c.slots[si]
	b := s.b
	s.b = nil
	b.remaining--
	c.inflight--
	if b.allSent && b.remaining == 0 {
		if b.abandoned {
			b.remaining, b.allSent, b.abandoned, b.err = 0, false, false, nil
			c.batches <- b
		} else {
			b.done <- struct{}{}
		}
	}
	c.freeSlots <- si
}

func (c *Client) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failLocked(err)
}

func (c *Client) failLocked(err error) {
	if c.err == nil {
		c.err = err
		close(c.done)
	}
}

func (c *Client) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close disconnects from the server and frees the client's resources,
// the memory from Alloc included. Calls in flight fail with ErrClosed.
func (c *Client) Close() error {
	c.fail(fmt.Errorf("store: %w", ErrClosed))
	c.cancel()
	c.wg.Wait()
	c.release()
	return nil
}

func (c *Client) release() {
	if c.conn != nil {
		_ = c.conn.Close()
	}
	if c.qp != nil {
		_ = c.qp.Destroy()
	}
	if c.dqp != nil {
		_ = c.dqp.Destroy()
	}
	if c.cq != nil {
		_ = c.cq.Destroy()
	}
	if c.msg != nil {
		_ = c.msg.Dereg()
	}
	if p := c.regions.Load(); p != nil {
		for _, r := range *p {
			_ = r.mr.Dereg()
		}
	}
	if st := c.stage.Load(); st != nil {
		_ = st.Dereg()
	}
	if c.pd != nil {
		_ = c.pd.Dealloc()
	}
	if c.vc != nil {
		_ = c.vc.Close()
	}
}
