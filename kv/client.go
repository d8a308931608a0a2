package kv

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ibex-rdma/ibex/internal/cm"
	"github.com/ibex-rdma/ibex/verbs"
)

// ClientConfig configures Dial. Zero fields take the defaults given.
type ClientConfig struct {
	// Server is the server's TCP address ("host:port"). Required.
	Server string
	// Device is the verbs device to open ("" opens the first), unless
	// Context is set.
	Device string
	// Context, if set, is an opened device the client uses (several
	// clients may share one); the caller closes it after the clients.
	Context *verbs.Context
	// Pipeline is the most GETs a batch keeps in flight (default 32).
	Pipeline int
	// SlotSize is the bytes each GET in flight reads into (default
	// 16 KiB): an entry (a 32-byte header, the key, the value, 8 bytes)
	// larger than this is read into one shared buffer of the server's
	// largest entry, one at a time.
	SlotSize int
	// Cache is the entries of the location cache (a power of two; default
	// 65536, -1 for none): where a key's entry was last found, so that a
	// GET of a key read before is one READ instead of two.
	Cache int
}

func (c *ClientConfig) setDefaults() error {
	if c.Server == "" {
		return errors.New("kv: ClientConfig.Server is empty")
	}
	if c.Pipeline == 0 {
		c.Pipeline = 32
	}
	if c.SlotSize == 0 {
		c.SlotSize = 16 << 10
	}
	if c.Cache == 0 {
		c.Cache = 1 << 16
	}
	switch {
	case c.Pipeline < 1 || c.Pipeline > 1024:
		return fmt.Errorf("kv: ClientConfig.Pipeline %d: want 1 to 1024", c.Pipeline)
	case c.SlotSize < 2*bucketSize || c.SlotSize > 1<<24:
		return fmt.Errorf("kv: ClientConfig.SlotSize %d: want %d to 16 MiB", c.SlotSize, 2*bucketSize)
	case c.Cache != -1 && (c.Cache < 1 || c.Cache&(c.Cache-1) != 0 || c.Cache > 1<<24):
		return fmt.Errorf("kv: ClientConfig.Cache %d: want a power of two up to 2^24, or -1", c.Cache)
	}
	return nil
}

// ClientStats are a client's counters.
type ClientStats struct {
	Gets, Found   uint64
	Reads         uint64 // RDMA READs posted (buckets, entries, headers)
	CacheHits     uint64 // GETs that went straight to the entry
	CacheStale    uint64 // ... and found it dead or reused, then read the buckets
	TornBuckets   uint64 // bucket READs that failed their checksum (read again)
	TornEntries   uint64 // entry READs that failed their checks (read again)
	StaleEntries  uint64 // entries found dead after their bucket named them (buckets read again)
	HeaderReads   uint64 // index header READs (one at Dial, one per resize seen)
	TagCollisions uint64 // entries of another key with the same tag
	Puts, Deletes uint64
}

// Client is one connection to a server: an RC QP, the server's index
// header and a location cache. Its methods are safe for concurrent use
// but run one at a time; dial one client per goroutine for parallelism.
type Client struct {
	mu   sync.Mutex
	cfg  ClientConfig
	si   serverInfo
	vc   *verbs.Context
	own  bool
	pd   *verbs.PD
	cq   *verbs.CQ
	qp   *verbs.QP
	conn *cm.Conn

	stage   *region // header area, then Pipeline slots
	rpcMem  *region // credits request buffers, then credits reply buffers
	big     *region // one largest entry (GETs), allocated at first use
	bigPut  *region // one largest value (PUTs), allocated at first use
	bigBusy bool
	putBusy bool

	hdr   header
	cache []cacheEnt
	stats ClientStats
	err   error // sticky: the connection is unusable

	// The engine's state, reused by every call.
	gs       []getState
	freeG    []int
	credits  []int // free request slots
	rpcOp    []int // by request slot: the op index
	rpcID    []uint64
	nextID   uint64
	hdrBusy  bool
	inflight int // READs and SENDs posted, not yet completed
	wcs      []verbs.WC
	rwr      [1]verbs.RecvWR
	rsge     [1]verbs.SGE
	ost      []uint8 // by op: osNew, osBusy, osDone
	done     int
	cancel   error // the batch's context ended: start nothing more
	rpcOut   int
	putSlot  int
	one      [1]Op
	pend     []verbs.SendWR // queued for the next flush
	psge     []verbs.SGE    // their SGEs
	lastStat ServerStats
	curOps   []Op
	spin     bool // poll a while before sleeping (Server.await says why)
	watched  chan struct{}
}

type cacheEnt struct {
	hash uint64
	s    slot
}

// OpKind is what an Op does.
type OpKind uint8

// Operations.
const (
	OpGet OpKind = iota
	OpPut
	OpDelete
	opStatsKind
)

// Op is one operation of Client.Do.
type Op struct {
	Kind OpKind
	Key  []byte
	// Value is a PUT's value, and a GET's destination: a GET copies the
	// value into Value[:N] (all of it when it fits; else Err wraps
	// io.ErrShortBuffer and N says the value's length).
	Value []byte
	// N, Found and Err are the outcome: Found says a GET or DELETE found
	// the key; Err is this operation's error (a key too long, a full
	// arena, ...).
	N     int
	Found bool
	Err   error
}

// Op states in a batch.
const (
	osNew = iota
	osBusy
	osDone
)

// getState is one GET in flight.
type getState struct {
	op        int
	phase     uint8
	pending   int
	hash      uint64
	b1, b2    uint64
	tag       uint16
	gen       uint64
	cands     [2 * slotsPerBkt]slot
	nc, ci    int
	exp       slot
	fromCache bool
	big       bool
	retries   int
}

const (
	phBuckets = iota + 1
	phEntry
	phWaitHdr
	phWaitBig
)

// WRIDs: kind in the top byte, an index below.
const (
	cwBucket = 1
	cwEntry  = 2
	cwHdr    = 3
	cwSend   = 4
	cwRecv   = 5
)

const maxRetries = 1 << 20

// Dial connects to a server.
func Dial(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg}
	ok := false
	defer func() {
		if !ok {
			c.release()
		}
	}()
	var err error
	if cfg.Context != nil {
		c.vc = cfg.Context
	} else {
		if c.vc, err = verbs.Open(cfg.Device); err != nil {
			return nil, fmt.Errorf("kv: dial %s: %w", cfg.Server, err)
		}
		c.own = true
	}
	if c.pd, err = c.vc.AllocPD(); err != nil {
		return nil, fmt.Errorf("kv: dial %s: %w", cfg.Server, err)
	}
	c.spin = c.vc.QueryDevice().Caps.Has(verbs.CapSameHost)
	// The most completions at once: two READs per GET slot, a header
	// READ, and per credit a request SEND and a reply.
	const maxCredits = 1024
	sq := 2*cfg.Pipeline + 2 + maxCredits
	if c.cq, err = c.vc.CreateCQ(sq + maxCredits); err != nil {
		return nil, fmt.Errorf("kv: dial %s: %w", cfg.Server, err)
	}
	if c.qp, err = c.pd.CreateQP(verbs.QPInitAttr{SendCQ: c.cq, RecvCQ: c.cq, Cap: verbs.QPCap{
		MaxSendWR: sq, MaxRecvWR: maxCredits, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 256}}); err != nil {
		return nil, fmt.Errorf("kv: dial %s: %w", cfg.Server, err)
	}
	if c.stage, err = allocRegion(c.pd, hdrSize+cfg.Pipeline*cfg.SlotSize, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("kv: dial %s: %w", cfg.Server, err)
	}
	// The server sends only replies, so the reply buffers are posted
	// after the handshake (when its credits are known), before the first
	// request.
	c.conn, err = cm.Dial(ctx, cfg.Server, c.qp, clientPrivate(), cm.Options{})
	if err != nil {
		return nil, fmt.Errorf("kv: dial: %w", err)
	}
	if c.si, err = decodeServerInfo(c.conn.Private()); err != nil {
		return nil, fmt.Errorf("kv: dial %s: %w", cfg.Server, err)
	}
	if err := c.setup(ctx); err != nil {
		return nil, fmt.Errorf("kv: dial %s: %w", cfg.Server, err)
	}
	ok = true
	c.watched = make(chan struct{})
	go c.watch()
	return c, nil
}

// watch fails the QP when the connection ends, so that a client waiting
// for a dead server's completions gets flushed ones at once.
func (c *Client) watch() {
	defer close(c.watched)
	<-c.conn.Done()
	_ = c.qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.AttrState)
}

// Close closes the connection and frees the client's resources.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return nil
	}
	_ = c.conn.Close()
	<-c.watched
	c.conn = nil
	c.fail(ErrClosed)
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
	for _, r := range []*region{c.stage, c.rpcMem, c.big, c.bigPut} {
		r.release()
	}
	if c.cq != nil {
		_ = c.cq.Destroy()
	}
	if c.pd != nil {
		_ = c.pd.Dealloc()
	}
	if c.own && c.vc != nil {
		_ = c.vc.Close()
	}
}

// Get reads key's value into dst: n is the value's length (if dst is
// shorter, the error wraps io.ErrShortBuffer and dst holds the start).
// The server's CPU takes no part: one READ of the entry when the location
// cache knows it, else a READ of the key's two buckets and one of the
// entry.
func (c *Client) Get(ctx context.Context, key, dst []byte) (n int, found bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.one[0] = Op{Kind: OpGet, Key: key, Value: dst}
	if err := c.exec(ctx, c.one[:]); err != nil {
		return 0, false, err
	}
	o := &c.one[0]
	n, found, err = o.N, o.Found, o.Err
	*o = Op{}
	return n, found, err
}

// Put stores value under key. The server writes it out of place and then
// switches the key's slot to it; a value larger than the server's inline
// limit is READ by the server from this client's buffer.
func (c *Client) Put(ctx context.Context, key, value []byte) error {
	_, err := c.one1(ctx, OpPut, key, value)
	return err
}

// Delete removes key; found says it was there.
func (c *Client) Delete(ctx context.Context, key []byte) (found bool, err error) {
	return c.one1(ctx, OpDelete, key, nil)
}

func (c *Client) one1(ctx context.Context, kind OpKind, key, value []byte) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.one[0] = Op{Kind: kind, Key: key, Value: value}
	if err := c.exec(ctx, c.one[:]); err != nil {
		return false, err
	}
	o := &c.one[0]
	found, err := o.Found, o.Err
	*o = Op{}
	return found, err
}

// ServerStats asks the server for its counters (one request: the server
// answers STATS like a PUT, never a GET).
func (c *Client) ServerStats(ctx context.Context) (ServerStats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.one[0] = Op{Kind: opStatsKind}
	if err := c.exec(ctx, c.one[:]); err != nil {
		return ServerStats{}, err
	}
	err := c.one[0].Err
	c.one[0] = Op{}
	return c.lastStat, err
}

// Stats returns the client's counters.
func (c *Client) Stats() ClientStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Limits are the server's largest key and value.
func (c *Client) Limits() (maxKey, maxValue int) { return int(c.si.maxKey), int(c.si.maxValue) }
