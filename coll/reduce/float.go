package reduce

import "math"

// Float kernels. Sum and Prod are the hardware's IEEE operations. Min and
// Max compare bit patterns through an integer key that orders them like
// the floats they encode, with -0 just below +0, and a NaN above
// everything for Max and below everything for Min, so a NaN operand wins;
// two NaNs keep a's. The result is always one operand's exact bits, and
// the loops compile to compares and conditional moves with no
// data-dependent branches.

func addF32(d, a, b []float32) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = a[i] + b[i]
	}
}

func mulF32(d, a, b []float32) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = a[i] * b[i]
	}
}

func addF64(d, a, b []float64) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = a[i] + b[i]
	}
}

func mulF64(d, a, b []float64) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = a[i] * b[i]
	}
}

// key32 is the order key of a float32 bit pattern; NaNs get nan.
func key32(x uint32, nan int32) int32 {
	m := int32(x & 0x7fffffff)
	k := m ^ -int32(x>>31) // negative: ^m = -m-1, so -0 sorts just below +0
	if m > 0x7f800000 {
		k = nan
	}
	return k
}

func maxF32(d, a, b []uint32) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		x, y := a[i], b[i]
		if key32(y, math.MaxInt32) > key32(x, math.MaxInt32) {
			x = y
		}
		d[i] = x
	}
}

func minF32(d, a, b []uint32) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		x, y := a[i], b[i]
		if key32(y, math.MinInt32) < key32(x, math.MinInt32) {
			x = y
		}
		d[i] = x
	}
}

// key64 is key32 for float64.
func key64(x uint64, nan int64) int64 {
	m := int64(x & 0x7fffffffffffffff)
	k := m ^ -int64(x>>63)
	if m > 0x7ff0000000000000 {
		k = nan
	}
	return k
}

func maxF64(d, a, b []uint64) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		x, y := a[i], b[i]
		if key64(y, math.MaxInt64) > key64(x, math.MaxInt64) {
			x = y
		}
		d[i] = x
	}
}

func minF64(d, a, b []uint64) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		x, y := a[i], b[i]
		if key64(y, math.MinInt64) < key64(x, math.MinInt64) {
			x = y
		}
		d[i] = x
	}
}

// key16 is key32 for float16 and bfloat16; inf is the type's +Inf bits.
func key16(x, inf uint16, nan int32) int32 {
	m := int32(x & 0x7fff)
	k := m ^ -int32(x>>15)
	if m > int32(inf) {
		k = nan
	}
	return k
}

func max16(d, a, b []uint16, inf uint16) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		x, y := a[i], b[i]
		if key16(y, inf, math.MaxInt32) > key16(x, inf, math.MaxInt32) {
			x = y
		}
		d[i] = x
	}
}

func min16(d, a, b []uint16, inf uint16) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		x, y := a[i], b[i]
		if key16(y, inf, math.MinInt32) < key16(x, inf, math.MinInt32) {
			x = y
		}
		d[i] = x
	}
}

// Avg's Finish for floats: the sum divided by n, correctly rounded.

func divF64(d []float64, n int) {
	fn := float64(n)
	for i := range d {
		d[i] /= fn
	}
}

// divF32 divides in float64 and rounds once. The exact quotient x/n of a
// 24-bit x is never closer than 2^-53 (relative) to a float32 rounding
// midpoint unless it is one, for n < 2^28, so rounding the float64
// quotient gives the correctly rounded float32.
func divF32(d []float32, n int) {
	fn := float64(n)
	for i := range d {
		d[i] = float32(float64(d[i]) / fn)
	}
}

// roundOdd32 rounds q to float32 toward zero and sets the lowest bit if
// that was inexact ("round to odd"). Rounding that to a format with at
// least two fewer bits, as the 16-bit types have, gives the same result
// as rounding q directly; plain round-to-nearest twice would not.
func roundOdd32(q float64) float32 {
	f := float32(q)
	if g := float64(f); g != q && q == q {
		b := math.Float32bits(f)
		if math.Abs(g) > math.Abs(q) {
			b-- // one step toward zero: f is finite and nonzero here
		}
		f = math.Float32frombits(b | 1)
	}
	return f
}

func divF16(d []uint16, n int) {
	fn := float64(n)
	for i := range d {
		d[i] = f32ToF16(roundOdd32(float64(f16Table[d[i]]) / fn))
	}
}

func divBF16(d []uint16, n int) {
	fn := float64(n)
	for i := range d {
		d[i] = f32ToBF16(roundOdd32(float64(bf16ToF32(d[i])) / fn))
	}
}
