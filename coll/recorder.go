package coll

import (
	"runtime"
	"slices"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/coll/reduce"
)

// The flight recorder: every rank keeps its last calls in a fixed ring of
// records, as PyTorch's NCCL flight recorder does, so that a hang or a
// failure can be read afterwards (FlightRecord, the dump on an abort) and
// while it happens (the heartbeats read the current record).
//
// Only the rank's own goroutine writes (the call in progress: run, the
// executor's step loop); the heartbeat goroutine, FlightRecord and Stats
// read from any goroutine. Every field is an atomic, and a record's
// version is odd while begin rewrites it (a seqlock): a reader retries
// until it reads one version on both sides. A call costs a dozen atomic
// stores and two clock reads, and allocates nothing.

// recOp is what a record's call did: an algo.Collective (1..6), or a
// point-to-point call.
type recOp uint8

const (
	recSend recOp = iota + 7
	recRecv
	recSendRecv
	numRecOps
)

func (o recOp) String() string {
	switch o {
	case recSend:
		return "send"
	case recRecv:
		return "recv"
	case recSendRecv:
		return "sendrecv"
	case 0:
		return ""
	}
	return algo.Collective(o).String()
}

// collective reports whether o is a collective (which every rank makes in
// the same order, so their counts and numbers compare across ranks).
func (o recOp) collective() bool { return o >= 1 && o < recSend }

// parseRecOp is String's inverse (0 for an unknown name).
func parseRecOp(s string) recOp {
	for o := recOp(1); o < numRecOps; o++ {
		if o.String() == s {
			return o
		}
	}
	return 0
}

// callInfo is what the recorder needs of a call beyond its descriptor,
// set where the call is made (ops.go).
type callInfo struct {
	op    recOp
	root  int32
	bytes int64 // nccl-tests' size: the whole buffer of all_gather, reduce_scatter, all_to_all
}

// The states of a record.
const (
	recRunning = iota + 1
	recDone
	recFailed
)

var recStateNames = [...]string{"", "running", "done", "failed"}

// The states of a communicator, as the heartbeats report them.
const (
	commInit = iota
	commReady
	commBroken
	commClosing
)

var commStateNames = [...]string{"init", "ready", "failed", "closing"}

// record is one call in the ring.
type record struct {
	ver   atomic.Uint64 // odd while begin rewrites the record
	seq   atomic.Uint64 // the collective's number (Comm.calls), or the point-to-point call's
	what  atomic.Uint64 // packWhat
	root  atomic.Int32
	bytes atomic.Int64
	start atomic.Int64 // unix ns
	end   atomic.Int64 // unix ns; 0 while running
	step  atomic.Int32 // the step the executor is in (from 0)
	state atomic.Uint32
	prog  atomic.Pointer[execStep] // the call's steps (immutable once compiled): the peers, read off the data path
	err   atomic.Pointer[string]
}

// packWhat packs op, dtype, redop, algorithm, path and the step count.
func packWhat(op recOp, d uint32, mode, steps int) uint64 {
	dt, redop, a := uint64(d>>11&15), uint64(d>>15&7), uint64(d>>18&7)
	return uint64(op) | dt<<8 | redop<<16 | a<<24 | uint64(mode)<<32 | uint64(steps)<<40
}

// rawRecord is a consistent copy of a record, on the stack.
type rawRecord struct {
	seq, what         uint64
	root, step        int32
	bytes, start, end int64
	state             uint32
	prog              *execStep
	err               *string
}

func (w rawRecord) op() recOp           { return recOp(w.what) }
func (w rawRecord) dtype() reduce.DType { return reduce.DType(w.what >> 8 & 0xff) }
func (w rawRecord) redop() reduce.Op    { return reduce.Op(w.what >> 16 & 0xff) }
func (w rawRecord) algo() algo.Algorithm {
	return algo.Algorithm(w.what >> 24 & 0xff)
}
func (w rawRecord) mode() int  { return int(w.what >> 32 & 0xff) }
func (w rawRecord) steps() int { return int(w.what >> 40) }

// load reads the record consistently; false if a writer kept it busy.
func (r *record) load() (rawRecord, bool) {
	for try := 0; try < 1000; try++ {
		v := r.ver.Load()
		if v&1 != 0 {
			runtime.Gosched()
			continue
		}
		w := rawRecord{seq: r.seq.Load(), what: r.what.Load(), root: r.root.Load(), step: r.step.Load(),
			bytes: r.bytes.Load(), start: r.start.Load(), end: r.end.Load(), state: r.state.Load(),
			prog: r.prog.Load(), err: r.err.Load()}
		if r.ver.Load() == v {
			return w, v != 0
		}
	}
	return rawRecord{}, false
}

// opCounters is what a rank counted of one kind of call.
type opCounters struct {
	started, done, failed atomic.Uint64
	lastNanos, lastBytes  atomic.Int64
}

// recorder is a rank's flight recorder and counters.
type recorder struct {
	ring  []record
	n     atomic.Uint64 // calls begun; the latest is ring[(n-1) % len(ring)]
	calls atomic.Uint64 // collective calls begun (the latest collective's number)
	state atomic.Uint32 // commInit, ...
	born  int64         // unix ns when the communicator was made
	ops   [numRecOps]opCounters

	// The rank's goroutine's own: the call in progress.
	cur      *record
	curOp    recOp
	curStart int64
	curBytes int64
	p2p      uint64
}

// defaultRecords is the ring's default length.
const defaultRecords = 64

func (r *recorder) init(n int) {
	r.ring = make([]record, max(n, 1))
	r.born = time.Now().UnixNano()
}

// begin records the start of call cl (the collective's number seq).
func (r *recorder) begin(cl *call, seq uint32) {
	if r.ring == nil {
		return
	}
	op := cl.info.op
	s := uint64(seq)
	if !op.collective() {
		r.p2p++
		s = r.p2p
	}
	k := r.n.Load()
	rec := &r.ring[k%uint64(len(r.ring))]
	now := time.Now().UnixNano()
	rec.ver.Add(1)
	rec.seq.Store(s)
	rec.what.Store(packWhat(op, cl.desc, cl.mode, len(cl.steps)))
	rec.root.Store(cl.info.root)
	rec.bytes.Store(cl.info.bytes)
	rec.start.Store(now)
	rec.end.Store(0)
	rec.step.Store(0)
	rec.prog.Store(unsafe.SliceData(cl.steps))
	rec.err.Store(nil)
	rec.state.Store(recRunning)
	rec.ver.Add(1)
	r.n.Store(k + 1)
	if op.collective() {
		r.calls.Store(s)
	}
	r.ops[op].started.Add(1)
	r.cur, r.curOp, r.curStart, r.curBytes = rec, op, now, cl.info.bytes
}

// step records that the call in progress entered step si.
func (r *recorder) step(si int) {
	if r.cur != nil {
		r.cur.step.Store(int32(si))
	}
}

// end records that the call in progress completed.
func (r *recorder) end() {
	rec := r.cur
	if rec == nil {
		return
	}
	now := time.Now().UnixNano()
	rec.end.Store(now)
	rec.state.Store(recDone)
	o := &r.ops[r.curOp]
	o.lastNanos.Store(now - r.curStart)
	o.lastBytes.Store(r.curBytes)
	o.done.Add(1)
	r.cur = nil
}

// fail records that the call in progress failed with msg.
func (r *recorder) fail(msg string) {
	rec := r.cur
	if rec == nil {
		return
	}
	rec.err.Store(&msg)
	rec.end.Store(time.Now().UnixNano())
	rec.state.Store(recFailed)
	r.ops[r.curOp].failed.Add(1)
	r.cur = nil
}

// latest reads the latest record (false: no call yet).
func (r *recorder) latest() (rawRecord, bool) {
	n := r.n.Load()
	if n == 0 || r.ring == nil {
		return rawRecord{}, false
	}
	return r.ring[(n-1)%uint64(len(r.ring))].load()
}

// Record is one call in a rank's flight record (Comm.FlightRecord, the
// JSON dumped when a communicator aborts, the status's current call).
type Record struct {
	// Seq is the collective's number on the communicator (1, 2, ...;
	// every rank numbers its collectives alike), or for send, recv and
	// sendrecv this rank's count of such calls.
	Seq uint64 `json:"seq"`
	// Op is all_reduce, reduce_scatter, all_gather, broadcast, reduce,
	// all_to_all, send, recv or sendrecv.
	Op string `json:"op"`
	// Bytes is the call's size as nccl-tests counts it: the buffer of one
	// rank, the whole gathered (scattered) one for all_gather,
	// reduce_scatter and all_to_all.
	Bytes     int64  `json:"bytes"`
	DType     string `json:"dtype"`
	Redop     string `json:"redop,omitempty"`
	Algorithm string `json:"algorithm,omitempty"`
	Path      string `json:"path"`           // LL, flagged or normal
	Root      int    `json:"root,omitempty"` // broadcast and reduce
	// Peers are the ranks the call sends to or receives from.
	Peers []int `json:"peers"`
	// Step is the step the call is in (or ended in), from 1, of Steps.
	Step  int       `json:"step"`
	Steps int       `json:"steps"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end,omitzero"`
	// State is running, done or failed.
	State string `json:"state"`
	Error string `json:"error,omitempty"`
}

// export turns a raw record into a Record (off the data path: allocates).
func (w rawRecord) export() Record {
	op := w.op()
	rec := Record{Seq: w.seq, Op: op.String(), Bytes: w.bytes, DType: w.dtype().String(), Path: pathNames[w.mode()],
		Step: int(w.step) + 1, Steps: w.steps(), Start: time.Unix(0, w.start), State: recStateNames[w.state], Peers: []int{}}
	if op.collective() {
		rec.Algorithm = w.algo().String()
		if k := algo.Collective(op); k == algo.AllReduce || k == algo.ReduceScatter || k == algo.Reduce {
			rec.Redop = w.redop().String()
		}
		if k := algo.Collective(op); k == algo.Broadcast || k == algo.Reduce {
			rec.Root = int(w.root)
		}
	}
	if w.end != 0 {
		rec.End = time.Unix(0, w.end)
	}
	if w.err != nil {
		rec.Error = *w.err
	}
	if w.prog != nil {
		for _, st := range unsafe.Slice(w.prog, w.steps()) {
			for _, x := range st.sends {
				rec.Peers = append(rec.Peers, x.peer)
			}
			for _, x := range st.recvs {
				rec.Peers = append(rec.Peers, x.peer)
			}
		}
		slices.Sort(rec.Peers)
		rec.Peers = slices.Compact(rec.Peers)
	}
	return rec
}

// FlightRecord returns this rank's last calls, oldest first: at most
// Options.Health.Records of them, the one in progress (if any) last with
// State "running". It may be called from any goroutine, during a call too.
func (c *Comm) FlightRecord() []Record {
	r := &c.rec
	n := r.n.Load()
	if r.ring == nil || n == 0 {
		return nil
	}
	first := uint64(0)
	if n > uint64(len(r.ring)) {
		first = n - uint64(len(r.ring))
	}
	out := make([]Record, 0, n-first)
	for k := first; k < n; k++ {
		if w, ok := r.ring[k%uint64(len(r.ring))].load(); ok {
			out = append(out, w.export())
		}
	}
	// A slot rewritten while we read it holds a newer call: keep the
	// order by start.
	slices.SortStableFunc(out, func(a, b Record) int { return a.Start.Compare(b.Start) })
	return out
}

// OpStats is what a rank measured of one kind of call: for metrics such as
// NCCL Inspector's nccl_collective_exec_time_microseconds and
// nccl_bus_bandwidth_gbs.
type OpStats struct {
	Op     string `json:"op"`     // all_reduce, ..., send, recv, sendrecv
	Count  uint64 `json:"count"`  // calls completed
	Failed uint64 `json:"failed"` // calls failed
	// The last completed call: its size (Record.Bytes), its execution
	// time on this rank (from the call's start to its end, setup
	// included), and the bandwidths nccl-tests would report for it (algbw
	// = Bytes / time; busbw = algbw × algo.BusFactor).
	LastBytes      int64   `json:"last_bytes"`
	LastExecMicros float64 `json:"last_exec_time_us"`
	LastAlgBWGBs   float64 `json:"last_alg_bandwidth_gbs"`
	LastBusBWGBs   float64 `json:"last_bus_bandwidth_gbs"`
}

// Stats returns this rank's counts and last measurements per kind of call
// it made (kinds never called are left out). Any goroutine may call it.
func (c *Comm) Stats() []OpStats {
	var out []OpStats
	for op := recOp(1); op < numRecOps; op++ {
		o := &c.rec.ops[op]
		if o.started.Load() == 0 {
			continue
		}
		s := OpStats{Op: op.String(), Count: o.done.Load(), Failed: o.failed.Load(), LastBytes: o.lastBytes.Load()}
		if ns := o.lastNanos.Load(); ns > 0 {
			s.LastExecMicros = float64(ns) / 1e3
			s.LastAlgBWGBs = float64(s.LastBytes) / float64(ns) // bytes per ns = GB/s
			s.LastBusBWGBs = s.LastAlgBWGBs
			if op.collective() {
				s.LastBusBWGBs *= algo.BusFactor(algo.Collective(op), c.size)
			}
		}
		out = append(out, s)
	}
	return out
}

// CommStats is one open communicator's rank in this process and its
// Stats.
type CommStats struct {
	ID   string    `json:"comm"` // Comm.ID
	Rank int       `json:"rank"`
	Size int       `json:"size"`
	Ops  []OpStats `json:"ops"`
}

// Stats returns Comm.Stats of every open communicator of this process
// (each rank here, in the order they were made), for an exporter of the
// whole process (NCCL Inspector's Prometheus names:
// nccl_collective_exec_time_microseconds from LastExecMicros,
// nccl_bus_bandwidth_gbs from LastBusBWGBs, labelled by comm, rank, op).
func Stats() []CommStats {
	registry.mu.Lock()
	comms := slices.Clone(registry.comms)
	registry.mu.Unlock()
	out := make([]CommStats, 0, len(comms))
	for _, c := range comms {
		out = append(out, CommStats{ID: c.ID(), Rank: c.rank, Size: c.size, Ops: c.Stats()})
	}
	return out
}
