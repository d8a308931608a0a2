package algo

import (
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// combos lists every supported (collective, algorithm).
func combos() [][2]uint8 {
	var out [][2]uint8
	for c := AllReduce; c <= AllToAll; c++ {
		for _, a := range Supported(c) {
			out = append(out, [2]uint8{uint8(c), uint8(a)})
		}
	}
	return out
}

// roots returns the roots to test: 0, the last and the middle rank for
// Broadcast and Reduce, else 0.
func roots(c Collective, n int) []int {
	if !c.rooted() || n == 1 {
		return []int{0}
	}
	rs := []int{0, n - 1}
	if m := n / 2; m != 0 && m != n-1 {
		rs = append(rs, m)
	}
	return rs
}

// TestGenerateVerify is the main proof: every supported combination, every
// rank count 1..64, three roots, pipeline 1..3, generates a schedule that
// Verify accepts, with the documented number of steps.
func TestGenerateVerify(t *testing.T) {
	maxN := 64
	if testing.Short() {
		maxN = 20
	}
	for _, ca := range combos() {
		c, a := Collective(ca[0]), Algorithm(ca[1])
		t.Run(fmt.Sprintf("%v/%v", c, a), func(t *testing.T) {
			t.Parallel()
			for n := 1; n <= maxN; n++ {
				for _, root := range roots(c, n) {
					for p := 1; p <= 3; p++ {
						s, err := Generate(c, a, n, root, p)
						if err != nil {
							t.Fatal(err)
						}
						s.Materialize() // generated once, for Verify and the checks below
						if err := s.Verify(); err != nil {
							t.Fatal(err)
						}
						if want, ok := wantSteps(c, a, n, p); ok && s.NumSteps != want {
							t.Fatalf("%v: %d steps, want %d", s, s.NumSteps, want)
						}
						// The documented rule: only rd all-reduce sends and
						// receives a slot in one step.
						if c != AllReduce || a != RecDoubling {
							for r := 0; r < n; r++ {
								for i, st := range s.Steps[r] {
									if st.Overlaps() {
										t.Fatalf("%v: rank %d step %d sends and receives a slot", s, r, i)
									}
								}
							}
						}
					}
				}
			}
		})
	}
}

// wantSteps is the step count the package documentation gives; ok is false
// for trees, whose count depends on the tree height.
func wantSteps(c Collective, a Algorithm, n, p int) (int, bool) {
	if n == 1 {
		return 0, true
	}
	pof2 := 1 << (bits.Len(uint(n)) - 1)
	lg := bits.Len(uint(pof2)) - 1
	fold := 0
	if n > pof2 {
		fold = 2
	}
	switch a {
	case Ring:
		switch c {
		case AllReduce:
			return 2 * (n - 1) * p, true
		case ReduceScatter, AllGather:
			return (n - 1) * p, true
		default:
			return n + p - 2, true
		}
	case RecHalvingDoubling:
		if c == AllReduce {
			return 2*lg + fold, true
		}
		return lg + fold, true
	case RecDoubling:
		return lg + fold, true
	case Direct:
		if c == AllReduce {
			return 2, true
		}
		return 1, true
	}
	return 0, false
}

// TestTreeShape checks the trees themselves: NCCL's layout for 14 ranks
// (the picture in trees.cc), binary, every rank in each tree, heights
// logarithmic, and the second tree complementary where NCCL's is.
func TestTreeShape(t *testing.T) {
	// ncclGetBtree's picture for 14 ranks: 0-8, 8-4, 8-12, 4-2, 4-6,
	// 12-10, 12-13, 2-1, 2-3, 6-5, 6-7, 10-9, 10-11.
	want := []int{-1, 2, 4, 2, 8, 6, 4, 6, 0, 10, 12, 10, 8, 12}
	for x, u := range want {
		if got := btreeParent(14, x); got != u {
			t.Errorf("btree(14): parent of %d = %d, want %d", x, got, u)
		}
	}
	for n := 1; n <= 300; n++ {
		for _, c := range []Collective{AllReduce, Broadcast} {
			for _, root := range roots(c, n) {
				trees := doubleTree(c, n, root)
				for ti, tr := range trees {
					if c != AllReduce && tr.root != root {
						t.Fatalf("n=%d %v root %d: tree %d rooted at %d", n, c, root, ti, tr.root)
					}
					limit := 2
					if c != AllReduce && ti == 1 {
						limit = 3 // the re-rooted second tree: Root may gain a child
					}
					seen := 0
					for x := 0; x < n; x++ {
						if k := len(tr.children(x)); k > limit {
							t.Fatalf("n=%d %v tree %d: rank %d has %d children", n, c, ti, x, k)
						}
						if x == tr.root || tr.depth[x] > 0 {
							seen++
						}
					}
					if seen != n {
						t.Fatalf("n=%d: tree %d reaches %d of %d ranks", n, ti, seen, n)
					}
					if h := int(tr.height[tr.root]); n > 1 && h > bits.Len(uint(n))+1 {
						t.Fatalf("n=%d %v tree %d: height %d", n, c, ti, h)
					}
				}
				if c == AllReduce && n > 2 && n%2 == 0 {
					// Mirror trees: no rank is an inner node of both.
					for x := 0; x < n; x++ {
						if len(trees[0].children(x)) > 0 && len(trees[1].children(x)) > 0 {
							t.Fatalf("n=%d: rank %d is inner in both trees", n, x)
						}
					}
				}
			}
		}
	}
}

func TestDeterminism(t *testing.T) {
	for _, ca := range combos() {
		c, a := Collective(ca[0]), Algorithm(ca[1])
		for _, n := range []int{1, 2, 7, 16, 33} {
			root := roots(c, n)[len(roots(c, n))-1]
			s1, err1 := Generate(c, a, n, root, 2)
			s2, err2 := Generate(c, a, n, root, 2)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if !reflect.DeepEqual(s1, s2) {
				t.Fatalf("%v: two Generates differ", s1)
			}
			for r := 0; r < n; r++ {
				if !reflect.DeepEqual(s1.Program(r), s2.Program(r)) || !reflect.DeepEqual(s1.Program(r), s1.Program(r)) {
					t.Fatalf("%v: rank %d's program differs between calls", s1, r)
				}
			}
			s1.Materialize()
			s2.Materialize()
			if !reflect.DeepEqual(s1.Steps, s2.Steps) {
				t.Fatalf("%v: materialized schedules differ", s1)
			}
		}
	}
}

func TestGenerateErrors(t *testing.T) {
	cases := []struct {
		c            Collective
		a            Algorithm
		n, root, p   int
		want         error
		wantContains string
	}{
		{AllToAll, Ring, 4, 0, 1, ErrUnsupported, "all_to_all supports [direct]"},
		{Broadcast, RecDoubling, 4, 0, 1, ErrUnsupported, "broadcast/rd"},
		{ReduceScatter, Tree, 4, 0, 1, ErrUnsupported, "reduce_scatter/tree"},
		{AllGather, RecHalvingDoubling, 4, 0, 1, ErrUnsupported, "all_gather/rhd"},
		{0, Ring, 4, 0, 1, ErrInvalid, "not a collective"},
		{AllReduce, 0, 4, 0, 1, ErrInvalid, "not an algorithm"},
		{AllReduce, Ring, 0, 0, 1, ErrInvalid, "ranks 0"},
		{AllReduce, Ring, -3, 0, 1, ErrInvalid, "ranks -3"},
		{Broadcast, Ring, 4, 4, 1, ErrInvalid, "root 4"},
		{Reduce, Tree, 4, -1, 1, ErrInvalid, "root -1"},
		{AllReduce, Ring, 4, 0, 0, ErrInvalid, "pipeline 0"},
		{AllReduce, Ring, 1 << 20, 0, 1 << 10, ErrInvalid, "slots"},
	}
	for _, tc := range cases {
		_, err := Generate(tc.c, tc.a, tc.n, tc.root, tc.p)
		if !errors.Is(err, tc.want) || !strings.Contains(fmt.Sprint(err), tc.wantContains) {
			t.Errorf("Generate(%v, %v, %d, %d, %d) = %v, want %v containing %q", tc.c, tc.a, tc.n, tc.root, tc.p, err, tc.want, tc.wantContains)
		}
	}
}

func TestNames(t *testing.T) {
	for c := AllReduce; c <= AllToAll; c++ {
		got, err := ParseCollective(c.String())
		if err != nil || got != c {
			t.Errorf("ParseCollective(%q) = %v, %v", c.String(), got, err)
		}
	}
	for a := Ring; a <= Direct; a++ {
		got, err := ParseAlgorithm(a.String())
		if err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", a.String(), got, err)
		}
	}
	if got := fmt.Sprint([]Collective{AllReduce, ReduceScatter, AllGather, Broadcast, Reduce, AllToAll}); got !=
		"[all_reduce reduce_scatter all_gather broadcast reduce all_to_all]" {
		t.Errorf("collective names: %s", got)
	}
	if got := fmt.Sprint([]Algorithm{Ring, Tree, RecHalvingDoubling, RecDoubling, Direct}); got != "[ring tree rhd rd direct]" {
		t.Errorf("algorithm names: %s", got)
	}
	if _, err := ParseAlgorithm("rabenseifner"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseAlgorithm(rabenseifner) = %v", err)
	}
	if _, err := ParseCollective("allreduce"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseCollective(allreduce) = %v", err)
	}
	if Collective(0).String() != "Collective(0)" || Algorithm(9).String() != "Algorithm(9)" || Supported(0) != nil {
		t.Error("invalid values")
	}
}

// TestSlotRange: the slots of each block partition it, sizes differ by at
// most one, for counts 0, below, at and above the slots per block.
func TestSlotRange(t *testing.T) {
	for _, ca := range combos() {
		c, a := Collective(ca[0]), Algorithm(ca[1])
		for _, n := range []int{1, 3, 8} {
			s, err := Generate(c, a, n, 0, 3)
			if err != nil {
				t.Fatal(err)
			}
			blocks := s.blocks()
			per := s.Slots / blocks
			for _, count := range []int{0, 1, per - 1, per, per + 1, 5*per + 2, 1000003} {
				next := 0
				for slot := 0; slot < s.Slots; slot++ {
					lo, hi := s.SlotRange(count, slot)
					if lo != next || hi < lo || hi-lo > count/per+1 || hi-lo < count/per {
						t.Fatalf("%v count %d: slot %d = [%d, %d), previous ended at %d", s, count, slot, lo, hi, next)
					}
					next = hi
				}
				if next != blocks*count {
					t.Fatalf("%v count %d: slots cover %d elements, want %d", s, count, next, blocks*count)
				}
			}
		}
	}
}

func TestFlowsAndOverlaps(t *testing.T) {
	s, _ := Generate(AllReduce, Ring, 5, 0, 2)
	var n int
	for f := range s.Flows() {
		if f.From == f.To || f.Len != 1 || !(f.To == (f.From+1)%5) {
			t.Fatalf("flow %+v", f)
		}
		n++
	}
	if want := 5 * 2 * 4 * 2; n != want {
		t.Fatalf("%d flows, want %d", n, want)
	}
	for f := range s.Flows() {
		_ = f
		break // early exit must not panic
	}
	// Only rd all-reduce reads and writes a slot in one step.
	for _, ca := range combos() {
		c, a := Collective(ca[0]), Algorithm(ca[1])
		s, _ := Generate(c, a, 6, 0, 2)
		any := false
		for r := 0; r < 6; r++ {
			for _, st := range s.Program(r) {
				any = any || st.Overlaps()
			}
		}
		if any != (c == AllReduce && a == RecDoubling) {
			t.Errorf("%v: some step overlaps: %v", s, any)
		}
	}
}

// Overlaps against brute force, on random steps large and small.
func TestOverlaps(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 2000; iter++ {
		var st Step
		w := 1 + rng.IntN(200)
		for range rng.IntN(40) {
			lo := rng.IntN(w)
			st.Sends = append(st.Sends, Transfer{Src: lo, Len: 1 + rng.IntN(w-lo)})
		}
		for range rng.IntN(40) {
			lo := rng.IntN(w)
			st.Recvs = append(st.Recvs, Transfer{Dst: lo, Len: 1 + rng.IntN(w-lo)})
		}
		want := false
		for _, r := range st.Recvs {
			for _, s := range st.Sends {
				want = want || r.Dst < s.Src+s.Len && s.Src < r.Dst+r.Len
			}
		}
		if got := st.Overlaps(); got != want {
			t.Fatalf("iteration %d: Overlaps = %v, want %v for %+v", iter, got, want, st)
		}
	}
}
