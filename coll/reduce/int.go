package reduce

import "encoding/binary"

// Integer kernels. Sum and Prod wrap around (two's complement), so one
// unsigned kernel serves both signednesses. The 8-bit kernels handle
// eight lanes per uint64 word (SWAR); the words are read with
// encoding/binary, which is one unaligned load on amd64 and arm64 and
// keeps lanes in order on any host.

const lanes8 = 0x8080808080808080 // the top bit of every byte lane

var le = binary.LittleEndian

func add8(d, a, b []byte) {
	for len(d) >= 32 && len(a) >= 32 && len(b) >= 32 {
		dd, aa, bb := (*[32]byte)(d), (*[32]byte)(a), (*[32]byte)(b)
		le.PutUint64(dd[0:], addLanes8(le.Uint64(aa[0:]), le.Uint64(bb[0:])))
		le.PutUint64(dd[8:], addLanes8(le.Uint64(aa[8:]), le.Uint64(bb[8:])))
		le.PutUint64(dd[16:], addLanes8(le.Uint64(aa[16:]), le.Uint64(bb[16:])))
		le.PutUint64(dd[24:], addLanes8(le.Uint64(aa[24:]), le.Uint64(bb[24:])))
		d, a, b = d[32:], a[32:], b[32:]
	}
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = a[i] + b[i]
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

func maxU8(d, a, b []byte) {
	for len(d) >= 8 && len(a) >= 8 && len(b) >= 8 {
		x, y := le.Uint64(a), le.Uint64(b)
		le.PutUint64(d, select8(ltLanes8(x, y), y, x))
		d, a, b = d[8:], a[8:], b[8:]
	}
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = max(a[i], b[i])
	}
}

func minU8(d, a, b []byte) {
	for len(d) >= 8 && len(a) >= 8 && len(b) >= 8 {
		x, y := le.Uint64(a), le.Uint64(b)
		le.PutUint64(d, select8(ltLanes8(x, y), x, y))
		d, a, b = d[8:], a[8:], b[8:]
	}
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = min(a[i], b[i])
	}
}

// The signed 8-bit kernels compare with the sign bits flipped, which maps
// int8 order onto uint8 order, and select from the unflipped lanes.

func maxI8(d, a, b []byte) {
	for len(d) >= 8 && len(a) >= 8 && len(b) >= 8 {
		x, y := le.Uint64(a), le.Uint64(b)
		le.PutUint64(d, select8(ltLanes8(x^lanes8, y^lanes8), y, x))
		d, a, b = d[8:], a[8:], b[8:]
	}
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = byte(max(int8(a[i]), int8(b[i])))
	}
}

func minI8(d, a, b []byte) {
	for len(d) >= 8 && len(a) >= 8 && len(b) >= 8 {
		x, y := le.Uint64(a), le.Uint64(b)
		le.PutUint64(d, select8(ltLanes8(x^lanes8, y^lanes8), x, y))
		d, a, b = d[8:], a[8:], b[8:]
	}
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = byte(min(int8(a[i]), int8(b[i])))
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
