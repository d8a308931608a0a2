package loader

import (
	"math/bits"
	"math/rand/v2"
)

// Shuffle fills perm (len(perm) = the dataset's Len) with epoch's order of
// the sample numbers 0..len(perm)-1. The order is specified here, so it is
// the same on every machine, every run and every Go version:
//
//   - the generator is math/rand/v2's PCG (PCG-DXSM, 128-bit state) made by
//     rand.NewPCG(seed, epoch) (PCG.Seed(seed, epoch)), whose output sequence Go fixes;
//   - perm starts as the identity and is shuffled by Fisher-Yates from the
//     top: for i = n-1 down to 1, swap perm[i] with perm[j], j uniform in
//     [0, i];
//   - j comes from one or more PCG.Uint64 calls by Lemire's multiply-shift
//     with rejection: (hi, lo) = x*(i+1) as 128 bits; while lo < 2^64 mod
//     (i+1), draw x again; j = hi.
//
// (math/rand/v2's Rand.Shuffle is not used: its reduction is not a promise.)
// TestOrderGolden pins the first samples of one (seed, epoch).
func Shuffle(perm []uint32, seed, epoch uint64) {
	for i := range perm {
		perm[i] = uint32(i)
	}
	var g rand.PCG // on the stack: no allocation per epoch
	g.Seed(seed, epoch)
	for i := len(perm) - 1; i > 0; i-- {
		j := bounded(&g, uint64(i)+1)
		perm[i], perm[j] = perm[j], perm[i]
	}
}

// bounded returns a uniform value in [0, n) from g (Lemire, "Fast Random
// Integer Generation in an Interval", 2019).
func bounded(g *rand.PCG, n uint64) uint64 {
	hi, lo := bits.Mul64(g.Uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(g.Uint64(), n)
		}
	}
	return hi
}
