package des

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

var seedFlag = flag.Uint64("des.seed", 0, "replay the randomised tests with this seed")

func testSeed(t *testing.T) uint64 {
	s := *seedFlag
	if s == 0 {
		s = rand.Uint64()
	}
	t.Logf("seed %d (replay with -des.seed=%d)", s, s)
	return s
}

// TestQueueOrder: random pushes and pops interleaved come out in time
// order, ties in push order, against a sorted reference.
func TestQueueOrder(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 1))
	var q Queue
	type ref struct {
		at  Time
		ord int
	}
	var want []ref
	ord := 0
	for round := range 20000 {
		if rng.IntN(3) > 0 || q.Len() == 0 {
			at := Time(rng.IntN(50)) // few distinct times: many ties
			q.Push(NewEvent(at, uint16(ord), int32(ord), 0, 0))
			want = append(want, ref{at, ord})
			ord++
			continue
		}
		slices.SortStableFunc(want, func(a, b ref) int { return int(a.at - b.at) })
		e := q.Pop()
		if e.At != want[0].at || int(e.A) != want[0].ord || e.Kind() != uint16(want[0].ord) {
			t.Fatalf("round %d: popped (%v, %d), want (%v, %d) (seed %d)", round, e.At, e.A, want[0].at, want[0].ord, seed)
		}
		want = want[1:]
	}
	if q.Len() != len(want) {
		t.Fatalf("%d queued, want %d", q.Len(), len(want))
	}
}

// chain is a model: each event schedules the next of its chain after a
// random delay, and records the order it saw.
type chain struct {
	seen []int32
	left int
}

func (c *chain) Handle(s *Sim, e Event) {
	c.seen = append(c.seen, e.A)
	if c.left > 0 {
		c.left--
		s.After(Time(s.Rand().IntN(1000)), 0, e.A, 0, 0)
	}
}

// TestReplay: one seed gives the same run; another seed a different one;
// the clock never goes back.
func TestReplay(t *testing.T) {
	seed := testSeed(t)
	run := func(seed uint64) ([]int32, Time) {
		s := New(seed)
		c := &chain{left: 5000}
		for i := range 16 {
			s.After(Time(i), 0, int32(i), 0, 0)
		}
		last := Time(0)
		n := s.Run(handlerFunc(func(s *Sim, e Event) {
			if s.Now() < last {
				t.Fatalf("clock went back from %v to %v", last, s.Now())
			}
			last = s.Now()
			c.Handle(s, e)
		}), 0, nil)
		if n != 16+5000 {
			t.Fatalf("%d events, want %d", n, 16+5000)
		}
		return c.seen, s.Now()
	}
	a, ta := run(seed)
	b, tb := run(seed)
	if !slices.Equal(a, b) || ta != tb {
		t.Fatalf("seed %d replayed differently", seed)
	}
	c, _ := run(seed + 1)
	if slices.Equal(a, c) {
		t.Fatalf("seeds %d and %d gave the same run", seed, seed+1)
	}
}

type handlerFunc func(s *Sim, e Event)

func (f handlerFunc) Handle(s *Sim, e Event) { f(s, e) }

// TestRunUntil: Run stops before the first event after until, with the
// clock at until, and goes on from there.
func TestRunUntil(t *testing.T) {
	s := New(1)
	for _, at := range []Time{10, 20, 30} {
		s.After(at, 0, 0, 0, 0)
	}
	var got []Time
	h := handlerFunc(func(s *Sim, e Event) { got = append(got, e.At) })
	if n := s.Run(h, 25, nil); n != 2 || s.Now() != 25 || s.Pending() != 1 {
		t.Fatalf("Run until 25: %d events, now %v, %d pending; want 2, 25ps, 1", n, s.Now(), s.Pending())
	}
	if n := s.Run(h, 0, nil); n != 1 || s.Now() != 30 || !slices.Equal(got, []Time{10, 20, 30}) {
		t.Fatalf("Run to the end: %d events, now %v, seen %v", n, s.Now(), got)
	}
}

// TestPastPanics: scheduling into the past is a model bug, said loudly.
func TestPastPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("After(-1) did not panic")
		}
	}()
	New(1).After(-1, 7, 0, 0, 0)
}

// TestAllocs: once the queue has grown, scheduling and handling events
// allocates nothing.
func TestAllocs(t *testing.T) {
	s := New(1)
	h := handlerFunc(func(s *Sim, e Event) {
		if e.B > 0 {
			s.After(Time(s.Rand().IntN(100)), 0, e.A, e.B-1, 0)
		}
	})
	for i := range 1000 {
		s.After(Time(i), 0, int32(i), 1, 0)
	}
	s.Run(h, 0, nil)
	if a := testing.AllocsPerRun(10, func() {
		for i := range 1000 {
			s.After(Time(i), 0, int32(i), 3, 0)
		}
		s.Run(h, 0, nil)
	}); a != 0 {
		t.Fatalf("%v allocations per 4,000 events, want 0", a)
	}
}

func TestTimeString(t *testing.T) {
	for _, c := range []struct {
		t    Time
		want string
	}{{20, "20ps"}, {1500, "1.500ns"}, {2 * Microsecond, "2.000µs"}, {3*Millisecond + 500*Microsecond, "3.500ms"}, {2 * Second, "2.000000s"}} {
		if got := c.t.String(); got != c.want {
			t.Errorf("%d: %q, want %q", int64(c.t), got, c.want)
		}
	}
}

// BenchmarkHold is the classic hold model: a queue of pending events,
// each handled event scheduling one more at a random later time; ns/op is
// the cost of one event (pop, handle, push).
func BenchmarkHold(b *testing.B) {
	for _, pending := range []int{1 << 10, 1 << 16, 1 << 20} {
		b.Run(fmt.Sprint(pending), func(b *testing.B) {
			s := New(1)
			for i := range pending {
				s.After(Time(s.Rand().IntN(1<<20)), 0, int32(i), 0, 0)
			}
			left := b.N
			h := handlerFunc(func(s *Sim, e Event) {
				if left > 0 {
					left--
					s.After(Time(s.Rand().IntN(1<<20)), 0, e.A, 0, 0)
				}
			})
			b.ReportAllocs()
			b.ResetTimer()
			s.Run(h, 0, func() bool { return left == 0 })
		})
	}
}
