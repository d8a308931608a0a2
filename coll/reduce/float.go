package reduce

// Float Sum, Prod and Avg's division. Sum and Prod are the hardware's
// IEEE operations; Min and Max are in minmax.go.

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
// quotient gives the correctly rounded float32. For the 16-bit types the
// same holds for any n < 2^40.
func divF32(d []float32, n int) {
	fn := float64(n)
	for i := range d {
		d[i] = float32(float64(d[i]) / fn)
	}
}

func divF16(d []uint16, n int) {
	fn := float64(n)
	for i := range d {
		q := float64(f16Table[d[i]]) / fn
		h := f64ToF16Finite(q)
		if q != q {
			h = f16NaN(float32(q))
		}
		d[i] = h
	}
}

func divBF16(d []uint16, n int) {
	fn := float64(n)
	for i := range d {
		q := float64(bf16ToF32(d[i])) / fn
		h := f64ToBF16Finite(q)
		if q != q {
			h = f32ToBF16(float32(q))
		}
		d[i] = h
	}
}
