package perf

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ibex-rdma/ibex/perf/oob"
	"github.com/ibex-rdma/ibex/verbs"
)

//go:linkname nanotime runtime.nanotime
func nanotime() int64

// outReads is max_rd_atomic and max_dest_rd_atomic (perftest's -o
// default, "Outstand reads : 16").
const outReads = 16

// rxDepth is the receives kept posted per QP in SEND tests.
const rxDepth = 512

const allAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

// session is one connected run: verbs resources on this side, the peer's
// dests, and the control connection.
type session struct {
	cfg    Config
	server bool
	conn   *oob.Conn

	vc       *verbs.Context
	pd       *verbs.PD
	scq      *verbs.CQ
	rcq      *verbs.CQ
	qps      []*verbs.QP
	mrs      []*verbs.MR
	byQPN    map[uint32]int
	half     int // receive region offset in each buffer: perftest's BUFF_SIZE
	cycle    int // the agreed cycle_buffer (the larger of both ends')
	line     int // the agreed cache_line_size
	local    []oob.Dest
	remote   []oob.Dest
	port     verbs.PortAttr
	wcs      []verbs.WC
	recvWR   []verbs.RecvWR
	peerIbex bool
	inl      verbs.SendFlags // SendInline when this run's payloads go inline (-I)
	ev       *events         // -e: empty polls sleep on the CQ (events.go); nil polls
}

func (s *session) close() error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for _, qp := range s.qps {
		keep(qp.Destroy())
	}
	for _, mr := range s.mrs {
		keep(mr.Dereg())
	}
	if s.scq != nil {
		keep(s.scq.Destroy())
	}
	if s.rcq != nil {
		keep(s.rcq.Destroy())
	}
	if s.pd != nil {
		keep(s.pd.Dealloc())
	}
	if s.vc != nil {
		keep(s.vc.Close())
	}
	return first
}

// open opens the device.
func (s *session) open() error {
	var err error
	if s.vc == nil {
		if s.vc, err = openDevice(s.cfg.Device); err != nil {
			return err
		}
	}
	s.port, err = s.vc.QueryPort(1)
	return err
}

// setup creates the QPs and buffers, exchanges dests, connects with the
// agreed MTU, and tells the peer it is ready.
func (s *session) setup(ctx context.Context, np oob.Params) error {
	c := s.cfg
	mtuBytes := np.MTU
	var err error
	if s.pd, err = s.vc.AllocPD(); err != nil {
		return err
	}
	sq := max(c.TxDepth, 64)
	if s.scq, err = s.vc.CreateCQ(sq*c.QPs + 16); err != nil {
		return err
	}
	if s.rcq, err = s.vc.CreateCQ(rxDepth*c.QPs + 16); err != nil {
		return err
	}
	// perftest's layout (alloc_ctx, with one MR per QP as its
	// --mr_per_qp): BUFF_SIZE = max(size, cycle_buffer) bytes to send
	// from, then the receive region the peer is told about, and the
	// whole rounded to the cache line twice over. A peer writes or reads
	// from the advertised address up to cycle_buffer bytes further
	// (increase_rem_addr), or size bytes for larger messages.
	s.cycle, s.line = np.CycleBuffer, np.CacheLineSize
	s.half = max(c.bufSize(), s.cycle)
	buf := 2 * inc(s.half, s.line)
	s.byQPN = map[uint32]int{}
	for q := range c.QPs {
		mr, err := s.pd.AllocMR(buf, allAccess)
		if err != nil {
			return fmt.Errorf("perf: buffer of %d bytes: %w", buf, err)
		}
		s.mrs = append(s.mrs, mr)
		qp, err := s.pd.CreateQP(verbs.QPInitAttr{SendCQ: s.scq, RecvCQ: s.rcq,
			Cap: verbs.QPCap{MaxSendWR: sq, MaxRecvWR: rxDepth, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: c.Inline}})
		if err != nil {
			return err
		}
		s.qps = append(s.qps, qp)
		s.byQPN[qp.Num()] = q
		info := qp.Info()
		d := oob.Dest{LID: s.port.LID, OutReads: outReads, QPN: qp.Num(), PSN: info.PSN,
			RKey: mr.RKey(), VAddr: mr.Addr() + uint64(s.half), GID: s.port.GID}
		if s.peerIbex {
			// Between ibex ends the srqn field (XRC's, unused by RC)
			// carries the QP's receive SPI; a real perftest gets 0.
			d.SRQN = info.SPI
		}
		s.local = append(s.local, d)
	}
	s.wcs = make([]verbs.WC, 64)
	s.recvWR = make([]verbs.RecvWR, 1)
	s.recvWR[0].SGL = make([]verbs.SGE, 1)

	dctx, cancel := s.deadline(ctx)
	s.remote, err = s.conn.ExchangeDests(dctx, s.local)
	cancel()
	if err != nil {
		return fmt.Errorf("perf: exchange with the peer: %w", err)
	}
	if len(s.remote) != c.QPs {
		return fmt.Errorf("perf: the peer has %d QPs, we have %d (-q must match)", len(s.remote), c.QPs)
	}
	opt := verbs.ConnectOptions{Set: verbs.AttrMaxQPRdAtomic | verbs.AttrMaxDestRdAtomic | verbs.AttrTimeout,
		Attr: verbs.QPAttr{MaxQPRdAtomic: outReads, MaxDestRdAtomic: outReads, Timeout: uint8(c.QPTimeout)}}
	if dev := s.vc.QueryDevice(); dev.MaxQPRdAtom < outReads || dev.MaxQPInitRdAtom < outReads {
		opt = verbs.ConnectOptions{Set: verbs.AttrTimeout, Attr: verbs.QPAttr{Timeout: uint8(c.QPTimeout)}}
	}
	for q, qp := range s.qps {
		r := s.remote[q]
		ci := verbs.ConnInfo{QPN: r.QPN, PSN: r.PSN & 0xffffff, GID: r.GID, LID: r.LID, MTU: mtuOf(mtuBytes, s.port.ActiveMTU)}
		if s.peerIbex {
			ci.SPI = r.SRQN // the peer's receive SPI (0: it does not encrypt)
		}
		if err := qp.Connect(ci, opt); err != nil {
			return fmt.Errorf("perf: connect qp %d to the peer's %#x: %w", q, r.QPN, err)
		}
	}
	if c.Test.verb() == "send" {
		for q := range s.qps {
			for range rxDepth {
				if err := s.postRecv(q, s.cfg.bufSize()); err != nil {
					return err
				}
			}
		}
	}
	rctx, cancel := s.deadline(ctx)
	defer cancel()
	if err := s.conn.Ready(rctx); err != nil {
		return fmt.Errorf("perf: the peer did not get ready: %w", err)
	}
	return nil
}

// inc is perftest's INC: size rounded up to the cache line, at least one
// line; the step between consecutive requests' addresses.
func inc(size, line int) int {
	if size <= line {
		return line
	}
	return (size + line - 1) / line * line
}

// cycleOffset is where perftest's k-th request of a size (k from 0) reads
// or writes, relative to the first: requests of at most half the cycle
// buffer walk through it in steps of inc (increase_loc_addr and
// increase_rem_addr), larger ones all use the first address.
func (s *session) cycleOffset(k, size int) uint64 {
	if size > s.cycle/2 {
		return 0
	}
	step := inc(size, s.line)
	return uint64(k % (s.cycle / step) * step)
}

// mtuOf is the verbs MTU for a byte count, at most the port's.
func mtuOf(n int, port verbs.MTU) verbs.MTU {
	for _, m := range []verbs.MTU{verbs.MTU4096, verbs.MTU2048, verbs.MTU1024, verbs.MTU512, verbs.MTU256} {
		if m.Bytes() <= n && m <= port {
			return m
		}
	}
	return verbs.MTU256
}

// deadline bounds one exchange with the peer by the timeout.
func (s *session) deadline(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.Timeout)
}

func (s *session) postRecv(q, size int) error {
	mr := s.mrs[q]
	s.recvWR[0].SGL[0] = verbs.SGE{Addr: mr.Addr() + uint64(s.half), Length: uint32(size), LKey: mr.LKey()}
	return s.qps[q].PostRecv(s.recvWR)
}

// watchdog turns a peer that stops answering into an error.
type watchdog struct {
	limit int64
	last  int64
	spins int
}

func (w *watchdog) reset() { w.last, w.spins = nanotime(), 0 }

// expired is called on every empty poll. Every 256th it also yields the
// CPU: on a machine with as many busy threads as cores, a provider's
// progress thread (udp) needs this core to deliver what we wait for.
func (w *watchdog) expired() bool {
	w.spins++
	if w.spins&255 != 0 {
		return false
	}
	runtime.Gosched()
	_, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	return nanotime()-w.last > w.limit
}

func (s *session) newWatchdog() *watchdog {
	w := &watchdog{limit: int64(s.cfg.Timeout)}
	w.reset()
	return w
}

func wcErr(s *session, wc verbs.WC) error {
	q, ok := s.byQPN[wc.QPNum]
	cause := ""
	if ok {
		if err := s.qps[q].Err(); err != nil {
			cause = ": " + err.Error()
		}
	}
	return fmt.Errorf("perf: completion %v%s", wc, cause)
}

// run runs one size and returns the result (ok false: nothing to report
// on this side).
func (s *session) run(ctx context.Context, size int) (Result, bool, error) {
	c := s.cfg
	if c.Events {
		s.ev = newEvents(ctx)
		defer func() {
			s.ev.stop()
			s.ev = nil
		}()
	}
	switch {
	case !c.Test.Latency() && (!s.server || c.Duplex):
		// The client; with -b both ends.
		r, err := s.bwClient(size)
		return r, err == nil, err
	case s.server && c.Test == SendBW:
		r, err := s.sendBWServer(size)
		return r, err == nil, err
	case c.Test == WriteLat || c.Test == SendLat:
		r, err := s.pingPong(size)
		return r, err == nil, err
	case !s.server && (c.Test == ReadLat || c.Test == AtomicLat):
		r, err := s.rdAtomicLat(size)
		return r, err == nil, err
	}
	return Result{}, false, nil // passive server side
}

func (s *session) sendWR(q, size int) verbs.SendWR {
	mr, r := s.mrs[q], s.remote[q]
	s.inl = 0
	if v := s.cfg.Test.verb(); size <= s.cfg.Inline && (v == "write" || v == "send") {
		s.inl = verbs.SendInline
	}
	// As perftest (ctx_set_send_reg_wqes): every verb reads or writes
	// this end's send region and names the peer's advertised address,
	// the start of its receive region.
	wr := verbs.SendWR{SGL: []verbs.SGE{{Addr: mr.Addr(), Length: uint32(size), LKey: mr.LKey()}},
		RemoteAddr: r.VAddr, RKey: r.RKey}
	switch s.cfg.Test.verb() {
	case "write":
		wr.Opcode = verbs.WRRDMAWrite
	case "read":
		wr.Opcode = verbs.WRRDMARead
	case "send":
		wr.Opcode = verbs.WRSend
	default:
		wr.Opcode, wr.CompareAdd = verbs.WRAtomicFetchAndAdd, 1
		wr.SGL[0].Length = 8
	}
	if s.inl != 0 {
		wr.Inline, wr.SGL = mr.Bytes()[:size], nil
	}
	return wr
}

// bwClient streams requests on every QP, tx depth outstanding each, every
// cqMod-th signaled (its wr_id counts the QP's requests so far).
func (s *session) bwClient(size int) (Result, error) {
	c := s.cfg
	n := len(s.qps)
	cqm := min(c.CQMod, c.TxDepth)
	wrs := make([][]verbs.SendWR, n)
	pl := c.PostList
	// Addresses as perftest's: with -l each request of the list has its
	// own fixed place in the cycle (ctx_set_send_reg_wqes); without, one
	// request walks through it post by post (run_iter_bw).
	type base struct{ local, remote uint64 }
	bases := make([]base, n)
	for q := range n {
		wrs[q] = make([]verbs.SendWR, pl)
		for j := range pl {
			w := s.sendWR(q, size)
			if j == 0 {
				bases[q].remote = w.RemoteAddr
				if w.SGL != nil { // not inline
					bases[q].local = w.SGL[0].Addr
				}
			}
			off := s.cycleOffset(j, size)
			w.RemoteAddr += off
			if w.SGL != nil {
				w.SGL[0].Addr += off
			}
			wrs[q][j] = w
		}
	}
	walk := pl == 1
	posted, done := make([]int, n), make([]int, n)
	dur := c.Duration > 0
	marks := make([]mark, 0, c.Iters*n/cqm+n+4)
	wd := s.newWatchdog()
	start := nanotime()
	end := start + int64(c.Duration)
	stop, total, last := false, 0, start
	recvs, got := c.Duplex && c.Test == SendBW, 0
	for {
		if dur && !stop && nanotime() > end {
			stop = true
		}
		for q := range n {
			// pl requests per call (-l); pl is a multiple of cqm and
			// divides -n, so a list ends on a signaled request.
			for posted[q]-done[q]+pl <= c.TxDepth {
				more := (dur && !stop) || (!dur && posted[q] < c.Iters)
				flush := dur && stop && posted[q]%cqm != 0 // end on a signaled one
				if !more && !flush {
					break
				}
				for j := range pl {
					w := &wrs[q][j]
					if walk {
						off := s.cycleOffset(posted[q], size)
						w.RemoteAddr = bases[q].remote + off
						if w.SGL != nil {
							w.SGL[0].Addr = bases[q].local + off
						}
					}
					posted[q]++
					w.Flags, w.ID = s.inl, uint64(posted[q])
					if posted[q]%cqm == 0 || (!dur && posted[q] == c.Iters) || flush {
						w.Flags = verbs.SendSignaled | s.inl
					}
				}
				if err := s.qps[q].PostSend(wrs[q]); err != nil {
					return Result{}, fmt.Errorf("perf: post: %w", err)
				}
			}
		}
		k, err := s.scq.Poll(s.wcs)
		if err != nil {
			return Result{}, err
		}
		if k > 0 {
			wd.reset()
			last = nanotime()
		}
		for _, wc := range s.wcs[:k] {
			if wc.Status != verbs.WCSuccess {
				return Result{}, wcErr(s, wc)
			}
			q := s.byQPN[wc.QPNum]
			total += int(wc.WRID) - done[q]
			done[q] = int(wc.WRID)
			marks = append(marks, mark{ops: total, ns: last - start})
		}
		if recvs {
			// -b send_bw: the peer's SENDs arrive here meanwhile; keep
			// its receives posted until all of them are in.
			r, err := s.rcq.Poll(s.wcs)
			if err != nil {
				return Result{}, err
			}
			if r > 0 {
				wd.reset()
			}
			for _, wc := range s.wcs[:r] {
				if wc.Status != verbs.WCSuccess {
					return Result{}, wcErr(s, wc)
				}
				got++
				if err := s.postRecv(s.byQPN[wc.QPNum], c.bufSize()); err != nil {
					return Result{}, err
				}
			}
			k += r
		}
		finished := !recvs || dur || got >= c.Iters*n
		for q := range n {
			if done[q] != posted[q] || (!dur && done[q] < c.Iters) || (dur && !stop) {
				finished = false
			}
		}
		if finished {
			return bwResult(c.Test, size, total, last-start, marks, c.Gbits), nil
		}
		if k == 0 {
			cq := s.scq
			if s.ev != nil && recvs && !outstanding(posted, done) {
				cq = s.rcq // -e, -b send_bw: only the peer's SENDs are still to come
			}
			expired, err := s.idle(cq, wd)
			if err != nil {
				return Result{}, err
			}
			if expired {
				return Result{}, fmt.Errorf("perf: no completion for %v (%d of %d requests done): the peer stopped answering", c.Timeout, total, c.Iters*n)
			}
		}
	}
}

// outstanding reports whether some QP has requests not yet completed.
func outstanding(posted, done []int) bool {
	for q := range posted {
		if posted[q] != done[q] {
			return true
		}
	}
	return false
}

// sendBWServer receives the client's SENDs, reposting receives, until it
// has all of them (or, with -D, until the client reaches the barrier).
func (s *session) sendBWServer(size int) (Result, error) {
	c := s.cfg
	want := c.Iters * len(s.qps)
	got, start, last := 0, int64(0), int64(0)
	marks := make([]mark, 0, want/cqMod+4)
	wd := s.newWatchdog()
	end := nanotime() + int64(c.Duration)
	for (c.Duration == 0 && got < want) || (c.Duration > 0 && nanotime() < end) {
		k, err := s.rcq.Poll(s.wcs)
		if err != nil {
			return Result{}, err
		}
		if k == 0 {
			expired, err := s.idle(s.rcq, wd)
			if err != nil {
				return Result{}, err
			}
			if expired {
				return Result{}, fmt.Errorf("perf: no SEND for %v (%d of %d received): the peer stopped sending", c.Timeout, got, want)
			}
			continue
		}
		wd.reset()
		now := nanotime()
		if start == 0 {
			start = now
		}
		for _, wc := range s.wcs[:k] {
			if wc.Status != verbs.WCSuccess {
				return Result{}, wcErr(s, wc)
			}
			if err := s.postRecv(s.byQPN[wc.QPNum], c.bufSize()); err != nil {
				return Result{}, err
			}
			got++
			if got%cqMod == 0 {
				marks = append(marks, mark{ops: got, ns: now - start})
			}
		}
		// As run_iter_bw_server: the clock stops after the last batch
		// is handled (its receives reposted), so a run whose SENDs all
		// arrive in one poll still has a duration.
		last = nanotime()
	}
	return bwResult(c.Test, size, got, last-start, marks, c.Gbits), nil
}

// word returns the aligned 32-bit word holding byte off of buf, and the
// byte's shift in it.
func word(buf []byte, off int) (*atomic.Uint32, uint) {
	w := off &^ 3
	return (*atomic.Uint32)(unsafe.Pointer(&buf[w])), uint(off-w) * 8
}

// pingPong is write_lat and send_lat in perftest's order
// (run_iter_lat_write, run_iter_lat_send): wait for the peer's message,
// post one, reap its completion, so a request that fails is reported at
// once. In write_lat the server sends first, in send_lat the client. The
// n-th WRITE carries byte n (mod 256) as its last byte, which the peer
// polls at the same offset from its advertised address. The report is
// half the time between consecutive posts, as perftest's.
func (s *session) pingPong(size int) (Result, error) {
	c := s.cfg
	buf := s.mrs[0].Bytes()
	wr := []verbs.SendWR{s.sendWR(0, size)}
	inWord, inShift := word(buf, s.half+size-1)
	outWord, outShift := word(buf, size-1)
	posts := make([]int64, 0, c.Iters)
	wd := s.newWatchdog()
	end := nanotime() + int64(c.Duration)
	isWrite := c.Test == WriteLat
	first := isWrite == s.server // this end sends the first message
	dur := c.Duration > 0
	// Every message is signaled and its completion reaped before the
	// buffer is written again (perftest's latency tests use cq_mod 1):
	// the provider may read the buffer until the request completes.
	post := func(n int) error {
		v := uint32(byte(n))
		for {
			old := outWord.Load()
			if outWord.CompareAndSwap(old, old&^(0xff<<outShift)|v<<outShift) {
				break
			}
		}
		wr[0].Flags = verbs.SendSignaled | s.inl
		if err := s.qps[0].PostSend(wr); err != nil {
			return fmt.Errorf("perf: post: %w", err)
		}
		return nil
	}
	reap := func(n int) error {
		wd.reset()
		for {
			k, err := s.scq.Poll(s.wcs[:1])
			if err != nil {
				return err
			}
			if k == 1 {
				if s.wcs[0].Status != verbs.WCSuccess {
					return wcErr(s, s.wcs[0])
				}
				return nil
			}
			expired, err := s.idle(s.scq, wd)
			if err != nil {
				return err
			}
			if expired {
				return fmt.Errorf("perf: message %d not completed in %v: the peer stopped answering", n, c.Timeout)
			}
		}
	}
	await := func(n int) error {
		wd.reset()
		if isWrite {
			v := uint32(byte(n))
			for (inWord.Load()>>inShift)&0xff != v {
				// A software device delivers in this goroutine
				// (verbs.Context.Progress): a spin on memory alone
				// would wait for the device's own goroutine. With -e
				// too: a WRITE completes nothing at its target, so
				// there is no event to sleep on (perftest spins here
				// as well).
				s.vc.Progress()
				if wd.expired() {
					return fmt.Errorf("perf: no message %d for %v: the peer stopped answering", n, c.Timeout)
				}
				if dur && nanotime() > end {
					return errStopped
				}
			}
			return nil
		}
		for {
			k, err := s.rcq.Poll(s.wcs[:1])
			if err != nil {
				return err
			}
			if k == 1 {
				if s.wcs[0].Status != verbs.WCSuccess {
					return wcErr(s, s.wcs[0])
				}
				return s.postRecv(0, c.bufSize())
			}
			expired, err := s.idle(s.rcq, wd)
			if err != nil {
				return err
			}
			if expired {
				return fmt.Errorf("perf: no message %d for %v: the peer stopped answering", n, c.Timeout)
			}
			if dur && nanotime() > end {
				return errStopped
			}
		}
	}
	scnt, rcnt := 0, 0
	for (!dur && (scnt < c.Iters || rcnt < c.Iters)) || (dur && nanotime() < end) {
		if (dur || rcnt < c.Iters) && !(first && scnt == 0) {
			rcnt++
			if err := await(rcnt); err != nil {
				if err == errStopped {
					break
				}
				return Result{}, err
			}
		}
		if dur || scnt < c.Iters {
			posts = append(posts, nanotime())
			scnt++
			if err := post(scnt); err != nil {
				return Result{}, err
			}
			if err := reap(scnt); err != nil {
				return Result{}, err
			}
		}
	}
	samples := make([]int64, 0, len(posts))
	for i := 1; i < len(posts); i++ {
		samples = append(samples, (posts[i]-posts[i-1])/2)
	}
	r := latResult(c.Test, size, samples)
	r.Iters = scnt
	return r, nil
}

var errStopped = fmt.Errorf("perf: the peer ended the test")

// rdAtomicLat is read_lat and atomic_lat: one request at a time, timed to
// its completion (a full round trip).
func (s *session) rdAtomicLat(size int) (Result, error) {
	c := s.cfg
	wr := []verbs.SendWR{s.sendWR(0, size)}
	wr[0].Flags = verbs.SendSignaled | s.inl
	samples := make([]int64, 0, c.Iters)
	wd := s.newWatchdog()
	end := nanotime() + int64(c.Duration)
	for i := 0; (c.Duration == 0 && i < c.Iters) || (c.Duration > 0 && nanotime() < end); i++ {
		t0 := nanotime()
		if err := s.qps[0].PostSend(wr); err != nil {
			return Result{}, fmt.Errorf("perf: post: %w", err)
		}
		wd.reset()
		for {
			k, err := s.scq.Poll(s.wcs[:1])
			if err != nil {
				return Result{}, err
			}
			if k == 1 {
				if s.wcs[0].Status != verbs.WCSuccess {
					return Result{}, wcErr(s, s.wcs[0])
				}
				break
			}
			expired, err := s.idle(s.scq, wd)
			if err != nil {
				return Result{}, err
			}
			if expired {
				return Result{}, fmt.Errorf("perf: request %d not completed in %v: the peer stopped answering", i, c.Timeout)
			}
		}
		samples = append(samples, nanotime()-t0)
	}
	return latResult(c.Test, size, samples), nil
}
