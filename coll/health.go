package coll

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Health, as NCCL's RAS: every rank of a communicator reports to a status
// service that rank 0 runs, a heartbeat every Heartbeat carrying what its
// flight recorder (recorder.go) says of the call in progress; the service
// (health_service.go) tells who is dead, not heard from, stalled behind
// the others or mismatched, and answers in text or JSON on a TCP port
// (health_status.go: `echo verbose status | nc localhost 28028`, `ibex
// coll status`). A call that fails (its deadline, a dead link, an abort)
// asks the service about the ranks it waited on, names them in its error,
// and dumps the rank's flight record.
//
// The data path pays only the recorder's atomic stores: the heartbeat
// goroutine reads them, and neither it nor the service allocates per
// heartbeat.

// HealthOptions configure the status service, the heartbeats and the
// flight recorder. The zero value is the documented defaults.
type HealthOptions struct {
	// StatusAddr is the text status port (as NCCL RAS's: `echo verbose
	// status | nc localhost 28028`, `ibex coll status`) the process
	// serves when it holds a communicator's rank 0. Default
	// IBEX_RAS_ADDR, else localhost:28028; "off" serves none; port 0
	// picks a free one. A port another process holds is skipped: the
	// service's own address (Comm.StatusAddr) answers the same queries.
	StatusAddr string
	// Heartbeat is how often each rank reports to rank 0's service.
	// Default IBEX_RAS_HEARTBEAT (a Go duration), else 200 ms. A rank is
	// "not heard from" after 4 missed heartbeats, dead after 25 (or at
	// once when its connection closes without a goodbye, or its pid is
	// gone on the service's host), and stalled when it has been behind
	// the others (fewer collectives begun, or still in one they finished)
	// for 5 heartbeats. Negative: no heartbeats and no service.
	Heartbeat time.Duration
	// Records is how many calls the flight recorder keeps per rank.
	// Default IBEX_COLL_RECORDS, else 64.
	Records int
	// DumpDir is where a rank writes its flight record as JSON when its
	// communicator aborts (a call timed out or failed, a peer aborted, or
	// Abort): ibex-coll-ID-rankR-PID.json. Default IBEX_COLL_DUMP_DIR,
	// else one line of JSON on standard error.
	DumpDir string
}

const (
	defaultStatusAddr = "localhost:28028"
	defaultHeartbeat  = 200 * time.Millisecond
	// How many heartbeats make a rank not heard from, stalled, dead.
	silentBeats = 4
	stallBeats  = 5
	deadBeats   = 25
	// queryWait bounds a failing call's question to the status service.
	queryWait = time.Second
)

func (o HealthOptions) withDefaults() (HealthOptions, error) {
	if o.StatusAddr == "" {
		o.StatusAddr = os.Getenv("IBEX_RAS_ADDR")
	}
	if o.StatusAddr == "" {
		o.StatusAddr = defaultStatusAddr
	}
	if e := os.Getenv("IBEX_RAS_HEARTBEAT"); o.Heartbeat == 0 && e != "" {
		d, err := time.ParseDuration(e)
		if err != nil {
			return o, fmt.Errorf("coll: IBEX_RAS_HEARTBEAT=%q: %w", e, err)
		}
		o.Heartbeat = d
	}
	if o.Heartbeat == 0 {
		o.Heartbeat = defaultHeartbeat
	}
	if e := os.Getenv("IBEX_COLL_RECORDS"); o.Records == 0 && e != "" {
		n, err := strconv.Atoi(e)
		if err != nil {
			return o, fmt.Errorf("coll: IBEX_COLL_RECORDS=%q: %w", e, err)
		}
		o.Records = n
	}
	if o.Records == 0 {
		o.Records = defaultRecords
	}
	if o.DumpDir == "" {
		o.DumpDir = os.Getenv("IBEX_COLL_DUMP_DIR")
	}
	switch {
	case o.Records < 1 || o.Records > 1<<16:
		return o, fmt.Errorf("coll: options: health: %d flight records: want 1 to 65536", o.Records)
	case o.Heartbeat > 0 && o.Heartbeat < time.Millisecond:
		return o, fmt.Errorf("coll: options: health: heartbeat every %v: want at least 1ms (or negative: none)", o.Heartbeat)
	}
	if o.StatusAddr != "off" {
		if _, _, err := net.SplitHostPort(o.StatusAddr); err != nil {
			return o, fmt.Errorf("coll: options: health: status address %q: want host:port or off: %w", o.StatusAddr, err)
		}
	}
	return o, nil
}

// health is a rank's part: its heartbeats, and at rank 0 the service.
type health struct {
	opt     HealthOptions
	id      string     // the communicator's id (commID)
	service string     // rank 0's service address
	coll    *collector // rank 0's service; nil elsewhere
	rep     *reporter
	port    *statusPort // the process's text port, when rank 0 here holds it
	waited  []int       // the ranks a timed-out call waited on (noteWaiting)
	aborted bool        // healthAbort ran
}

// commID names a communicator in the status, as NCCL's commHash: derived
// from its unique ID, so every rank computes the same.
func commID(id UniqueID) string {
	s := sha256.Sum256(append(id.Magic[:], id.Addr...))
	return hex.EncodeToString(s[:8])
}

// ID is the communicator's id in the status and the flight record's
// dumps: 16 hex digits, the same on every rank.
func (c *Comm) ID() string { return c.health.id }

// StatusAddr is the address of the communicator's status service (rank
// 0's, on the bootstrap network), which answers the same text queries as
// the status port; "" when the heartbeats are off. Every rank knows it.
func (c *Comm) StatusAddr() string { return c.health.service }

// healthStart sets up the recorder and, at rank 0, the status service,
// whose address exchangeSetup then publishes.
func (c *Comm) healthStart(id UniqueID) error {
	opt, err := c.opt.Health.withDefaults()
	if err != nil {
		return err
	}
	c.rec.init(opt.Records)
	h := &health{opt: opt, id: commID(id)}
	c.health = h
	if opt.Heartbeat < 0 || c.rank != 0 {
		return nil
	}
	if h.coll, err = newCollector(h.id, c.size, opt.Heartbeat, c.boot.localIP()); err != nil {
		return fmt.Errorf("coll: rank 0: status service: %w", err)
	}
	h.service = h.coll.addr
	return nil
}

// healthReport starts this rank's heartbeats to the service exchangeSetup
// named.
func (c *Comm) healthReport() {
	if c.health.service == "" || c.health.opt.Heartbeat < 0 {
		return
	}
	c.health.rep = startReporter(c, c.health.service)
}

// healthReady marks the communicator ready and lists it in the process's
// registry (the status port, Stats).
func (c *Comm) healthReady() {
	c.rec.state.Store(commReady)
	register(c)
}

// healthClosing marks the communicator closing (Close's barrier).
func (c *Comm) healthClosing() {
	c.rec.state.CompareAndSwap(commReady, commClosing)
}

// healthClose says goodbye to the service and, at rank 0, stops it.
func (c *Comm) healthClose() {
	unregister(c)
	h := c.health
	if h == nil {
		return
	}
	if h.rep != nil {
		h.rep.stop()
		h.rep = nil
	}
	if h.coll != nil {
		h.coll.close()
	}
}

// noteWaiting keeps the ranks a timed-out call was waiting for, for
// healthAbort to ask the service about.
func (c *Comm) noteWaiting(from, to map[int]int) {
	if c.health == nil {
		return
	}
	c.health.waited = c.health.waited[:0]
	for q := range from {
		c.health.waited = append(c.health.waited, q)
	}
	for q := range to {
		if _, ok := from[q]; !ok {
			c.health.waited = append(c.health.waited, q)
		}
	}
	sort.Ints(c.health.waited)
}

// healthAbort runs once when the communicator breaks (breakComm): it
// marks the call failed in the flight record, asks the status service
// what it knows of the ranks the call waited on (and of any other rank
// that is not well), dumps the flight record, and returns err with both.
func (c *Comm) healthAbort(err error) error {
	msg := err.Error()
	c.rec.fail(msg)
	c.rec.state.Store(commBroken)
	h := c.health
	if h == nil || h.aborted {
		return err
	}
	h.rep.beatNow()
	h.aborted = true
	var notes []string
	if h.service != "" {
		notes = append(notes, c.healthNote())
	}
	notes = append(notes, "flight record: "+c.dumpFlightRecord(msg))
	return fmt.Errorf("%w; %s", err, strings.Join(notes, "; "))
}

// healthNote is what the status service says of the ranks this one waited
// on, and of the others that are not well.
//
// The status it gives is no older than the failure: it asks until every
// other rank has been heard from since (or is dead, or closed), for up to
// two heartbeats. A rank that died fails our links about when the
// service's connection from it closes, and a peer's abort notice can
// overtake the service's news: two heartbeats are enough for the service
// to have seen the connection close.
func (c *Comm) healthNote() string {
	h := c.health
	t0 := time.Now()
	settle := t0.Add(2 * h.opt.Heartbeat)
	for {
		cs, err := c.commStatus()
		if err != nil {
			why := fmt.Sprintf("status: rank 0's service at %s did not answer: %v", h.service, err)
			if lost := h.rep.lostReason(); lost != "" {
				why += "; our heartbeats to it ended: " + lost + " (rank 0 dead?)"
			}
			return why
		}
		fresh := true
		for _, rs := range cs.Ranks {
			if rs.Rank != c.rank && rs.Health != HealthDead && rs.Health != HealthClosed && rs.HeardAgo >= 0 &&
				rs.HeardAgo > time.Since(t0).Seconds() {
				fresh = false
			}
		}
		if fresh || time.Now().After(settle) {
			return "status: " + cs.explain(h.waited, c.rank)
		}
		time.Sleep(h.opt.Heartbeat / 4)
	}
}

// commStatus is the service's view of this communicator.
func (c *Comm) commStatus() (CommStatus, error) {
	h := c.health
	if h.coll != nil {
		return h.coll.status(time.Now(), false), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), queryWait)
	defer cancel()
	b, err := QueryStatus(ctx, h.service, "SET FORMAT json\nSTATUS "+h.id+"\n")
	if err != nil {
		return CommStatus{}, err
	}
	var st Status
	if err := json.Unmarshal(b, &st); err != nil {
		return CommStatus{}, err
	}
	for _, cs := range st.Comms {
		if cs.ID == h.id && !cs.Remote {
			return cs, nil
		}
	}
	return CommStatus{}, fmt.Errorf("it does not serve communicator %s", h.id)
}

// flightDump is the JSON of a dumped flight record.
type flightDump struct {
	Comm    string    `json:"comm"`
	Rank    int       `json:"rank"`
	Size    int       `json:"size"`
	PID     int       `json:"pid"`
	Host    string    `json:"host"`
	Time    time.Time `json:"time"`
	Reason  string    `json:"reason"`
	Records []Record  `json:"records"`
}

// dumpFlightRecord writes the flight record to DumpDir, else standard
// error; it returns where.
func (c *Comm) dumpFlightRecord(reason string) string {
	h := c.health
	host, _ := os.Hostname()
	d := flightDump{Comm: h.id, Rank: c.rank, Size: c.size, PID: os.Getpid(), Host: host, Time: time.Now(), Reason: reason, Records: c.FlightRecord()}
	if d.Records == nil {
		d.Records = []Record{}
	}
	fail := ""
	if h.opt.DumpDir != "" {
		b, err := json.MarshalIndent(d, "", "  ")
		if err == nil {
			path := filepath.Join(h.opt.DumpDir, fmt.Sprintf("ibex-coll-%s-rank%d-%d.json", h.id, c.rank, d.PID))
			if err = os.WriteFile(path, append(b, '\n'), 0o644); err == nil {
				return path
			}
		}
		fail = fmt.Sprintf(" (not written to %s: %v)", h.opt.DumpDir, err)
	}
	b, err := json.Marshal(d)
	if err != nil {
		return "not written: " + err.Error()
	}
	fmt.Fprintf(os.Stderr, "coll: rank %d: flight record of communicator %s: %s\n", c.rank, h.id, b)
	return "on standard error" + fail
}

// The heartbeat protocol, on a TCP connection from each rank to rank 0's
// service: length-prefixed frames (u32 big-endian length, then a type
// byte). Network input: every field is checked.
//
//	hello: comm id [8], rank u32, size u32, pid u32, born i64,
//	       host (u16 length, bytes), host id (u16 length, bytes)
//	beat:  comm state u8, record state u8, what u64, seq u64, root i32,
//	       step i32, bytes i64, start i64, end i64, sent i64, calls u64,
//	       counts [numRecOps]u64, error (u16 length, bytes)
//	bye:   nothing
//
// Times are unix ns by the rank's clock; the service takes differences to
// the rank's "sent", so clocks need not agree.
const (
	frameHello = 1
	frameBeat  = 2
	frameBye   = 3
	maxFrame   = 4096
	maxBeatErr = 512
	beatFixed  = 1 + 1 + 1 + 8 + 8 + 4 + 4 + 8 + 8 + 8 + 8 + 8 + 8*int(numRecOps) + 2
)

// beat is a decoded heartbeat: fixed size, so the service keeps one per
// rank without allocating.
type beat struct {
	commState uint8
	rec       rawRecord // prog and err unused
	sent      int64
	calls     uint64
	counts    [numRecOps]uint64
	errLen    int
	errBuf    [maxBeatErr]byte
}

func encodeBeatHello(b []byte, id string, rank, size int, born int64, host, hostID string) []byte {
	b = append(b[:0], 0, 0, 0, 0, frameHello)
	raw, _ := hex.DecodeString(id)
	b = append(b, raw...)
	b = binary.BigEndian.AppendUint32(b, uint32(rank))
	b = binary.BigEndian.AppendUint32(b, uint32(size))
	b = binary.BigEndian.AppendUint32(b, uint32(os.Getpid()))
	b = binary.BigEndian.AppendUint64(b, uint64(born))
	for _, s := range []string{host, hostID} {
		s = s[:min(len(s), 1024)]
		b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
		b = append(b, s...)
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// encodeBeat writes the rank's heartbeat into b (which holds
// 4+beatFixed+maxBeatErr bytes) without allocating.
func encodeBeat(b []byte, r *recorder) []byte {
	w, ok := r.latest()
	if !ok {
		w = rawRecord{}
	}
	be := binary.BigEndian
	b = append(b[:0], 0, 0, 0, 0, frameBeat, uint8(r.state.Load()), uint8(w.state))
	b = be.AppendUint64(b, w.what)
	b = be.AppendUint64(b, w.seq)
	b = be.AppendUint32(b, uint32(w.root))
	b = be.AppendUint32(b, uint32(w.step))
	b = be.AppendUint64(b, uint64(w.bytes))
	b = be.AppendUint64(b, uint64(w.start))
	b = be.AppendUint64(b, uint64(w.end))
	b = be.AppendUint64(b, uint64(time.Now().UnixNano()))
	b = be.AppendUint64(b, r.calls.Load())
	for op := range numRecOps {
		b = be.AppendUint64(b, r.ops[op].started.Load())
	}
	var e string
	if w.err != nil {
		e = *w.err
	}
	e = e[:min(len(e), maxBeatErr)]
	b = be.AppendUint16(b, uint16(len(e)))
	b = append(b, e...)
	be.PutUint32(b, uint32(len(b)-4))
	return b
}

// decodeBeat reads a beat frame's body (after the type byte) into bt.
func decodeBeat(p []byte, bt *beat) error {
	if len(p) < beatFixed-1 {
		return errors.New("short heartbeat")
	}
	be := binary.BigEndian
	bt.commState, bt.rec.state = p[0], uint32(p[1])
	p = p[2:]
	u64 := func() uint64 { v := be.Uint64(p); p = p[8:]; return v }
	u32 := func() uint32 { v := be.Uint32(p); p = p[4:]; return v }
	bt.rec.what = u64()
	bt.rec.seq = u64()
	bt.rec.root = int32(u32())
	bt.rec.step = int32(u32())
	bt.rec.bytes = int64(u64())
	bt.rec.start = int64(u64())
	bt.rec.end = int64(u64())
	bt.sent = int64(u64())
	bt.calls = u64()
	for op := range numRecOps {
		bt.counts[op] = u64()
	}
	n := int(be.Uint16(p))
	p = p[2:]
	if n > maxBeatErr || n != len(p) || bt.commState > commClosing || bt.rec.state > recFailed || bt.rec.op() >= numRecOps ||
		bt.rec.mode() >= len(pathNames) {
		return errors.New("malformed heartbeat")
	}
	bt.errLen = copy(bt.errBuf[:], p)
	return nil
}

// reporter is a rank's heartbeat goroutine: started by healthReport,
// stopped by healthClose (stop waits for it).
type reporter struct {
	rec   *recorder
	conn  net.Conn
	every time.Duration
	quit  chan struct{}
	done  chan struct{}
	kick  chan struct{} // beat now
	lost  atomic.Pointer[string]
	buf   []byte
}

// startReporter dials the service and starts beating; a service it cannot
// reach is noted (lostReason) and nothing more.
func startReporter(c *Comm, service string) *reporter {
	r := &reporter{rec: &c.rec, every: c.health.opt.Heartbeat, quit: make(chan struct{}), done: make(chan struct{}), kick: make(chan struct{}, 1),
		buf: make([]byte, 0, 4+beatFixed+maxBeatErr)}
	conn, err := net.DialTimeout("tcp", service, 5*time.Second)
	if err == nil {
		host, _ := os.Hostname()
		_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err = conn.Write(encodeBeatHello(nil, c.health.id, c.rank, c.size, c.rec.born, host, HostID())); err != nil {
			_ = conn.Close()
		}
	}
	if err != nil {
		s := err.Error()
		r.lost.Store(&s)
		close(r.done)
		return r
	}
	r.conn = conn
	go r.run()
	return r
}

func (r *reporter) run() {
	defer close(r.done)
	defer r.conn.Close()
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		r.buf = encodeBeat(r.buf, r.rec)
		_ = r.conn.SetWriteDeadline(time.Now().Add(deadBeats * r.every))
		if _, err := r.conn.Write(r.buf); err != nil {
			s := err.Error()
			r.lost.Store(&s)
			<-r.quit
			return
		}
		select {
		case <-r.quit:
			// One last beat says how we ended, then goodbye.
			r.buf = encodeBeat(r.buf, r.rec)
			r.buf = append(r.buf, 0, 0, 0, 1, frameBye)
			_ = r.conn.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = r.conn.Write(r.buf)
			return
		case <-t.C:
		case <-r.kick:
		}
	}
}

// beatNow has the service hear of a change (a failure) without waiting
// for the next heartbeat.
func (r *reporter) beatNow() {
	if r == nil {
		return
	}
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *reporter) stop() {
	select {
	case <-r.done:
		return
	default:
	}
	close(r.quit)
	<-r.done
}

// lostReason says why the heartbeats ended early ("" if they did not).
func (r *reporter) lostReason() string {
	if r == nil {
		return ""
	}
	if p := r.lost.Load(); p != nil {
		return *p
	}
	return ""
}
