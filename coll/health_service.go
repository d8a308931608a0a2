package coll

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// collector is rank 0's status service: it listens on the bootstrap
// network, keeps every rank's latest heartbeat, and answers text queries
// on the same port. Started by healthStart, stopped by healthClose
// (close waits for its goroutines: the accept loop and one per
// connection).
type collector struct {
	id     string
	size   int
	every  time.Duration
	l      net.Listener
	addr   string
	hostID string
	wg     sync.WaitGroup

	mu     sync.Mutex // guards what follows
	ranks  []rankSlot
	conns  map[net.Conn]struct{}
	closed bool
}

// rankSlot is what the service knows of one rank.
type rankSlot struct {
	hello        bool
	pid          int
	host, hostID string
	born         int64
	beats        uint64
	b            beat
	err          string
	heard        time.Time // the last frame (the service's clock)
	lost         string    // the connection ended without a goodbye: why
	bye          bool
	conn         net.Conn // the rank's current connection
}

func newCollector(id string, size int, every time.Duration, ip string) (*collector, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return nil, err
	}
	c := &collector{id: id, size: size, every: every, l: l, addr: l.Addr().String(), hostID: HostID(),
		ranks: make([]rankSlot, size), conns: map[net.Conn]struct{}{}}
	c.wg.Add(1)
	go c.accept()
	return c, nil
}

func (c *collector) accept() {
	defer c.wg.Done()
	for {
		conn, err := c.l.Accept()
		if err != nil {
			return
		}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			_ = conn.Close()
			return
		}
		c.conns[conn] = struct{}{}
		c.wg.Add(1)
		c.mu.Unlock()
		go c.handle(conn)
	}
}

func (c *collector) close() {
	c.mu.Lock()
	c.closed = true
	_ = c.l.Close()
	for conn := range c.conns {
		_ = conn.Close()
	}
	c.mu.Unlock()
	c.wg.Wait()
}

// handle serves one connection: a rank's heartbeats (frames begin with a
// zero byte, the length's top), else a text query.
func (c *collector) handle(conn net.Conn) {
	defer c.wg.Done()
	defer func() {
		c.mu.Lock()
		delete(c.conns, conn)
		c.mu.Unlock()
		_ = conn.Close()
	}()
	br := bufio.NewReaderSize(conn, 1024)
	_ = conn.SetReadDeadline(time.Now().Add(helloWait))
	first, err := br.Peek(1)
	if err != nil {
		return
	}
	if first[0] != 0 {
		serveQuery(conn, br)
		return
	}
	var hdr [4]byte
	buf := make([]byte, maxFrame)
	bt := new(beat)
	rank := -1
	for {
		_, err := io.ReadFull(br, hdr[:])
		n := int(binary.BigEndian.Uint32(hdr[:]))
		if err == nil && (n < 1 || n > maxFrame) {
			err = fmt.Errorf("frame of %d bytes", n)
		}
		if err == nil {
			_, err = io.ReadFull(br, buf[:n])
		}
		if err == nil {
			switch {
			case buf[0] == frameHello && rank < 0:
				if rank, err = c.hello(conn, buf[1:n]); err == nil {
					_ = conn.SetReadDeadline(time.Time{})
				}
			case buf[0] == frameBeat && rank >= 0:
				if err = decodeBeat(buf[1:n], bt); err == nil {
					c.beat(conn, rank, bt)
				}
			case buf[0] == frameBye && rank >= 0:
				c.mu.Lock()
				if c.ranks[rank].conn == conn {
					c.ranks[rank].bye = true
				}
				c.mu.Unlock()
			default:
				err = fmt.Errorf("unexpected frame type %d", buf[0])
			}
		}
		if err != nil {
			if rank >= 0 {
				c.mu.Lock()
				s := &c.ranks[rank]
				if s.conn == conn && !s.bye && !c.closed {
					s.lost = lostWhy(err)
				}
				c.mu.Unlock()
			}
			return
		}
	}
}

// lostWhy says how a rank's heartbeat connection ended.
func lostWhy(err error) string {
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "its heartbeat connection closed without a goodbye"
	case errors.Is(err, syscall.ECONNRESET):
		return "its heartbeat connection was reset"
	}
	return "its heartbeat connection failed: " + err.Error()
}

// hello registers a rank's connection.
func (c *collector) hello(conn net.Conn, p []byte) (int, error) {
	bad := errors.New("malformed hello")
	if len(p) < 8+4+4+4+8+2 {
		return -1, bad
	}
	if hex.EncodeToString(p[:8]) != c.id {
		return -1, errors.New("hello for another communicator")
	}
	be := binary.BigEndian
	rank, size, pid, born := int(be.Uint32(p[8:])), int(be.Uint32(p[12:])), int(be.Uint32(p[16:])), int64(be.Uint64(p[20:]))
	p = p[28:]
	var strs [2]string
	for i := range strs {
		if len(p) < 2 || int(be.Uint16(p)) > len(p)-2 {
			return -1, bad
		}
		n := int(be.Uint16(p))
		strs[i], p = string(p[2:2+n]), p[2+n:]
	}
	if size != c.size || rank < 0 || rank >= c.size || len(p) != 0 {
		return -1, bad
	}
	c.mu.Lock()
	c.ranks[rank] = rankSlot{hello: true, pid: pid, host: strs[0], hostID: strs[1], born: born, heard: time.Now(), conn: conn}
	c.mu.Unlock()
	return rank, nil
}

// beat keeps a rank's heartbeat (allocating only when its error text
// changes).
func (c *collector) beat(conn net.Conn, rank int, bt *beat) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &c.ranks[rank]
	if s.conn != conn {
		return
	}
	s.b = *bt
	s.beats++
	s.heard = time.Now()
	if e := s.b.errBuf[:s.b.errLen]; string(e) != s.err {
		s.err = string(e)
	}
}

// status classifies the ranks as of now (health_status.go).
func (c *collector) status(now time.Time, verbose bool) CommStatus {
	c.mu.Lock()
	views := make([]rankView, len(c.ranks))
	for r := range c.ranks {
		s := c.ranks[r]
		s.conn = nil
		views[r] = rankView{rank: r, slot: s, heardAgo: now.Sub(s.heard)}
	}
	c.mu.Unlock()
	for i := range views {
		v := &views[i]
		if v.slot.hello && !v.slot.bye && v.slot.hostID == c.hostID && v.slot.pid != os.Getpid() {
			v.pidGone = unix.Kill(v.slot.pid, 0) == unix.ESRCH
		}
	}
	return classify(c.id, c.size, c.addr, c.every, views, verbose)
}

// The process's text status port and its registry of communicators: the
// port serves the communicators whose rank 0 is in this process (their
// services' views) and lists the others' ranks here with where their
// status is. One port per address, opened by the first rank 0 that asks
// for it and closed when the last one closes.
var registry struct {
	mu    sync.Mutex
	comms []*Comm
	ports map[string]*statusPort
}

// statusPort is a listener answering text queries (serveQuery).
type statusPort struct {
	l     net.Listener
	refs  int
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func openStatusPort(addr string) (*statusPort, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &statusPort{l: l, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns[conn] = struct{}{}
			p.wg.Add(1)
			p.mu.Unlock()
			go func() {
				defer p.wg.Done()
				serveQuery(conn, bufio.NewReader(conn))
				p.mu.Lock()
				delete(p.conns, conn)
				p.mu.Unlock()
				_ = conn.Close()
			}()
		}
	}()
	return p, nil
}

func (p *statusPort) close() {
	_ = p.l.Close()
	p.mu.Lock()
	for conn := range p.conns {
		_ = conn.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// StatusPortAddr is the address this process's text status port listens
// on ("" if none: no rank 0 here, "off", or the port was taken).
func StatusPortAddr() string {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	for _, p := range registry.ports {
		return p.l.Addr().String()
	}
	return ""
}

// register lists c in the process's registry, and opens the status port
// when c's rank 0 is here.
func register(c *Comm) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	registry.comms = append(registry.comms, c)
	h := c.health
	if h == nil || h.coll == nil || h.opt.StatusAddr == "off" {
		return
	}
	p := registry.ports[h.opt.StatusAddr]
	if p == nil {
		var err error
		if p, err = openStatusPort(h.opt.StatusAddr); err != nil {
			return // another process holds it; the service's own address answers too
		}
		if registry.ports == nil {
			registry.ports = map[string]*statusPort{}
		}
		registry.ports[h.opt.StatusAddr] = p
	}
	p.refs++
	h.port = p
}

// unregister takes c out of the registry, closing the port it held last.
func unregister(c *Comm) {
	registry.mu.Lock()
	registry.comms = slices.DeleteFunc(registry.comms, func(x *Comm) bool { return x == c })
	var last *statusPort
	if h := c.health; h != nil && h.port != nil {
		if h.port.refs--; h.port.refs == 0 {
			last = h.port
			delete(registry.ports, h.opt.StatusAddr)
		}
		h.port = nil
	}
	registry.mu.Unlock()
	if last != nil {
		last.close() // outside the lock: its queries read the registry
	}
}

// processStatus is the status of every communicator in the registry
// (only filter's, if not empty).
func processStatus(filter string, verbose bool) Status {
	registry.mu.Lock()
	comms := slices.Clone(registry.comms)
	registry.mu.Unlock()
	now := time.Now()
	host, _ := os.Hostname()
	st := Status{Time: now, Host: host, PID: os.Getpid(), Comms: []CommStatus{}}
	served := map[string]bool{}
	for _, c := range comms {
		if h := c.health; h.coll != nil && (filter == "" || filter == h.id) {
			st.Comms = append(st.Comms, h.coll.status(now, verbose))
			served[h.id] = true
		}
	}
	remote := map[string]int{}
	for _, c := range comms {
		h := c.health
		if served[h.id] || h.coll != nil || filter != "" && filter != h.id {
			continue
		}
		i, ok := remote[h.id]
		if !ok {
			i = len(st.Comms)
			remote[h.id] = i
			st.Comms = append(st.Comms, CommStatus{ID: h.id, Size: c.size, Service: h.service, Remote: true, State: "RUNNING"})
		}
		st.Comms[i].Ranks = append(st.Comms[i].Ranks, localRankStatus(c, now))
	}
	for i := range st.Comms {
		sort.Slice(st.Comms[i].Ranks, func(a, b int) bool { return st.Comms[i].Ranks[a].Rank < st.Comms[i].Ranks[b].Rank })
	}
	return st
}

// localRankStatus is a rank's own view of itself, for a communicator
// whose service is in another process.
func localRankStatus(c *Comm, now time.Time) RankStatus {
	r := &c.rec
	host, _ := os.Hostname()
	rs := RankStatus{Rank: c.rank, PID: os.Getpid(), Host: host, Health: "unclassified", HeardAgo: 0,
		State: commStateNames[r.state.Load()], Collectives: r.calls.Load(), Counts: map[string]uint64{}}
	for op := recOp(1); op < numRecOps; op++ {
		if n := r.ops[op].started.Load(); n > 0 {
			rs.Counts[op.String()] = n
		}
	}
	w, ok := r.latest()
	since := func(t int64) time.Duration { return now.Sub(time.Unix(0, t)) }
	switch {
	case !ok:
		rs.For = since(r.born).Seconds()
	case w.state == recRunning:
		rs.For = since(w.start).Seconds()
	default:
		rs.For = since(w.end).Seconds()
	}
	if ok {
		rec := w.export()
		rs.Call = &rec
	}
	rs.Doing = doing(rs)
	return rs
}

// queryWaitMax bounds a text query's connection.
const queryWaitMax = 5 * time.Second

// serveQuery answers the text protocol, NCCL RAS's: lines of STATUS,
// VERBOSE STATUS (either with a communicator id to show only that one),
// SET FORMAT json|text, TIMEOUT seconds (accepted; ibex answers from what
// it holds, without waiting). The answer to a status command ends the
// connection.
func serveQuery(conn net.Conn, br *bufio.Reader) {
	_ = conn.SetDeadline(time.Now().Add(queryWaitMax))
	format := "text"
	for {
		line, err := br.ReadString('\n')
		if len(line) > 256 {
			fmt.Fprintf(conn, "error: line too long\n")
			return
		}
		f := strings.Fields(strings.ToLower(line))
		verbose := len(f) > 0 && f[0] == "verbose"
		if verbose {
			f = f[1:]
		}
		switch {
		case len(f) == 0 && !verbose:
		case len(f) == 0:
			fmt.Fprintf(conn, "error: VERBOSE what? want VERBOSE STATUS\n")
			return
		case f[0] == "status" && len(f) <= 2:
			filter := ""
			if len(f) == 2 {
				filter = f[1]
			}
			st := processStatus(filter, verbose)
			if format == "json" {
				b, _ := json.MarshalIndent(st, "", "  ")
				_, _ = conn.Write(append(b, '\n'))
			} else {
				var sb strings.Builder
				st.WriteText(&sb, verbose)
				_, _ = io.WriteString(conn, sb.String())
			}
			return
		case len(f) == 3 && f[0] == "set" && f[1] == "format" && (f[2] == "json" || f[2] == "text"):
			format = f[2]
		case len(f) == 2 && f[0] == "timeout":
		default:
			fmt.Fprintf(conn, "error: unknown command %q: want STATUS, VERBOSE STATUS, SET FORMAT json|text\n", strings.TrimSpace(line))
			return
		}
		if err != nil {
			return
		}
	}
}
