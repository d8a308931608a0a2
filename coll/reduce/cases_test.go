package reduce

import (
	"math"
	"math/big"
	"testing"
)

// encInt encodes an integer element, wrapped to the width.
func encInt(dt DType, v int64) uint64 {
	if w := dt.Size() * 8; w < 64 {
		return uint64(v) & (1<<w - 1)
	}
	return uint64(v)
}

// enc encodes a float element from a float64 (NaN as the default quiet
// NaN), rounding to the type.
func enc(dt DType, v float64) uint64 {
	f := formats[dt]
	switch {
	case math.IsNaN(v):
		return f.nanBits()
	case math.IsInf(v, 0):
		return f.infBits(v < 0)
	}
	return f.round(new(big.Rat).SetFloat64(v), math.Signbit(v))
}

func one(t *testing.T, dt DType, op Op, a, b uint64) uint64 {
	t.Helper()
	x, y := make([]byte, dt.Size()), make([]byte, dt.Size())
	putElem(x, dt, 0, a)
	putElem(y, dt, 0, b)
	if err := Reduce(x, y, dt, op); err != nil {
		t.Fatal(err)
	}
	return elem(x, dt, 0)
}

var negZero = math.Copysign(0, -1)

// TestIntCases: Sum and Prod wrap around; Min and Max follow the sign.
func TestIntCases(t *testing.T) {
	cases := []struct {
		name    string
		dt      DType
		op      Op
		a, b, w int64
	}{
		{"int8 sum wraps", Int8, Sum, 127, 1, -128},
		{"int8 avg sums", Int8, Avg, 100, 100, -56},
		{"uint8 sum wraps", Uint8, Sum, 255, 1, 0},
		{"int8 prod wraps", Int8, Prod, -128, -1, -128},
		{"uint8 prod wraps", Uint8, Prod, 16, 16, 0},
		{"int32 sum wraps", Int32, Sum, math.MaxInt32, 1, math.MinInt32},
		{"uint32 prod wraps", Uint32, Prod, 65536, 65536, 0},
		{"int32 prod wraps", Int32, Prod, 65537, 65537, 131073},
		{"int64 sum wraps", Int64, Sum, math.MaxInt64, 1, math.MinInt64},
		{"uint64 sum wraps", Uint64, Sum, -1, 2, 1},
		{"int8 max signed", Int8, Max, -1, 1, 1},
		{"uint8 max unsigned", Uint8, Max, -1, 1, 255},
		{"int32 min signed", Int32, Min, -1, 0, -1},
		{"uint32 min unsigned", Uint32, Min, -1, 0, 0},
		{"int64 min signed", Int64, Min, math.MinInt64, math.MaxInt64, math.MinInt64},
		{"uint64 max unsigned", Uint64, Max, -1, 1, -1},
	}
	for _, c := range cases {
		got := one(t, c.dt, c.op, encInt(c.dt, c.a), encInt(c.dt, c.b))
		if w := encInt(c.dt, c.w); got != w {
			t.Errorf("%s: %v %v %v %v = %#x, want %#x", c.name, c.dt, c.a, c.op, c.b, got, w)
		}
	}
}

// TestCases are the numerics the package comment promises, one by one.
func TestCases(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	half, bf := math.Ldexp(1, -11), math.Ldexp(1, -8) // half an ulp of 1.0
	cases := []struct {
		name    string
		dt      DType
		op      Op
		a, b, w float64
	}{
		// NaN wins Min and Max, in either position; ±0 are ordered.
		{"float max nan first", Float32, Max, nan, 1, nan},
		{"float max nan second", Float32, Max, 1, nan, nan},
		{"float min nan first", Float32, Min, nan, -inf, nan},
		{"float min nan second", Float32, Min, -inf, nan, nan},
		{"double max nan", Float64, Max, inf, nan, nan},
		{"half min nan", Float16, Min, nan, 3, nan},
		{"bf16 max nan", BFloat16, Max, 3, nan, nan},
		{"float max +0 -0", Float32, Max, 0, negZero, 0},
		{"float max -0 +0", Float32, Max, negZero, 0, 0},
		{"float min +0 -0", Float32, Min, 0, negZero, negZero},
		{"float min -0 +0", Float32, Min, negZero, 0, negZero},
		{"double min -0 +0", Float64, Min, 0, negZero, negZero},
		{"half max -0 +0", Float16, Max, negZero, 0, 0},
		{"bf16 min +0 -0", BFloat16, Min, 0, negZero, negZero},
		{"float min infs", Float32, Min, inf, -inf, -inf},

		// IEEE sums and products.
		{"float inf-inf", Float32, Sum, inf, -inf, nan},
		{"half inf-inf", Float16, Sum, inf, -inf, nan},
		{"double 0*inf", Float64, Prod, 0, inf, nan},
		{"bf16 0*inf", BFloat16, Prod, 0, -inf, nan},
		{"half x-x is +0", Float16, Sum, 3, -3, 0},
		{"half -0+-0 is -0", Float16, Sum, negZero, negZero, negZero},

		// float16/bfloat16 round to nearest, ties to even.
		{"half tie down to even", Float16, Sum, 1, half, 1},
		{"half tie up to even", Float16, Sum, 1 + 2*half, half, 1 + 4*half},
		{"half above tie", Float16, Sum, 1, half + half/2, 1 + 2*half},
		{"half overflow tie to inf", Float16, Sum, 65504, 16, inf},
		{"half below overflow", Float16, Sum, 65504, 8, 65504},
		{"half negative overflow", Float16, Sum, -65504, -16, -inf},
		{"half prod overflow", Float16, Prod, 256, 256, inf},
		{"half subnormal sum", Float16, Sum, 0x1p-24, 0x1p-24, 0x1p-23},
		{"half subnormal tie to 0", Float16, Prod, 0x1p-24, 0.5, 0},
		{"half subnormal tie to even", Float16, Prod, 0x3p-24, 0.5, 0x2p-24},
		{"half subnormal rounds up", Float16, Prod, 0x1p-24, 0.75, 0x1p-24},
		{"half subnormal to normal", Float16, Sum, 0x3ffp-24, 0x1p-24, 0x1p-14},
		{"bf16 tie down to even", BFloat16, Sum, 1, bf, 1},
		{"bf16 tie up to even", BFloat16, Sum, 1 + 2*bf, bf, 1 + 4*bf},
		{"bf16 prod overflow", BFloat16, Prod, 0x1p100, 0x1p100, inf},
		{"bf16 subnormal", BFloat16, Prod, 0x1p-120, 0x1p-13, 0x1p-133},
		{"bf16 underflow tie to 0", BFloat16, Prod, 0x1p-120, 0x1p-14, 0},
		{"float tie", Float32, Sum, 1, 0x1p-24, 1},
	}
	for _, c := range cases {
		got := one(t, c.dt, c.op, enc(c.dt, c.a), enc(c.dt, c.b))
		if math.IsNaN(c.w) {
			if !isNaNBits(c.dt, got) {
				t.Errorf("%s: %v %v %v %v = %#x, want a NaN", c.name, c.dt, c.a, c.op, c.b, got)
			}
			continue
		}
		if w := enc(c.dt, c.w); got != w {
			t.Errorf("%s: %v %v %v %v = %#x, want %#x (%v)", c.name, c.dt, c.a, c.op, c.b, got, w, c.w)
		}
	}
}

// TestMinMaxOrderFree: Min and Max give the same bits in any order of
// operands and grouping, NaNs and ±0 included, and pick an operand.
func TestMinMaxOrderFree(t *testing.T) {
	rng := newRand(t)
	const n = 2000
	for _, dt := range allDTypes {
		x, y, z := randBuf(rng, dt, n), randBuf(rng, dt, n), randBuf(rng, dt, n)
		if f, ok := formats[dt]; ok { // plenty of NaN pairs
			for i := range n / 4 {
				putElem(x, dt, i, f.nanBits()^uint64(rng.IntN(4)))
				putElem(y, dt, i, f.infBits(rng.IntN(2) == 0)|uint64(1+rng.IntN(4)))
			}
		}
		for _, op := range []Op{Max, Min} {
			r := func(a, b []byte) []byte {
				d := make([]byte, len(a))
				if err := Reduce3(d, a, b, dt, op); err != nil {
					t.Fatal(err)
				}
				return d
			}
			xy, yx := r(x, y), r(y, x)
			left, right := r(xy, z), r(x, r(y, z))
			for i := range n {
				a, b := elem(x, dt, i), elem(y, dt, i)
				g := elem(xy, dt, i)
				switch {
				case g != elem(yx, dt, i):
					t.Fatalf("%v %v(%#x, %#x) = %#x, but %#x swapped", dt, op, a, b, g, elem(yx, dt, i))
				case g != a && g != b:
					t.Fatalf("%v %v(%#x, %#x) = %#x, not an operand", dt, op, a, b, g)
				case elem(left, dt, i) != elem(right, dt, i):
					t.Fatalf("%v %v of %#x, %#x, %#x: %#x grouped left, %#x right", dt, op, a, b, elem(z, dt, i), elem(left, dt, i), elem(right, dt, i))
				}
			}
		}
	}
}

// TestFinishCases: integer Avg truncates toward zero after the wrapped
// sum; float Avg is the correctly rounded quotient.
func TestFinishCases(t *testing.T) {
	intCases := []struct {
		dt      DType
		v       int64
		n       int
		w       int64
		comment string
	}{
		{Int32, -7, 2, -3, "truncates toward zero"},
		{Int32, 7, 2, 3, ""},
		{Int8, -56, 2, -28, "100+100 wrapped to -56 first"},
		{Uint8, 255, 2, 127, ""},
		{Int8, -128, 200, 0, "n beyond the type's range"},
		{Int8, -128, 128, -1, ""},
		{Uint32, math.MaxUint32, math.MaxInt32, 2, ""},
		{Int64, math.MinInt64, 2, math.MinInt64 / 2, ""},
		{Int64, math.MinInt64, 3, math.MinInt64 / 3, ""},
		{Uint64, -1, 3, 0x5555555555555555, ""},
	}
	for _, c := range intCases {
		buf := make([]byte, c.dt.Size())
		putElem(buf, c.dt, 0, encInt(c.dt, c.v))
		if err := Finish(buf, c.dt, Avg, c.n); err != nil {
			t.Fatal(err)
		}
		if got, w := elem(buf, c.dt, 0), encInt(c.dt, c.w); got != w {
			t.Errorf("%v avg of %v over %d = %#x, want %#x %s", c.dt, c.v, c.n, got, w, c.comment)
		}
	}
	cases := []struct {
		dt      DType
		v       float64
		n       int
		w       float64
		comment string
	}{
		{Float32, 1, 3, float64(float32(1.0 / 3)), ""},
		{Float64, 1, 3, 1.0 / 3, ""},
		{Float16, 1, 3, 0x1.554p-2, "1/3 in half"},
		{Float16, 3, 2, 1.5, ""},
		{BFloat16, 1, 3, 0x1.56p-2, "1/3 in bfloat16"},
		{Float16, 0x1p-24, 2, 0, "half a subnormal ulp: tie to even"},
		{Float16, 0x3p-24, 2, 0x2p-24, "tie to even"},
		{Float16, math.Inf(-1), 4, math.Inf(-1), ""},
		{Float32, negZero, 4, negZero, ""},
	}
	for _, c := range cases {
		buf := make([]byte, c.dt.Size())
		putElem(buf, c.dt, 0, enc(c.dt, c.v))
		if err := Finish(buf, c.dt, Avg, c.n); err != nil {
			t.Fatal(err)
		}
		if got, w := elem(buf, c.dt, 0), enc(c.dt, c.w); got != w {
			t.Errorf("%v avg of %v over %d = %#x, want %#x (%v) %s", c.dt, c.v, c.n, got, w, c.w, c.comment)
		}
	}
}

// TestLanes8 runs the SWAR kernels over every pair of bytes, against
// scalar Go.
func TestLanes8(t *testing.T) {
	a, b := make([]byte, 1<<16), make([]byte, 1<<16)
	for i := range a {
		a[i], b[i] = byte(i), byte(i>>8)
	}
	ref := map[DType]map[Op]func(x, y byte) byte{
		Uint8: {
			Sum:  func(x, y byte) byte { return x + y },
			Prod: func(x, y byte) byte { return x * y },
			Max:  func(x, y byte) byte { return max(x, y) },
			Min:  func(x, y byte) byte { return min(x, y) },
		},
		Int8: {
			Sum:  func(x, y byte) byte { return byte(int8(x) + int8(y)) },
			Prod: func(x, y byte) byte { return byte(int8(x) * int8(y)) },
			Max:  func(x, y byte) byte { return byte(max(int8(x), int8(y))) },
			Min:  func(x, y byte) byte { return byte(min(int8(x), int8(y))) },
		},
	}
	for dt, ops := range ref {
		for op, f := range ops {
			for _, off := range []int{0, 3} { // the word loop, and the byte tail at either end
				d := make([]byte, len(a)+off)[off:]
				if err := Reduce3(d, a, b, dt, op); err != nil {
					t.Fatal(err)
				}
				for i := range d {
					if w := f(a[i], b[i]); d[i] != w {
						t.Fatalf("%v %v(%#x, %#x) = %#x, want %#x", dt, op, a[i], b[i], d[i], w)
					}
				}
			}
		}
	}
}
