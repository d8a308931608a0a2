package coll

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/internal/units"
	"github.com/ibex-rdma/ibex/verbs"
)

// Options configure a communicator. The zero value picks devices by
// host: shm0 between ranks of one host (machine and network namespace),
// udp0 between hosts.
type Options struct {
	// Transport forces one device for every peer ("shm0", "udp0",
	// "loop0", or one added with udp.AddDevice); IBEX_TRANSPORT
	// overrides the default too. The paths a call may take follow from
	// the device's capabilities (verbs.DeviceCap), not its name.
	Transport string
	// Landing is the bytes of the normal path's landing buffer per peer:
	// Credits slots of Landing/Credits bytes each. Default: on a
	// communicator whose links all take the flagged path (every link's
	// device with CapOrderedPlacement, on amd64: shm0 and udp devices),
	// Credits × Chunk, as that path carries every call but a few
	// programs with two transfers on one link in a step (rd all-gather and
	// tree broadcast/reduce on some rank counts); elsewhere 8 credits of 1
	// MiB (measured best for 2 ranks on loop0-era shm0 among 256 KiB to 2
	// MiB pieces and 2 to 16 credits), or of 256 KiB with more than 16
	// peers, so a rank's staging stays bounded.
	Landing int
	Credits int
	// Chunk is the flagged path's piece (fl.go): Credits slots of Chunk
	// bytes per peer. Default 256 KiB (128 KiB to 1 MiB measured alike
	// for 2 ranks on shm0 from 128 KiB to 128 MiB, within this VM's
	// noise); IBEX_CHUNK (bytes, with K, M or G) overrides it.
	Chunk int
	// Model is the cost model algorithms are chosen by; nil: the file
	// named by IBEX_COLL_MODEL, else DefaultModel. Only rank 0's counts:
	// it is handed to every rank at NewComm, so all choose alike.
	Model *Model
	// Health configures the status service, the heartbeats and the
	// flight recorder (health.go).
	Health HealthOptions
}

const (
	defaultLanding      = 8 << 20
	defaultLandingLarge = 2 << 20 // communicators of more than 17 ranks
	defaultCredits      = 8
)

const defaultChunk = 256 << 10

// withDefaults fills in the defaults; fast says whether every link of the
// communicator takes the flagged path.
func (o Options) withDefaults(size int, fast bool) (Options, error) {
	if o.Credits == 0 {
		o.Credits = defaultCredits
	}
	if e := os.Getenv("IBEX_CHUNK"); e != "" {
		n, err := units.ParseBytes(e)
		if err != nil {
			return o, fmt.Errorf("coll: IBEX_CHUNK=%q: %w", e, err)
		}
		o.Chunk = int(n)
	}
	if o.Chunk == 0 {
		o.Chunk = defaultChunk
	}
	if o.Chunk < 4096 || o.Chunk > 64<<20 {
		return o, fmt.Errorf("coll: options: chunk of %d bytes: want 4 KiB to 64 MiB", o.Chunk)
	}
	if o.Landing == 0 {
		switch {
		case fast && o.Credits <= 256:
			o.Landing = o.Credits * o.Chunk
		case size > 17:
			o.Landing = defaultLandingLarge
		default:
			o.Landing = defaultLanding
		}
	}
	if o.Credits < 1 || o.Credits > 256 || o.Landing < o.Credits*4096 || o.Landing%o.Credits != 0 {
		return o, fmt.Errorf("coll: options: %d credits over %d landing bytes: want 1..256 credits of at least 4 KiB, dividing the landing buffer", o.Credits, o.Landing)
	}
	return o, nil
}

// link is the connection to one peer: an RC QP on the device chosen for
// that peer, the landing buffer the peer writes into, and the peer's
// landing buffer we write into. What each protocol keeps per peer is in
// its own state (normalProto, llProto, flProto).
type link struct {
	peer  int
	dev   *device
	caps  verbs.DeviceCap // what both ends' devices guarantee (linkCaps)
	qp    *verbs.QP
	land  *verbs.MR // ours: the peer writes here
	rAddr uint64    // the peer's landing buffer
	rKey  uint32
	stage staging // the LL and flagged paths' staging (fast.go)
}

// device is one opened verbs device with its PD and CQ.
type device struct {
	name string
	caps verbs.DeviceCap
	ctx  *verbs.Context
	pd   *verbs.PD
	cq   *verbs.CQ
}

// Comm is a communicator: size ranks, this one rank, a link to every
// other rank.
type Comm struct {
	rank, size   int
	opt          Options
	peers        []Peer
	rankCaps     []map[string]verbs.DeviceCap // per rank, its devices' capabilities (published at NewComm)
	devs         map[string]*device
	progressList []*device              // devices without CapCompleteAtPost, which the waits drive (exec.go)
	devList      []*device              // devs, for the executor's polling loop
	links        []*link                // by rank; nil for ourselves
	primary      string                 // the device working buffers are allocated on
	boot         *Boot                  // the bootstrap network, kept for barriers
	work         *workBuf               // the registered working buffer
	userMRs      map[userKey]*workBuf   // callers' buffers registered for large calls
	programs     map[progKey][]execStep // compiled programs by call shape
	programMode  map[progKey]int        // the path each compiled program takes (modeNormal, modeLL, modeFL)
	wide         []byte                 // float32 copies of float16 input and output
	calls        uint32                 // collective calls so far (their number goes in the immediates)
	idleSince    time.Time
	model        Model
	choices      map[choiceKey]algo.Algorithm
	envAlgo      algo.Algorithm // IBEX_ALGO, read at NewComm (0: none)
	broken       error          // set when a call failed: every later call fails with it
	abortReq     atomic.Bool    // Abort was called
	mismatched   bool           // Close found data no call received
	notices      int            // abort notices posted, not completed
	peerAborted  int            // Close found an abort notice from this rank (-1: none)
	yieldThread  bool           // a waiting rank yields its thread too (a device of ours with CapProgressThread, or more local ranks than cores)

	// The protocols, each with its own state (normal.go, ll.go, fl.go),
	// and what the LL and flagged paths share: their staging writes
	// posted with a completion, not completed (fast.go).
	normal    normalProto
	ll        llProto
	fl        flProto
	stagedOut int

	// The executor's state, reused by every call (exec.go).
	cur            call // the call being run (reused: calls allocate nothing)
	wc             []verbs.WC
	sDone, rDone   []int    // pieces of each send and receive of the step done
	blockS, blockR []uint32 // per peer: the round its sends (receives) were refused; a link's pieces go in order
	rounds         uint32

	rec    recorder // the flight recorder (recorder.go)
	health *health  // heartbeats, rank 0's status service (health.go)
}

// Abort makes the call in progress on this communicator, and every later
// one, return an error wrapping ErrAborted within about a millisecond, and
// tells the peers, whose calls then fail the same way. It may be called
// from any goroutine, any number of times. Close must still be called; it
// does not wait for the other ranks after an abort.
func (c *Comm) Abort() {
	c.abortReq.Store(true)
}

// Rank is this rank; Size the number of ranks.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of ranks.
func (c *Comm) Size() int { return c.size }

// Transport names the device used to reach rank r ("" for ourselves).
func (c *Comm) Transport(r int) string {
	if r == c.rank || c.links[r] == nil {
		return ""
	}
	return c.links[r].dev.name
}

// The per-peer record a rank publishes at the bootstrap: for each other
// rank, the QP (on the device chosen for it) and landing buffer.
//
//	u32 count, then per entry: u32 peer, u32 qpn, u32 psn, [16]gid, u8 mtu,
//	u32 rkey, u64 addr, u64 len, u8 device-name length, name
type endpoint struct {
	peer int
	info verbs.ConnInfo
	dev  string
}

func encodeEndpoints(eps []endpoint) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(eps)))
	for _, e := range eps {
		b = binary.BigEndian.AppendUint32(b, uint32(e.peer))
		b = binary.BigEndian.AppendUint32(b, e.info.QPN)
		b = binary.BigEndian.AppendUint32(b, e.info.PSN)
		b = append(b, e.info.GID[:]...)
		b = append(b, byte(e.info.MTU))
		b = binary.BigEndian.AppendUint32(b, e.info.RKey)
		b = binary.BigEndian.AppendUint64(b, e.info.Addr)
		b = binary.BigEndian.AppendUint64(b, e.info.Len)
		b = append(b, byte(len(e.dev)))
		b = append(b, e.dev...)
	}
	return b
}

func decodeEndpoints(b []byte) ([]endpoint, error) {
	bad := errors.New("malformed endpoint table")
	if len(b) < 4 {
		return nil, bad
	}
	n := int(binary.BigEndian.Uint32(b))
	b = b[4:]
	if n > 1<<16 {
		return nil, bad
	}
	out := make([]endpoint, 0, n)
	for range n {
		const fixed = 4 + 4 + 4 + 16 + 1 + 4 + 8 + 8 + 1
		if len(b) < fixed {
			return nil, bad
		}
		var e endpoint
		e.peer = int(binary.BigEndian.Uint32(b))
		e.info.QPN = binary.BigEndian.Uint32(b[4:])
		e.info.PSN = binary.BigEndian.Uint32(b[8:])
		copy(e.info.GID[:], b[12:28])
		e.info.MTU = verbs.MTU(b[28])
		e.info.RKey = binary.BigEndian.Uint32(b[29:])
		e.info.Addr = binary.BigEndian.Uint64(b[33:])
		e.info.Len = binary.BigEndian.Uint64(b[41:])
		l := int(b[49])
		b = b[fixed:]
		if len(b) < l {
			return nil, bad
		}
		e.dev, b = string(b[:l]), b[l:]
		out = append(out, e)
	}
	if len(b) != 0 {
		return nil, bad
	}
	return out, nil
}

// deviceFor picks the device that reaches peer q.
func (c *Comm) deviceFor(q int) string { return c.transportBetween(c.rank, q) }

func (c *Comm) device(name string) (*device, error) {
	if d := c.devs[name]; d != nil {
		return d, nil
	}
	vc, err := verbs.Open(name)
	if err != nil {
		return nil, fmt.Errorf("coll: rank %d: open %s: %w", c.rank, name, err)
	}
	d := &device{name: name, caps: vc.QueryDevice().Caps, ctx: vc}
	c.devs[name] = d
	c.devList = append(c.devList, d)
	if !d.caps.Has(verbs.CapCompleteAtPost) {
		c.progressList = append(c.progressList, d)
	}
	if d.pd, err = vc.AllocPD(); err != nil {
		return nil, err
	}
	if d.cq, err = vc.CreateCQ(1 << 16); err != nil {
		return nil, err
	}
	return d, nil
}

// NewComm joins the communicator named by id as rank of size: it
// bootstraps twice (host table, then endpoints), connects an RC QP to
// every other rank on the device that reaches it, and returns when all are
// connected or ctx ends.
func NewComm(ctx context.Context, id UniqueID, rank, size int, opt Options) (*Comm, error) {
	return newComm(ctx, id, rank, size, opt, nil)
}

// newComm is NewComm where rank 0 may bring its rendezvous listener.
func newComm(ctx context.Context, id UniqueID, rank, size int, opt Options, l net.Listener) (_ *Comm, err error) {
	// Bad options fail here, before the rendezvous (the landing default
	// waits for the transports, below).
	if _, err := opt.withDefaults(size, false); err != nil {
		return nil, err
	}
	if opt.Transport == "" {
		opt.Transport = os.Getenv("IBEX_TRANSPORT")
	}
	var envAlgo algo.Algorithm
	if e := os.Getenv("IBEX_ALGO"); e != "" {
		if envAlgo, err = algo.ParseAlgorithm(e); err != nil {
			return nil, fmt.Errorf("coll: IBEX_ALGO=%q: %w", e, err)
		}
	}
	c := &Comm{rank: rank, size: size, opt: opt, devs: map[string]*device{}, links: make([]*link, size), peerAborted: -1, envAlgo: envAlgo}
	defer func() {
		if err != nil {
			_ = c.Close()
		}
	}()
	// The rendezvous tells who is where (HostID).
	boot, err := rendezvous(ctx, id, rank, size, l)
	if err != nil {
		return nil, err
	}
	c.boot = boot
	c.peers = boot.Peers()
	if err := c.healthStart(id); err != nil {
		return nil, err
	}
	// Open the devices: the primary, which holds the working buffers (the
	// forced transport, else the same-host device), then each peer's.
	c.primary = opt.Transport
	if c.primary == "" {
		c.primary = sameHostDevice
	}
	if _, err := c.device(c.primary); err != nil {
		return nil, err
	}
	for q := range size {
		if q != rank {
			if _, err := c.device(c.deviceFor(q)); err != nil {
				return nil, err
			}
		}
	}
	// Every rank publishes its devices' capabilities, and rank 0 its cost
	// model for everyone: the paths and the algorithms are decided from
	// what all ranks know alike.
	if err := c.exchangeSetup(ctx); err != nil {
		return nil, err
	}
	c.healthReport()
	c.yieldThread = len(LocalRanks(c.peers, rank)) > runtime.NumCPU()
	// The LL path needs every link of every rank to place writes in
	// order, so that all ranks decide alike; the flagged path needs that
	// and amd64 (fl.go). The LL limit is the larger one unless every link
	// completes a write at post.
	llOn, atPost := true, true
	for a := range size {
		for b := range size {
			if a == b {
				continue
			}
			caps := c.linkCaps(a, b)
			llOn = llOn && caps.Has(verbs.CapOrderedPlacement)
			atPost = atPost && caps.Has(verbs.CapCompleteAtPost)
		}
	}
	flOn := llOn && runtime.GOARCH == "amd64"
	llMax := llMaxAtPost
	if !atPost {
		llMax = llMaxAcked
	}
	if c.opt, err = opt.withDefaults(size, flOn); err != nil {
		return nil, err
	}
	opt = c.opt
	// The landing buffer: [normal slots][LL area][flagged area]; the
	// staging: [LL staging][flagged headers and credit source].
	c.normal.init(c)
	c.ll.init(c, llOn, llMax, opt.Landing)
	c.fl.init(c, flOn, opt.Landing+c.ll.area, c.ll.stageN)
	// Create a QP and landing buffer per peer, on its device.
	var eps []endpoint
	for q := range size {
		if q == rank {
			continue
		}
		d := c.devs[c.deviceFor(q)]
		l := &link{peer: q, dev: d, caps: c.linkCaps(rank, q)}
		land, stage := opt.Landing+c.ll.area, c.ll.stageN
		if c.fl.on {
			land, stage = land+c.fl.area(), stage+c.fl.stageN()
		}
		if l.land, err = d.pd.AllocMR(land, verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
			return nil, fmt.Errorf("coll: rank %d: landing buffer for rank %d: %w", rank, q, err)
		}
		if l.caps.Has(verbs.CapOrderedPlacement) {
			if l.stage.mr, err = d.pd.AllocMR(stage, verbs.AccessLocalWrite); err != nil {
				return nil, fmt.Errorf("coll: rank %d: LL staging for rank %d: %w", rank, q, err)
			}
		}
		// The send queue holds a step's normal pieces and credit returns,
		// or its flagged data and headers, plus LL writes in between.
		if l.qp, err = d.pd.CreateQP(verbs.QPInitAttr{SendCQ: d.cq, RecvCQ: d.cq,
			Cap: verbs.QPCap{MaxSendWR: 4*opt.Credits + llSlots + 8, MaxRecvWR: 4 * opt.Credits, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			return nil, fmt.Errorf("coll: rank %d: qp for rank %d: %w", rank, q, err)
		}
		c.links[q] = l
		info := l.qp.Info()
		info.RKey, info.Addr, info.Len = l.land.RKey(), l.land.Addr(), uint64(l.land.Len())
		eps = append(eps, endpoint{peer: q, info: info, dev: d.name})
	}
	// Every rank's endpoints.
	table, err := boot.AllGather(ctx, encodeEndpoints(eps))
	if err != nil {
		return nil, err
	}
	for q, data := range table {
		if q == rank {
			continue
		}
		if len(data) == 0 && size > 1 {
			return nil, fmt.Errorf("coll: rank %d: rank %d failed to set up its links (its own error says why)", rank, q)
		}
		theirs, err := decodeEndpoints(data)
		if err != nil {
			return nil, fmt.Errorf("coll: rank %d: endpoints of rank %d: %w", rank, q, err)
		}
		var mine *endpoint
		for i := range theirs {
			if theirs[i].peer == rank {
				mine = &theirs[i]
			}
		}
		l := c.links[q]
		switch {
		case mine == nil:
			return nil, fmt.Errorf("coll: rank %d: rank %d published no endpoint for us", rank, q)
		case mine.dev != l.dev.name:
			return nil, fmt.Errorf("coll: rank %d reaches rank %d over %s but rank %d chose %s (IBEX_TRANSPORT differs?)", rank, q, l.dev.name, q, mine.dev)
		}
		l.rAddr, l.rKey = mine.info.Addr, mine.info.RKey
		// A receive is reposted at once; an RNR wait should be short.
		rnr := verbs.ConnectOptions{Set: verbs.AttrMinRNRTimer, Attr: verbs.QPAttr{MinRNRTimer: 1}}
		if err := l.qp.Connect(mine.info, rnr); err != nil {
			return nil, fmt.Errorf("coll: rank %d: connect to rank %d: %w", rank, q, err)
		}
		if l.dev.caps.Has(verbs.CapProgressThread) {
			c.yieldThread = true
		}
		// Receives from the start, so an abort notice lands even before
		// our first call.
		if err := c.normal.postRecvs(l); err != nil {
			return nil, err
		}
	}
	c.healthReady()
	return c, nil
}

// setup is what every rank publishes once the hosts are known: the
// capabilities of the devices it opened, and (rank 0) the cost model.
type setup struct {
	Caps   map[string]verbs.DeviceCap `json:"caps"`
	Model  json.RawMessage            `json:"model,omitempty"`
	Health string                     `json:"health,omitempty"` // rank 0's status service
}

// exchangeSetup publishes our devices' capabilities (and, at rank 0, the
// cost model) and reads every rank's.
func (c *Comm) exchangeSetup(ctx context.Context) error {
	mine := setup{Caps: map[string]verbs.DeviceCap{}}
	for _, d := range c.devList {
		mine.Caps[d.name] = d.caps
	}
	if c.rank == 0 {
		mine.Health = c.health.service
		m := DefaultModel()
		switch {
		case c.opt.Model != nil:
			m = *c.opt.Model
		case os.Getenv(ModelEnv) != "":
			var err error
			if m, err = LoadModel(os.Getenv(ModelEnv)); err != nil {
				return err
			}
		}
		var err error
		if mine.Model, err = json.Marshal(m); err != nil {
			return err
		}
	}
	b, err := json.Marshal(mine)
	if err != nil {
		return err
	}
	all, err := c.boot.AllGather(ctx, b)
	if err != nil {
		return err
	}
	c.rankCaps = make([]map[string]verbs.DeviceCap, c.size)
	for q, data := range all {
		if len(data) == 0 {
			return fmt.Errorf("coll: rank %d: rank %d failed to set up (its own error says why)", c.rank, q)
		}
		var s setup
		if err := json.Unmarshal(data, &s); err != nil {
			return fmt.Errorf("coll: rank %d: setup of rank %d: %w", c.rank, q, err)
		}
		c.rankCaps[q] = s.Caps
		if q == 0 {
			c.health.service = s.Health
			m, err := parseModel(s.Model, "from rank 0")
			if err != nil {
				return err
			}
			c.setModel(m)
		}
	}
	return nil
}

// linkCaps is what the link between ranks a and b may rely on: the
// capabilities that both ranks published for the device that joins them.
// Every rank computes the same for every pair.
func (c *Comm) linkCaps(a, b int) verbs.DeviceCap {
	d := c.transportBetween(a, b)
	return c.rankCaps[a][d] & c.rankCaps[b][d]
}

// closeWait bounds Close's barrier: a dead rank must not keep the others.
const closeWait = 10 * time.Second

// Close waits until every rank closes (so no rank tears down a link a peer
// still uses), then destroys the links and closes the devices. After an
// abort or a failed call it does not wait.
func (c *Comm) Close() error {
	var errs []string
	c.healthClosing()
	if c.abortReq.Load() && c.broken == nil && c.links != nil {
		c.breakComm(fmt.Errorf("coll: rank %d: %w by Abort", c.rank, ErrAborted))
	}
	if c.boot != nil && c.broken != nil {
		// The links are in an unknown state and the peers were told;
		// closing the bootstrap connections ends their Close barriers.
		c.flushNotices()
		c.boot.Close()
		c.boot = nil
	}
	if c.boot != nil {
		c.flushStaged(time.Now().Add(closeWait))
		ctx, cancel := context.WithTimeout(context.Background(), closeWait)
		if _, err := c.boot.AllGather(ctx, nil); err != nil {
			errs = append(errs, "barrier: "+err.Error())
		}
		if err := c.leftovers(); err != nil {
			errs = append(errs, err.Error())
		}
		cancel()
		c.boot.Close()
		c.boot = nil
	}
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	if err := c.freeWork(); err != nil {
		errs = append(errs, err.Error())
	}
	for _, l := range c.links {
		if l == nil {
			continue
		}
		if l.qp != nil {
			keep(l.qp.Destroy())
		}
		if l.land != nil {
			keep(l.land.Dereg())
		}
		if l.stage.mr != nil {
			keep(l.stage.mr.Dereg())
		}
	}
	for _, d := range c.devs {
		if d.cq != nil {
			keep(d.cq.Destroy())
		}
		if d.pd != nil {
			keep(d.pd.Dealloc())
		}
		keep(d.ctx.Close())
	}
	c.links, c.devs, c.devList, c.progressList = nil, nil, nil, nil
	c.healthClose()
	if len(errs) > 0 {
		err := fmt.Errorf("coll: close rank %d: %s", c.rank, strings.Join(errs, "; "))
		if c.mismatched {
			err = fmt.Errorf("%w: %w", ErrMismatch, err)
		}
		if c.peerAborted >= 0 {
			err = fmt.Errorf("%w: %w", ErrAborted, err)
		}
		return err
	}
	return nil
}

// leftovers reports data that peers sent and no call of ours received:
// ranks whose calls differed in a way no receive noticed (two ranks that
// both thought they were a broadcast's root). Once every rank has passed
// Close's barrier, every piece sent has landed, so none is missed. It
// also reports a peer's abort notice no call saw.
func (c *Comm) leftovers() error {
	left := make([]int, c.size)
	for _, l := range c.links {
		if l != nil {
			left[l.peer] += c.normal.peers[l.peer].arrived.len()
			if c.fastLanded(l) {
				left[l.peer]++
			}
		}
	}
	wc := make([]verbs.WC, 64)
	for _, d := range c.devs {
		for {
			n, err := d.cq.Poll(wc)
			if err != nil || n == 0 {
				break
			}
			for _, w := range wc[:n] {
				if w.Status != verbs.WCSuccess || w.Opcode != verbs.WCRecvRDMAWithImm || w.Imm&immCredit != 0 && w.Imm&immAbort != immAbort {
					continue
				}
				for _, l := range c.links {
					if l != nil && l.qp.Num() == w.QPNum {
						if w.Imm&immAbort == immAbort {
							c.peerAborted = l.peer
						} else {
							left[l.peer]++
						}
					}
				}
			}
		}
	}
	var who []string
	if c.peerAborted >= 0 {
		who = append(who, fmt.Sprintf("rank %d aborted the communicator (its own error says why)", c.peerAborted))
	}
	for q, n := range left {
		if n > 0 {
			who = append(who, fmt.Sprintf("rank %d (%d pieces)", q, n))
		}
	}
	if len(who) == 0 {
		return nil
	}
	if len(who) > 1 || c.peerAborted < 0 {
		c.mismatched = true
		return fmt.Errorf("%v: data no call received, from %s: the ranks' calls differed", ErrMismatch, strings.Join(who, ", "))
	}
	return errors.New(who[0])
}
