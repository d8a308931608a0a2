package packet

import (
	"fmt"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/sim/des"
	"github.com/ibex-rdma/ibex/sim/fabric"
	"github.com/ibex-rdma/ibex/sim/place"
	"github.com/ibex-rdma/ibex/sim/route"
	"github.com/ibex-rdma/ibex/sim/topo"
)

// work runs a schedule's programs over the fabric: every rank of every
// channel (a proc) steps through its program; a step's sends go as
// messages (chunks) over the connection to the peer, at most Slots chunks
// unconsumed per connection, and the step ends when its sends are
// acknowledged and its receives have arrived.
type work struct {
	n     *Net
	sim   *des.Sim
	p     fabric.Params
	ranks int
	nch   int

	steps [][]cstep // per rank
	xfers [][]cxfer // per rank
	off   [][]int64 // per channel: byte offset of each slot, Slots+1 entries

	procs  []proc // channel × ranks + rank
	conns  []conn // channel × pairs + pair
	pairs  int
	chunks []chunkRec // conn × Slots + i
	nvBusy []des.Time // per GPU: its NVLink egress is busy until

	left     int // procs not done
	end      des.Time
	iters    int32      // times each proc runs its program
	iterEnd  []des.Time // per iteration: when its last proc finished it
	stepsRun int64
	total    int64 // steps of all procs
	// Bytes cut into messages so far (to NICs or NVLink), and of the whole
	// run: how far it is (Config.OnProgress).
	cutBytes, totalBytes int64

	trace    *tracer
	nvChunks int64
}

type cstep struct{ first, ns, nr int32 }

type cxfer struct{ pair, src, n int32 }

type proc struct {
	rank, ch int32
	gpu      int32
	step     int32
	iter     int32
	pending  int32
	start    des.Time // of the current step
	done     des.Time
}

type conn struct {
	intra      bool
	gpu        int32 // the sending GPU (NVLink egress)
	qp0, nqp   int32
	nextQP     int32
	lat        des.Time // one way without serialisation: acknowledgements and slot returns
	slotEvAt   des.Time // an evSlot is scheduled for then (0: none)
	sends      []sendRec
	sh, cut    int
	sendBase   int32 // sequence number of sends[sh]
	sendPosted int32
	recvs      []recvRec
	rh         int
	recvBase   int32
	recvPosted int32
}

type sendRec struct {
	proc            int32
	left, unarrived int64
}

type recvRec struct {
	proc      int32
	remaining int64
}

type chunkRec struct {
	conn      int32
	seq       int32
	bytes     int32
	unarrived int32
	state     uint8    // chunkFree, chunkSent, chunkArrived
	freeAt    des.Time // chunkFree: when the sender learns the slot is free
}

const (
	chunkFree uint8 = iota
	chunkSent
	chunkArrived
)

// newWork compiles the schedule into compact programs, finds the
// connections and builds their QPs.
func newWork(n *Net, s *algo.Schedule, bytes int64, esize, nch int, pl *place.Placement, pxn bool, seed uint64, iters int) (*work, error) {
	w := &work{n: n, sim: n.sim, p: n.p, ranks: s.Ranks, nch: nch, iters: int32(iters), iterEnd: make([]des.Time, iters)}
	n.w = w
	g := n.g
	gpn := g.GPUsOnHost()
	// Programs, and the pairs that talk.
	pairOf := map[uint64]int32{}
	var pairFrom, pairTo []int32
	pair := func(a, b int) int32 {
		k := uint64(a)<<32 | uint64(b)
		if i, ok := pairOf[k]; ok {
			return i
		}
		i := int32(len(pairFrom))
		pairOf[k] = i
		pairFrom, pairTo = append(pairFrom, int32(a)), append(pairTo, int32(b))
		return i
	}
	w.steps = make([][]cstep, s.Ranks)
	w.xfers = make([][]cxfer, s.Ranks)
	for r := range s.Ranks {
		prog := s.Program(r)
		st := make([]cstep, len(prog))
		nx := 0
		for _, p := range prog {
			nx += len(p.Sends) + len(p.Recvs)
		}
		xf := make([]cxfer, 0, nx)
		for i, p := range prog {
			st[i] = cstep{first: int32(len(xf)), ns: int32(len(p.Sends)), nr: int32(len(p.Recvs))}
			for _, t := range p.Sends {
				xf = append(xf, cxfer{pair(r, t.Peer), int32(t.Src), int32(t.Len)})
			}
			for _, t := range p.Recvs {
				xf = append(xf, cxfer{pair(t.Peer, r), int32(t.Src), int32(t.Len)})
			}
		}
		w.steps[r], w.xfers[r] = st, xf
		w.total += int64(len(st)) * int64(nch) * int64(iters)
	}
	w.pairs = len(pairFrom)
	w.off = place.SlotOffsets(s, bytes, esize, nch)
	for r := range s.Ranks {
		for _, cs := range w.steps[r] {
			for k := range cs.ns {
				for c := range nch {
					w.totalBytes += w.bytesOf(int32(c), &w.xfers[r][cs.first+k]) * int64(iters)
				}
			}
		}
	}
	// Procs.
	w.procs = make([]proc, nch*s.Ranks)
	for c := range nch {
		for r := range s.Ranks {
			w.procs[c*s.Ranks+r] = proc{rank: int32(r), ch: int32(c), gpu: pl.GPU(c, r), step: -1}
		}
	}
	w.left = len(w.procs)
	// Connections and their QPs.
	w.conns = make([]conn, nch*w.pairs)
	w.chunks = make([]chunkRec, len(w.conns)*n.p.Slots)
	w.nvBusy = make([]des.Time, g.NumGPUs())
	var path []topo.PortID
	salt := uint32(seed * 0x9e3779b97f4a7c15 >> 32)
	for c := range nch {
		for pi := range w.pairs {
			ci := c*w.pairs + pi
			cn := &w.conns[ci]
			a, b := pl.GPU(c, int(pairFrom[pi])), pl.GPU(c, int(pairTo[pi]))
			cn.gpu = a
			for k := range n.p.Slots {
				w.chunks[ci*n.p.Slots+k].conn = int32(ci)
			}
			// With PXN the data crosses to the GPU on the receiver's rail
			// over NVLink (not charged: NVLink is not the bottleneck) and
			// leaves by that GPU's NIC, so a ring stays on one rail.
			src, dst, intra := place.EndpointsIn(g, gpn, a, b, pxn, place.Plane(g, gpn, c))
			if intra {
				cn.intra = true
				cn.lat = n.p.NVLinkLatency
				continue
			}
			var err error
			path, err = n.r.Path(src, dst, route.PolicyDModK, 0, path[:0])
			if err != nil {
				return nil, fmt.Errorf("packet: rank %d -> %d (%s -> %s): %w", pairFrom[pi], pairTo[pi], g.NodeName(src), g.NodeName(dst), err)
			}
			cn.lat = n.p.NICLatency
			for _, p := range path {
				cn.lat += n.ports[p].prop
				if n.ports[p].toSw {
					cn.lat += n.lat
				}
			}
			cn.qp0, cn.nqp = int32(len(n.qps)), int32(n.p.QPsPerConn)
			for range n.p.QPsPerConn {
				qn := uint32(len(n.qps))
				n.qps = append(n.qps, qp{
					nic: int32(src - n.nic0), port: g.Nodes[src].FirstPort, src: src, dst: dst,
					hash: route.FlowHash(src, dst, qn^salt), vl: uint8(int(qn) % n.nv),
				})
			}
		}
	}
	return w, nil
}

// start begins every proc's first step at time 0.
func (w *work) start() {
	for i := range w.procs {
		w.advance(int32(i))
	}
}

// bytesOf is a transfer's size in channel ch.
func (w *work) bytesOf(ch int32, x *cxfer) int64 {
	off := w.off[ch]
	return off[x.src+x.n] - off[x.src]
}

// advance moves proc i to its next step, and on while steps finish at once.
func (w *work) advance(i int32) {
	p := &w.procs[i]
	now := w.sim.Now()
	for {
		if p.step >= 0 {
			w.stepsRun++
			if w.trace != nil {
				w.trace.step(p, p.start, now)
			}
		}
		p.step++
		st := w.steps[p.rank]
		if int(p.step) == len(st) {
			w.iterEnd[p.iter] = max(w.iterEnd[p.iter], now)
			if p.iter+1 < w.iters {
				// The next call: a rank starts it when it has finished this
				// one, as NCCL's callers do; no barrier between calls.
				p.iter++
				p.step = -1
				continue
			}
			p.done = now
			w.end = max(w.end, now)
			w.left--
			return
		}
		p.start = now
		p.pending = 1 // held while the step's transfers are posted
		cs := st[p.step]
		xf := w.xfers[p.rank][cs.first : cs.first+cs.ns+cs.nr]
		base := int(p.ch) * w.pairs
		for k := range xf {
			x := &xf[k]
			b := w.bytesOf(p.ch, x)
			if b == 0 {
				continue
			}
			ci := int32(base + int(x.pair))
			p.pending++
			if k < int(cs.ns) {
				w.send(ci, i, b)
			} else {
				w.recv(ci, i, b)
			}
		}
		p.pending--
		if p.pending > 0 {
			return
		}
	}
}

// progress is one of proc i's transfers finishing.
func (w *work) progress(i int32) {
	p := &w.procs[i]
	p.pending--
	if p.pending == 0 {
		w.advance(i)
	}
}

func (w *work) send(ci, proc int32, b int64) {
	c := &w.conns[ci]
	c.sends = append(c.sends, sendRec{proc: proc, left: b, unarrived: b})
	c.sendPosted++
	w.pump(ci)
}

func (w *work) recv(ci, proc int32, b int64) {
	c := &w.conns[ci]
	seq := c.recvPosted
	c.recvs = append(c.recvs, recvRec{proc: proc, remaining: b})
	c.recvPosted++
	// Messages that came before the receive was posted.
	S := w.p.Slots
	for k := int(ci) * S; k < int(ci+1)*S; k++ {
		if ch := &w.chunks[k]; ch.state == chunkArrived && ch.seq == seq {
			w.consume(int32(k))
		}
	}
}

// pump cuts the connection's pending sends into messages while it has
// free slots, and posts them. A slot is free once the receiver has
// consumed its message and the sender has heard (freeAt); the sender
// looks at slots when it needs one, so a slot costs an event only when a
// sender waits for it.
func (w *work) pump(ci int32) {
	c := &w.conns[ci]
	S := w.p.Slots
	now := w.sim.Now()
	for {
		for c.cut < len(c.sends) && c.sends[c.cut].left == 0 {
			c.cut++
		}
		if c.cut == len(c.sends) {
			return
		}
		k, wait := -1, des.Time(0)
		for j := int(ci) * S; j < int(ci+1)*S; j++ {
			if ch := &w.chunks[j]; ch.state == chunkFree {
				if ch.freeAt <= now {
					k = j
					break
				}
				wait = earliest(wait, ch.freeAt)
			}
		}
		if k < 0 {
			if wait > 0 && (c.slotEvAt == 0 || wait < c.slotEvAt) {
				c.slotEvAt = wait
				w.sim.After(wait-now, evSlot, ci, 0, 0)
			}
			return
		}
		s := &c.sends[c.cut]
		b := min(int64(w.p.Chunk), s.left)
		s.left -= b
		w.cutBytes += b
		ch := &w.chunks[k]
		ch.state, ch.seq, ch.bytes, ch.unarrived = chunkSent, c.sendBase+int32(c.cut-c.sh), int32(b), int32(b)
		if c.intra {
			st := max(now, w.nvBusy[c.gpu])
			end := st + des.Time(float64(b)/w.p.NVLinkRate*float64(des.Second))
			w.nvBusy[c.gpu] = end
			w.nvChunks++
			w.sim.After(end+w.p.NVLinkLatency-now, evNVLink, int32(k), 0, 0)
			continue
		}
		q := c.qp0 + c.nextQP
		c.nextQP++
		if c.nextQP == c.nqp {
			c.nextQP = 0
		}
		w.n.post(q, int32(k))
	}
}

// packetIn counts a packet's payload into its message.
func (w *work) packetIn(k int32, payload int32) {
	ch := &w.chunks[k]
	ch.unarrived -= payload
	if ch.unarrived == 0 {
		w.sim.After(w.p.NICLatency, evChunk, k, 0, 0)
	}
}

// arrived is a message wholly in the receiver's memory.
func (w *work) arrived(k int32) {
	ch := &w.chunks[k]
	c := &w.conns[ch.conn]
	s := &c.sends[c.sh+int(ch.seq-c.sendBase)]
	s.unarrived -= int64(ch.bytes)
	if s.unarrived == 0 {
		w.sim.After(c.lat, evSendDone, s.proc, 0, 0)
		for c.sh < len(c.sends) && c.sends[c.sh].unarrived == 0 {
			c.sh++
			c.sendBase++
		}
		if c.sh == len(c.sends) {
			c.sends, c.sh, c.cut = c.sends[:0], 0, 0
		}
	}
	ch.state = chunkArrived
	if ch.seq < c.recvPosted {
		w.consume(k)
	}
}

// consume applies an arrived message to its receive and frees its slot.
func (w *work) consume(k int32) {
	ch := &w.chunks[k]
	ci := ch.conn
	c := &w.conns[ci]
	r := &c.recvs[c.rh+int(ch.seq-c.recvBase)]
	r.remaining -= int64(ch.bytes)
	ch.state, ch.freeAt = chunkFree, w.sim.Now()+c.lat
	if c.cut < len(c.sends) && c.slotEvAt == 0 {
		// The sender has data waiting for a slot.
		c.slotEvAt = ch.freeAt
		w.sim.After(c.lat, evSlot, ci, 0, 0)
	}
	if r.remaining == 0 {
		proc := r.proc
		for c.rh < len(c.recvs) && c.recvs[c.rh].remaining == 0 {
			c.rh++
			c.recvBase++
		}
		if c.rh == len(c.recvs) {
			c.recvs, c.rh = c.recvs[:0], 0
		}
		w.progress(proc)
	}
}

func (w *work) handle(e des.Event) {
	switch e.Kind() {
	case evChunk, evNVLink:
		w.arrived(e.A)
	case evSlot:
		if c := &w.conns[e.A]; c.slotEvAt == w.sim.Now() {
			c.slotEvAt = 0
		}
		w.pump(e.A)
	case evSendDone:
		w.progress(e.A)
	case evSample:
		w.trace.sampleTiers(w.n)
	default:
		panic(fmt.Sprintf("packet: event kind %d", e.Kind()))
	}
}
