package kvload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

const (
	keyPrefix = "key:"
	keyDigits = 12
	keyLen    = len(keyPrefix) + keyDigits
	maxKeys   = 1_000_000_000_000 // 10^keyDigits
)

// key writes key n ("key:%012d") into b[:16] and returns it, allocating
// nothing.
func key(b []byte, n int) []byte {
	b = b[:keyLen]
	copy(b, keyPrefix)
	for i := keyLen - 1; i >= len(keyPrefix); i-- {
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return b
}

// worker is one connection's state; everything the load loop touches is
// allocated by newWorker.
type worker struct {
	id       int
	c        Client
	rng      *rand.Rand
	getRatio float64
	keys     int
	ops      []Op
	res      []Result
	value    []byte

	h                        hist
	nops, gets, sets, misses uint64
}

func newWorker(id int, c Client, cfg *Config) *worker {
	w := &worker{
		id:       id,
		c:        c,
		rng:      rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(id))),
		getRatio: cfg.GetRatio,
		keys:     cfg.Keys,
		ops:      make([]Op, cfg.Pipeline),
		res:      make([]Result, cfg.Pipeline),
		value:    make([]byte, cfg.ValueSize),
	}
	keys := make([]byte, cfg.Pipeline*keyLen)
	for i := range w.ops {
		w.ops[i].Key = keys[i*keyLen : (i+1)*keyLen]
	}
	for i := range w.value {
		w.value[i] = 'a' + byte((i+id)%26)
	}
	return w
}

// fill draws the next n operations.
func (w *worker) fill(n int) {
	for i := range w.ops[:n] {
		op := &w.ops[i]
		if w.rng.Float64() < w.getRatio {
			op.Kind, op.Value = Get, nil
		} else {
			op.Kind, op.Value = Set, w.value
		}
		key(op.Key, w.rng.IntN(w.keys))
	}
}

// step runs the next n operations as one Do and counts them.
func (w *worker) step(ctx context.Context, n int) error {
	w.fill(n)
	clear(w.res[:n])
	t0 := time.Now()
	if err := w.c.Do(ctx, w.ops[:n], w.res[:n]); err != nil {
		return err
	}
	w.h.record(time.Since(t0), uint64(n))
	for i := range w.ops[:n] {
		if w.ops[i].Kind == Get {
			w.gets++
			if !w.res[i].Found {
				w.misses++
			}
		} else {
			w.sets++
		}
	}
	w.nops += uint64(n)
	return nil
}

// preload SETs keys id, id+stride, ... in batches of len(w.ops), untimed.
func (w *worker) preload(ctx context.Context, stride int) error {
	n := 0
	for k := w.id; k < w.keys; k += stride {
		op := &w.ops[n]
		op.Kind, op.Value = Set, w.value
		key(op.Key, k)
		if n++; n == len(w.ops) {
			if err := w.c.Do(ctx, w.ops[:n], w.res[:n]); err != nil {
				return err
			}
			n = 0
		}
	}
	if n > 0 {
		return w.c.Do(ctx, w.ops[:n], w.res[:n])
	}
	return nil
}

// run is the timed loop: Requests operations, or batches until Duration has
// passed since start.
func (w *worker) run(ctx context.Context, cfg *Config, start time.Time) error {
	done := ctx.Done()
	if cfg.Requests > 0 {
		for left := cfg.Requests; left > 0; {
			n := min(len(w.ops), left)
			if err := w.step(ctx, n); err != nil {
				return err
			}
			left -= n
		}
		return nil
	}
	for {
		select {
		case <-done:
			return context.Cause(ctx)
		default:
		}
		if err := w.step(ctx, len(w.ops)); err != nil {
			return err
		}
		if time.Since(start) >= cfg.Duration {
			return nil
		}
	}
}

// Run dials cfg.Conns connections, preloads the keys if asked, and runs the
// closed loop on each connection until cfg.Duration has passed (or each has
// run cfg.Requests operations). The first error of any connection stops all
// of them and is returned, naming the connection, with the figures measured
// until then. ctx bounds the whole run, dialling included: the run's end
// does not interrupt a Do in flight, so a server that never replies holds
// Run until ctx ends.
func Run(ctx context.Context, cfg Config, dial Dialer) (Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Report{}, err
	}
	if dial == nil {
		return Report{}, fmt.Errorf("%w: nil Dialer", ErrConfig)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	ws := make([]*worker, 0, cfg.Conns)
	defer func() {
		for _, w := range ws {
			w.c.Close()
		}
	}()
	for i := range cfg.Conns {
		c, err := dial(ctx)
		if err != nil {
			return Report{}, fmt.Errorf("kvload: dial conn %d: %w", i, err)
		}
		ws = append(ws, newWorker(i, c, &cfg))
	}

	// all runs f on every worker at once; the first error cancels the
	// others, whose errors (the cancellation's) are dropped.
	all := func(what string, f func(w *worker) error) error {
		var (
			wg    sync.WaitGroup
			once  sync.Once
			first error
		)
		for _, w := range ws {
			wg.Go(func() {
				if err := f(w); err != nil {
					once.Do(func() {
						first = fmt.Errorf("kvload: %sconn %d: %w", what, w.id, err)
						cancel(first)
					})
				}
			})
		}
		wg.Wait()
		return first
	}
	if cfg.Preload {
		if err := all("preload: ", func(w *worker) error { return w.preload(ctx, cfg.Conns) }); err != nil {
			return Report{}, err
		}
	}
	start := time.Now()
	err = all("", func(w *worker) error { return w.run(ctx, &cfg, start) })
	elapsed := time.Since(start)

	var h hist
	r := Report{Elapsed: elapsed}
	for _, w := range ws {
		h.merge(&w.h)
		r.Ops += w.nops
		r.Gets += w.gets
		r.Sets += w.sets
		r.Misses += w.misses
	}
	if elapsed > 0 {
		r.OpsPerSec = float64(r.Ops) / elapsed.Seconds()
	}
	r.P50, r.P99, r.P999 = h.quantile(0.50), h.quantile(0.99), h.quantile(0.999)
	return r, err
}
