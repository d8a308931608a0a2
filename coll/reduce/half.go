package reduce

import "math"

// float16 and bfloat16. Each element is widened to float32 (exact), the
// operation runs in float32, and the result is rounded back to nearest,
// ties to even. One float32 operation on two 16-bit operands followed by
// that rounding is the correctly rounded 16-bit result, because float32
// has more than 2p+2 bits for both (p = 11 and 8): the double rounding
// cannot go wrong, so this is what native half arithmetic gives.

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
// stays a NaN with its sign and top payload bits, made quiet. Written to
// stay under the inlining budget: the kernels call it per element.
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	a := b & 0x7fffffff
	var h uint32
	if a < 0x38800000 { // |f| < 2^-14: float16 subnormal or zero
		// In [0.5, 1) float32 has the spacing 2^-24 of float16
		// subnormals, so adding 0.5 makes the FPU round to that grid,
		// to nearest even; the low bits are then the float16 mantissa
		// (reaching 0x400, the smallest normal, when it rounds up).
		h = math.Float32bits(math.Float32frombits(a)+0.5) - 0x3f000000
	} else { // normal: rebias 127 to 15, round off 13 bits; a carry out of 0x7bff gives Inf
		h = (a - (127-15)<<23 + 0xfff + (a>>13)&1) >> 13
	}
	if a >= 0x47800000 { // |f| >= 2^16: overflow, Inf, NaN
		h = f16Inf
		if a > 0x7f800000 {
			h = 0x7e00 | (a>>13)&0x3ff
		}
	}
	return uint16(b>>16)&0x8000 | uint16(h)
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
		d[i] = f32ToF16(f16Table[a[i]] + f16Table[b[i]])
	}
}

func mulF16(d, a, b []uint16) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = f32ToF16(f16Table[a[i]] * f16Table[b[i]])
	}
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
