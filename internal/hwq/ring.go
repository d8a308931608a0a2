package hwq

import (
	"fmt"

	"github.com/ibex-rdma/ibex/internal/shmem"
)

// Producer is the end of a queue that fills entries: the application for a
// send or receive queue, the daemon for a CQ. One goroutine at a time may
// use it; nothing else may publish into the same region.
//
// Filling is in three steps so that a batch costs one store of the shared
// index: Reserve up to n entries, write each with Entry, Publish them all.
type Producer struct {
	r        *Ring
	head     uint64 // entries published: the private copy of the producer index
	tail     uint64 // the consumer index as last loaded and accepted
	reserved uint64 // entries reserved past head, not yet published
}

// Producer returns the producing end of r, starting from the indices now in
// the region. It fails with ErrCorrupt when those are inconsistent.
func (r *Ring) Producer() (*Producer, error) {
	head, tail := r.producer().Load(), r.consumer().Load()
	if d := head - tail; d > r.count {
		return nil, corruptf("at attach: producer index %d is %d past consumer %d in a ring of %d", head, int64(d), tail, r.count)
	}
	return &Producer{r: r, head: head, tail: tail}, nil
}

// Ring returns the queue p produces into.
func (p *Producer) Ring() *Ring { return p.r }

// refresh loads the consumer index, which the peer writes, and accepts it
// only if it is possible: not behind the last accepted value, not past what
// was published.
func (p *Producer) refresh() error {
	tail := p.r.consumer().Load()
	if tail == p.tail {
		return nil
	}
	if tail-p.tail > p.head-p.tail {
		if int64(tail-p.tail) < 0 {
			return corruptf("consumer index %d moved back from %d (producer %d, ring of %d)", tail, p.tail, p.head, p.r.count)
		}
		return corruptf("consumer index %d is %d past producer %d in a ring of %d", tail, tail-p.head, p.head, p.r.count)
	}
	p.tail = tail
	return nil
}

// Reserve reserves up to n more free entries (fewer when the ring is
// fuller) and returns how many are now reserved in all, unpublished. It
// loads the consumer index only when what is known free is not enough.
// When no entry is free it returns 0 and an error wrapping ErrFull; a bad
// consumer index is ErrCorrupt.
func (p *Producer) Reserve(n int) (int, error) {
	if n < 0 {
		n = 0
	}
	want := p.reserved + uint64(n)
	if p.head+want-p.tail > p.r.count {
		if err := p.refresh(); err != nil {
			return int(p.reserved), err
		}
	}
	free := p.r.count - (p.head - p.tail)
	p.reserved = min(want, free)
	if p.reserved == 0 && n > 0 {
		return 0, fmt.Errorf("hwq: ring of %d: %d entries unconsumed (consumer at %d): %w", p.r.count, p.head-p.tail, p.tail, ErrFull)
	}
	return int(p.reserved), nil
}

// Entry returns the i-th reserved entry, to be written before Publish. It
// aliases shared memory the consumer cannot read until Publish. It panics
// unless 0 <= i < the number Reserve returned: a bug of the caller, not of
// the peer.
func (p *Producer) Entry(i int) []byte {
	if i < 0 || uint64(i) >= p.reserved {
		panic(fmt.Sprintf("hwq: Producer.Entry(%d) with %d reserved", i, p.reserved))
	}
	return p.r.entry(p.head + uint64(i))
}

// Publish makes every reserved entry visible to the consumer with one
// store of the producer index, then rings the doorbell: if the consumer
// said it is going to sleep, it is woken (one futex wake); otherwise no
// syscall is made. It returns how many entries it published.
func (p *Producer) Publish() int {
	n := p.reserved
	if n == 0 {
		return 0
	}
	p.head += n
	p.reserved = 0
	// The store releases the entries; the load after it cannot be
	// reordered before it (sync/atomic is sequentially consistent), so
	// either we see the consumer's sleeping flag or it sees our index on
	// its re-check.
	p.r.producer().Store(p.head)
	if s := p.r.sleeping(); s.Load() != 0 && s.Swap(0) != 0 {
		shmem.FutexWake(s, 1)
	}
	return int(n)
}

// Push copies e (at most EntrySize bytes; the rest of the entry is zeroed)
// into the next entry and publishes it, with any entries reserved before.
// A full ring is ErrFull and leaves every unconsumed entry as it was.
func (p *Producer) Push(e []byte) error {
	if len(e) > p.r.size {
		return fmt.Errorf("hwq: push of %d bytes into entries of %d: %w", len(e), p.r.size, ErrBadEntry)
	}
	before := p.reserved
	if _, err := p.Reserve(1); err != nil {
		return err
	}
	if p.reserved == before {
		return fmt.Errorf("hwq: ring of %d: %d entries unconsumed, %d reserved: %w", p.r.count, p.head-p.tail, before, ErrFull)
	}
	dst := p.Entry(int(before))
	clear(dst[copy(dst, e):])
	p.Publish()
	return nil
}

// Consumer is the end of a queue that takes entries: the daemon for a send
// or receive queue, the application for a CQ. One goroutine at a time may
// use it.
type Consumer struct {
	r    *Ring
	tail uint64 // entries released: the private copy of the consumer index
	head uint64 // the producer index as last loaded and accepted
	opts WaitOptions

	sleeps uint64 // futex sleeps Wait went into (for tests)
}

// Consumer returns the consuming end of r, starting from the indices now in
// the region. It fails with ErrCorrupt when those are inconsistent.
func (r *Ring) Consumer(opts WaitOptions) (*Consumer, error) {
	head, tail := r.producer().Load(), r.consumer().Load()
	if d := head - tail; d > r.count {
		return nil, corruptf("at attach: producer index %d is %d past consumer %d in a ring of %d", head, int64(d), tail, r.count)
	}
	return &Consumer{r: r, tail: tail, head: head, opts: opts.withDefaults()}, nil
}

// Ring returns the queue c consumes from.
func (c *Consumer) Ring() *Ring { return c.r }

// Available loads the producer index and returns how many published
// entries are not yet released. A producer index that moved backwards or is
// more than a ring ahead of the consumer is ErrCorrupt (and the count stays
// what it was).
func (c *Consumer) Available() (int, error) {
	head := c.r.producer().Load()
	if head != c.head {
		d := head - c.tail
		switch {
		case d > c.r.count && int64(d) < 0:
			return int(c.head - c.tail), corruptf("producer index %d is %d behind consumer %d in a ring of %d", head, c.tail-head, c.tail, c.r.count)
		case d > c.r.count:
			return int(c.head - c.tail), corruptf("producer index %d is %d ahead of consumer %d in a ring of %d", head, d, c.tail, c.r.count)
		case d < c.head-c.tail:
			return int(c.head - c.tail), corruptf("producer index %d moved back from %d (consumer %d, ring of %d)", head, c.head, c.tail, c.r.count)
		}
		c.head = head
	}
	return int(c.head - c.tail), nil
}

// Peek returns the i-th unreleased entry in place, in shared memory: the
// peer may change it at any moment, so it is for a quick look only (e.g.
// an opcode to dispatch on). Decode from CopyOut's copy. It panics unless
// 0 <= i < Available's count.
func (c *Consumer) Peek(i int) []byte {
	if i < 0 || uint64(i) >= c.head-c.tail {
		panic(fmt.Sprintf("hwq: Consumer.Peek(%d) with %d available", i, c.head-c.tail))
	}
	return c.r.entry(c.tail + uint64(i))
}

// CopyOut copies the i-th unreleased entry into dst, which the caller owns,
// and returns the bytes copied (min(len(dst), EntrySize)). Validate and use
// the copy: it cannot change under you. It panics unless 0 <= i <
// Available's count.
func (c *Consumer) CopyOut(i int, dst []byte) int {
	return copy(dst, c.Peek(i))
}

// Release gives the first n unreleased entries back to the producer with
// one store of the consumer index. It panics unless 0 <= n <= Available's
// count.
func (c *Consumer) Release(n int) {
	if n < 0 || uint64(n) > c.head-c.tail {
		panic(fmt.Sprintf("hwq: Consumer.Release(%d) with %d available", n, c.head-c.tail))
	}
	if n == 0 {
		return
	}
	c.tail += uint64(n)
	c.r.consumer().Store(c.tail)
}

// Pop copies the next entry into dst and releases it. It reports false
// when the ring is empty.
func (c *Consumer) Pop(dst []byte) (bool, error) {
	n, err := c.Available()
	if n == 0 || err != nil {
		return false, err
	}
	c.CopyOut(0, dst)
	c.Release(1)
	return true, nil
}

func corruptf(format string, args ...any) error {
	return fmt.Errorf("hwq: "+format+": %w", append(args, ErrCorrupt)...)
}

// Trim gives back reserved entries beyond the first n, so that Publish
// publishes only those (a daemon that reserved room for a batch of
// completions and found fewer). n above the reservation changes nothing.
func (p *Producer) Trim(n int) {
	if n >= 0 && uint64(n) < p.reserved {
		p.reserved = uint64(n)
	}
}
