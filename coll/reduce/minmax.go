package reduce

// Float Min and Max compare bit patterns as integers. The key of a w-bit
// pattern is the pattern with its magnitude bits flipped when the sign
// bit is set: as a signed integer it orders floats as they compare, with
// -0 just below +0, -NaNs below -Inf and +NaNs above +Inf. Adding Inf+1
// (Max) or subtracting it (Min), modulo 2^w, and comparing unsigned then
// rotates every NaN to the top (Max) or the bottom (Min) of the order, so
// a NaN operand wins. The key is a bijection, so no two patterns tie: Min
// and Max are commutative and associative bit for bit, two NaNs included.
// The result is always one operand's exact bits, and the loops compile to
// conditional moves, with no data-dependent branches.

const (
	f32Rot = 0x7f800001         // float32 Inf+1
	f64Rot = 0x7ff0000000000001 // float64 Inf+1
)

func key32(x uint32) uint32 { return x ^ uint32(int32(x)>>31)>>1 }

func maxF32(d, a, b []uint32) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		x, y := a[i], b[i]
		if key32(y)+f32Rot > key32(x)+f32Rot {
			x = y
		}
		d[i] = x
	}
}

func minF32(d, a, b []uint32) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		x, y := a[i], b[i]
		if key32(y)-f32Rot < key32(x)-f32Rot {
			x = y
		}
		d[i] = x
	}
}

func key64(x uint64) uint64 { return x ^ uint64(int64(x)>>63)>>1 }

func maxF64(d, a, b []uint64) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		x, y := a[i], b[i]
		if key64(y)+f64Rot > key64(x)+f64Rot {
			x = y
		}
		d[i] = x
	}
}

func minF64(d, a, b []uint64) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		x, y := a[i], b[i]
		if key64(y)-f64Rot < key64(x)-f64Rot {
			x = y
		}
		d[i] = x
	}
}

// The 16-bit Min and Max work on four lanes per uint64 word (SWAR) when
// all three buffers are 8-byte aligned, with the same keys lane by lane,
// and finish, or do everything otherwise, one element at a time.

func key16(x uint16) uint16 { return x ^ uint16(int16(x)>>15)>>1 }

func max16(d, a, b []byte, inf uint16) {
	if aligned(d, 8) && aligned(a, 8) && aligned(b, 8) {
		c := uint64(inf+1) * ones16
		maxWords16(u64s(d), u64s(a), u64s(b), c&^lanes16, c&lanes16)
		n := len(d) &^ 7
		d, a, b = d[n:], a[n:], b[n:]
	}
	rot := inf + 1
	dh, ah, bh := u16s(d), u16s(a), u16s(b)
	ah, bh = ah[:len(dh)], bh[:len(dh)]
	for i := range dh {
		x, y := ah[i], bh[i]
		if key16(y)+rot > key16(x)+rot {
			x = y
		}
		dh[i] = x
	}
}

func min16(d, a, b []byte, inf uint16) {
	if aligned(d, 8) && aligned(a, 8) && aligned(b, 8) {
		c := uint64(-(inf + 1)) * ones16 // lanes of 2^16-(Inf+1): subtracting Inf+1
		minWords16(u64s(d), u64s(a), u64s(b), c&^lanes16, c&lanes16)
		n := len(d) &^ 7
		d, a, b = d[n:], a[n:], b[n:]
	}
	rot := inf + 1
	dh, ah, bh := u16s(d), u16s(a), u16s(b)
	ah, bh = ah[:len(dh)], bh[:len(dh)]
	for i := range dh {
		x, y := ah[i], bh[i]
		if key16(y)-rot < key16(x)-rot {
			x = y
		}
		dh[i] = x
	}
}

const (
	lanes16 = 0x8000800080008000 // the top bit of every 16-bit lane
	ones16  = 0x0001000100010001
)

// keyLanes16 is key16 in every lane.
func keyLanes16(x uint64) uint64 { return x ^ x>>15&ones16*0x7fff }

// addLanes16 adds c lanewise modulo 2^16, given cLo = c&^lanes16 and
// cHi = c&lanes16: the low 15 bits add without reaching the next lane.
func addLanes16(x, cLo, cHi uint64) uint64 { return ((x &^ lanes16) + cLo) ^ (x & lanes16) ^ cHi }

// ltLanes16 is 0xffff in each lane where x < y (unsigned), 0 elsewhere;
// ltLanes8 explains how.
func ltLanes16(x, y uint64) uint64 {
	diff := (x | lanes16) - (y &^ lanes16)
	lt := ((^x & y) | (^(x ^ y) &^ diff)) & lanes16
	return lt >> 15 * 0xffff
}

// maxWords16 and minWords16 are functions of their own, kept from
// inlining, like the 8-bit word loops; c is the lanes of the rotation.
//
//go:noinline
func maxWords16(d, a, b []uint64, cLo, cHi uint64) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		x, y := a[i], b[i]
		m := ltLanes16(addLanes16(keyLanes16(x), cLo, cHi), addLanes16(keyLanes16(y), cLo, cHi))
		d[i] = y&m | x&^m
	}
}

//go:noinline
func minWords16(d, a, b []uint64, cLo, cHi uint64) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		x, y := a[i], b[i]
		m := ltLanes16(addLanes16(keyLanes16(y), cLo, cHi), addLanes16(keyLanes16(x), cLo, cHi))
		d[i] = y&m | x&^m
	}
}
