package algo

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"
)

// Verify proves that the schedule computes its collective, by running it on
// symbols instead of numbers. Every slot of every rank holds a set of
// contributions (rank q's input slot s), starting from the inputs the
// package documentation defines; a receive that overwrites replaces the
// receiver's set with the sender's, one that reduces requires the two sets
// to be disjoint and unions them. Sends read the state before their step.
// Verify checks, and reports as a *VerifyError naming rank, step and slot:
//
//   - shape (ErrMalformed): program lengths, peers and slots in range, no
//     transfer to oneself, no slot written twice in a step unless every
//     write reduces;
//   - pairing (ErrUnmatched): for every ordered pair of ranks, the sends one
//     way and the receives at the other end match one to one, in order, in
//     the same step, with equal Src, Dst, Len and Reduce;
//   - data (ErrBadData, ErrDuplicate): no send of a slot holding nothing, no
//     reduce into one, no reduce of one slot's data into another's, no
//     contribution reduced twice;
//   - the result (ErrResult): every output slot holds exactly what the
//     collective defines — all ranks' contributions to that slot, each
//     once, for the reductions; the owner's data for the others.
//
// Since every output element of these collectives depends only on the
// elements at the same position, a set is kept as (input slot, bitset of
// ranks), and a reduce that would mix two input slots is reported at once.
// Verify materializes every program: it is meant for tests, up to a few
// hundred ranks; its cost is O(Ranks·Slots·Ranks/64) memory plus
// O(transfers·Len·Ranks/64) time.
func (s *Schedule) Verify() error {
	v := &verifier{s: s, name: s.String()}
	if err := v.shape(); err != nil {
		return err
	}
	v.start()
	for i := 0; i < s.NumSteps; i++ {
		if err := v.step(i); err != nil {
			return err
		}
	}
	return v.result()
}

type verifier struct {
	s     *Schedule
	name  string
	n, w  int
	nw    int // words per rank set
	progs [][]Step

	// The state: slot x = rank·w + slot holds contributions to input slot
	// origin[x] (-1: nothing) from the ranks set in set(x).
	origin []int32
	sets   []uint64
	// Writes in the current step: wstep[x] = step+1 if written, by wfrom,
	// wred = every write so far reduced.
	wstep []int32
	wfrom []int32
	wred  []bool

	// Scratch for step.
	sends     []sendRef
	bucket    []int
	cur       []int
	payOrigin []int32
	paySets   []uint64
}

// sendRef is send idx of rank from's current step.
type sendRef struct{ from, idx int32 }

func (v *verifier) fail(err error, rank, step, slot int, format string, args ...any) error {
	return &VerifyError{Rank: rank, Step: step, Slot: slot, Err: err, Detail: fmt.Sprintf(format, args...), sched: v.name}
}

func (v *verifier) shape() error {
	s := v.s
	switch {
	case !s.Collective.valid():
		return v.fail(ErrMalformed, -1, -1, -1, "collective %d is not a collective", uint8(s.Collective))
	case s.Ranks < 1:
		return v.fail(ErrMalformed, -1, -1, -1, "%d ranks", s.Ranks)
	case s.Slots < 1 || s.Slots%s.blocks() != 0:
		return v.fail(ErrMalformed, -1, -1, -1, "%d slots: want a positive multiple of %d for %v", s.Slots, s.blocks(), s.Collective)
	case s.Root < 0 || s.Root >= s.Ranks:
		return v.fail(ErrMalformed, -1, -1, -1, "root %d of %d ranks", s.Root, s.Ranks)
	case s.NumSteps < 0:
		return v.fail(ErrMalformed, -1, -1, -1, "%d steps", s.NumSteps)
	case s.Steps == nil && s.plan == nil:
		return v.fail(ErrMalformed, -1, -1, -1, "no programs: Steps is nil and the schedule is not from Generate")
	case s.Steps != nil && len(s.Steps) != s.Ranks:
		return v.fail(ErrMalformed, -1, -1, -1, "Steps has %d programs for %d ranks", len(s.Steps), s.Ranks)
	}
	v.n, v.w, v.nw = s.Ranks, s.Slots, (s.Ranks+63)/64
	v.progs = make([][]Step, v.n)
	var b builder
	for r := range v.progs {
		var p []Step
		if s.Steps != nil {
			p = s.Steps[r]
		} else {
			p = s.programWith(&b, r)
		}
		if len(p) != s.NumSteps {
			return v.fail(ErrMalformed, r, -1, -1, "program has %d steps, want NumSteps = %d", len(p), s.NumSteps)
		}
		v.progs[r] = p
		for i, st := range p {
			for _, list := range [2][]Transfer{st.Sends, st.Recvs} {
				for _, t := range list {
					if err := v.checkTransfer(r, i, t); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

func (v *verifier) checkTransfer(r, i int, t Transfer) error {
	switch {
	case t.Peer < 0 || t.Peer >= v.n:
		return v.fail(ErrMalformed, r, i, -1, "transfer %+v: peer out of range", t)
	case t.Peer == r:
		return v.fail(ErrMalformed, r, i, t.Src, "transfer %+v to itself", t)
	case t.Len < 1:
		return v.fail(ErrMalformed, r, i, t.Src, "transfer %+v: length %d, want at least 1", t, t.Len)
	case t.Src < 0 || t.Src+t.Len > v.w:
		return v.fail(ErrMalformed, r, i, t.Src, "transfer %+v: source slots beyond [0, %d)", t, v.w)
	case t.Dst < 0 || t.Dst+t.Len > v.w:
		return v.fail(ErrMalformed, r, i, t.Dst, "transfer %+v: destination slots beyond [0, %d)", t, v.w)
	}
	return nil
}

func (v *verifier) set(x int) []uint64 { return v.sets[x*v.nw : (x+1)*v.nw] }

// start puts every rank's input into its working buffer.
func (v *verifier) start() {
	n, w, s := v.n, v.w, v.s
	v.origin = make([]int32, n*w)
	v.sets = make([]uint64, n*w*v.nw)
	v.wstep = make([]int32, n*w)
	v.wfrom = make([]int32, n*w)
	v.wred = make([]bool, n*w)
	put := func(r, slot, origin int) {
		x := r*w + slot
		v.origin[x] = int32(origin)
		v.set(x)[r/64] |= 1 << (r % 64)
	}
	for x := range v.origin {
		v.origin[x] = -1
	}
	per := w / s.blocks()
	for r := 0; r < n; r++ {
		switch s.Collective {
		case AllReduce, Reduce, ReduceScatter:
			for slot := 0; slot < w; slot++ {
				put(r, slot, slot)
			}
		case Broadcast:
			if r == s.Root {
				for slot := 0; slot < w; slot++ {
					put(r, slot, slot)
				}
			}
		case AllGather:
			for k := 0; k < per; k++ {
				put(r, r*per+k, r*per+k)
			}
		case AllToAll:
			// The send blocks, and the copy of send block r into receive
			// block r that the executor makes before step 0.
			for slot := 0; slot < n*per; slot++ {
				put(r, slot, slot)
			}
			for k := 0; k < per; k++ {
				put(r, (n+r)*per+k, r*per+k)
			}
		}
	}
}

func (v *verifier) step(i int) error {
	// Pair sends with receives. Sends are bucketed by receiver with a
	// stable counting sort, so a bucket lists them by sender and, per
	// sender, in program order; cur[a] is the next unmatched send from a in
	// the current receiver's bucket. A matched send's payload, the
	// sender's slots before this step, is copied out in the receiver's
	// list order; the receives are applied afterwards in the same order.
	if v.bucket == nil {
		v.bucket, v.cur = make([]int, v.n+1), make([]int, v.n)
		for a := range v.cur {
			v.cur[a] = -1
		}
	}
	clear(v.bucket)
	for _, p := range v.progs {
		for _, t := range p[i].Sends {
			v.bucket[t.Peer+1]++
		}
	}
	for b := 0; b < v.n; b++ {
		v.bucket[b+1] += v.bucket[b]
	}
	v.sends = slices.Grow(v.sends[:0], v.bucket[v.n])[:v.bucket[v.n]]
	fill := v.bucket[:v.n] // becomes each bucket's end
	for r, p := range v.progs {
		for j := range p[i].Sends {
			to := p[i].Sends[j].Peer
			v.sends[fill[to]] = sendRef{from: int32(r), idx: int32(j)}
			fill[to]++
		}
	}
	v.payOrigin, v.paySets = v.payOrigin[:0], v.paySets[:0]
	start := 0
	for b := 0; b < v.n; b++ {
		bucket := v.sends[start:fill[b]]
		start = fill[b]
		for j := len(bucket) - 1; j >= 0; j-- {
			v.cur[bucket[j].from] = j
		}
		recvs := v.progs[b][i].Recvs
		for k := range recvs {
			t := &recvs[k]
			a := t.Peer
			j := v.cur[a]
			if j < 0 || j >= len(bucket) || int(bucket[j].from) != a {
				return v.fail(ErrUnmatched, b, i, t.Dst, "receive %s from rank %d: rank %d has no send for it in step %d%s",
					xferString(*t), a, a, i, v.elsewhere(a, b, *t, true, i))
			}
			if sd := &v.progs[a][i].Sends[bucket[j].idx]; !sameXfer(*sd, *t) {
				return v.fail(ErrUnmatched, b, i, t.Dst, "receive %s from rank %d, but the matching send of rank %d (same place in their order) is %s",
					xferString(*t), a, a, xferString(*sd))
			}
			v.cur[a] = j + 1
			for slot := t.Src; slot < t.Src+t.Len; slot++ {
				x := a*v.w + slot
				if v.origin[x] < 0 {
					return v.fail(ErrBadData, a, i, slot, "sends the slot to rank %d, but it holds no data yet", b)
				}
				v.payOrigin = append(v.payOrigin, v.origin[x])
				v.paySets = append(v.paySets, v.set(x)...)
			}
		}
		// Each sender's matched sends are a prefix of its run.
		for j, sd := range bucket {
			if j >= v.cur[sd.from] {
				t := v.progs[sd.from][i].Sends[sd.idx]
				return v.fail(ErrUnmatched, int(sd.from), i, t.Src, "send %s to rank %d: rank %d has no receive for it in step %d%s",
					xferString(t), b, b, i, v.elsewhere(b, int(sd.from), t, false, i))
			}
		}
		for _, sd := range bucket {
			v.cur[sd.from] = -1
		}
	}

	// Apply the receives.
	pay := 0
	for b, p := range v.progs {
		recvs := p[i].Recvs
		for k := range recvs {
			t := &recvs[k]
			for j := 0; j < t.Len; j, pay = j+1, pay+1 {
				if err := v.apply(b, i, t, j, pay); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// apply applies slot j of receive t of rank b in step i, whose payload is
// number pay.
func (v *verifier) apply(b, i int, t *Transfer, j, pay int) error {
	slot := t.Dst + j
	x := b*v.w + slot
	po, ps := v.payOrigin[pay], v.paySets[pay*v.nw:(pay+1)*v.nw]
	if v.wstep[x] == int32(i+1) {
		if !v.wred[x] || !t.Reduce {
			return v.fail(ErrMalformed, b, i, slot, "written by the receives from ranks %d and %d in one step, not both reducing", v.wfrom[x], t.Peer)
		}
	} else {
		v.wstep[x], v.wfrom[x], v.wred[x] = int32(i+1), int32(t.Peer), t.Reduce
	}
	dst := v.set(x)
	if !t.Reduce {
		v.origin[x] = po
		copy(dst, ps)
		return nil
	}
	switch {
	case v.origin[x] < 0:
		return v.fail(ErrBadData, b, i, slot, "reduces %s from rank %d into a slot that holds no data", describe(po, ps, v.n), t.Peer)
	case v.origin[x] != po:
		return v.fail(ErrBadData, b, i, slot, "reduces data of input slot %d (rank %d's slot %d) into data of input slot %d: wrong slot",
			po, t.Peer, t.Src+j, v.origin[x])
	}
	for k := range dst {
		if both := dst[k] & ps[k]; both != 0 {
			q := k*64 + bits.TrailingZeros64(both)
			return v.fail(ErrDuplicate, b, i, slot, "reduces %s from rank %d into %s: rank %d's contribution would be counted twice",
				describe(po, ps, v.n), t.Peer, describe(v.origin[x], dst, v.n), q)
		}
	}
	for k := range dst {
		dst[k] |= ps[k]
	}
	return nil
}

// elsewhere explains an unmatched transfer: where rank (the peer) has the
// counterpart instead, if anywhere.
func (v *verifier) elsewhere(rank, peer int, t Transfer, send bool, step int) string {
	for i, st := range v.progs[rank] {
		list := st.Recvs
		if send {
			list = st.Sends
		}
		for _, u := range list {
			if u.Peer == peer && sameXfer(t, u) && i != step {
				return fmt.Sprintf(" (it is in rank %d's step %d; matching transfers must share the step)", rank, i)
			}
		}
	}
	return ""
}

func sameXfer(a, b Transfer) bool {
	return a.Src == b.Src && a.Dst == b.Dst && a.Len == b.Len && a.Reduce == b.Reduce
}

func xferString(t Transfer) string {
	op := "overwrite"
	if t.Reduce {
		op = "reduce"
	}
	return fmt.Sprintf("[src %d dst %d len %d %s]", t.Src, t.Dst, t.Len, op)
}

// result checks the collective's postcondition on every rank.
func (v *verifier) result() error {
	n, w, s := v.n, v.w, v.s
	per := w / s.blocks()
	want, allSet := make([]uint64, v.nw), make([]uint64, v.nw)
	for q := 0; q < n; q++ {
		allSet[q/64] |= 1 << (q % 64)
	}
	all := func() { copy(want, allSet) }
	one := func(q int) {
		clear(want)
		want[q/64] |= 1 << (q % 64)
	}
	for r := 0; r < n; r++ {
		for slot := 0; slot < w; slot++ {
			origin := slot
			switch s.Collective {
			case AllReduce:
				all()
			case Reduce:
				if r != s.Root {
					continue
				}
				all()
			case ReduceScatter:
				if slot/per != r {
					continue
				}
				all()
			case Broadcast:
				one(s.Root)
			case AllGather:
				one(slot / per)
			case AllToAll:
				if slot < n*per {
					continue // the send blocks
				}
				j, k := slot/per-n, slot%per
				origin = r*per + k
				one(j)
			}
			x := r*w + slot
			if int(v.origin[x]) != origin || !slices.Equal(v.set(x), want) {
				return v.fail(ErrResult, r, -1, slot, "holds %s, want %s", describe(v.origin[x], v.set(x), n), describe(int32(origin), want, n))
			}
		}
	}
	return nil
}

// describe renders a symbolic value: "slot 5 of ranks 0-3,6" or "no data".
func describe(origin int32, set []uint64, n int) string {
	if origin < 0 {
		return "no data"
	}
	var ranks []string
	count := 0
	for q := 0; q < n; {
		if set[q/64]&(1<<(q%64)) == 0 {
			q++
			continue
		}
		e := q
		for e+1 < n && set[(e+1)/64]&(1<<((e+1)%64)) != 0 {
			e++
		}
		count += e - q + 1
		if e == q {
			ranks = append(ranks, fmt.Sprint(q))
		} else {
			ranks = append(ranks, fmt.Sprintf("%d-%d", q, e))
		}
		q = e + 1
	}
	switch {
	case count == n && n > 1:
		return fmt.Sprintf("input slot %d of all %d ranks", origin, n)
	case count == 1:
		return fmt.Sprintf("input slot %d of rank %s", origin, ranks[0])
	}
	return fmt.Sprintf("input slot %d of ranks %s", origin, strings.Join(ranks, ","))
}
