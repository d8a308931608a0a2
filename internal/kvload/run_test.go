package kvload

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// store is the fakes' shared key space.
type store struct {
	mu sync.Mutex
	m  map[string]int // key -> value length
}

func newStore() *store { return &store{m: map[string]int{}} }

// fake is an in-memory Client. It records a hash of the operations it saw
// (kind and key, in order), fails its failAt-th Do with failErr, and sleeps
// delay per Do (honouring ctx).
type fake struct {
	s       *store
	seq     uint64 // FNV-1a of kinds and keys
	dos     int
	failAt  int
	failErr error
	delay   time.Duration
	closed  bool
	badKeys int
}

func (f *fake) Do(ctx context.Context, ops []Op, res []Result) error {
	f.dos++
	if f.failAt > 0 && f.dos == f.failAt {
		return f.failErr
	}
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	for i, op := range ops {
		if len(op.Key) != 16 || !strings.HasPrefix(string(op.Key), "key:") {
			f.badKeys++
		}
		h := fnv.New64a()
		h.Write([]byte{byte(op.Kind)})
		h.Write(op.Key)
		f.seq = f.seq*31 + h.Sum64()
		if op.Kind == Set {
			f.s.m[string(op.Key)] = len(op.Value)
			res[i] = Result{Found: true}
		} else {
			n, ok := f.s.m[string(op.Key)]
			res[i] = Result{Found: ok, Len: n}
		}
	}
	return nil
}

func (f *fake) Close() error { f.closed = true; return nil }

// fakes dials fakes on one store and keeps them, in dial order.
type fakes struct {
	mu  sync.Mutex
	s   *store
	all []*fake
	mk  func(i int) *fake
}

func (fs *fakes) dial(ctx context.Context) (Client, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.s == nil {
		fs.s = newStore()
	}
	f := &fake{}
	if fs.mk != nil {
		f = fs.mk(len(fs.all))
	}
	f.s = fs.s
	fs.all = append(fs.all, f)
	return f, nil
}

func TestRunRequests(t *testing.T) {
	defer goleak.VerifyNone(t)
	var fs fakes
	r, err := Run(context.Background(), Config{Conns: 3, Pipeline: 4, Requests: 10, Keys: 50, Preload: true, Seed: 7}, fs.dial)
	if err != nil {
		t.Fatal(err)
	}
	if r.Ops != 30 || r.Gets+r.Sets != 30 || r.Misses != 0 {
		t.Errorf("ops %d, gets %d + sets %d, misses %d; want 30 ops, no misses after a preload", r.Ops, r.Gets, r.Sets, r.Misses)
	}
	if len(fs.s.m) != 50 {
		t.Errorf("preload stored %d keys, want 50", len(fs.s.m))
	}
	for i, f := range fs.all {
		// preload: 50 keys over 3 conns in batches of 4 (17 keys: 5
		// Dos; 16: 4); run: 4, 4, 2.
		want := 3 + 5
		if i == 2 {
			want = 3 + 4
		}
		if f.dos != want || !f.closed || f.badKeys != 0 {
			t.Errorf("conn %d: %d Dos (want %d), closed %v, %d malformed keys", i, f.dos, want, f.closed, f.badKeys)
		}
	}
	if r.P50 <= 0 || r.P99 < r.P50 || r.P999 < r.P99 || r.OpsPerSec <= 0 {
		t.Errorf("figures out of order: %v", r)
	}
	t.Log(r)
}

func TestRunMisses(t *testing.T) {
	var fs fakes
	r, err := Run(context.Background(), Config{Requests: 2000, Keys: 999_999_999_999, GetRatio: 1}, fs.dial)
	if err != nil {
		t.Fatal(err)
	}
	if r.Gets != 2000 || r.Misses != 2000 || r.Sets != 0 {
		t.Errorf("GETs of an empty store: %v; want 2000 gets, all misses", r)
	}
}

func TestRunDuration(t *testing.T) {
	defer goleak.VerifyNone(t)
	var fs fakes
	fs.mk = func(int) *fake { return &fake{delay: time.Millisecond} }
	r, err := Run(context.Background(), Config{Conns: 2, Pipeline: 8, Duration: 100 * time.Millisecond}, fs.dial)
	if err != nil {
		t.Fatal(err)
	}
	if r.Elapsed < 100*time.Millisecond || r.Ops == 0 || r.Ops%8 != 0 {
		t.Errorf("%v: want >= 100ms and whole pipelines of 8", r)
	}
	if r.P50 < time.Millisecond {
		t.Errorf("p50 %v below the fake's 1ms per Do: a pipelined op's latency is its Do's", r.P50)
	}
}

func TestRunSeed(t *testing.T) {
	seqs := func(seed int64) []uint64 {
		var fs fakes
		if _, err := Run(context.Background(), Config{Conns: 3, Pipeline: 5, Requests: 500, Seed: seed}, fs.dial); err != nil {
			t.Fatal(err)
		}
		var s []uint64
		for _, f := range fs.all {
			s = append(s, f.seq)
		}
		return s
	}
	a, b, c := seqs(42), seqs(42), seqs(43)
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("seed 42, conn %d: sequences differ between runs", i)
		}
		if a[i] == c[i] {
			t.Errorf("conn %d: seeds 42 and 43 gave the same sequence", i)
		}
	}
	if a[0] == a[1] {
		t.Error("conns 0 and 1 ran the same sequence")
	}
}

func TestRunGetRatio(t *testing.T) {
	for _, tc := range []struct {
		ratio    float64
		lo, hi   float64
		describe string
	}{
		{0, 0.88, 0.92, "default 0.9"},
		{10.0 / 11, 0.89, 0.93, "memtier's 1:10"},
		{1, 1, 1, "GETs only"},
		{-1, 0, 0, "negative: SETs only"},
		{0.5, 0.47, 0.53, "half"},
	} {
		var fs fakes
		r, err := Run(context.Background(), Config{Requests: 10000, GetRatio: tc.ratio, Seed: 1}, fs.dial)
		if err != nil {
			t.Fatal(err)
		}
		if got := float64(r.Gets) / float64(r.Ops); got < tc.lo || got > tc.hi {
			t.Errorf("GetRatio %v (%s): %.3f of ops were GETs", tc.ratio, tc.describe, got)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	var fs fakes
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{Conns: -1}, "Conns"},
		{Config{Pipeline: -2}, "Pipeline"},
		{Config{Duration: -time.Second}, "Duration"},
		{Config{Requests: -1}, "Requests"},
		{Config{Keys: -1}, "Keys"},
		{Config{Keys: 2_000_000_000_000}, "Keys"},
		{Config{ValueSize: -1}, "ValueSize"},
		{Config{GetRatio: 1.5}, "GetRatio"},
	} {
		_, err := Run(context.Background(), tc.cfg, fs.dial)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: error %v, want ErrConfig naming %s", tc.cfg, err, tc.field)
		}
	}
	if _, err := Run(context.Background(), Config{}, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("nil Dialer: %v", err)
	}
	if len(fs.all) != 0 {
		t.Errorf("a bad config dialled %d conns", len(fs.all))
	}
}

func TestRunErrors(t *testing.T) {
	defer goleak.VerifyNone(t)
	boom := errors.New("boom")
	var fs fakes
	fs.mk = func(i int) *fake {
		if i == 2 {
			return &fake{failAt: 20, failErr: boom}
		}
		return &fake{delay: 100 * time.Microsecond}
	}
	start := time.Now()
	r, err := Run(context.Background(), Config{Conns: 4, Duration: 10 * time.Second}, fs.dial)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "conn 2") {
		t.Fatalf("error %v, want boom naming conn 2", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("a failed conn did not stop the others: %v", time.Since(start))
	}
	if r.Ops < 19 {
		t.Errorf("partial report %v: want the ops before the error", r)
	}
	for i, f := range fs.all {
		if !f.closed {
			t.Errorf("conn %d not closed", i)
		}
	}

	// Preload errors say so.
	fs = fakes{mk: func(int) *fake { return &fake{failAt: 1, failErr: boom} }}
	if _, err := Run(context.Background(), Config{Preload: true}, fs.dial); !errors.Is(err, boom) || !strings.Contains(err.Error(), "preload: conn 0") {
		t.Errorf("preload error %v", err)
	}

	// Dial errors name the conn and close the ones already open.
	fs = fakes{}
	n := 0
	dial := func(ctx context.Context) (Client, error) {
		if n++; n == 3 {
			return nil, boom
		}
		return fs.dial(ctx)
	}
	if _, err := Run(context.Background(), Config{Conns: 5}, dial); !errors.Is(err, boom) || !strings.Contains(err.Error(), "dial conn 2") {
		t.Errorf("dial error %v", err)
	}
	for i, f := range fs.all {
		if !f.closed {
			t.Errorf("conn %d left open after a dial error", i)
		}
	}
}

func TestRunCancel(t *testing.T) {
	defer goleak.VerifyNone(t)
	var fs fakes
	fs.mk = func(int) *fake { return &fake{delay: time.Hour} }
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Run(ctx, Config{Conns: 2}, fs.dial)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v, want the context's", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Run returned %v after its context ended", d)
	}
}

// nop is a Client that allocates nothing.
type nop struct{}

func (nop) Do(ctx context.Context, ops []Op, res []Result) error {
	for i := range ops {
		res[i] = Result{Found: ops[i].Kind == Get, Len: len(ops[i].Value)}
	}
	return nil
}
func (nop) Close() error { return nil }

func TestLoopAllocs(t *testing.T) {
	cfg, err := Config{Pipeline: 16}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	w := newWorker(0, nop{}, &cfg)
	ctx := context.Background()
	if a := testing.AllocsPerRun(1000, func() {
		if err := w.step(ctx, 16); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("the load loop allocates %v times per Do of 16 ops", a)
	}
	cfg.Requests = 1000
	if a := testing.AllocsPerRun(10, func() {
		if err := w.run(ctx, &cfg, time.Now()); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("worker.run of 1000 ops allocates %v times", a)
	}
	cfg.Requests = 0
	cfg.Duration = time.Millisecond
	if a := testing.AllocsPerRun(10, func() {
		if err := w.run(ctx, &cfg, time.Now()); err != nil {
			t.Fatal(err)
		}
	}); a != 0 {
		t.Errorf("worker.run for 1ms allocates %v times", a)
	}
}

func TestKey(t *testing.T) {
	b := make([]byte, 16)
	for _, n := range []int{0, 7, 123456789012, 999999999999} {
		if got, want := string(key(b, n)), fmt.Sprintf("key:%012d", n); got != want {
			t.Errorf("key(%d) = %q, want %q", n, got, want)
		}
	}
}
