package reduce

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

var seedFlag = flag.Uint64("reduce.seed", 0, "seed for the randomized tests (0 picks one from the clock); a failure prints it")

// newRand logs its seed; a failing test repeats it with the command that
// replays the run.
func newRand(t *testing.T) *rand.Rand {
	t.Helper()
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d", seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replay with: go test -run '^%s$' -reduce.seed=%d ./coll/reduce", t.Name(), seed)
		}
	})
	return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
}

var (
	allDTypes = []DType{Int8, Uint8, Int32, Uint32, Int64, Uint64, Float16, BFloat16, Float32, Float64}
	allOps    = []Op{Sum, Prod, Max, Min, Avg}
)

// randElem draws element bits with the corner cases over-represented.
func randElem(rng *rand.Rand, dt DType) uint64 {
	w := dt.Size() * 8
	mask := uint64(1)<<w - 1
	if w == 64 {
		mask = ^uint64(0)
	}
	f, ok := formats[dt]
	if !ok {
		switch rng.IntN(8) {
		case 0:
			specials := []uint64{0, 1, mask, mask >> 1, 1 << (w - 1), 2, mask - 1, 1<<(w-1) + 1}
			return specials[rng.IntN(len(specials))]
		case 1:
			return uint64(rng.IntN(33)-16) & mask
		default:
			return rng.Uint64() & mask
		}
	}
	mbits := f.p - 1
	sign := uint64(rng.IntN(2)) << (w - 1)
	switch rng.IntN(16) {
	case 0, 1:
		specials := []uint64{
			0,                                   // zero
			f.infBits(false),                    // Inf
			f.nanBits(),                         // quiet NaN
			f.infBits(false) | 1,                // signalling NaN with a payload
			f.infBits(false) | 1<<(mbits-1) | 5, // quiet NaN with a payload
			1,                                   // smallest subnormal
			1<<mbits - 1,                        // largest subnormal
			1 << mbits,                          // smallest normal
			f.infBits(false) - 1,                // largest finite
			uint64(f.emax) << mbits,             // 1.0
		}
		return sign | specials[rng.IntN(len(specials))]
	case 2, 3, 4, 5, 6, 7, 8:
		// Near 1: sums and products of these round often, with ties.
		e := uint64(f.emax + rng.IntN(9) - 4)
		return sign | e<<mbits | rng.Uint64()&(1<<mbits-1)
	default:
		return rng.Uint64() & mask
	}
}

func randBuf(rng *rand.Rand, dt DType, n int) []byte {
	b := make([]byte, n*dt.Size())
	for i := range n {
		putElem(b, dt, i, randElem(rng, dt))
	}
	return b
}

// want is the reference result of one element: exact bits, any NaN, or
// either of two bit patterns.
type want struct {
	bits    uint64
	nan     bool
	alt     bool
	altBits uint64
}

func (w want) ok(dt DType, got uint64) bool {
	switch {
	case w.nan:
		return isNaNBits(dt, got)
	case w.alt:
		return got == w.bits || got == w.altBits
	}
	return got == w.bits
}

func refReduce(dt DType, op Op, a, b []byte) []want {
	n := len(a) / dt.Size()
	w := make([]want, n)
	for i := range n {
		x, y := elem(a, dt, i), elem(b, dt, i)
		if isFloat(dt) {
			o := op
			if o == Avg {
				o = Sum
			}
			w[i] = refFloat(dt, o, x, y)
		} else {
			w[i].bits = refInt(dt, op, x, y)
		}
	}
	return w
}

func isNaNBits(dt DType, bits uint64) bool {
	f, ok := formats[dt]
	return ok && f.decode(bits).nan
}

func checkResult(t *testing.T, label string, dt DType, got []byte, ws []want) {
	t.Helper()
	bad := 0
	for i, w := range ws {
		g := elem(got, dt, i)
		if w.ok(dt, g) {
			continue
		}
		if bad++; bad <= 5 {
			switch {
			case w.nan:
				t.Errorf("%s: element %d of %d: got %#x, want a NaN", label, i, len(ws), g)
			case w.alt:
				t.Errorf("%s: element %d of %d: got %#x, want %#x or %#x", label, i, len(ws), g, w.bits, w.altBits)
			default:
				t.Errorf("%s: element %d of %d: got %#x, want %#x", label, i, len(ws), g, w.bits)
			}
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d wrong elements in all", label, bad)
	}
}

// guarded places b at byte offset off inside a larger buffer filled with
// a guard pattern, so misaligned layouts are tested and stray writes seen.
type guarded struct {
	all []byte
	off int
	n   int
}

const guardLen = 16

func newGuarded(b []byte, off int) guarded {
	all := bytes.Repeat([]byte{0xa5}, guardLen+len(b)+guardLen)
	copy(all[guardLen+off:], b)
	return guarded{all, off, len(b)}
}

func (g guarded) buf() []byte { return g.all[guardLen+g.off : guardLen+g.off+g.n] }

func (g guarded) checkGuards(t *testing.T, label string) {
	t.Helper()
	for i, c := range g.all {
		if (i < guardLen+g.off || i >= guardLen+g.off+g.n) && c != 0xa5 {
			t.Errorf("%s: wrote outside the buffer at byte %d", label, i-guardLen-g.off)
			return
		}
	}
}

// TestReduceRandom checks every dtype × op against the reference on
// random data, for Reduce and Reduce3, aligned and misaligned, with dst
// aliasing an operand, across the bounce buffer's chunk boundary.
func TestReduceRandom(t *testing.T) { testReduceRandom(t) }

// TestReduceBigEndianPath runs TestReduceRandom as a big-endian host
// would: every call through the bounce buffers, decoding elements one by
// one with encoding/binary (to native little-endian order here).
func TestReduceBigEndianPath(t *testing.T) {
	if !littleEndian {
		t.Skip("big-endian host: TestReduceRandom covers it")
	}
	littleEndian = false
	defer func() { littleEndian = true }()
	testReduceRandom(t)
	testFinishRandom(t)
}

func testReduceRandom(t *testing.T) {
	rng := newRand(t)
	for _, dt := range allDTypes {
		for _, op := range allOps {
			t.Run(dt.String()+"/"+op.String(), func(t *testing.T) {
				lens := []int{0, 1, 2, 3, 5, 8, 9, 17, 31, 33, 64, 100, bounceBytes/dt.Size() + 7}
				for _, n := range lens {
					a, b := randBuf(rng, dt, n), randBuf(rng, dt, n)
					for i := range n {
						if rng.IntN(16) == 0 { // cancellation, equal values, ±0 pairs
							x := elem(a, dt, i)
							if isFloat(dt) && rng.IntN(2) == 0 {
								x ^= 1 << (dt.Size()*8 - 1)
							}
							putElem(b, dt, i, x)
						}
					}
					ws := refReduce(dt, op, a, b)
					offs := [][3]int{{0, 0, 0}, {1, 1, 1}, {1, 0, 3}, {0, 3, 5}, {2, 6, 4}}
					for _, o := range offs {
						label := fmt.Sprintf("n=%d offsets=%v", n, o)

						d, s := newGuarded(a, o[0]), newGuarded(b, o[1])
						if err := Reduce(d.buf(), s.buf(), dt, op); err != nil {
							t.Fatal(err)
						}
						checkResult(t, "Reduce "+label, dt, d.buf(), ws)
						d.checkGuards(t, "Reduce dst "+label)
						if !bytes.Equal(s.buf(), b) {
							t.Errorf("Reduce %s: src changed", label)
						}

						d, x, y := newGuarded(make([]byte, len(a)), o[2]), newGuarded(a, o[0]), newGuarded(b, o[1])
						if err := Reduce3(d.buf(), x.buf(), y.buf(), dt, op); err != nil {
							t.Fatal(err)
						}
						checkResult(t, "Reduce3 "+label, dt, d.buf(), ws)
						d.checkGuards(t, "Reduce3 dst "+label)
						if !bytes.Equal(x.buf(), a) || !bytes.Equal(y.buf(), b) {
							t.Errorf("Reduce3 %s: an operand changed", label)
						}

						x, y = newGuarded(a, o[0]), newGuarded(b, o[1])
						if err := Reduce3(x.buf(), x.buf(), y.buf(), dt, op); err != nil {
							t.Fatal(err)
						}
						checkResult(t, "Reduce3 dst=a "+label, dt, x.buf(), ws)
						x.checkGuards(t, "Reduce3 dst=a "+label)

						x, y = newGuarded(a, o[0]), newGuarded(b, o[1])
						if err := Reduce3(y.buf(), x.buf(), y.buf(), dt, op); err != nil {
							t.Fatal(err)
						}
						checkResult(t, "Reduce3 dst=b "+label, dt, y.buf(), ws)
						y.checkGuards(t, "Reduce3 dst=b "+label)
					}
					// src is dst: x op x.
					self := newGuarded(a, 1)
					if err := Reduce(self.buf(), self.buf(), dt, op); err != nil {
						t.Fatal(err)
					}
					checkResult(t, fmt.Sprintf("Reduce(x, x) n=%d", n), dt, self.buf(), refReduce(dt, op, a, a))
					if t.Failed() {
						return
					}
				}
			})
		}
	}
}

// TestFinishRandom checks Avg's division against the exact quotient
// rounded once, for several rank counts, aligned and misaligned, and that
// Finish leaves the other ops' results alone.
func TestFinishRandom(t *testing.T) { testFinishRandom(t) }

func testFinishRandom(t *testing.T) {
	rng := newRand(t)
	for _, dt := range allDTypes {
		t.Run(dt.String(), func(t *testing.T) {
			for _, n := range []int{1, 2, 3, 5, 7, 10, 255, 1000, 4097, 1<<20 + 3, 1<<27 - 1} {
				a := randBuf(rng, dt, bounceBytes/dt.Size()+5)
				ws := make([]want, len(a)/dt.Size())
				for i := range ws {
					x := elem(a, dt, i)
					switch {
					case n == 1:
						ws[i].bits = x
					case isFloat(dt):
						ws[i].bits, ws[i].nan = refFinishFloat(dt, x, n)
					default:
						ws[i].bits = refFinishInt(dt, x, n)
					}
				}
				for _, off := range []int{0, 1, 3} {
					g := newGuarded(a, off)
					if err := Finish(g.buf(), dt, Avg, n); err != nil {
						t.Fatal(err)
					}
					checkResult(t, fmt.Sprintf("avg n=%d off=%d", n, off), dt, g.buf(), ws)
					g.checkGuards(t, fmt.Sprintf("avg n=%d off=%d", n, off))
				}
				for _, op := range []Op{Sum, Prod, Max, Min} {
					b := bytes.Clone(a)
					if err := Finish(b, dt, op, n); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(a, b) {
						t.Errorf("Finish %v n=%d changed the buffer", op, n)
					}
				}
				if t.Failed() {
					return
				}
			}
		})
	}
}
