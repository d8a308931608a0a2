package algo

import "math/bits"

// Recursive halving and doubling (Thakur, Rabenseifner and Gropp,
// "Optimization of collective communication operations in MPICH", IJHPCA
// 2005; MPICH src/mpi/coll/allreduce/allreduce_intra_reduce_scatter_allgather.c,
// reduce_scatter/reduce_scatter_intra_recursive_halving.c,
// allreduce/allreduce_intra_recursive_doubling.c).
//
// Let pof2 be the largest power of two ≤ N and rem = N-pof2. When rem > 0
// the extra ranks are folded in first and out last, as MPICH does: in the
// first step each even rank r < 2·rem sends its whole buffer to r+1, which
// reduces it (all-gather: sends its own block) and stands for both from then
// on; in the last step r+1 sends r the result. The pof2 remaining ranks are
// renumbered 0…pof2-1 (new rank i is rank 2i+1 for i < rem, i+rem after).
//
// For rhd and rd all-gather the buffer is N blocks of P slots (block b is
// slots [b·P, (b+1)·P)); new rank i owns the blocks of the ranks it
// stands for, a contiguous run, so every message is one contiguous range
// of slots whatever P is. Pipelining only makes the slots finer.
type halving struct {
	n, p, pof2, rem, lg int
}

func newHalving(n, p int) halving {
	pof2 := 1 << (bits.Len(uint(n)) - 1)
	return halving{n: n, p: p, pof2: pof2, rem: n - pof2, lg: bits.Len(uint(pof2)) - 1}
}

// newRank is r's rank in the power-of-two core, or -1 if r is folded out.
func (h halving) newRank(r int) int {
	switch {
	case r >= 2*h.rem:
		return r - h.rem
	case r%2 == 1:
		return r / 2
	}
	return -1
}

// oldRank is the inverse of newRank.
func (h halving) oldRank(i int) int {
	if i < h.rem {
		return 2*i + 1
	}
	return i + h.rem
}

// span returns the slots [first, first+len) of the blocks owned by new
// ranks [a, c).
func (h halving) span(a, c int) (first, n int) {
	start := func(i int) int {
		if i < h.rem {
			return 2 * i
		}
		return i + h.rem
	}
	return start(a) * h.p, (start(c) - start(a)) * h.p
}

// exchange adds a send of new ranks [sa, sc)'s blocks to peer and a receive
// of [ra, rc)'s from it.
func (h halving) exchange(b *builder, step, peer, sa, sc, ra, rc int, reduce bool) {
	s, sn := h.span(sa, sc)
	d, dn := h.span(ra, rc)
	b.send(step, Transfer{Peer: peer, Src: s, Dst: s, Len: sn, Reduce: reduce})
	b.recv(step, Transfer{Peer: peer, Src: d, Dst: d, Len: dn, Reduce: reduce})
}

// fold adds the fold-in step: the whole buffer (w slots) for reductions,
// rank r's block for all-gather.
func (h halving) fold(b *builder, r, w int, reduce bool) {
	if r >= 2*h.rem {
		return
	}
	x := Transfer{Src: 0, Dst: 0, Len: w, Reduce: reduce}
	if !reduce {
		x.Src, x.Dst, x.Len = (r&^1)*h.p, (r&^1)*h.p, h.p
	}
	if r%2 == 0 {
		x.Peer = r + 1
		b.send(0, x)
	} else {
		x.Peer = r - 1
		b.recv(0, x)
	}
}

// rhd is Rabenseifner's algorithm. Reduce-scatter by recursive halving:
// in the step at distance m (pof2/2, pof2/4, …, 1) new rank i and i^m split
// the run of blocks they share and each sends the half the other keeps, so
// new rank i ends with its own blocks complete. All-reduce then gathers by
// recursive doubling (m = 1, 2, …, pof2/2), each step doubling the run.
//
//	all_reduce      2·log2(pof2) steps, +2 if rem > 0
//	reduce_scatter  log2(pof2) steps, +2 if rem > 0 (the last sends an
//	                even rank its block)
func (pl *plan) rhd(b *builder, r int) {
	h := newHalving(pl.n, pl.p)
	t := 0
	if h.rem > 0 {
		h.fold(b, r, pl.w, true)
		t = 1
	}
	if i := h.newRank(r); i >= 0 {
		for m := h.pof2 / 2; m >= 1; m /= 2 {
			lo := i &^ (2*m - 1)
			if i&m == 0 { // keep the lower half
				h.exchange(b, t, h.oldRank(i^m), lo+m, lo+2*m, lo, lo+m, true)
			} else {
				h.exchange(b, t, h.oldRank(i^m), lo, lo+m, lo+m, lo+2*m, true)
			}
			t++
		}
		if pl.c == AllReduce {
			for m := 1; m < h.pof2; m *= 2 {
				mine, theirs := i&^(m-1), (i^m)&^(m-1)
				h.exchange(b, t, h.oldRank(i^m), mine, mine+m, theirs, theirs+m, false)
				t++
			}
		}
	}
	if h.rem == 0 || r >= 2*h.rem {
		return
	}
	last := 1 + h.lg // the fold-out step is the schedule's last
	x := Transfer{Src: 0, Dst: 0, Len: pl.w}
	if pl.c == AllReduce {
		last += h.lg
	} else {
		e := r &^ 1
		x.Src, x.Dst, x.Len = e*pl.p, e*pl.p, pl.p
	}
	if r%2 == 1 {
		x.Peer = r - 1
		b.send(last, x)
	} else {
		x.Peer = r + 1
		b.recv(last, x)
	}
}

// rdAllReduce is recursive doubling: every step new ranks i and i^m
// (m = 1, 2, …, pof2/2) exchange their whole buffers and both reduce, so
// each step's receive writes the slots its send reads (see Step.Overlaps).
// The buffer is P slots. log2(pof2) steps, +2 if rem > 0.
func (pl *plan) rdAllReduce(b *builder, r int) {
	h := newHalving(pl.n, pl.p)
	t := 0
	if h.rem > 0 {
		h.fold(b, r, pl.w, true)
		t = 1
	}
	whole := Transfer{Src: 0, Dst: 0, Len: pl.w, Reduce: true}
	if i := h.newRank(r); i >= 0 {
		for m := 1; m < h.pof2; m *= 2 {
			whole.Peer = h.oldRank(i ^ m)
			b.send(t, whole)
			b.recv(t, whole)
			t++
		}
	}
	if h.rem == 0 || r >= 2*h.rem {
		return
	}
	whole.Reduce = false
	if r%2 == 1 {
		whole.Peer = r - 1
		b.send(1+h.lg, whole)
	} else {
		whole.Peer = r + 1
		b.recv(1+h.lg, whole)
	}
}

// rdAllGather is all-gather by recursive doubling: in the step at distance
// m (1, 2, …, pof2/2) new ranks i and i^m swap the runs of blocks they hold,
// doubling them. Non-powers of two fold in and out (the fold-out sends an
// even rank everything but its own block); MPICH instead patches the
// missing blocks along a tree. log2(pof2) steps, +2 if rem > 0.
func (pl *plan) rdAllGather(b *builder, r int) {
	h := newHalving(pl.n, pl.p)
	t := 0
	if h.rem > 0 {
		h.fold(b, r, pl.w, false)
		t = 1
	}
	if i := h.newRank(r); i >= 0 {
		for m := 1; m < h.pof2; m *= 2 {
			mine, theirs := i&^(m-1), (i^m)&^(m-1)
			h.exchange(b, t, h.oldRank(i^m), mine, mine+m, theirs, theirs+m, false)
			t++
		}
	}
	if h.rem == 0 || r >= 2*h.rem {
		return
	}
	// Everything but block e, in at most two ranges, lower first on both
	// sides.
	e := r &^ 1
	xs := []Transfer{{Src: 0, Dst: 0, Len: e * pl.p}, {Src: (e + 1) * pl.p, Dst: (e + 1) * pl.p, Len: pl.w - (e+1)*pl.p}}
	for _, x := range xs {
		if x.Len == 0 {
			continue
		}
		if r%2 == 1 {
			x.Peer = r - 1
			b.send(1+h.lg, x)
		} else {
			x.Peer = r + 1
			b.recv(1+h.lg, x)
		}
	}
}
