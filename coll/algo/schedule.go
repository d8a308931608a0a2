package algo

import (
	"fmt"
	"iter"
	"slices"
)

// Transfer is one message: Len consecutive slots from the sender's buffer,
// starting at slot Src, into the receiver's buffer, starting at slot Dst.
// A send and its receive carry the same Src, Dst, Len and Reduce; only
// Peer differs. Src and Dst differ only in AllToAll.
type Transfer struct {
	Peer   int  // the receiver in a send, the sender in a receive
	Src    int  // first slot read, in the sender's buffer
	Dst    int  // first slot written, in the receiver's buffer
	Len    int  // number of slots, at least 1
	Reduce bool // the receiver reduces into its slots (true) or overwrites them (false)
}

// Step is everything a rank does in one step. Its sends and receives may
// proceed concurrently; the step ends when all are done. The package
// documentation gives the rules an executor relies on.
type Step struct {
	Sends []Transfer
	Recvs []Transfer
}

// Overlaps reports whether one of the step's receives writes a slot that
// one of its sends reads (only rd all-reduce has such steps). The send
// carries the value from before the step, so an executor applies received
// data to such a slot only once the step's sends of that slot have
// completed. That is per slot or piece, not per transfer: waiting for a
// whole send before applying any of the matching receive would deadlock
// two ranks exchanging more pieces than they have credits.
func (st Step) Overlaps() bool {
	ns, nr := len(st.Sends), len(st.Recvs)
	if ns == 0 || nr == 0 {
		return false
	}
	if ns*nr <= 64 {
		for i := range st.Recvs {
			r := &st.Recvs[i]
			for j := range st.Sends {
				if s := &st.Sends[j]; r.Dst < s.Src+s.Len && s.Src < r.Dst+r.Len {
					return true
				}
			}
		}
		return false
	}
	// Many transfers (direct): merge the sends' ranges, then look each
	// receive up.
	iv := make([][2]int, 0, ns)
	for i := range st.Sends {
		iv = append(iv, [2]int{st.Sends[i].Src, st.Sends[i].Src + st.Sends[i].Len})
	}
	slices.SortFunc(iv, func(a, b [2]int) int { return a[0] - b[0] })
	m := iv[:1]
	for _, x := range iv[1:] {
		if last := &m[len(m)-1]; x[0] <= last[1] {
			last[1] = max(last[1], x[1])
		} else {
			m = append(m, x)
		}
	}
	for i := range st.Recvs {
		lo, hi := st.Recvs[i].Dst, st.Recvs[i].Dst+st.Recvs[i].Len
		// The first merged range ending after lo is the only candidate.
		k, _ := slices.BinarySearchFunc(m, lo, func(x [2]int, lo int) int {
			if x[1] <= lo {
				return -1
			}
			return 1
		})
		if k < len(m) && m[k][0] < hi {
			return true
		}
	}
	return false
}

// Schedule is a collective algorithm for a fixed number of ranks, as data:
// every rank's program of steps over a working buffer of Slots slots.
//
// Generate computes programs on demand (Program) rather than storing them:
// a ring all-reduce over 4096 ranks has 33 million steps in all, but one
// rank's program is 8190 steps. Materialize stores them all in Steps, where
// they can be inspected or edited; Program, Verify and Flows then use
// Steps. A schedule may also be written by hand with Steps set.
type Schedule struct {
	Collective Collective
	Algorithm  Algorithm
	Ranks      int
	Root       int // Broadcast and Reduce; 0 for the others
	Pipeline   int // as passed to Generate
	Slots      int // W: slots in every rank's working buffer
	NumSteps   int // steps in every rank's program, empty steps included

	// Steps[r][i] is step i of rank r's program, when not nil.
	Steps [][]Step

	plan *plan // how to compute programs; nil for a hand-written schedule
}

// Limits on Generate's arguments, so that slot and step numbers stay small.
const (
	maxRanks    = 1 << 20
	maxPipeline = 1 << 20
	maxSlots    = 1 << 26
)

// Generate returns the schedule of collective c by algorithm a over ranks
// ranks. root is the root of Broadcast and Reduce (0 ≤ root < ranks; it
// must be in range for the other collectives too, and is recorded as 0).
// pipeline ≥ 1 splits every slot of the basic algorithm into that many, so
// that messages are smaller and, in chains and trees, hops overlap; the
// package documentation says what it does per algorithm.
//
// Generate costs O(ranks) for trees and O(1) otherwise; programs are
// computed by Program.
func Generate(c Collective, a Algorithm, ranks, root, pipeline int) (*Schedule, error) {
	fail := func(err error, format string, args ...any) (*Schedule, error) {
		return nil, fmt.Errorf("coll/algo: generate %v/%v: %w: %s", c, a, err, fmt.Sprintf(format, args...))
	}
	switch {
	case !c.valid():
		return fail(ErrInvalid, "collective %d: not a collective", uint8(c))
	case !a.valid():
		return fail(ErrInvalid, "algorithm %d: not an algorithm", uint8(a))
	case !supports(c, a):
		return fail(ErrUnsupported, "%v supports %v", c, supported[c])
	case ranks < 1 || ranks > maxRanks:
		return fail(ErrInvalid, "ranks %d: want 1 to %d", ranks, maxRanks)
	case root < 0 || root >= ranks:
		return fail(ErrInvalid, "root %d: want 0 to %d", root, ranks-1)
	case pipeline < 1 || pipeline > maxPipeline:
		return fail(ErrInvalid, "pipeline %d: want 1 to %d", pipeline, maxPipeline)
	case ranks*pipeline > maxSlots/2:
		return fail(ErrInvalid, "ranks %d × pipeline %d: more than %d slots", ranks, pipeline, maxSlots/2)
	}
	if !c.rooted() {
		root = 0
	}
	s := &Schedule{Collective: c, Algorithm: a, Ranks: ranks, Root: root, Pipeline: pipeline}
	s.plan = newPlan(s)
	return s, nil
}

// Program returns rank's program: NumSteps steps. For a generated schedule
// without Steps it is computed afresh (O(its steps and transfers)) and the
// caller owns it; otherwise it is Steps[rank] and must not be modified
// except on purpose.
func (s *Schedule) Program(rank int) []Step {
	if s.Steps != nil {
		return s.Steps[rank]
	}
	if s.plan == nil {
		return nil
	}
	if rank < 0 || rank >= s.Ranks {
		panic(fmt.Sprintf("coll/algo: Program(%d) of %d ranks", rank, s.Ranks))
	}
	return s.programWith(&builder{}, rank)
}

// programWith computes rank's program with b, whose event buffer is reused.
func (s *Schedule) programWith(b *builder, rank int) []Step {
	b.steps, b.ev = s.NumSteps, b.ev[:0]
	s.plan.program(b, rank)
	return b.program()
}

// Materialize computes every rank's program into Steps, if not done yet.
// It costs what Program costs, times Ranks, in memory too.
func (s *Schedule) Materialize() {
	if s.Steps != nil {
		return
	}
	steps := make([][]Step, s.Ranks)
	var b builder
	for r := range steps {
		if s.plan != nil {
			steps[r] = s.programWith(&b, r)
		}
	}
	s.Steps = steps
}

// blocks is the number of equal blocks the working buffer is made of: one
// per rank for ReduceScatter and AllGather, two per rank for AllToAll
// (send blocks, then receive blocks), else one.
func (s *Schedule) blocks() int {
	switch s.Collective {
	case ReduceScatter, AllGather:
		return s.Ranks
	case AllToAll:
		return 2 * s.Ranks
	}
	return 1
}

// SlotRange returns the elements [lo, hi) of the working buffer that slot
// holds, for a call with count elements (count as the package documentation
// defines it per collective: the whole buffer for AllReduce, Broadcast and
// Reduce, one block otherwise). Slots of a block split it evenly; the
// first count mod (slots per block) of them hold one element more, and
// slots are empty when count is smaller than that.
func (s *Schedule) SlotRange(count, slot int) (lo, hi int) {
	if slot < 0 || slot >= s.Slots || count < 0 {
		panic(fmt.Sprintf("coll/algo: SlotRange(%d, %d) of %d slots", count, slot, s.Slots))
	}
	per := s.Slots / s.blocks()
	b, k := slot/per, slot%per
	q, rem := count/per, count%per
	lo = b*count + k*q + min(k, rem)
	hi = lo + q
	if k < rem {
		hi++
	}
	return lo, hi
}

// Flow is one send of a schedule, for a simulator: From sends slots
// [Src, Src+Len) to To's slots [Dst, Dst+Len) in step Step.
type Flow struct {
	Step, From, To int
	Src, Dst, Len  int
	Reduce         bool
}

// Flows yields every send of the schedule, by sender rank, then step, then
// order within the step; the receive that matches each is implied. A flow
// of rank r's step i may start once r has finished its steps before i
// (sends completed, receives applied) and the receiver has reached step i.
// One rank's program is held at a time.
func (s *Schedule) Flows() iter.Seq[Flow] {
	return func(yield func(Flow) bool) {
		for r := 0; r < s.Ranks; r++ {
			for i, st := range s.Program(r) {
				for _, t := range st.Sends {
					if !yield(Flow{Step: i, From: r, To: t.Peer, Src: t.Src, Dst: t.Dst, Len: t.Len, Reduce: t.Reduce}) {
						return
					}
				}
			}
		}
	}
}

// String names the schedule: "ring all_reduce ranks=8 pipeline=2" (with
// root=R for Broadcast and Reduce).
func (s *Schedule) String() string {
	str := fmt.Sprintf("%v %v ranks=%d", s.Algorithm, s.Collective, s.Ranks)
	if s.Collective.rooted() {
		str += fmt.Sprintf(" root=%d", s.Root)
	}
	return str + fmt.Sprintf(" pipeline=%d", s.Pipeline)
}

// builder collects a rank's transfers, tagged with their step, and packs
// them into a program backed by one array. Transfers of a step keep the
// order in which they were added.
type builder struct {
	steps int
	ev    []event
	count []span // scratch: transfers per step
}

type span struct{ ns, nr int }

type event struct {
	step int
	send bool
	t    Transfer
}

func (b *builder) send(step int, t Transfer) { b.ev = append(b.ev, event{step, true, t}) }
func (b *builder) recv(step int, t Transfer) { b.ev = append(b.ev, event{step, false, t}) }

func (b *builder) program() []Step {
	prog := make([]Step, b.steps)
	if len(b.ev) == 0 {
		return prog
	}
	// Count per step and kind, give each its range of one array, fill.
	if cap(b.count) < b.steps {
		b.count = make([]span, b.steps)
	}
	sp := b.count[:b.steps]
	clear(sp)
	for _, e := range b.ev {
		if e.send {
			sp[e.step].ns++
		} else {
			sp[e.step].nr++
		}
	}
	all := make([]Transfer, len(b.ev))
	off := 0
	for i := range sp {
		if sp[i].ns > 0 {
			prog[i].Sends = all[off : off : off+sp[i].ns]
		}
		off += sp[i].ns
		if sp[i].nr > 0 {
			prog[i].Recvs = all[off : off : off+sp[i].nr]
		}
		off += sp[i].nr
	}
	for _, e := range b.ev {
		st := &prog[e.step]
		if e.send {
			st.Sends = append(st.Sends, e.t)
		} else {
			st.Recvs = append(st.Recvs, e.t)
		}
	}
	return prog
}
