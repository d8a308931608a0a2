package algo

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// Mutation tests: break correct schedules in one place and check that
// Verify notices, for the right reason, naming the right place.

// site is one send of a materialized schedule and its matching receive.
type site struct {
	from, to, step int
	si, ri         int // indices in Sends and Recvs
}

// sites lists every send with its receive (same step, k-th of the pair).
func sites(s *Schedule) []site {
	var out []site
	for a := 0; a < s.Ranks; a++ {
		for i, st := range s.Steps[a] {
			seen := map[int]int{}
			for si, t := range st.Sends {
				k := seen[t.Peer]
				seen[t.Peer]++
				// The k-th receive from a in the peer's step i.
				for ri, u := range s.Steps[t.Peer][i].Recvs {
					if u.Peer == a {
						if k == 0 {
							out = append(out, site{a, t.Peer, i, si, ri})
							break
						}
						k--
					}
				}
			}
		}
	}
	return out
}

// clone deep-copies a materialized schedule.
func clone(s *Schedule) *Schedule {
	c := *s
	c.Steps = make([][]Step, len(s.Steps))
	for r, p := range s.Steps {
		c.Steps[r] = make([]Step, len(p))
		for i, st := range p {
			c.Steps[r][i] = Step{Sends: append([]Transfer(nil), st.Sends...), Recvs: append([]Transfer(nil), st.Recvs...)}
		}
	}
	return &c
}

func remove(ts []Transfer, i int) []Transfer { return append(ts[:i:i], ts[i+1:]...) }

// mutants yields the schedules to break: every combination at a few sizes.
func mutants(t *testing.T, f func(t *testing.T, s *Schedule)) {
	for _, ca := range combos() {
		c, a := Collective(ca[0]), Algorithm(ca[1])
		for _, n := range []int{2, 3, 6} {
			for _, root := range roots(c, n) {
				s, err := Generate(c, a, n, root, 2)
				if err != nil {
					t.Fatal(err)
				}
				s.Materialize()
				f(t, s)
			}
		}
	}
}

func wantErr(t *testing.T, s *Schedule, what string, err error, kinds ...error) *VerifyError {
	t.Helper()
	if err == nil {
		t.Fatalf("%v with %s: Verify passed", s, what)
	}
	var ve *VerifyError
	if !errors.As(err, &ve) {
		t.Fatalf("%v with %s: %v is not a *VerifyError", s, what, err)
	}
	for _, k := range kinds {
		if errors.Is(err, k) {
			return ve
		}
	}
	t.Fatalf("%v with %s: got %v, want one of %v", s, what, err, kinds)
	return nil
}

// Every transfer is needed: dropping any one (send and receive) breaks the
// result or starves a later send.
func TestMutateDrop(t *testing.T) {
	mutants(t, func(t *testing.T, s *Schedule) {
		for _, x := range sites(s) {
			m := clone(s)
			m.Steps[x.from][x.step].Sends = remove(m.Steps[x.from][x.step].Sends, x.si)
			m.Steps[x.to][x.step].Recvs = remove(m.Steps[x.to][x.step].Recvs, x.ri)
			wantErr(t, s, fmt.Sprintf("%+v dropped", x), m.Verify(), ErrResult, ErrBadData)
		}
	})
}

// Repeating a reducing transfer counts a contribution twice.
func TestMutateDuplicateReduce(t *testing.T) {
	mutants(t, func(t *testing.T, s *Schedule) {
		for _, x := range sites(s) {
			tr := s.Steps[x.from][x.step].Sends[x.si]
			if !tr.Reduce {
				continue
			}
			m := clone(s)
			m.Steps[x.from][x.step].Sends = append(m.Steps[x.from][x.step].Sends, tr)
			rv := s.Steps[x.to][x.step].Recvs[x.ri]
			m.Steps[x.to][x.step].Recvs = append(m.Steps[x.to][x.step].Recvs, rv)
			ve := wantErr(t, s, fmt.Sprintf("%+v twice", x), m.Verify(), ErrDuplicate)
			if ve.Rank != x.to || ve.Step != x.step || ve.Slot < tr.Dst || ve.Slot >= tr.Dst+tr.Len {
				t.Fatalf("%v with %+v twice: %v names the wrong place", s, x, ve)
			}
		}
	})
}

// Moving a transfer to other slots (on both ends, so it still matches)
// mixes data of different slots or leaves the result wrong.
func TestMutateWrongSlot(t *testing.T) {
	mutants(t, func(t *testing.T, s *Schedule) {
		for _, x := range sites(s) {
			tr := s.Steps[x.from][x.step].Sends[x.si]
			if tr.Len == s.Slots {
				continue // the whole buffer: nowhere to move
			}
			shift := func(u Transfer) Transfer {
				u.Dst = (u.Dst + 1) % (s.Slots - u.Len + 1)
				return u
			}
			m := clone(s)
			m.Steps[x.from][x.step].Sends[x.si] = shift(tr)
			m.Steps[x.to][x.step].Recvs[x.ri] = shift(m.Steps[x.to][x.step].Recvs[x.ri])
			what := fmt.Sprintf("%+v to slot %d", x, shift(tr).Dst)
			if tr.Reduce {
				// Caught at the receive: data of another slot, or a slot
				// some other receive of the step overwrites.
				ve := wantErr(t, s, what, m.Verify(), ErrBadData, ErrMalformed)
				if ve.Rank != x.to || ve.Step != x.step || errors.Is(ve, ErrBadData) && !strings.Contains(ve.Detail, "wrong slot") {
					t.Fatalf("%v with %s: %v", s, what, ve)
				}
			} else {
				wantErr(t, s, what, m.Verify(), ErrResult, ErrBadData, ErrDuplicate, ErrMalformed)
			}
			// Only the receiver's end moved: the ends disagree.
			m = clone(s)
			m.Steps[x.to][x.step].Recvs[x.ri] = shift(m.Steps[x.to][x.step].Recvs[x.ri])
			wantErr(t, s, what+" at the receiver only", m.Verify(), ErrUnmatched)
		}
	})
}

// A send without its receive, a receive without its send, a receive in
// another step: pairing errors naming the rank and step.
func TestMutateUnmatched(t *testing.T) {
	elsewhere := 0
	defer func() {
		if elsewhere == 0 && !t.Failed() {
			t.Error("no moved receive was reported as being in another step")
		}
	}()
	mutants(t, func(t *testing.T, s *Schedule) {
		for _, x := range sites(s) {
			m := clone(s)
			m.Steps[x.to][x.step].Recvs = remove(m.Steps[x.to][x.step].Recvs, x.ri)
			ve := wantErr(t, s, fmt.Sprintf("%+v without its receive", x), m.Verify(), ErrUnmatched)
			if ve.Step != x.step || (ve.Rank != x.from && ve.Rank != x.to) {
				t.Fatalf("%v: %v names the wrong place for %+v", s, ve, x)
			}

			m = clone(s)
			m.Steps[x.from][x.step].Sends = remove(m.Steps[x.from][x.step].Sends, x.si)
			wantErr(t, s, fmt.Sprintf("%+v without its send", x), m.Verify(), ErrUnmatched)

			if s.NumSteps > 1 {
				m = clone(s)
				other := (x.step + 1) % s.NumSteps
				rv := m.Steps[x.to][x.step].Recvs[x.ri]
				m.Steps[x.to][x.step].Recvs = remove(m.Steps[x.to][x.step].Recvs, x.ri)
				m.Steps[x.to][other].Recvs = append(m.Steps[x.to][other].Recvs, rv)
				err := m.Verify()
				wantErr(t, s, fmt.Sprintf("%+v received in step %d", x, other), err, ErrUnmatched)
				if strings.Contains(err.Error(), "must share the step") {
					elsewhere++
				} else if strings.Contains(err.Error(), "no send for it") {
					t.Fatalf("%v: %v does not say where the receive is", s, err)
				}
			}
		}
	})
}

// Shape errors, on a hand-written 2-rank all-reduce (one exchange).
func TestMutateShape(t *testing.T) {
	x := func(peer int, reduce bool) Transfer {
		return Transfer{Peer: peer, Src: 0, Dst: 0, Len: 2, Reduce: reduce}
	}
	good := func() *Schedule {
		return &Schedule{Collective: AllReduce, Algorithm: RecDoubling, Ranks: 2, Pipeline: 1, Slots: 2, NumSteps: 1,
			Steps: [][]Step{
				{{Sends: []Transfer{x(1, true)}, Recvs: []Transfer{x(1, true)}}},
				{{Sends: []Transfer{x(0, true)}, Recvs: []Transfer{x(0, true)}}},
			}}
	}
	if err := good().Verify(); err != nil {
		t.Fatalf("hand-written exchange: %v", err)
	}
	cases := []struct {
		name   string
		break_ func(s *Schedule)
		want   error
		detail string
	}{
		{"to itself", func(s *Schedule) { s.Steps[0][0].Sends[0].Peer = 0 }, ErrMalformed, "to itself"},
		{"peer out of range", func(s *Schedule) { s.Steps[1][0].Recvs[0].Peer = 2 }, ErrMalformed, "peer out of range"},
		{"slot out of range", func(s *Schedule) { s.Steps[1][0].Recvs[0].Dst = 1 }, ErrMalformed, "destination slots"},
		{"empty transfer", func(s *Schedule) { s.Steps[1][0].Recvs[0].Len = 0 }, ErrMalformed, "length 0"},
		{"short program", func(s *Schedule) { s.Steps[1] = s.Steps[1][:0] }, ErrMalformed, "0 steps, want NumSteps = 1"},
		{"missing program", func(s *Schedule) { s.Steps = s.Steps[:1] }, ErrMalformed, "1 programs for 2 ranks"},
		{"no programs", func(s *Schedule) { s.Steps = nil }, ErrMalformed, "no programs"},
		{"slots not blocks", func(s *Schedule) { s.Collective = AllToAll; s.Slots = 3 }, ErrMalformed, "multiple of 4"},
		{"reduce flag", func(s *Schedule) { s.Steps[1][0].Recvs[0].Reduce = false }, ErrUnmatched, "matching send"},
		{"two overwrites", func(s *Schedule) {
			s.Steps[0][0].Sends[0].Reduce, s.Steps[1][0].Recvs[0].Reduce = false, false
			s.Steps[0][0].Sends = append(s.Steps[0][0].Sends, s.Steps[0][0].Sends[0])
			s.Steps[1][0].Recvs = append(s.Steps[1][0].Recvs, s.Steps[1][0].Recvs[0])
		}, ErrMalformed, "not both reducing"},
		{"no exchange", func(s *Schedule) { s.NumSteps, s.Steps[0], s.Steps[1] = 0, nil, nil }, ErrResult, "want input slot 0 of all 2 ranks"},
	}
	for _, tc := range cases {
		s := good()
		tc.break_(s)
		err := s.Verify()
		if !errors.Is(err, tc.want) || !strings.Contains(fmt.Sprint(err), tc.detail) {
			t.Errorf("%s: got %v, want %v with %q", tc.name, err, tc.want, tc.detail)
		}
	}
}

// The message names everything: schedule, rank, step, slot, what and why.
func TestVerifyErrorMessage(t *testing.T) {
	s, _ := Generate(AllReduce, Ring, 4, 0, 1)
	s.Materialize()
	m := clone(s)
	// Rank 0 sends chunk 0 to rank 1 in step 0; send it twice.
	m.Steps[0][0].Sends = append(m.Steps[0][0].Sends, m.Steps[0][0].Sends[0])
	m.Steps[1][0].Recvs = append(m.Steps[1][0].Recvs, m.Steps[1][0].Recvs[0])
	err := m.Verify()
	want := "coll/algo: verify ring all_reduce ranks=4 pipeline=1: rank 1 step 0 slot 0: contribution reduced twice: " +
		"reduces input slot 0 of rank 0 from rank 0 into input slot 0 of ranks 0-1: rank 0's contribution would be counted twice"
	if err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
}
