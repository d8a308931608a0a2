package flow

import (
	"flag"
	"math"
	"math/rand/v2"
	"testing"
)

var seedFlag = flag.Uint64("flow.seed", 0, "replay TestMaxMinRandom with this seed")

func TestMaxMinSmall(t *testing.T) {
	// Two links of 10 and 4; flow 0 on both, flow 1 on the first, flow 2
	// on the second. Link 1 fills first: flows 0 and 2 get 2 each; flow 1
	// gets the rest of link 0: 8.
	var f Flows
	f.Add(0, 1)
	f.Add(0)
	f.Add(1)
	f.Add()
	rate := make([]float64, 4)
	var m MaxMin
	m.Solve([]float64{10, 4}, &f, rate)
	want := []float64{2, 8, 2, math.Inf(1)}
	for i := range want {
		if rate[i] != want[i] {
			t.Errorf("flow %d: rate %v, want %v (all %v)", i, rate[i], want[i], rate)
		}
	}
}

// TestMaxMinRandom checks the defining properties on random instances:
// no resource is over capacity, and every flow has a bottleneck: a
// saturated resource on which no flow has a higher rate.
func TestMaxMinRandom(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (replay: go test ./sim/flow -run MaxMinRandom -flow.seed %d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	var m MaxMin
	var f Flows
	for trial := range 300 {
		nres, nf := 1+rng.IntN(30), 1+rng.IntN(60)
		capacity := make([]float64, nres)
		for i := range capacity {
			capacity[i] = 1 + float64(rng.IntN(100))
		}
		f.Reset()
		for range nf {
			k := 1 + rng.IntN(min(4, nres))
			res := rng.Perm(nres)[:k]
			r32 := make([]int32, k)
			for i, r := range res {
				r32[i] = int32(r)
			}
			f.Add(r32...)
		}
		rate := make([]float64, nf)
		m.Solve(capacity, &f, rate)
		used := make([]float64, nres)
		maxOn := make([]float64, nres)
		for i := range nf {
			for _, r := range f.Res[f.Off[i]:f.Off[i+1]] {
				used[r] += rate[i]
				maxOn[r] = max(maxOn[r], rate[i])
			}
		}
		const eps = 1e-9
		for r := range nres {
			if used[r] > capacity[r]*(1+eps) {
				t.Fatalf("trial %d: resource %d carries %v over its %v", trial, r, used[r], capacity[r])
			}
		}
		for i := range nf {
			ok := false
			for _, r := range f.Res[f.Off[i]:f.Off[i+1]] {
				if used[r] >= capacity[r]*(1-eps) && rate[i] >= maxOn[r]*(1-eps) {
					ok = true
				}
			}
			if !ok {
				t.Fatalf("trial %d: flow %d (rate %v) has no bottleneck", trial, i, rate[i])
			}
		}
	}
}

func TestMaxMinAllocs(t *testing.T) {
	var f Flows
	for i := range 100 {
		f.Add(int32(i%7), int32(7+i%5))
	}
	capacity := make([]float64, 12)
	for i := range capacity {
		capacity[i] = float64(1 + i)
	}
	rate := make([]float64, f.Len())
	var m MaxMin
	m.Solve(capacity, &f, rate)
	if a := testing.AllocsPerRun(10, func() { m.Solve(capacity, &f, rate) }); a != 0 {
		t.Errorf("%v allocations per solve, want 0", a)
	}
}
