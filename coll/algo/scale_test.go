package algo

import (
	"reflect"
	"testing"
)

// At the simulator's scale: generation costs nothing until a program is
// asked for, a program costs O(its own steps), and neighbours' programs
// match. No timing is asserted; the work here is a few hundred
// milliseconds at most, under the race detector too.
func TestScale4096(t *testing.T) {
	const n = 4096
	s, err := Generate(AllReduce, Ring, n, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if s.NumSteps != 2*(n-1) || s.Slots != n {
		t.Fatalf("%v: %d steps, %d slots", s, s.NumSteps, s.Slots)
	}
	progs := map[int][]Step{}
	for _, r := range []int{n - 1, 0, 1, n / 2, n/2 + 1} {
		progs[r] = s.Program(r)
		if len(progs[r]) != s.NumSteps {
			t.Fatalf("rank %d: %d steps", r, len(progs[r]))
		}
	}
	// Rank a's sends are rank a+1's receives, step by step.
	for _, a := range []int{n - 1, 0, n / 2} {
		b := (a + 1) % n
		for i := range progs[a] {
			snd, rcv := progs[a][i].Sends, progs[b][i].Recvs
			if len(snd) != 1 || len(rcv) != 1 || snd[0].Peer != b || rcv[0].Peer != a || !sameXfer(snd[0], rcv[0]) {
				t.Fatalf("step %d: rank %d sends %+v, rank %d receives %+v", i, a, snd, b, rcv)
			}
		}
	}

	// Trees are small per rank; the whole schedule verifies at this scale.
	for _, c := range []Collective{AllReduce, Broadcast} {
		s, err := Generate(c, Tree, n, n/3, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Verify(); err != nil {
			t.Fatal(err)
		}
		flows := 0
		for range s.Flows() {
			flows++
		}
		per := 2 * (n - 1) // every non-root rank, once per tree
		if c == AllReduce {
			per *= 2 // up and down
		}
		if flows != per {
			t.Fatalf("%v: %d flows, want %d", s, flows, per)
		}
	}

	// Halving-doubling: logarithmic programs of range transfers.
	s, _ = Generate(AllReduce, RecHalvingDoubling, n-1, 0, 1)
	for _, r := range []int{0, 1, n - 2} {
		tr := 0
		for _, st := range s.Program(r) {
			tr += len(st.Sends) + len(st.Recvs)
		}
		if tr > 2*s.NumSteps {
			t.Fatalf("%v rank %d: %d transfers in %d steps", s, r, tr, s.NumSteps)
		}
	}

	// Cheap and deterministic: the same arguments give the same schedule.
	t1, _ := Generate(Reduce, Tree, n, 7, 2)
	t2, _ := Generate(Reduce, Tree, n, 7, 2)
	if !reflect.DeepEqual(t1, t2) || !reflect.DeepEqual(t1.Program(123), t2.Program(123)) {
		t.Fatal("tree schedules differ")
	}
}
