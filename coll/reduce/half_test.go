package reduce

import (
	"math"
	"math/big"
	"testing"
)

// conv describes one 16-bit type for the conversion tests.
type conv struct {
	dt       DType
	widen    func(uint16) float32
	narrow   func(float32) uint16
	narrow64 func(float64) uint16 // as Avg's Finish does it
	quiet    uint16               // the quiet bit of a NaN's mantissa
}

var convs = []conv{
	{Float16, func(h uint16) float32 { return f16Table[h] }, f32ToF16, func(q float64) uint16 {
		if q != q {
			return f16NaN(float32(q))
		}
		return f64ToF16Finite(q)
	}, 0x200},
	{BFloat16, bf16ToF32, f32ToBF16, func(q float64) uint16 {
		if q != q {
			return f32ToBF16(float32(q))
		}
		return f64ToBF16Finite(q)
	}, 0x40},
}

// TestHalfExhaustive checks, for all 65536 bit patterns of float16 and
// bfloat16: widening against the reference value (NaN payloads kept);
// narrowing back (identity, NaNs made quiet); and rounding at the
// midpoint to the next pattern up in magnitude, exactly (ties to even)
// and one float32 ulp to either side.
func TestHalfExhaustive(t *testing.T) {
	for _, c := range convs {
		t.Run(c.dt.String(), func(t *testing.T) {
			f := formats[c.dt]
			inf := uint16(f.infBits(false))
			bad := 0
			fail := func(format string, args ...any) {
				t.Helper()
				if bad++; bad <= 10 {
					t.Errorf(format, args...)
				}
			}
			for i := range 1 << 16 {
				h := uint16(i)
				w := c.widen(h)
				if c.dt == Float16 && math.Float32bits(w) != math.Float32bits(f16ToF32(h)) {
					fail("%#04x: table %#x, f16ToF32 %#x", h, math.Float32bits(w), math.Float32bits(f16ToF32(h)))
				}
				ref := f.decode(uint64(h))
				if ref.nan {
					// Same sign, mantissa shifted to the top of float32's.
					mbits := uint(f.p - 1)
					wantBits := uint32(h&0x8000)<<16 | 0x7f800000 | uint32(h)&(1<<mbits-1)<<(23-mbits)
					if math.Float32bits(w) != wantBits {
						fail("%#04x: widened to %#x, want NaN %#x", h, math.Float32bits(w), wantBits)
					}
					if got := c.narrow(w); got != h|c.quiet {
						fail("%#04x: NaN narrowed back to %#04x, want %#04x", h, got, h|c.quiet)
					}
					if got := c.narrow64(float64(w)); got != h|c.quiet {
						fail("%#04x: NaN narrowed back from float64 to %#04x, want %#04x", h, got, h|c.quiet)
					}
					continue
				}
				if rv := ref.float64(); float64(w) != rv || math.Signbit(float64(w)) != ref.neg {
					fail("%#04x: widened to %v, want %v", h, w, rv)
				}
				if got := c.narrow(w); got != h {
					fail("%#04x: round trip gives %#04x", h, got)
				}
				if got := c.narrow64(float64(w)); got != h {
					fail("%#04x: round trip through float64 gives %#04x", h, got)
				}
				if h&0x7fff >= inf {
					continue
				}
				// next is the neighbour one step away from zero; past the
				// largest finite that is Inf, whose "value" for rounding
				// is 2^(emax+1).
				next := h + 1
				v0 := math.Abs(ref.float64())
				v1 := math.Ldexp(1, f.emax+1)
				if next&0x7fff != inf {
					v1 = math.Abs(float64(c.widen(next)))
				}
				mid := float32((v0 + v1) / 2) // exact: one bit more than the type has
				if h&0x8000 != 0 {
					mid = -mid
				}
				even := h
				if h&1 == 1 {
					even = next
				}
				mb := math.Float32bits(mid)
				if got := c.narrow(mid); got != even {
					fail("%#04x: the midpoint %v to %#04x rounds to %#04x, want %#04x (even)", h, mid, next, got, even)
				}
				if got := c.narrow(math.Float32frombits(mb + 1)); got != next {
					fail("%#04x: just above the midpoint rounds to %#04x, want %#04x", h, got, next)
				}
				if got := c.narrow(math.Float32frombits(mb - 1)); got != h {
					fail("%#04x: just below the midpoint rounds to %#04x, want %#04x", h, got, h)
				}
				m64 := math.Float64bits(float64(mid))
				for _, x := range []struct {
					bits uint64
					want uint16
				}{{m64, even}, {m64 + 1, next}, {m64 - 1, h}} {
					if got := c.narrow64(math.Float64frombits(x.bits)); got != x.want {
						fail("%#04x: float64 %#x near the midpoint rounds to %#04x, want %#04x", h, x.bits, got, x.want)
					}
				}
			}
			if bad > 10 {
				t.Errorf("%d failures in all", bad)
			}
		})
	}
}

// TestHalfNarrowRandom narrows random float32 and float64 bit patterns
// (every exponent, subnormals, NaNs) and compares with the reference
// rounding.
func TestHalfNarrowRandom(t *testing.T) {
	rng := newRand(t)
	for _, c := range convs {
		f := formats[c.dt]
		bad := 0
		for range 1 << 14 {
			b := rng.Uint32()
			if rng.IntN(4) == 0 { // concentrate near the type's range
				e := 127 + f.emin - f.p - 1 + rng.IntN(f.emax-f.emin+f.p+3)
				b = b&0x807fffff | uint32(min(max(e, 0), 255))<<23
			}
			x := math.Float32frombits(b)
			got := c.narrow(x)
			if rng.IntN(2) == 0 { // a float64 near x, with bits below float32's
				x64 := math.Float64frombits(math.Float64bits(float64(x)) ^ rng.Uint64()&(1<<29-1))
				if x == x && !math.IsInf(float64(x), 0) {
					want := f.round(new(big.Rat).SetFloat64(x64), math.Signbit(x64))
					if got := c.narrow64(x64); uint64(got) != want {
						t.Errorf("%v: float64 %#x (%v) narrows to %#04x, want %#04x", c.dt, math.Float64bits(x64), x64, got, want)
					}
				}
			}
			var want uint64
			switch {
			case x != x:
				if !f.decode(uint64(got)).nan || got>>15 != uint16(b>>31) {
					t.Errorf("%v: NaN %#x narrows to %#04x", c.dt, b, got)
				}
				continue
			case math.IsInf(float64(x), 0):
				want = f.infBits(x < 0)
			default:
				want = f.round(new(big.Rat).SetFloat64(float64(x)), math.Signbit(float64(x)))
			}
			if uint64(got) != want {
				if bad++; bad <= 10 {
					t.Errorf("%v: %#08x (%v) narrows to %#04x, want %#04x", c.dt, b, x, got, want)
				}
			}
		}
	}
}
