package kv

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/ibex-rdma/ibex/internal/cm"
	"github.com/ibex-rdma/ibex/verbs"
)

// ServerConfig configures a Server. Zero fields take the defaults given.
type ServerConfig struct {
	// Device is the verbs device to serve on ("" opens the first).
	Device string
	// Listen is the TCP address clients connect to (default
	// "127.0.0.1:0": a free port, see Server.Addr).
	Listen string
	// Index is the index MR's size in bytes (default 64 MiB): the header
	// and two table areas; the table can grow to the largest power of two
	// of 128-byte buckets that fits in half of the rest.
	Index int64
	// Values is the value arena MR's size in bytes (default 256 MiB).
	Values int64
	// MaxKey and MaxValue bound a key and a value (defaults 1 KiB and
	// 4 MiB).
	MaxKey, MaxValue int
	// Inline is the largest value a client sends inside its request
	// (default 4 KiB); larger ones the server READs from the client.
	Inline int
	// MaxClients bounds the clients connected at once (default 64).
	MaxClients int
	// Credits is the requests each client may have in flight (default 16).
	Credits int
	// Quarantine is how long a freed entry waits before reuse (default
	// 100 ms).
	Quarantine time.Duration
	// Buckets is the first table's bucket count (default 1024; a power of
	// two). LoadFactor is the share of slots in use past which a PUT of a
	// new key grows the table first (default 0.6).
	Buckets    int
	LoadFactor float64
	// Logf, if set, receives one line per client event (connect, drop,
	// bad request).
	Logf func(format string, args ...any)
}

func (c *ServerConfig) setDefaults() error {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:0"
	}
	if c.Index == 0 {
		c.Index = 64 << 20
	}
	if c.Values == 0 {
		c.Values = 256 << 20
	}
	if c.MaxKey == 0 {
		c.MaxKey = 1024
	}
	if c.MaxValue == 0 {
		c.MaxValue = 4 << 20
	}
	if c.Inline == 0 {
		c.Inline = 4096
	}
	if c.MaxClients == 0 {
		c.MaxClients = 64
	}
	if c.Credits == 0 {
		c.Credits = 16
	}
	if c.Quarantine == 0 {
		c.Quarantine = 100 * time.Millisecond
	}
	if c.Buckets == 0 {
		c.Buckets = 1024
	}
	if c.LoadFactor == 0 {
		c.LoadFactor = 0.6
	}
	switch {
	case c.Index < minIndexSize || c.Index > 1<<40:
		return fmt.Errorf("kv: ServerConfig.Index %d: want %d bytes to 1 TiB", c.Index, minIndexSize)
	case c.Values < 1<<16 || c.Values > maxArena:
		return fmt.Errorf("kv: ServerConfig.Values %d: want 64 KiB to %d bytes", c.Values, uint64(maxArena))
	case c.MaxKey < 1 || c.MaxKey > maxKeyLimit:
		return fmt.Errorf("kv: ServerConfig.MaxKey %d: want 1 to %d", c.MaxKey, maxKeyLimit)
	case c.MaxValue < 0 || c.MaxValue > maxValueLimit:
		return fmt.Errorf("kv: ServerConfig.MaxValue %d: want 0 to %d", c.MaxValue, maxValueLimit)
	case int64(entryLen(c.MaxKey, c.MaxValue)) > c.Values:
		return fmt.Errorf("kv: ServerConfig.MaxValue %d does not fit in Values %d", c.MaxValue, c.Values)
	case c.Inline < 0 || c.Inline > 1<<16:
		return fmt.Errorf("kv: ServerConfig.Inline %d: want 0 to 64 KiB", c.Inline)
	case c.MaxClients < 1 || c.MaxClients > 4096:
		return fmt.Errorf("kv: ServerConfig.MaxClients %d: want 1 to 4096", c.MaxClients)
	case c.Credits < 1 || c.Credits > 256:
		return fmt.Errorf("kv: ServerConfig.Credits %d: want 1 to 256", c.Credits)
	case c.Quarantine < 0:
		return fmt.Errorf("kv: ServerConfig.Quarantine %v is negative", c.Quarantine)
	case c.Buckets < minBuckets || c.Buckets&(c.Buckets-1) != 0:
		return fmt.Errorf("kv: ServerConfig.Buckets %d: want a power of two ≥ %d", c.Buckets, minBuckets)
	case c.LoadFactor <= 0 || c.LoadFactor > 1:
		return fmt.Errorf("kv: ServerConfig.LoadFactor %v: want (0, 1]", c.LoadFactor)
	}
	return nil
}

// The worker's wait for work: it polls (which also drives a software
// transport in this goroutine) for spinFor after its last completion,
// then waits in PollWait for naps that grow from 20 µs to 1 ms, polling
// between them, and only after napFor without work waits in PollWait for
// as long as it takes. A completion ends any wait at once; the naps bound
// what a transport that delivers late to a goroutine that stopped polling
// costs the next request (shm's progress loop naps up to 200 µs while an
// application polls). On a device whose peers are all in this process
// (no CapSameHost: loop0) a peer completes into the CQ from its own
// goroutine, and the worker just waits.
const (
	spinFor = 100 * time.Microsecond
	napFor  = 50 * time.Millisecond
)

// faultNoDeadMark, set by a test, leaves a superseded entry unmarked:
// the race check must then catch a GET that returns an older value.
var faultNoDeadMark bool

const (
	maxArena      = 1 << 38 // offsets/64 fit in 32 bits
	maxKeyLimit   = 1 << 16
	maxValueLimit = 1 << 30
)

// Server serves one device: it owns the index and value MRs, registered
// once at NewServer, and one RC QP per client. Its worker goroutine does
// every PUT and DELETE; GETs never reach it.
type Server struct {
	cfg   ServerConfig
	vc    *verbs.Context
	pd    *verbs.PD
	cq    *verbs.CQ
	index *region
	vals  *region
	ln    *cm.Listener
	si    serverInfo

	reqSize int
	sqDepth int
	spin    bool // poll before sleeping (see await)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// mu guards everything below: the worker holds it while it handles a
	// batch of completions, admission and teardown while they change the
	// client table.
	mu      sync.Mutex
	ix      *index
	ar      *arena
	ver     uint64
	clients map[uint32]*srvClient
	nextID  uint32
	admits  int // clients admitted or being admitted
	stats   ServerStats
	closed  bool
	rep     [repLen]byte
	wr      [1]verbs.SendWR
	sge     [1]verbs.SGE
}

// srvClient is one client's QP and receive buffers.
type srvClient struct {
	id      uint32
	qp      *verbs.QP
	conn    *cm.Conn
	recv    *region
	pending []pendingPut // by receive slot: a value being READ
	dead    bool
}

// pendingPut is a PUT whose value the server is READing from the client.
type pendingPut struct {
	live  bool
	id    uint64
	off   uint64
	class int
	klen  int
	vlen  int
}

// ServerStats are the server's counters, as STATS returns them.
type ServerStats struct {
	// CPUUser and CPUSys are the server process's CPU time (getrusage).
	CPUUser, CPUSys time.Duration
	Puts, Deletes   uint64
	// Requests counts every request received; BadRequests those that
	// broke the protocol (the client was dropped).
	Requests, BadRequests uint64
	PutErrors             uint64 // PUTs refused: too large, arena or index full
	RemoteReads           uint64 // values the server READ from clients
	Resizes               uint64
	Keys, Buckets         uint64
	Generation            uint64
	ArenaUsed, ArenaSize  uint64
	Quarantined           uint64
	IndexSize             uint64
	Clients, ClientsTotal uint64
	ClientsRejected       uint64
}

// WRIDs: kind in the top byte, the client in the next 32 bits, the slot
// in the low 24.
const (
	widRecv = 1
	widSend = 2
	widRead = 3
)

func wrid(kind uint8, client uint32, slot int) uint64 {
	return uint64(kind)<<56 | uint64(client)<<24 | uint64(slot)
}

// NewServer opens the device, registers the index and value MRs and
// listens. Serve runs it.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, clients: map[uint32]*srvClient{}}
	s.reqSize = int(align(uint64(reqHdr+cfg.MaxKey+cfg.Inline), 64))
	s.sqDepth = 2*cfg.Credits + 2
	ok := false
	defer func() {
		if !ok {
			s.release()
		}
	}()
	var err error
	if s.vc, err = verbs.Open(cfg.Device); err != nil {
		return nil, fmt.Errorf("kv: server: %w", err)
	}
	if s.pd, err = s.vc.AllocPD(); err != nil {
		return nil, fmt.Errorf("kv: server: %w", err)
	}
	s.spin = s.vc.QueryDevice().Caps.Has(verbs.CapSameHost)
	depth := cfg.MaxClients * (cfg.Credits + s.sqDepth)
	if s.cq, err = s.vc.CreateCQ(depth); err != nil {
		return nil, fmt.Errorf("kv: server: completion queue of %d for %d clients: %w", depth, cfg.MaxClients, err)
	}
	if s.index, err = allocRegion(s.pd, int(cfg.Index), verbs.AccessLocalWrite|verbs.AccessRemoteRead); err != nil {
		return nil, fmt.Errorf("kv: server: index of %d bytes (Index): %w", cfg.Index, err)
	}
	if s.vals, err = allocRegion(s.pd, int(cfg.Values), verbs.AccessLocalWrite|verbs.AccessRemoteRead); err != nil {
		return nil, fmt.Errorf("kv: server: value arena of %d bytes (Values): %w", cfg.Values, err)
	}
	var seed [8]byte
	_, _ = rand.Read(seed[:])
	s.ix = newIndex(s.index.bytes(), s.vals.bytes(), binary.LittleEndian.Uint64(seed[:]), uint64(cfg.Buckets))
	s.ar = newArena(uint64(cfg.Values), entryLen(cfg.MaxKey, cfg.MaxValue), cfg.Quarantine)
	s.si = serverInfo{
		indexRKey: s.index.mr.RKey(), arenaRKey: s.vals.mr.RKey(),
		indexAddr: s.index.mr.Addr(), indexLen: uint64(s.index.mr.Len()),
		arenaAddr: s.vals.mr.Addr(), arenaLen: uint64(s.vals.mr.Len()),
		maxKey: uint32(cfg.MaxKey), maxValue: uint32(cfg.MaxValue),
		reqSize: uint32(s.reqSize), credits: uint32(cfg.Credits),
	}
	if s.ln, err = cm.Listen(cfg.Listen); err != nil {
		return nil, fmt.Errorf("kv: server: %w", err)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	ok = true
	return s, nil
}

// Addr is the address clients dial.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Device is the name of the device the server serves on.
func (s *Server) Device() string { return s.vc.Name() }

// RegisteredBytes is the memory the server registered for its index and
// values: fixed at NewServer, whatever is stored.
func (s *Server) RegisteredBytes() int64 {
	return int64(s.index.mr.Len() + s.vals.mr.Len())
}

// Serve accepts clients and serves their requests until ctx ends or
// Close is called; then it drops every client and frees the server's
// resources.
func (s *Server) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, s.cancel)
	defer stop()
	s.wg.Add(2)
	errc := make(chan error, 1)
	go func() { defer s.wg.Done(); s.acceptLoop() }()
	go func() { defer s.wg.Done(); errc <- s.work() }()
	<-s.ctx.Done()
	_ = s.ln.Close()
	s.mu.Lock()
	s.closed = true
	conns := make([]*cm.Conn, 0, len(s.clients))
	for _, c := range s.clients {
		conns = append(conns, c.conn)
	}
	s.mu.Unlock()
	for _, c := range conns {
		if c != nil {
			_ = c.Close()
		}
	}
	s.wg.Wait()
	s.mu.Lock()
	for _, c := range s.clients {
		s.dropLocked(c, nil)
	}
	s.mu.Unlock()
	s.release()
	err := <-errc
	if err == nil && ctx.Err() != nil {
		return nil
	}
	return err
}

// Close stops Serve.
func (s *Server) Close() error {
	s.cancel()
	return nil
}

func (s *Server) release() {
	if s.ln != nil {
		_ = s.ln.Close()
	}
	s.index.release()
	s.vals.release()
	if s.cq != nil {
		_ = s.cq.Destroy()
	}
	if s.pd != nil {
		_ = s.pd.Dealloc()
	}
	if s.vc != nil {
		_ = s.vc.Close()
	}
}

func (s *Server) logf(format string, args ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf(format, args...)
	}
}

func (s *Server) acceptLoop() {
	for {
		req, err := s.ln.Accept(s.ctx)
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.admit(req) }()
	}
}

// admit connects one client. The client is in the table before it may
// send, so its first request finds it.
func (s *Server) admit(req *cm.Request) {
	if err := checkClientPrivate(req.Private); err != nil {
		_ = req.Reject(s.ctx, err.Error())
		return
	}
	s.mu.Lock()
	if s.closed || s.admits >= s.cfg.MaxClients {
		s.stats.ClientsRejected++
		s.mu.Unlock()
		_ = req.Reject(s.ctx, fmt.Sprintf("kv: server full: %d clients (MaxClients)", s.cfg.MaxClients))
		return
	}
	s.admits++
	s.nextID++
	c := &srvClient{id: s.nextID, pending: make([]pendingPut, s.cfg.Credits)}
	s.mu.Unlock()

	fail := func(err error) {
		s.logf("kv: client %s: %v", req.RemoteAddr(), err)
		s.mu.Lock()
		s.dropLocked(c, nil)
		s.mu.Unlock()
	}
	var err error
	c.qp, err = s.pd.CreateQP(verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, Cap: verbs.QPCap{
		MaxSendWR: s.sqDepth, MaxRecvWR: s.cfg.Credits, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: repLen}})
	if err != nil {
		_ = req.Reject(s.ctx, "kv: server: "+err.Error())
		fail(err)
		return
	}
	if c.recv, err = allocRegion(s.pd, s.cfg.Credits*s.reqSize, verbs.AccessLocalWrite); err != nil {
		_ = req.Reject(s.ctx, "kv: server: "+err.Error())
		fail(err)
		return
	}
	s.mu.Lock()
	s.clients[c.id] = c
	s.mu.Unlock()
	conn, err := req.Accept(s.ctx, c.qp, s.si.encode(), cm.Options{Ready: func(qp *verbs.QP) error {
		for i := 0; i < s.cfg.Credits; i++ {
			if err := s.postRecv(c, i); err != nil {
				return err
			}
		}
		return nil
	}})
	if err != nil {
		fail(err)
		return
	}
	s.mu.Lock()
	if c.dead {
		s.mu.Unlock()
		_ = conn.Close()
		return
	}
	c.conn = conn
	s.stats.ClientsTotal++
	s.mu.Unlock()
	s.logf("kv: client %s connected (qp %#x)", conn.RemoteAddr(), c.qp.Num())
	select {
	case <-conn.Done():
	case <-s.ctx.Done():
	}
	s.mu.Lock()
	s.dropLocked(c, conn.Err())
	s.mu.Unlock()
}

// dropLocked frees a client: its QP (outstanding work discarded), its
// buffers, and any arena space a PUT of its was filling.
func (s *Server) dropLocked(c *srvClient, why error) {
	if c.dead {
		return
	}
	c.dead = true
	s.admits--
	delete(s.clients, c.id)
	if c.qp != nil {
		_ = c.qp.Destroy()
	}
	for i := range c.pending {
		if p := &c.pending[i]; p.live {
			p.live = false
			s.ar.release(p.off, p.class)
		}
	}
	c.recv.release()
	if c.conn != nil {
		_ = c.conn.Close()
		if why != nil {
			s.logf("kv: client %s gone: %v", c.conn.RemoteAddr(), why)
		}
	}
}

func (s *Server) postRecv(c *srvClient, i int) error {
	buf := c.recv.mr
	sge := []verbs.SGE{{Addr: buf.Addr() + uint64(i*s.reqSize), Length: uint32(s.reqSize), LKey: buf.LKey()}}
	return c.qp.PostRecv([]verbs.RecvWR{{ID: wrid(widRecv, c.id, i), SGL: sge}})
}

// work is the server's one worker: every request, reply and value READ
// completes here, in order, under s.mu.
func (s *Server) work() error {
	wcs := make([]verbs.WC, 64)
	var last time.Time
	for {
		n, err := s.cq.Poll(wcs)
		if n == 0 && err == nil {
			n, err = s.await(wcs, last)
		}
		last = time.Now()
		if err != nil {
			if s.ctx.Err() != nil {
				return nil
			}
			// A CQ in error has lost completions: nothing the server
			// holds can be trusted to finish; stop serving.
			s.cancel()
			return fmt.Errorf("kv: server: %w", err)
		}
		s.mu.Lock()
		for i := range wcs[:n] {
			s.handle(&wcs[i])
		}
		s.mu.Unlock()
	}
}

func (s *Server) await(wcs []verbs.WC, last time.Time) (int, error) {
	nap := 20 * time.Microsecond
	for {
		n, err := s.cq.Poll(wcs)
		if n > 0 || err != nil {
			return n, err
		}
		idle := time.Since(last)
		switch {
		case !s.spin:
			return s.cq.PollWait(s.ctx, wcs)
		case idle < spinFor:
			runtime.Gosched()
		case idle < napFor:
			ctx, cancel := context.WithTimeout(s.ctx, nap)
			n, err := s.cq.PollWait(ctx, wcs)
			cancel()
			if n > 0 || s.ctx.Err() != nil {
				return n, err
			}
			nap = min(2*nap, time.Millisecond)
		default:
			return s.cq.PollWait(s.ctx, wcs)
		}
	}
}

func (s *Server) handle(wc *verbs.WC) {
	kind, id, slot := uint8(wc.WRID>>56), uint32(wc.WRID>>24), int(wc.WRID&0xffffff)
	c := s.clients[id]
	if c == nil || c.dead || slot >= s.cfg.Credits {
		return // a client already dropped
	}
	if wc.Status != verbs.WCSuccess {
		if wc.Status != verbs.WCWRFlushErr {
			s.logf("kv: client %d: %v", id, wc)
		}
		s.dropLocked(c, fmt.Errorf("completion %v", wc.Status))
		return
	}
	switch kind {
	case widRecv:
		s.request(c, slot, int(wc.ByteLen))
	case widRead:
		s.valueRead(c, slot)
	}
}

// request handles one received request in receive slot i.
func (s *Server) request(c *srvClient, i int, n int) {
	s.stats.Requests++
	b := c.recv.bytes()[i*s.reqSize : i*s.reqSize+n]
	r, st, err := decodeRequest(b, s.si.maxKey, s.si.maxValue)
	if st == stBad {
		s.stats.BadRequests++
		s.logf("kv: client %d: bad request: %v", c.id, err)
		s.dropLocked(c, fmt.Errorf("bad request: %w", err))
		return
	}
	var ver, arg uint64
	stats := false
	switch {
	case st != stOK:
	case r.op == opStats:
		stats = true
	case r.op == opDelete:
		st = s.del(r.key)
	case r.remote:
		st, arg = s.startRemotePut(c, i, r)
		if st == stOK {
			// The value is on its way; the reply waits for it. The key
			// was copied into the entry, so the buffer is free.
			if s.postRecv(c, i) != nil {
				s.dropLocked(c, errors.New("repost receive"))
			}
			return
		}
	default:
		st, ver, arg = s.put(r.key, r.val, len(r.val))
	}
	if s.postRecv(c, i) != nil {
		s.dropLocked(c, errors.New("repost receive"))
		return
	}
	if st != stOK && st != stNotFound {
		s.stats.PutErrors++
	}
	if ver == 0 {
		ver = arg
	}
	s.reply(c, r.id, st, ver, stats)
}

func (s *Server) reply(c *srvClient, id uint64, st uint8, v uint64, stats bool) {
	b := s.rep[:repHdr]
	clear(b)
	b[0] = st
	put64(b[8:], id)
	put64(b[16:], v)
	if stats {
		b = s.rep[:repLen]
		st := s.snapshotLocked()
		for j, x := range st.fields() {
			put64(b[repHdr+8*j:], x)
		}
	}
	s.wr[0] = verbs.SendWR{ID: wrid(widSend, c.id, 0), Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, Inline: b}
	if err := c.qp.PostSend(s.wr[:]); err != nil {
		s.dropLocked(c, fmt.Errorf("reply: %w", err))
	}
}

func (st *ServerStats) fields() [statsFields]uint64 {
	return [statsFields]uint64{
		uint64(st.CPUUser / time.Microsecond), uint64(st.CPUSys / time.Microsecond),
		st.Puts, st.Deletes, st.Requests, st.BadRequests, st.PutErrors, st.RemoteReads, st.Resizes,
		st.Keys, st.Buckets, st.Generation, st.ArenaUsed, st.ArenaSize, st.Quarantined, st.IndexSize,
		st.Clients, st.ClientsTotal, st.ClientsRejected, 0,
	}
}

func statsFrom(f []byte) ServerStats {
	var x [statsFields]uint64
	for j := range x {
		x[j] = le64(f[8*j:])
	}
	return ServerStats{
		CPUUser: time.Duration(x[0]) * time.Microsecond, CPUSys: time.Duration(x[1]) * time.Microsecond,
		Puts: x[2], Deletes: x[3], Requests: x[4], BadRequests: x[5], PutErrors: x[6], RemoteReads: x[7], Resizes: x[8],
		Keys: x[9], Buckets: x[10], Generation: x[11], ArenaUsed: x[12], ArenaSize: x[13], Quarantined: x[14], IndexSize: x[15],
		Clients: x[16], ClientsTotal: x[17], ClientsRejected: x[18],
	}
}

// Stats returns the server's counters.
func (s *Server) Stats() ServerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshotLocked()
}

func (s *Server) snapshotLocked() ServerStats {
	st := s.stats
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		st.CPUUser = time.Duration(ru.Utime.Nano())
		st.CPUSys = time.Duration(ru.Stime.Nano())
	}
	st.Keys, st.Buckets, st.Generation = s.ix.keys, s.ix.hdr.buckets, s.ix.hdr.gen
	st.ArenaUsed, st.ArenaSize, st.Quarantined = s.ar.used, s.ar.size, s.ar.qbytes
	st.IndexSize = uint64(len(s.ix.mem))
	st.Clients = uint64(len(s.clients))
	return st
}

// allocEntry reserves an entry for a klen-byte key and vlen-byte value.
func (s *Server) allocEntry(klen, vlen int) (off uint64, class int, st uint8, limit uint64) {
	n := entryLen(klen, vlen)
	off, class, ok := s.ar.alloc(n)
	if !ok {
		return 0, 0, stArena, s.ar.size
	}
	put32(s.vals.bytes()[off+28:], uint32(class))
	return off, class, stOK, 0
}

func (s *Server) entry(off uint64) []byte {
	b := s.vals.bytes()
	n := entryLen(int(le32(b[off+8:])), int(le32(b[off+12:])))
	return b[off : off+n : off+n]
}

// put stores key=val (val nil: the value is already in the entry, see
// startRemotePut) and returns the new version.
func (s *Server) put(key, val []byte, vlen int) (uint8, uint64, uint64) {
	off, class, st, limit := s.allocEntry(len(key), vlen)
	if st != stOK {
		return st, 0, limit
	}
	return s.link(off, class, key, val, vlen, keyHash(s.ix.hdr.seed, key))
}

// link finishes an entry at off and makes the index name it: out of
// place, then the old entry marked dead, then the bucket rewritten.
func (s *Server) link(off uint64, class int, key, val []byte, vlen int, h uint64) (uint8, uint64, uint64) {
	n := entryLen(len(key), vlen)
	e := s.vals.bytes()[off : off+n : off+n]
	s.ver++
	ver := s.ver
	writeEntry(e, ver, h, key, val, vlen)
	put32(e[28:], uint32(class))
	ns := slot{ver: ver, off: off, n: uint32(n)}
	if b, i, old, ok := s.ix.find(h, e[entryHdr:entryHdr+len(key)]); ok {
		ns.tag = old.tag
		oe := s.entry(old.off)
		if !faultNoDeadMark {
			markDead(oe)
		}
		s.ix.setSlot(b, i, ns, false)
		s.ar.release(old.off, int(le32(oe[28:])))
		s.stats.Puts++
		return stOK, ver, 0
	}
	if float64(s.ix.keys+1) > s.cfg.LoadFactor*float64(s.ix.hdr.buckets*slotsPerBkt) {
		s.grow()
	}
	if !s.ix.insert(h, ns) && !(s.grow() && s.ix.insert(h, ns)) {
		markDead(e)
		s.ar.release(off, class)
		return stIndex, 0, uint64(len(s.ix.mem))
	}
	s.stats.Puts++
	return stOK, ver, 0
}

func (s *Server) grow() bool {
	if !s.ix.grow() {
		return false
	}
	s.stats.Resizes++
	s.logf("kv: index grew to %d buckets (generation %d)", s.ix.hdr.buckets, s.ix.hdr.gen)
	return true
}

func (s *Server) del(key []byte) uint8 {
	b, i, old, ok := s.ix.find(keyHash(s.ix.hdr.seed, key), key)
	if !ok {
		return stNotFound
	}
	oe := s.entry(old.off)
	markDead(oe)
	s.ix.setSlot(b, i, slot{}, false)
	s.ix.keys--
	s.ar.release(old.off, int(le32(oe[28:])))
	s.stats.Deletes++
	return stOK
}

// startRemotePut reserves the entry and READs the value from the client
// straight into it; valueRead finishes the PUT.
func (s *Server) startRemotePut(c *srvClient, i int, r request) (uint8, uint64) {
	off, class, st, limit := s.allocEntry(len(r.key), int(r.vlen))
	if st != stOK {
		return st, limit
	}
	e := s.vals.bytes()[off:]
	atomicStore64(e, 0)
	put32(e[8:], uint32(len(r.key)))
	put32(e[12:], r.vlen)
	copy(e[entryHdr:], r.key)
	c.pending[i] = pendingPut{live: true, id: r.id, off: off, class: class, klen: len(r.key), vlen: int(r.vlen)}
	s.wr[0] = verbs.SendWR{ID: wrid(widRead, c.id, i), Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGL: s.sge[:], RemoteAddr: r.raddr, RKey: r.rkey}
	s.sge[0] = verbs.SGE{Addr: s.vals.mr.Addr() + off + entryHdr + uint64(len(r.key)), Length: r.vlen, LKey: s.vals.mr.LKey()}
	if err := c.qp.PostSend(s.wr[:]); err != nil {
		c.pending[i].live = false
		s.ar.release(off, class)
		return stReadErr, 0
	}
	s.stats.RemoteReads++
	return stOK, 0
}

func (s *Server) valueRead(c *srvClient, i int) {
	p := &c.pending[i]
	if !p.live {
		return
	}
	p.live = false
	e := s.vals.bytes()[p.off:]
	key := e[entryHdr : entryHdr+p.klen]
	st, ver, arg := s.link(p.off, p.class, key, nil, p.vlen, keyHash(s.ix.hdr.seed, key))
	if st != stOK {
		s.stats.PutErrors++
		ver = arg
	}
	s.reply(c, p.id, st, ver, false)
}
