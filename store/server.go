package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/ibex-rdma/ibex/internal/cm"
	"github.com/ibex-rdma/ibex/verbs"
)

// DefaultPort is the TCP port a server listens on when ServerConfig.Listen
// names none.
const DefaultPort = 18520

// ServerConfig configures NewServer. Every zero field takes the default
// named beside it.
type ServerConfig struct {
	// Dir is the directory served (required). Its regular files, found
	// recursively once at NewServer, are the file list for the server's
	// life: files added later are not served, and a file that shrinks
	// answers reads past its new end with an I/O error. A file is opened
	// at its first read and stays open: one descriptor per file read (Go
	// raises the soft RLIMIT_NOFILE to the hard limit; a read that finds
	// none left answers an I/O error).
	Dir string
	// Listen is the TCP address clients connect to (default
	// ":18520").
	Listen string
	// Device is the verbs device (default: the first device, verbs.Open("")).
	Device string
	// PoolBytes is the registered memory that stages file data (default
	// 256 MiB), cut into PoolBytes/ChunkBytes buffers (with Direct,
	// PoolBytes/(ChunkBytes+4 KiB)); it does not grow with the dataset or
	// the clients.
	PoolBytes int64
	// ChunkBytes is one buffer's size (default 1 MiB, at least 4 KiB, at
	// most 1 GiB; with Direct a multiple of 4 KiB): the most one range of
	// a request moves. Clients split longer ranges.
	ChunkBytes int
	// Direct reads with O_DIRECT into 4 KiB-aligned buffers instead of
	// through the page cache.
	Direct bool
	// MaxClients is the most clients connected at once (default 64);
	// more are rejected, with the reason.
	MaxClients int
	// MaxDepth is the most requests a client may have in flight (default
	// 16, at most 1024).
	MaxDepth int
	// MaxBatch is the most ranges one request carries (default and
	// maximum 64).
	MaxBatch int
	// MaxHeld is the most pool buffers one client holds at once: in READ
	// mode until it releases them, in WRITE mode while its WRITEs are in
	// flight (default a quarter of the pool's buffers, at most 256).
	MaxHeld int
}

// stride is one buffer's bytes: O_DIRECT reads the aligned blocks around
// a range, up to one block more than a chunk.
func (c *ServerConfig) stride() int {
	if c.Direct {
		return c.ChunkBytes + dioAlign
	}
	return c.ChunkBytes
}

func (c *ServerConfig) check() (nbuf int, err error) {
	if c.Dir == "" {
		return 0, configErr("Dir: empty (the directory to serve)")
	}
	if c.Listen == "" {
		c.Listen = fmt.Sprintf(":%d", DefaultPort)
	}
	if c.PoolBytes == 0 {
		c.PoolBytes = 256 << 20
	}
	if c.ChunkBytes == 0 {
		c.ChunkBytes = 1 << 20
	}
	switch {
	case c.ChunkBytes < 4096 || c.ChunkBytes > 1<<30:
		return 0, configErr("ChunkBytes %d: want 4 KiB to 1 GiB", c.ChunkBytes)
	case c.Direct && c.ChunkBytes%dioAlign != 0:
		return 0, configErr("ChunkBytes %d: Direct needs a multiple of %d", c.ChunkBytes, dioAlign)
	case c.PoolBytes < int64(c.stride()):
		return 0, configErr("PoolBytes %d: smaller than one buffer (%d bytes)", c.PoolBytes, c.stride())
	case c.PoolBytes > 1<<40:
		return 0, configErr("PoolBytes %d: more than 1 TiB", c.PoolBytes)
	}
	nbuf = int(c.PoolBytes / int64(c.stride()))
	if c.MaxClients == 0 {
		c.MaxClients = 64
	}
	if c.MaxDepth == 0 {
		c.MaxDepth = 16
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = MaxBatchLimit
	}
	if c.MaxHeld == 0 {
		c.MaxHeld = min(MaxHeldLimit, max(1, nbuf/4))
	}
	switch {
	case c.MaxClients < 0:
		return 0, configErr("MaxClients %d: negative", c.MaxClients)
	case c.MaxDepth < 0 || c.MaxDepth > 1024:
		return 0, configErr("MaxDepth %d: want 1 to 1024", c.MaxDepth)
	case c.MaxBatch < 0 || c.MaxBatch > MaxBatchLimit:
		return 0, configErr("MaxBatch %d: want 1 to %d", c.MaxBatch, MaxBatchLimit)
	case c.MaxHeld < 0 || c.MaxHeld > MaxHeldLimit:
		return 0, configErr("MaxHeld %d: want 1 to %d", c.MaxHeld, MaxHeldLimit)
	case c.MaxHeld > nbuf:
		return 0, configErr("MaxHeld %d: more than the pool's %d buffers", c.MaxHeld, nbuf)
	}
	return nbuf, nil
}

// Server serves a directory's files to clients over verbs. It is safe for
// concurrent use.
type Server struct {
	cfg   ServerConfig
	files []FileInfo
	sizes []int64
	total int64
	fds   []atomic.Int32 // fd+1 once opened (files open at first read)
	fdMu  sync.Mutex

	vc    *verbs.Context
	pd    *verbs.PD
	pool  *pool
	catMR *verbs.MR
	ln    *cm.Listener

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop, handshakes and client loops

	mu     sync.Mutex
	conns  map[int32]*sconn // guarded by mu
	nextID int32            // guarded by mu
	closed bool             // guarded by mu

	st counters
}

// NewServer scans cfg.Dir, opens the device, registers the pool and
// the file list, and starts serving on cfg.Listen. Close stops it.
func NewServer(cfg ServerConfig) (_ *Server, err error) {
	nbuf, err := cfg.check()
	if err != nil {
		return nil, err
	}
	files, err := scanDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, files: files, sizes: make([]int64, len(files)), fds: make([]atomic.Int32, len(files)), conns: map[int32]*sconn{}}
	for i, f := range files {
		s.sizes[i] = f.Size
		s.total += f.Size
	}
	if n := catalogLen(files); n > 1<<31 {
		return nil, fmt.Errorf("store: %s: the file list takes %d bytes, more than one RDMA READ moves (2 GiB)", cfg.Dir, n)
	}
	defer func() {
		if err != nil {
			s.release()
		}
	}()
	if cfg.Direct && len(files) > 0 {
		// Fail now, naming the directory, on a file system without
		// O_DIRECT (tmpfs) rather than at every read.
		if _, err := s.fd(0); err != nil {
			return nil, fmt.Errorf("store: Direct: %w", err)
		}
	}
	if s.vc, err = verbs.Open(cfg.Device); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if s.pd, err = s.vc.AllocPD(); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if s.pool, err = newPool(s.pd, nbuf, cfg.ChunkBytes, cfg.Direct); err != nil {
		return nil, fmt.Errorf("store: pool of %d buffers of %d bytes: %w", nbuf, cfg.ChunkBytes, err)
	}
	if s.catMR, err = s.pd.AllocMR(catalogLen(files), verbs.AccessLocalWrite|verbs.AccessRemoteRead); err != nil {
		return nil, fmt.Errorf("store: file list: %w", err)
	}
	encodeCatalog(s.catMR.Bytes(), files)
	if s.ln, err = cm.Listen(cfg.Listen); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// Addr is the TCP address clients dial.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Files is the served file list; indexes are Extent.File.
func (s *Server) Files() []FileInfo { return append([]FileInfo(nil), s.files...) }

// Config is the configuration in use, defaults filled in.
func (s *Server) Config() ServerConfig { return s.cfg }

// Close disconnects every client, stops listening and frees the pool. It
// returns when every goroutine of the server has ended.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	_ = s.ln.Close()
	s.wg.Wait()
	s.release()
	return nil
}

func (s *Server) release() {
	if s.ln != nil {
		_ = s.ln.Close()
	}
	if s.catMR != nil {
		_ = s.catMR.Dereg()
	}
	if s.pool != nil {
		_ = s.pool.mr.Dereg()
	}
	if s.pd != nil {
		_ = s.pd.Dealloc()
	}
	if s.vc != nil {
		_ = s.vc.Close()
	}
	for i := range s.fds {
		if fd := s.fds[i].Load(); fd > 0 {
			_ = syscall.Close(int(fd - 1))
		}
	}
}

// fd opens file i at its first use and keeps it open.
func (s *Server) fd(i int) (int, error) {
	if fd := s.fds[i].Load(); fd > 0 {
		return int(fd - 1), nil
	}
	s.fdMu.Lock()
	defer s.fdMu.Unlock()
	if fd := s.fds[i].Load(); fd > 0 {
		return int(fd - 1), nil
	}
	flags := syscall.O_RDONLY | syscall.O_CLOEXEC
	if s.cfg.Direct {
		flags |= syscall.O_DIRECT
	}
	name := s.cfg.Dir + "/" + s.files[i].Name
	var fd int
	var err error
	for {
		fd, err = syscall.Open(name, flags, 0)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", name, err)
	}
	s.fds[i].Store(int32(fd + 1))
	return fd, nil
}

// pread reads n bytes at off of file i into pool buffer b and returns
// where in b they start (O_DIRECT reads the aligned blocks around them).
func (s *Server) pread(i int, off int64, n int, b []byte) (int, error) {
	fd, err := s.fd(i)
	if err != nil {
		return 0, err
	}
	start, pre, need := off, 0, n
	if s.cfg.Direct {
		start = off &^ (dioAlign - 1)
		pre = int(off - start)
		need = pre + n
		b = b[:(need+dioAlign-1)&^(dioAlign-1)]
	} else {
		b = b[:n]
	}
	got := 0
	for got < need {
		m, err := syscall.Pread(fd, b[got:], start+int64(got))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if m == 0 {
			return 0, errShortRead
		}
		got += m
	}
	return pre, nil
}

var errShortRead = errors.New("file shorter than when the server started")

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	for {
		req, err := s.ln.Accept(s.ctx)
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed || len(s.conns) >= s.cfg.MaxClients {
			n := len(s.conns)
			s.mu.Unlock()
			s.st.rejected.Add(1)
			_ = req.Reject(s.ctx, fmt.Sprintf("store: too many clients (%d of %d)", n, s.cfg.MaxClients))
			continue
		}
		s.nextID++
		c := &sconn{s: s, id: s.nextID}
		s.conns[c.id] = c
		s.wg.Add(1)
		s.mu.Unlock()
		go c.run(req)
	}
}

// Stats are a server's counters.
type Stats struct {
	Files        int   // files served
	DatasetBytes int64 // their total size

	Clients      int    // connected now
	ClientsTotal uint64 // connected since the start
	Rejected     uint64 // refused: too many clients, or a bad hello

	Requests uint64 // request messages received
	Ranges   uint64 // ranges served (read and answered OK)
	Bytes    uint64 // bytes of those ranges

	Errors ErrorCounts

	PoolBuffers int   // buffers in the pool
	PoolFree    int   // of them free now
	ChunkBytes  int   // one buffer's data bytes
	PoolBytes   int64 // registered bytes of the pool (fixed at start)
	// RegisteredBytes is all the server has registered: the pool, the
	// file list, and each connected client's message buffers.
	RegisteredBytes int64
}

// ErrorCounts counts what clients got wrong or what failed, by cause.
type ErrorCounts struct {
	// Messages rejected whole (msgStatus): malformed header or length,
	// too many ranges or releases, a release of a buffer not held.
	Malformed  uint64
	BadRelease uint64 // of Malformed: releases of buffers the client does not hold
	// Ranges refused.
	BadFile   uint64 // file index out of range
	PastEOF   uint64 // range past the end of its file
	BadLength uint64 // length 0 or over a chunk
	Reserved  uint64 // reserved field not zero
	HeldCap   uint64 // the client held too many buffers
	IO        uint64 // pread failed or came up short
	// QPFailed counts clients disconnected because their QP failed: a
	// WRITE to a bad rkey, a SEND too long, a transport error.
	QPFailed uint64
}

type counters struct {
	clientsTotal, rejected                                              atomic.Uint64
	requests, ranges, bytes                                             atomic.Uint64
	malformed, badRelease, badFile, pastEOF, badLen, reserved, held, io atomic.Uint64
	qpFailed                                                            atomic.Uint64
	clientBytes                                                         atomic.Int64
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	n := len(s.conns)
	s.mu.Unlock()
	st := &s.st
	return Stats{
		Files: len(s.files), DatasetBytes: s.total,
		Clients: n, ClientsTotal: st.clientsTotal.Load(), Rejected: st.rejected.Load(),
		Requests: st.requests.Load(), Ranges: st.ranges.Load(), Bytes: st.bytes.Load(),
		Errors: ErrorCounts{
			Malformed: st.malformed.Load(), BadRelease: st.badRelease.Load(),
			BadFile: st.badFile.Load(), PastEOF: st.pastEOF.Load(), BadLength: st.badLen.Load(),
			Reserved: st.reserved.Load(), HeldCap: st.held.Load(), IO: st.io.Load(),
			QPFailed: st.qpFailed.Load(),
		},
		PoolBuffers: s.pool.n, PoolFree: s.pool.freeCount(), ChunkBytes: s.pool.chunk,
		PoolBytes:       int64(s.pool.mr.Len()),
		RegisteredBytes: int64(s.pool.mr.Len()+s.catMR.Len()) + st.clientBytes.Load(),
	}
}

func (st *counters) rangeErr(r rangeStatus) {
	switch r {
	case rangeBadFile:
		st.badFile.Add(1)
	case rangePastEOF:
		st.pastEOF.Add(1)
	case rangeBadLen:
		st.badLen.Add(1)
	case rangeReserved:
		st.reserved.Add(1)
	case rangeHeld:
		st.held.Add(1)
	case rangeIO:
		st.io.Add(1)
	}
}
