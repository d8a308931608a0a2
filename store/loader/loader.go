package loader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ibex-rdma/ibex/store"
)

// Config is a Loader's configuration. The zero value of each field but
// Source and Dataset is its documented default.
type Config struct {
	// Source is where samples are read from (required).
	Source Source
	// Dataset is the Source's files cut into samples (required; made from
	// Source.Files()).
	Dataset *Dataset
	// Seed and Epoch choose the order of the first epoch (see Shuffle);
	// epoch k after it is shuffled with (Seed, Epoch+k).
	Seed, Epoch uint64
	// Epochs is how many epochs Next hands out before its final io.EOF.
	// 0: one; negative: no end.
	Epochs int
	// BatchSize is the number of samples in a batch. 0: 32.
	BatchSize int
	// Ahead is the number of batches read ahead of the consumer: the
	// Loader allocates (Ahead+1) batch buffers at New (Ahead reading or
	// ready, one with the consumer) and never more. 0: 4.
	Ahead int
	// Readers is the number of goroutines calling Source.ReadBatch, one
	// batch each at a time. 0: Ahead; at most Ahead+1.
	Readers int
	// DropLast leaves out an epoch's last batch if it is short (fewer than
	// BatchSize samples); otherwise it is handed out short.
	DropLast bool
}

// Defaults of Config's zero fields.
const (
	DefaultBatchSize = 32
	DefaultAhead     = 4
)

// ErrClosed is returned by Next after Close.
var ErrClosed = errors.New("loader: closed")

// Batch is one batch of samples, valid from Next until Release.
type Batch struct {
	Epoch uint64 // the epoch it belongs to
	Index int    // its number in the epoch, from 0
	// Samples are the dataset indices of its samples, in the epoch's order.
	Samples []int
	// Data[i] holds sample Samples[i] (SampleSize bytes) in the Loader's
	// buffer: valid until Release.
	Data [][]byte

	l      *Loader
	held   atomic.Bool
	buf    []byte         // BatchSize*SampleSize bytes of the Alloc'd memory
	sorted []int          // Samples in dataset order: sample sorted[k] is at buf[k*SampleSize:]
	exts   []store.Extent // sorted, adjacent samples of a shard coalesced
	dst    [][]byte       // exts' places in buf
	err    error          // the read's outcome, set before done
	done   chan struct{}  // one token when the read has ended (cap 1)
}

// Release gives the batch's buffer back to the Loader, to be read into
// again: Data must not be used after it. Releasing a batch twice panics.
// Any goroutine may call it, also after Close.
func (b *Batch) Release() {
	if !b.held.CompareAndSwap(true, false) {
		panic("loader: Batch.Release of a batch not held (released twice?)")
	}
	b.l.free <- b // never blocks: free has room for every buffer
}

// ReadError is a failed read of a batch: it names the extent (shard, offset,
// length) that failed. Extent is -1 when the batch's read failed but each
// of its extents then read alone did not; Shard and Off are the first
// extent's.
type ReadError struct {
	Epoch  uint64
	Batch  int // its index in the epoch
	Extent int // the failing extent's index in the batch's read, or -1
	Shard  string
	Off    int64
	Len    int
	Err    error
}

func (e *ReadError) Error() string {
	if e.Extent < 0 {
		return fmt.Sprintf("loader: epoch %d batch %d: read from shard %q offset %d on: %v (each extent read alone then succeeded)",
			e.Epoch, e.Batch, e.Shard, e.Off, e.Err)
	}
	return fmt.Sprintf("loader: epoch %d batch %d: shard %q offset %d len %d: %v", e.Epoch, e.Batch, e.Shard, e.Off, e.Len, e.Err)
}

func (e *ReadError) Unwrap() error { return e.Err }

// Loader reads a Dataset's batches ahead of its consumer. Goroutines: New
// starts Readers readers; they end when the last epoch is read or at Close,
// which waits for them. Next is for one consumer goroutine; Close and
// Release may be called from any.
type Loader struct {
	cfg     Config
	ds      *Dataset
	nb      int64 // batches per epoch
	total   int64 // batches in all epochs (MaxInt64: no end)
	batches []Batch

	ctx    context.Context // cancelled by Close; the readers' reads use it
	cancel context.CancelFunc
	wg     sync.WaitGroup
	free   chan *Batch // buffers to read into
	order  chan *Batch // batches being read or ready, in sequence order

	// mu guards the assignment of sequence numbers to buffers: next, and
	// perm and permEpoch (the order of epoch permEpoch).
	mu        sync.Mutex
	next      int64
	perm      []uint32
	permEpoch int64

	// The consumer's state (Next's goroutine).
	delivered int64
	eofGiven  bool   // io.EOF returned for the boundary at delivered
	pending   *Batch // taken from order, its read not yet ended
	err       error  // a read failed: every later Next returns it
	closed    atomic.Bool
}

// New checks cfg (naming the bad field), allocates the batch buffers with
// one Source.Alloc call and starts reading the first epoch.
func New(cfg Config) (*Loader, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	ds := cfg.Dataset
	n, bs := int64(ds.Len()), int64(cfg.BatchSize)
	l := &Loader{cfg: cfg, ds: ds, nb: (n + bs - 1) / bs, permEpoch: -1}
	if cfg.DropLast {
		l.nb = n / bs
	}
	l.total = math.MaxInt64
	if cfg.Epochs > 0 {
		l.total = l.nb * int64(cfg.Epochs)
	}
	slots := cfg.Ahead + 1
	bufSize := cfg.BatchSize * ds.SampleSize()
	mem, err := cfg.Source.Alloc(slots * bufSize)
	if err != nil {
		return nil, fmt.Errorf("loader: alloc %d bytes for %d batch buffers: %w", slots*bufSize, slots, err)
	}
	if len(mem) < slots*bufSize {
		return nil, fmt.Errorf("loader: alloc %d bytes: got %d", slots*bufSize, len(mem))
	}
	l.perm = make([]uint32, ds.Len())
	l.batches = make([]Batch, slots)
	l.free = make(chan *Batch, slots)
	l.order = make(chan *Batch, slots)
	for i := range l.batches {
		b := &l.batches[i]
		b.l = l
		b.buf = mem[i*bufSize : (i+1)*bufSize : (i+1)*bufSize]
		b.Samples = make([]int, 0, cfg.BatchSize)
		b.Data = make([][]byte, 0, cfg.BatchSize)
		b.sorted = make([]int, 0, cfg.BatchSize)
		b.exts = make([]store.Extent, 0, cfg.BatchSize)
		b.dst = make([][]byte, 0, cfg.BatchSize)
		b.done = make(chan struct{}, 1)
		l.free <- b
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Add(cfg.Readers)
	for range cfg.Readers {
		go l.reader()
	}
	return l, nil
}

func (c *Config) fill() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("loader: Config.%s %v: %w: %s", field, v, ErrConfig, want)
	}
	switch {
	case c.Source == nil:
		return bad("Source", nil, "required")
	case c.Dataset == nil:
		return bad("Dataset", nil, "required (NewDataset of the Source's Files)")
	case c.BatchSize < 0:
		return bad("BatchSize", c.BatchSize, "want > 0 samples (0: 32)")
	case c.Ahead < 0:
		return bad("Ahead", c.Ahead, "want > 0 batches (0: 4)")
	case c.Readers < 0:
		return bad("Readers", c.Readers, "want > 0 (0: Ahead)")
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.Ahead == 0 {
		c.Ahead = DefaultAhead
	}
	if c.Readers == 0 {
		c.Readers = c.Ahead
	}
	if c.Readers > c.Ahead+1 {
		return bad("Readers", c.Readers, fmt.Sprintf("at most Ahead+1 = %d (no more batches can be in flight)", c.Ahead+1))
	}
	ds := c.Dataset
	if c.DropLast && ds.Len() < c.BatchSize {
		return bad("DropLast", true, fmt.Sprintf("the dataset's %d samples make no full batch of %d", ds.Len(), c.BatchSize))
	}
	if float64(c.Ahead+1)*float64(c.BatchSize)*float64(ds.SampleSize()) > math.MaxInt/2 {
		return bad("Ahead", c.Ahead, fmt.Sprintf("(Ahead+1) x BatchSize %d x SampleSize %d bytes is too much memory", c.BatchSize, ds.SampleSize()))
	}
	files := c.Source.Files()
	for _, sh := range ds.Shards() {
		if sh.File >= len(files) || files[sh.File].Name != sh.Name || files[sh.File].Size < sh.Size {
			return bad("Dataset", "", fmt.Sprintf("shard %q (file %d) is not the Source's file %d: made from another Source?", sh.Name, sh.File, sh.File))
		}
	}
	return nil
}

// BatchesPerEpoch is the number of batches in an epoch.
func (l *Loader) BatchesPerEpoch() int { return int(l.nb) }

// Config returns the configuration, defaults filled in.
func (l *Loader) Config() Config { return l.cfg }

// reader takes a free buffer, the next batch in sequence for it, and reads
// it; until every epoch is read or Close.
func (l *Loader) reader() {
	defer l.wg.Done()
	for {
		var b *Batch
		select {
		case b = <-l.free:
		case <-l.ctx.Done():
			return
		}
		if !l.assign(b) {
			l.free <- b
			return
		}
		l.prepare(b)
		b.err = l.read(b)
		b.done <- struct{}{}
	}
}

// assign gives b the next batch of the sequence and queues it for the
// consumer, in sequence order; false when every batch is assigned.
func (l *Loader) assign(b *Batch) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	seq := l.next
	if seq >= l.total {
		return false
	}
	l.next++
	e, k := seq/l.nb, seq%l.nb
	if e != l.permEpoch {
		// Once per epoch, with the lock held: the other readers wait for
		// the order, as they would for anything else.
		Shuffle(l.perm, l.cfg.Seed, l.cfg.Epoch+uint64(e))
		l.permEpoch = e
	}
	bs := int64(l.cfg.BatchSize)
	lo, hi := k*bs, min((k+1)*bs, int64(len(l.perm)))
	b.Epoch, b.Index = l.cfg.Epoch+uint64(e), int(k)
	b.Samples = b.Samples[:0]
	for _, s := range l.perm[lo:hi] {
		b.Samples = append(b.Samples, int(s))
	}
	l.order <- b // never blocks: order has room for every buffer
	return true
}

// prepare lays b's samples out in its buffer in dataset order, so that
// samples adjacent in a shard are adjacent in the buffer and read as one
// extent, and points Data at each.
func (l *Loader) prepare(b *Batch) {
	ss := l.ds.SampleSize()
	b.sorted = append(b.sorted[:0], b.Samples...)
	slices.Sort(b.sorted)
	b.exts, b.dst = b.exts[:0], b.dst[:0]
	start := 0 // first sample (in sorted) of the extent being built
	for k, s := range b.sorted {
		_, e := l.ds.Locate(s)
		if n := len(b.exts); n > 0 {
			last := &b.exts[n-1]
			if last.File == e.File && last.Off+int64(last.Len) == e.Off {
				last.Len += ss
				b.dst[n-1] = b.buf[start*ss : (k+1)*ss]
				continue
			}
		}
		start = k
		b.exts = append(b.exts, e)
		b.dst = append(b.dst, b.buf[k*ss:(k+1)*ss])
	}
	b.Data = b.Data[:0]
	for _, s := range b.Samples {
		k, _ := slices.BinarySearch(b.sorted, s)
		b.Data = append(b.Data, b.buf[k*ss:(k+1)*ss:(k+1)*ss])
	}
}

// read reads b's extents; a failure names the extent that failed.
func (l *Loader) read(b *Batch) error {
	err := l.cfg.Source.ReadBatch(l.ctx, b.exts, b.dst)
	if err == nil {
		return nil
	}
	if l.ctx.Err() != nil {
		return ErrClosed
	}
	idx := -1
	var ee *ExtentError
	var re *store.RangeError
	files := l.cfg.Source.Files()
	switch {
	case errors.As(err, &ee) && ee.Index >= 0 && ee.Index < len(b.exts):
		idx = ee.Index
		if err == error(ee) {
			err = ee.Err // ReadError says the rest
		}
	case errors.As(err, &re):
		// store.Client names the file and offset of the part that failed.
		for k, e := range b.exts {
			if files[e.File].Name == re.File && e.Off <= re.Off && re.Off < e.Off+int64(e.Len) {
				idx = k
				break
			}
		}
	}
	if idx < 0 {
		// The Source did not say which: read them one at a time.
		for k := range b.exts {
			if err1 := l.cfg.Source.ReadBatch(l.ctx, b.exts[k:k+1], b.dst[k:k+1]); err1 != nil {
				idx, err = k, err1
				break
			}
		}
	}
	e := b.exts[max(idx, 0)]
	return &ReadError{Epoch: b.Epoch, Batch: b.Index, Extent: idx, Shard: files[e.File].Name, Off: e.Off, Len: e.Len, Err: err}
}

// Next returns the next batch, waiting for its read if it has not ended.
// At the end of each epoch it returns io.EOF once, and the call after that
// the next epoch's first batch (already read ahead); after the last epoch
// it returns io.EOF every time, so two in a row mean the end. A failed read
// is a *ReadError, returned by this and every later call. ctx bounds the
// wait (its error is returned, and the next call waits for the same batch);
// after Close, ErrClosed. A consumer holding all Ahead+1 batches waits
// until its ctx ends: release one first.
func (l *Loader) Next(ctx context.Context) (*Batch, error) {
	if l.closed.Load() {
		return nil, ErrClosed
	}
	if l.err != nil {
		return nil, l.err
	}
	if l.pending == nil {
		if l.delivered >= l.total {
			return nil, io.EOF
		}
		if l.delivered > 0 && l.delivered%l.nb == 0 && !l.eofGiven {
			l.eofGiven = true
			return nil, io.EOF
		}
		select {
		case l.pending = <-l.order:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-l.ctx.Done():
			return nil, ErrClosed
		}
	}
	select {
	case <-l.pending.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.ctx.Done():
		return nil, ErrClosed
	}
	b := l.pending
	l.pending = nil
	l.delivered++
	l.eofGiven = false
	if b.err != nil {
		l.err = b.err
		l.free <- b
		return nil, l.err
	}
	b.held.Store(true)
	return b, nil
}

// Close stops the readers, waits for them to end and makes Next return
// ErrClosed. Batches still held stay valid (nothing reads into them after
// Close returns) and may be released or dropped.
func (l *Loader) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	l.cancel()
	l.wg.Wait()
	return nil
}
