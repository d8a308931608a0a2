package hwq

import (
	"context"
	"runtime"
	"time"

	"github.com/ibex-rdma/ibex/internal/shmem"
)

// WaitOptions tune Consumer.Wait. The zero value is the documented default.
type WaitOptions struct {
	// Spin is how long Wait polls the ring before it goes to sleep. Zero
	// sleeps at once (the cheapest for the CPU, the slowest to wake); a few
	// microseconds catch a producer that is about to publish.
	Spin time.Duration
	// MaxSleep bounds one futex sleep (default 10ms): a producer that died
	// never rings, and a context's cancellation is seen only between
	// sleeps, so Wait wakes on its own this often to look again.
	MaxSleep time.Duration
}

// DefaultMaxSleep is WaitOptions.MaxSleep's default.
const DefaultMaxSleep = 10 * time.Millisecond

func (o WaitOptions) withDefaults() WaitOptions {
	if o.MaxSleep <= 0 {
		o.MaxSleep = DefaultMaxSleep
	}
	if o.Spin < 0 {
		o.Spin = 0
	}
	return o
}

// Wait returns as soon as at least one entry is available, with the count
// Available would give. It polls for WaitOptions.Spin, then sleeps on the
// ring's sleeping word: it sets the word, re-checks the ring (a publish
// that raced with going to sleep is seen here, not missed), and futex-waits
// until the producer's Publish wakes it, MaxSleep passes, or ctx is done
// (its error is returned then). No syscall is made while entries keep
// coming within the spin.
func (c *Consumer) Wait(ctx context.Context) (int, error) {
	if n, err := c.Available(); n > 0 || err != nil {
		return n, err
	}
	if c.opts.Spin > 0 {
		start := time.Now()
		for i := 1; ; i++ {
			if n, err := c.Available(); n > 0 || err != nil {
				return n, err
			}
			if i%64 == 0 {
				if time.Since(start) >= c.opts.Spin {
					break
				}
				// On an oversubscribed machine the producer may be
				// waiting for this CPU.
				runtime.Gosched()
			}
		}
	}
	s := c.r.sleeping()
	for {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		timeout := c.opts.MaxSleep
		if dl, ok := ctx.Deadline(); ok {
			if until := time.Until(dl); until < timeout {
				if until <= 0 {
					return 0, context.DeadlineExceeded
				}
				timeout = until
			}
		}
		s.Store(1)
		if n, err := c.Available(); n > 0 || err != nil {
			s.Store(0)
			return n, err
		}
		c.sleeps++
		shmem.FutexWait(s, 1, timeout)
		s.Store(0)
		if n, err := c.Available(); n > 0 || err != nil {
			return n, err
		}
	}
}

// Released is the consumer index: the entries this end has released.
func (c *Consumer) Released() uint64 { return c.tail }

// SleepUnless sleeps on the ring's sleeping word for at most timeout
// unless the producer has published past idx (a Consumer's Released
// after it drained the ring). It touches only the shared words, never a
// Consumer's private state, so one goroutine may sleep on a ring while
// another drains it (the drainer holds the lock of the Consumer; the
// sleeper does not). The producer's Publish ends the sleep.
func (r *Ring) SleepUnless(idx uint64, timeout time.Duration) {
	s := r.sleeping()
	s.Store(1)
	if r.producer().Load() != idx {
		s.Store(0)
		return
	}
	shmem.FutexWait(s, 1, timeout)
	s.Store(0)
}
