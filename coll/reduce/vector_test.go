package reduce

import (
	"bytes"
	"flag"
	"math/rand/v2"
	"os"
	"testing"
)

// The vector kernels are checked against the scalar ones bit for bit, at
// every level the CPU has (the scalar ones are checked against the exact
// reference in reduce_test.go, and TestLevels runs those checks at every
// level too); every other test runs at the CPU's best level unless
// -reduce.scalar forces the scalar kernels:
//
//	go test ./coll/reduce                    # vector kernels, where the CPU has them
//	go test ./coll/reduce -reduce.scalar     # scalar kernels only

var scalarFlag = flag.Bool("reduce.scalar", false, "run the tests on the scalar kernels (no AVX2 or AVX-512); those that compare the levels still run each")

// level is a set of kernels the tests can force: scalar alone, AVX2 (and
// scalar for the tail), or AVX-512 (and AVX2 and scalar for the tail).
type level int

const (
	levelScalar level = iota
	levelAVX2
	levelAVX512
)

var (
	allLevels    = []level{levelScalar, levelAVX2, levelAVX512}
	vectorLevels = allLevels[1:]
)

func (l level) String() string { return [...]string{"scalar", "avx2", "avx512"}[l] }

// cpuLevel is the best level of this build and CPU, read before TestMain
// can lower it.
var cpuLevel = currentLevel()

func currentLevel() level {
	switch {
	case useAVX512:
		return levelAVX512
	case useAVX2:
		return levelAVX2
	}
	return levelScalar
}

// forceLevel switches the kernels to l, which must be at most cpuLevel,
// and returns what switches them back.
func forceLevel(l level) (restore func()) {
	if l > cpuLevel {
		panic("forceLevel " + l.String() + " on a " + cpuLevel.String() + " CPU")
	}
	old2, old512 := useAVX2, useAVX512
	useAVX2, useAVX512 = l >= levelAVX2, l >= levelAVX512
	return func() { useAVX2, useAVX512 = old2, old512 }
}

// setLevel runs the rest of the test at level l, or skips it, naming the
// CPU feature that is missing, when the CPU does not have l.
func setLevel(t testing.TB, l level) {
	t.Helper()
	if l > cpuLevel {
		t.Skipf("no %v kernels: %s", l, missingFeatures(l))
	}
	t.Cleanup(forceLevel(l))
}

// eachLevel runs f in a subtest named by each level of ls, at that level.
func eachLevel(t *testing.T, ls []level, f func(t *testing.T, l level)) {
	for _, l := range ls {
		t.Run(l.String(), func(t *testing.T) {
			setLevel(t, l)
			f(t, l)
		})
	}
}

func TestMain(m *testing.M) {
	flag.Parse()
	if *scalarFlag {
		forceLevel(levelScalar)
	}
	os.Exit(m.Run())
}

// TestLevels runs the reference tests at every level, so a plain go test
// covers the scalar kernels and each set of vector kernels against the
// exact reference, not only against each other.
func TestLevels(t *testing.T) {
	plain := currentLevel() // the level the tests run at by themselves
	eachLevel(t, allLevels, func(t *testing.T, l level) {
		if raceEnabled && l == plain {
			// The kernels are one goroutine's arithmetic, and the tests ran
			// at this level by themselves: under the race detector a second
			// run (6 s) checks nothing more. .ci/run runs every level
			// without it.
			t.Skipf("the tests ran at %v already; left to the run without the race detector", l)
		}
		t.Run("ReduceRandom", testReduceRandom)
		t.Run("FinishRandom", testFinishRandom)
		t.Run("Cases", TestCases)
		t.Run("IntCases", TestIntCases)
		t.Run("Lanes8", TestLanes8)
		t.Run("MinMaxOrderFree", TestMinMaxOrderFree)
		t.Run("WidenNarrow", TestWidenNarrow)
	})
}

// edgeElems are the values that break vector kernels: NaNs of both signs
// with payloads (quiet and signalling), ±Inf, ±0, the extreme subnormals
// and normals, values around 1 whose sums and products tie, and the
// extreme integers.
func edgeElems(dt DType) []uint64 {
	w := dt.Size() * 8
	ones := ^uint64(0) >> (64 - w)
	sign := uint64(1) << (w - 1)
	f, ok := formats[dt]
	if !ok {
		return []uint64{0, 1, 2, ones, ones - 1, sign, sign - 1, sign + 1, ones >> 2, 0x5a & ones}
	}
	mb := uint(f.p - 1)
	inf := f.infBits(false)
	one := uint64(f.emax) << mb
	var e []uint64
	for _, v := range []uint64{
		0, inf, inf | 1, inf | 1<<(mb-1), inf | 1<<(mb-1) | 5, inf | (1<<mb - 1), inf | 3,
		1, 2, 3, 1<<mb - 1, 1 << mb, 1<<mb + 1, inf - 1, inf - 2,
		one, one + 1, one + 2, one + 3, one - 1, one - 2, 1 << (w - 2),
		one - uint64(mb+1)<<mb,     // 2^-(mb+1): half an ulp of 1
		one - uint64(mb+1)<<mb + 1, // just above
		one - uint64(mb)<<mb,       // an ulp of 1
		uint64(f.emax+f.p)<<mb + 1, // large odd-mantissa values whose sums tie
	} {
		e = append(e, v, v|sign)
	}
	return e
}

// vecInputs fills a and b with random elements, a quarter of them edge
// values, some equal or opposite pairs.
func vecInputs(rng *rand.Rand, dt DType, a, b []byte) {
	edges := edgeElems(dt)
	n := len(a) / dt.Size()
	for i := range n {
		for _, buf := range [][]byte{a, b} {
			v := randElem(rng, dt)
			if rng.IntN(4) == 0 {
				v = edges[rng.IntN(len(edges))]
			}
			putElem(buf, dt, i, v)
		}
		if rng.IntN(16) == 0 {
			x := elem(a, dt, i)
			if rng.IntN(2) == 0 {
				x ^= 1 << (dt.Size()*8 - 1)
			}
			putElem(b, dt, i, x)
		}
	}
}

// diffVector reduces a and b with the scalar kernels and at level l into
// buffers at the given byte offsets and reports the first difference:
// with dst separate, and for aliases > 1 as a, and > 2 as b.
func diffVector(t *testing.T, l level, dt DType, op Op, a, b []byte, offs [3]int, aliases int) bool {
	t.Helper()
	n := len(a)
	place := func(src []byte, off int) (all, view []byte) {
		all = bytes.Repeat([]byte{0xa5}, n+64)
		copy(all[off:], src)
		return all, all[off : off+n]
	}
	d := func(l level, alias int) []byte {
		defer forceLevel(l)()
		_, x := place(a, offs[0])
		_, y := place(b, offs[1])
		all, z := place(make([]byte, n), offs[2])
		var err error
		switch alias {
		case 0:
			err = Reduce3(z, x, y, dt, op)
		case 1:
			err = Reduce(x, y, dt, op)
			z = x
		case 2:
			err = Reduce3(y, x, y, dt, op)
			z = y
		}
		if err != nil {
			t.Fatal(err)
		}
		if g := all[offs[2]+n:]; !bytes.Equal(g, bytes.Repeat([]byte{0xa5}, len(g))) {
			t.Fatalf("%v %v %v n=%d offsets %v: wrote past the end", l, dt, op, n/dt.Size(), offs)
		}
		return z
	}
	for alias := range aliases {
		want, got := d(levelScalar, alias), d(l, alias)
		if bytes.Equal(want, got) {
			continue
		}
		for i := range n / dt.Size() {
			if w, g := elem(want, dt, i), elem(got, dt, i); w != g {
				t.Errorf("%v %v %v n=%d offsets %v alias %d: element %d: %#x op %#x = %#x, scalar %#x",
					l, dt, op, n/dt.Size(), offs, alias, i, elem(a, dt, i), elem(b, dt, i), g, w)
				return false
			}
		}
	}
	return true
}

// TestVectorMatchesScalar: at each vector level, every dtype and op,
// every length 0..300 and a few large ones (all tails around the 32- and
// 64-byte blocks), at element-aligned offsets that move the buffers
// against 64-byte boundaries, and misaligned ones (the bounce path, whose
// chunks the vector kernels also run), with dst separate from, or the
// same as, an operand.
func TestVectorMatchesScalar(t *testing.T) {
	rng := newRand(t)
	eachLevel(t, vectorLevels, func(t *testing.T, l level) {
		for _, dt := range allDTypes {
			for _, op := range []Op{Sum, Prod, Max, Min} {
				t.Run(dt.String()+"/"+op.String(), func(t *testing.T) {
					sz := dt.Size()
					lens := []int{1000, 4099, bounceBytes/sz*3 + 5, 1<<16 + 13}
					upTo := 300
					if raceEnabled {
						// One goroutine's arithmetic: 32 s under the race
						// detector for nothing it can check. Every path stays
						// (two 64-byte blocks, the odd 32, each tail, the
						// bounce buffer's chunks); .ci/run runs all lengths
						// without it.
						lens, upTo = []int{bounceBytes/sz*3 + 5}, 130
					}
					for n := range upTo + 1 {
						lens = append(lens, n)
					}
					for _, n := range lens {
						a, b := make([]byte, n*sz), make([]byte, n*sz)
						vecInputs(rng, dt, a, b)
						offs := [][3]int{{0, 0, 0}}
						for range 2 {
							o := [3]int{}
							for j := range o {
								o[j] = rng.IntN(64/sz) * sz
							}
							offs = append(offs, o)
						}
						offs = append(offs, [3]int{1, rng.IntN(64), rng.IntN(64)})
						for _, o := range offs {
							if !diffVector(t, l, dt, op, a, b, o, 3) {
								return
							}
						}
					}
				})
			}
		}
	})
}

// TestVectorPairs16 runs, at each vector level, every float16 and
// bfloat16 bit pattern against each edge value and some random ones, both
// ways round; and every pair of edge values of the other types.
func TestVectorPairs16(t *testing.T) {
	rng := newRand(t)
	eachLevel(t, vectorLevels, func(t *testing.T, l level) {
		for _, dt := range []DType{Float16, BFloat16} {
			others := edgeElems(dt)
			for range 8 {
				others = append(others, rng.Uint64()&0xffff)
			}
			if raceEnabled {
				// One goroutine's arithmetic: every pattern against every
				// other took 23 s under the race detector for nothing it
				// can check. A fifth of them (of both signs, and a random
				// one) run here; .ci/run runs them all without it.
				var some []uint64
				for i := 0; i < len(others); i += 5 {
					some = append(some, others[i])
				}
				others = some
			}
			all := make([]byte, 2<<16)
			for i := range 1 << 16 {
				putElem(all, dt, i, uint64(i))
			}
			other := make([]byte, len(all))
			for _, y := range others {
				for i := range 1 << 16 {
					putElem(other, dt, i, y)
				}
				for _, op := range []Op{Sum, Prod, Max, Min} {
					if !diffVector(t, l, dt, op, all, other, [3]int{}, 1) || !diffVector(t, l, dt, op, other, all, [3]int{}, 1) {
						return
					}
				}
			}
		}
		for _, dt := range []DType{Float32, Float64, Int64, Uint64, Int32, Uint32, Int8, Uint8} {
			e := edgeElems(dt)
			a, b := make([]byte, len(e)*len(e)*dt.Size()), make([]byte, len(e)*len(e)*dt.Size())
			for i, x := range e {
				for j, y := range e {
					putElem(a, dt, i*len(e)+j, x)
					putElem(b, dt, i*len(e)+j, y)
				}
			}
			for _, op := range []Op{Sum, Prod, Max, Min} {
				if !diffVector(t, l, dt, op, a, b, [3]int{}, 3) {
					return
				}
			}
		}
	})
}

// TestVectorWidenNarrow: at each vector level, F16C's Widen of every
// float16 (signalling NaNs included) and Narrow of random and edge
// float32s give the scalar bits, at any alignment, for every count of
// elements modulo 16 (AVX-512 blocks, then an AVX2 one, then scalar) and
// every short count.
func TestVectorWidenNarrow(t *testing.T) {
	rng := newRand(t)
	src := make([]byte, 2<<16+3)
	for i := range 1 << 16 {
		putElem(src[1:], Float16, i, uint64(i))
	}
	f := make([]byte, 4*(1<<16)+4)
	edges := append(edgeElems(Float32),
		0x477ff000, 0x477fefff, 0x477fe000, // around float16's largest finite and its overflow tie
		0x33000000, 0x33000001, 0x32ffffff, 0x33c00000, // around the smallest float16 subnormal's ties
		0x387fe000, 0x387ff000, 0x38800000) // around the largest subnormal and the smallest normal
	for i := range 1 << 16 {
		v := rng.Uint32()
		switch rng.IntN(4) {
		case 0:
			v = uint32(edges[rng.IntN(len(edges))])
		case 1: // float16's range, ties and near-ties
			v = v&0x8001ffff | uint32(100+rng.IntN(50))<<23
			if rng.IntN(2) == 0 {
				v &^= 0x1fff
				v |= 0x1000 - uint32(rng.IntN(3)) + 1
			}
		}
		putElem(f[1:], Float32, i, uint64(v))
	}
	// (first element, count): the whole table less 0..16, and 0..40 from
	// anywhere in it.
	var spans [][2]int
	for k := range 17 {
		spans = append(spans, [2]int{0, 1<<16 - k})
	}
	for n := range 41 {
		spans = append(spans, [2]int{rng.IntN(1<<16 - n + 1), n})
	}
	eachLevel(t, vectorLevels, func(t *testing.T, l level) {
		for _, sp := range spans {
			for _, off := range [][2]int{{0, 0}, {1, 3}, {1, 0}} {
				s := src[off[0]+2*sp[0] : off[0]+2*(sp[0]+sp[1])]
				d := func(l level) []byte {
					defer forceLevel(l)()
					buf := make([]byte, 2*len(s)+4)
					if err := Widen(buf[off[1]:], s, Float16); err != nil {
						t.Fatal(err)
					}
					return buf
				}
				if w, g := d(levelScalar), d(l); !bytes.Equal(w, g) {
					for i := 0; i < len(w); i++ {
						if w[i] != g[i] {
							t.Fatalf("Widen elements %v offsets %v: byte %d: %v %#x, scalar %#x", sp, off, i, l, g[i], w[i])
						}
					}
				}
			}
			for _, off := range [][2]int{{0, 0}, {1, 1}, {1, 0}} {
				s := f[off[0]+4*sp[0] : off[0]+4*(sp[0]+sp[1])]
				d := func(l level) []byte {
					defer forceLevel(l)()
					buf := make([]byte, len(s)/2+2)
					if err := Narrow(buf[off[1]:off[1]+len(s)/2], s, Float16, 1); err != nil {
						t.Fatal(err)
					}
					return buf
				}
				w, g := d(levelScalar), d(l)
				for i := 0; i < len(w); i += 2 {
					if w[i] != g[i] || w[i+1] != g[i+1] {
						t.Fatalf("Narrow elements %v offsets %v: byte %d: %v %#x, scalar %#x", sp, off, i, l, g[i:i+2], w[i:i+2])
					}
				}
			}
		}
	})
}
