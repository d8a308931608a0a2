package algo

import "math/bits"

// plan holds what a generated schedule needs to compute any rank's
// program: its parameters and, for Tree, the two trees.
type plan struct {
	c     Collective
	a     Algorithm
	n     int // ranks
	p     int // pipeline: pieces per basic slot
	root  int
	w     int // slots
	trees []tree
}

// newPlan sizes s (Slots, NumSteps) and returns its plan.
func newPlan(s *Schedule) *plan {
	pl := &plan{c: s.Collective, a: s.Algorithm, n: s.Ranks, p: s.Pipeline, root: s.Root}
	n, p := pl.n, pl.p
	fold, lg := 0, 0 // the extra fold-in and fold-out steps, and log2 of the power-of-two core
	if n > 1 {
		pof2 := 1 << (bits.Len(uint(n)) - 1)
		lg = bits.Len(uint(pof2)) - 1
		if n > pof2 {
			fold = 2
		}
	}
	var steps int
	switch pl.a {
	case Ring:
		switch pl.c {
		case AllReduce:
			pl.w, steps = n*p, 2*(n-1)*p
		case ReduceScatter, AllGather:
			pl.w, steps = n*p, (n-1)*p
		case Broadcast, Reduce:
			pl.w, steps = p, n+p-2
		}
	case Tree:
		pl.w = 2 * p
		pl.trees = doubleTree(pl.c, n, pl.root)
		for _, t := range pl.trees {
			h := int(t.height[t.root])
			if pl.c == AllReduce {
				h *= 2
			}
			steps = max(steps, p+h-1)
		}
	case RecHalvingDoubling:
		pl.w = n * p
		steps = fold + lg
		if pl.c == AllReduce {
			steps += lg
		}
	case RecDoubling:
		pl.w, steps = n*p, fold+lg
		if pl.c == AllReduce {
			pl.w = p
		}
	case Direct:
		switch pl.c {
		case AllReduce:
			pl.w, steps = n*p, 2
		case ReduceScatter, AllGather:
			pl.w, steps = n*p, 1
		case Broadcast, Reduce:
			pl.w, steps = p, 1
		case AllToAll:
			pl.w, steps = 2*n*p, 1
		}
	}
	if n == 1 {
		steps = 0
	}
	s.Slots, s.NumSteps = pl.w, steps
	return pl
}

func (pl *plan) program(b *builder, r int) {
	if pl.n == 1 {
		return
	}
	switch pl.a {
	case Ring:
		switch pl.c {
		case AllReduce, ReduceScatter, AllGather:
			pl.ring(b, r)
		case Broadcast, Reduce:
			pl.chain(b, r)
		}
	case Tree:
		pl.tree(b, r)
	case RecHalvingDoubling:
		pl.rhd(b, r)
	case RecDoubling:
		if pl.c == AllReduce {
			pl.rdAllReduce(b, r)
		} else {
			pl.rdAllGather(b, r)
		}
	case Direct:
		pl.direct(b, r)
	}
}

// mod returns a mod n in [0, n).
func mod(a, n int) int {
	a %= n
	if a < 0 {
		a += n
	}
	return a
}
