package reduce

// Integer kernels. Sum and Prod wrap around (two's complement), so one
// unsigned kernel serves both signednesses. The 8-bit Sum, Min and Max
// handle eight lanes per uint64 word (SWAR).

const lanes8 = 0x8080808080808080 // the top bit of every byte lane

// The 8-bit kernels take the word path when all three buffers are 8-byte
// aligned, and finish, or do everything otherwise, a byte at a time. The
// word loops are functions of their own, kept from inlining: with the
// byte loop's slices live around them, the compiler spills the lane
// arithmetic to the stack (measured: 1.5-2x slower).

func add8(d, a, b []byte) {
	if aligned(d, 8) && aligned(a, 8) && aligned(b, 8) {
		addWords8(u64s(d), u64s(a), u64s(b))
		n := len(d) &^ 7
		d, a, b = d[n:], a[n:], b[n:]
	}
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = a[i] + b[i]
	}
}

//go:noinline
func addWords8(d, a, b []uint64) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = addLanes8(a[i], b[i])
	}
}

// addLanes8 adds byte lanes modulo 256: the low seven bits of each lane
// add without reaching the next lane, and the top bit is their carry
// XOR the operands' top bits.
func addLanes8(x, y uint64) uint64 {
	return ((x &^ lanes8) + (y &^ lanes8)) ^ ((x ^ y) & lanes8)
}

// ltLanes8 is 0xff in each byte lane where x < y (unsigned), 0 elsewhere.
func ltLanes8(x, y uint64) uint64 {
	// Per lane 0x80+x[6:0]-y[6:0] never borrows from the next lane; its
	// top bit says x[6:0] >= y[6:0]. x < y if the top bits decide it
	// (x7=0, y7=1), or they are equal and the low bits do.
	diff := (x | lanes8) - (y &^ lanes8)
	lt := ((^x & y) | (^(x ^ y) &^ diff)) & lanes8
	return (lt >> 7) * 0xff
}

// select8 picks x's lanes where m is 0xff and y's elsewhere.
func select8(m, x, y uint64) uint64 { return x&m | y&^m }

// maxLanes8 and minLanes8 serve uint8 with flip 0 and int8 with flip
// lanes8: flipping the sign bits maps int8 order onto uint8 order. They
// select from the unflipped lanes.
func maxLanes8(x, y, flip uint64) uint64 { return select8(ltLanes8(x^flip, y^flip), y, x) }

func minLanes8(x, y, flip uint64) uint64 { return select8(ltLanes8(x^flip, y^flip), x, y) }

func max8(d, a, b []byte, flip uint64) {
	if aligned(d, 8) && aligned(a, 8) && aligned(b, 8) {
		maxWords8(u64s(d), u64s(a), u64s(b), flip)
		n := len(d) &^ 7
		d, a, b = d[n:], a[n:], b[n:]
	}
	f := byte(flip)
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = max(a[i]^f, b[i]^f) ^ f
	}
}

func min8(d, a, b []byte, flip uint64) {
	if aligned(d, 8) && aligned(a, 8) && aligned(b, 8) {
		minWords8(u64s(d), u64s(a), u64s(b), flip)
		n := len(d) &^ 7
		d, a, b = d[n:], a[n:], b[n:]
	}
	f := byte(flip)
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = min(a[i]^f, b[i]^f) ^ f
	}
}

//go:noinline
func maxWords8(d, a, b []uint64, flip uint64) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = maxLanes8(a[i], b[i], flip)
	}
}

//go:noinline
func minWords8(d, a, b []uint64, flip uint64) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = minLanes8(a[i], b[i], flip)
	}
}

func mul8(d, a, b []byte) {
	for len(d) >= 8 && len(a) >= 8 && len(b) >= 8 {
		dd, aa, bb := (*[8]byte)(d), (*[8]byte)(a), (*[8]byte)(b)
		dd[0] = aa[0] * bb[0]
		dd[1] = aa[1] * bb[1]
		dd[2] = aa[2] * bb[2]
		dd[3] = aa[3] * bb[3]
		dd[4] = aa[4] * bb[4]
		dd[5] = aa[5] * bb[5]
		dd[6] = aa[6] * bb[6]
		dd[7] = aa[7] * bb[7]
		d, a, b = d[8:], a[8:], b[8:]
	}
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = a[i] * b[i]
	}
}

// The 32- and 64-bit kernels are plain loops: the bounds checks are
// hoisted by reslicing a and b to len(d), and the compiler emits CMOV
// for the builtin min and max.

func add32(d, a, b []uint32) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = a[i] + b[i]
	}
}

func mul32(d, a, b []uint32) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = a[i] * b[i]
	}
}

func maxU32(d, a, b []uint32) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = max(a[i], b[i])
	}
}

func minU32(d, a, b []uint32) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = min(a[i], b[i])
	}
}

func maxI32(d, a, b []int32) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = max(a[i], b[i])
	}
}

func minI32(d, a, b []int32) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = min(a[i], b[i])
	}
}

func add64(d, a, b []uint64) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = a[i] + b[i]
	}
}

func mul64(d, a, b []uint64) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = a[i] * b[i]
	}
}

func maxU64(d, a, b []uint64) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = max(a[i], b[i])
	}
}

func minU64(d, a, b []uint64) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = min(a[i], b[i])
	}
}

func maxI64(d, a, b []int64) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = max(a[i], b[i])
	}
}

func minI64(d, a, b []int64) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = min(a[i], b[i])
	}
}

// Avg's Finish for integers: the (wrapped) sum divided by n, truncating
// toward zero. Dividing in 64 bits keeps any n >= 2 exact, even one
// that does not fit the element type.

func divI8(d []byte, n int) {
	for i := range d {
		d[i] = byte(int64(int8(d[i])) / int64(n))
	}
}

func divU8(d []byte, n int) {
	for i := range d {
		d[i] = byte(uint64(d[i]) / uint64(n))
	}
}

func divI32(d []int32, n int) {
	for i := range d {
		d[i] = int32(int64(d[i]) / int64(n))
	}
}

func divU32(d []uint32, n int) {
	for i := range d {
		d[i] = uint32(uint64(d[i]) / uint64(n))
	}
}

func divI64(d []int64, n int) {
	for i := range d {
		d[i] /= int64(n)
	}
}

func divU64(d []uint64, n int) {
	for i := range d {
		d[i] /= uint64(n)
	}
}
