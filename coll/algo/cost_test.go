package algo

import (
	"math"
	"testing"
)

// TestCostRing: a ring all-reduce over n ranks on one kind of link costs
// the textbook 2(n-1)·α + 2(n-1)/n·S·β + (n-1)/n·S·γ when S divides
// evenly.
func TestCostRing(t *testing.T) {
	const alpha, beta, gamma = 5e-6, 1e-9, 0.25e-9
	m := CostModel{Link: func(a, b int) LinkCost { return LinkCost{alpha, beta} }, Gamma: gamma}
	for _, n := range []int{1, 2, 3, 8, 13} {
		s, err := Generate(AllReduce, Ring, n, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		count := 1024 * n
		S := float64(4 * count)
		want := 0.0
		if n > 1 {
			k := float64(n - 1)
			want = 2*k*alpha + 2*k/float64(n)*S*beta + k/float64(n)*S*gamma
		}
		if got := s.Cost(count, 4, m); math.Abs(got-want) > 1e-12 {
			t.Errorf("ring all_reduce n=%d: cost %g, want %g", n, got, want)
		}
	}
}

// TestCostChoice: with a large α, recursive doubling (log n steps) beats
// the ring (2(n-1) steps) on a tiny message; with a large message the
// ring's bandwidth term wins. The slowest link dominates a step.
func TestCostChoice(t *testing.T) {
	m := CostModel{Link: func(a, b int) LinkCost { return LinkCost{10e-6, 1e-9} }}
	ring, _ := Generate(AllReduce, Ring, 8, 0, 1)
	rd, _ := Generate(AllReduce, RecDoubling, 8, 0, 1)
	if r, d := ring.Cost(2, 4, m), rd.Cost(2, 4, m); d >= r {
		t.Errorf("8 bytes: rd %g ≥ ring %g", d, r)
	}
	if r, d := ring.Cost(1<<24, 4, m), rd.Cost(1<<24, 4, m); r >= d {
		t.Errorf("64 MiB: ring %g ≥ rd %g", r, d)
	}
	slow := CostModel{Link: func(a, b int) LinkCost {
		if a == 0 || b == 0 {
			return LinkCost{100e-6, 1e-9}
		}
		return LinkCost{1e-6, 1e-9}
	}}
	if got := ring.Cost(0, 4, slow); math.Abs(got-14*100e-6) > 1e-12 {
		t.Errorf("ring with a slow rank 0: %g, want every step at rank 0's α (%g)", got, 14*100e-6)
	}
}
