package reduce

import "math"

// float16 and bfloat16: conversions to and from float32 (and, for Avg's
// division, from float64), and the Sum and Prod kernels, which widen,
// operate in float32 and round back (see the package comment). Min and
// Max need no conversion (minmax.go).

const (
	f16Inf  = 0x7c00
	bf16Inf = 0x7f80
)

// f16Table holds every float16 widened to float32 (256 KiB): one load
// per element, with no branch on subnormals, which gradients have plenty of.
var f16Table [1 << 16]float32

func init() {
	for h := range f16Table {
		f16Table[h] = f16ToF32(uint16(h))
	}
}

// f16ToF32 widens a float16, keeping NaN payloads.
func f16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // Inf, NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0: // normal: rebias the exponent from 15 to 127
		return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
	default: // zero, subnormal: man × 2^-24, exact
		return math.Float32frombits(sign | math.Float32bits(float32(man)*0x1p-24))
	}
}

// f32ToF16 rounds a float32 to the nearest float16, ties to even. A NaN
// stays a NaN with its sign and top payload bits, made quiet.
func f32ToF16(f float32) uint16 {
	if f != f {
		return f16NaN(f)
	}
	return f16Finite(f)
}

// f16Finite is f32ToF16 for a float32 that is not a NaN. It is split off
// to fit the inlining budget: the kernels call it per element and check
// for a NaN themselves.
func f16Finite(f float32) uint16 {
	b := math.Float32bits(f)
	a := b & 0x7fffffff
	// Normal: rebias the exponent 127 to 15, round off 13 bits; a
	// carry out of the largest finite mantissa gives Inf.
	h := (a - (127-15)<<23 + 0xfff + (a>>13)&1) >> 13
	if a < 0x38800000 { // |f| < 2^-14: float16 subnormal or zero
		// In [0.5, 1) float32 has the spacing 2^-24 of float16
		// subnormals, so adding 0.5 makes the FPU round to that grid,
		// to nearest even; the low bits are then the float16 mantissa
		// (reaching 0x400, the smallest normal, when it rounds up).
		h = math.Float32bits(math.Float32frombits(a)+0.5) - 0x3f000000
	}
	if a >= 0x47800000 { // |f| >= 2^16
		h = f16Inf
	}
	return uint16(b>>16)&0x8000 | uint16(h)
}

func f16NaN(f float32) uint16 {
	b := math.Float32bits(f)
	return uint16(b>>16)&0x8000 | 0x7e00 | uint16(b>>13)&0x3ff
}

// f64ToF16Finite rounds a float64 that is not a NaN to the nearest
// float16, ties to even: f16Finite with the float64 layout. Rounding
// straight from float64 matters: through float32 it would round twice.
func f64ToF16Finite(q float64) uint16 {
	b := math.Float64bits(q)
	a := b &^ (1 << 63)
	// Normal: rebias 1023 to 15, round off 42 bits.
	h := (a - (1023-15)<<52 + 1<<41 - 1 + (a>>42)&1) >> 42
	if a < 0x3f10000000000000 { // |q| < 2^-14
		// Around 2^28 float64 has the spacing 2^-24 of float16 subnormals.
		h = math.Float64bits(math.Float64frombits(a)+0x1p28) - 0x41b0000000000000
	}
	if a >= 0x40f0000000000000 { // |q| >= 2^16
		h = f16Inf
	}
	return uint16(b>>48)&0x8000 | uint16(h)
}

// bf16ToF32 widens a bfloat16: it is the top half of a float32.
func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// f32ToBF16 rounds a float32 to the nearest bfloat16, ties to even. A NaN
// stays a NaN with its sign and top payload bits, made quiet.
func f32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16) // a carry into the exponent of the largest finite gives Inf
}

func addF16(d, a, b []uint16) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		f := f16Table[a[i]] + f16Table[b[i]]
		h := f16Finite(f)
		if f != f {
			h = f16NaN(f)
		}
		d[i] = h
	}
}

func mulF16(d, a, b []uint16) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		f := f16Table[a[i]] * f16Table[b[i]]
		h := f16Finite(f)
		if f != f {
			h = f16NaN(f)
		}
		d[i] = h
	}
}

// f64ToBF16Finite is f64ToF16Finite for bfloat16.
func f64ToBF16Finite(q float64) uint16 {
	b := math.Float64bits(q)
	a := b &^ (1 << 63)
	// Normal: rebias 1023 to 127, round off 45 bits.
	h := (a - (1023-127)<<52 + 1<<44 - 1 + (a>>45)&1) >> 45
	if a < 0x3810000000000000 { // |q| < 2^-126
		// Around 2^-81 float64 has the spacing 2^-133 of bfloat16 subnormals.
		h = math.Float64bits(math.Float64frombits(a)+0x1p-81) - 0x3ae0000000000000
	}
	if a >= 0x47f0000000000000 { // |q| >= 2^128
		h = bf16Inf
	}
	return uint16(b>>48)&0x8000 | uint16(h)
}

func addBF16(d, a, b []uint16) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = f32ToBF16(bf16ToF32(a[i]) + bf16ToF32(b[i]))
	}
}

func mulBF16(d, a, b []uint16) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = f32ToBF16(bf16ToF32(a[i]) * bf16ToF32(b[i]))
	}
}
