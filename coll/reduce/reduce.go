package reduce

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"
)

var (
	// ErrLength: buffers of different lengths, or a length that is not a
	// whole number of elements.
	ErrLength = errors.New("bad buffer length")
	// ErrInvalid: an unknown DType or Op, or a contribution count below 1.
	ErrInvalid = errors.New("invalid argument")
)

// Reduce sets dst[i] = dst[i] op src[i] for every element. dst and src are
// little-endian elements of type dt and must have the same length, a
// multiple of dt.Size(). Avg reduces as Sum. src may be dst.
func Reduce(dst, src []byte, dt DType, op Op) error {
	if err := check(dt, op); err != nil {
		return err
	}
	if len(dst) != len(src) {
		return fmt.Errorf("reduce: %v %v: len(dst)=%d != len(src)=%d: %w", dt, op, len(dst), len(src), ErrLength)
	}
	if err := checkMultiple(dt, op, "dst", len(dst)); err != nil {
		return err
	}
	apply(dst, dst, src, dt, op)
	return nil
}

// Reduce3 sets dst[i] = a[i] op b[i] for every element, saving the copy of
// a into dst that Reduce would need. All three must have the same length,
// a multiple of dt.Size(). dst may be a or b (the same bytes); any other
// overlap gives unspecified results.
func Reduce3(dst, a, b []byte, dt DType, op Op) error {
	if err := check(dt, op); err != nil {
		return err
	}
	if len(dst) != len(a) || len(dst) != len(b) {
		return fmt.Errorf("reduce: %v %v: len(dst)=%d, len(a)=%d, len(b)=%d differ: %w", dt, op, len(dst), len(a), len(b), ErrLength)
	}
	if err := checkMultiple(dt, op, "dst", len(dst)); err != nil {
		return err
	}
	apply(dst, a, b, dt, op)
	return nil
}

// Finish does what must happen once, after the last Reduce, to a result
// that combines n contributions (ranks): for Avg it divides every element
// by n (see the package comment for the rounding); for the other ops it
// does nothing.
func Finish(buf []byte, dt DType, op Op, n int) error {
	if err := check(dt, op); err != nil {
		return err
	}
	if n < 1 {
		return fmt.Errorf("reduce: %v %v: finish over n=%d contributions: %w", dt, op, n, ErrInvalid)
	}
	if err := checkMultiple(dt, op, "buf", len(buf)); err != nil {
		return err
	}
	if op != Avg || n == 1 || len(buf) == 0 {
		return nil
	}
	if littleEndian && aligned(buf, dt.Size()) {
		divide(buf, dt, n)
	} else {
		bounceDivide(buf, dt, n)
	}
	return nil
}

func check(dt DType, op Op) error {
	if dt >= numDTypes {
		return fmt.Errorf("reduce: unknown data type %v: %w", dt, ErrInvalid)
	}
	if op >= numOps {
		return fmt.Errorf("reduce: unknown op %v: %w", op, ErrInvalid)
	}
	return nil
}

func checkMultiple(dt DType, op Op, name string, n int) error {
	if n%dt.Size() != 0 {
		return fmt.Errorf("reduce: %v %v: len(%s)=%d is not a multiple of the %d-byte element: %w", dt, op, name, n, dt.Size(), ErrLength)
	}
	return nil
}

// littleEndian selects the direct path: the kernels view the caller's
// bytes as typed slices. A big-endian host always takes the bounce path,
// which decodes little-endian elements into native ones.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// bounceBytes is the scratch size for misaligned (or big-endian) buffers:
// small enough for the stack, large enough that the per-chunk overhead
// does not show. A multiple of every element size.
const bounceBytes = 2048

func aligned(b []byte, align int) bool {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(align) == 0
}

// apply runs dst = a op b on validated buffers. The typed kernels need
// buffers aligned to the element size (unaligned typed access is not
// portable, and the race detector's checkptr rejects it), so otherwise
// the elements go through bounce. The 8-bit kernels need no alignment.
func apply(dst, a, b []byte, dt DType, op Op) {
	if len(dst) == 0 {
		return
	}
	if op == Avg {
		op = Sum
	}
	size := dt.Size()
	if size == 1 || littleEndian && aligned(dst, size) && aligned(a, size) && aligned(b, size) {
		kernel(dst, a, b, dt, op)
	} else {
		bounce(dst, a, b, dt, op)
	}
}

// bounce runs the kernel a chunk at a time on aligned copies in stack
// buffers (its own function, so that apply's frame stays small).
func bounce(dst, a, b []byte, dt DType, op Op) {
	size := dt.Size()
	var sa, sb [bounceBytes / 8]uint64
	ba, bb := bytesOf(&sa), bytesOf(&sb)
	for len(dst) > 0 {
		k := min(len(dst), bounceBytes)
		// Load both operands before storing: dst may be a or b.
		loadLE(ba[:k], a[:k], size)
		loadLE(bb[:k], b[:k], size)
		kernel(ba[:k], ba[:k], bb[:k], dt, op)
		storeLE(dst[:k], ba[:k], size)
		dst, a, b = dst[k:], a[k:], b[k:]
	}
}

func bounceDivide(buf []byte, dt DType, n int) {
	var s [bounceBytes / 8]uint64
	sb := bytesOf(&s)
	for len(buf) > 0 {
		k := min(len(buf), bounceBytes)
		loadLE(sb[:k], buf[:k], dt.Size())
		divide(sb[:k], dt, n)
		storeLE(buf[:k], sb[:k], dt.Size())
		buf = buf[k:]
	}
}

// kernel runs dst = a op b (op is not Avg) on equal-length buffers that
// are aligned for dt and hold native-endian elements.
func kernel(d, a, b []byte, dt DType, op Op) {
	if n := vector(d, a, b, dt, op); n > 0 {
		// The vector kernels did the whole blocks; the scalar ones below
		// do the tail (n keeps any alignment) or everything without them.
		d, a, b = d[n:], a[n:], b[n:]
		if len(d) == 0 {
			return
		}
	}
	switch dt {
	case Int8, Uint8:
		switch op {
		case Sum:
			add8(d, a, b)
		case Prod:
			mul8(d, a, b)
		case Max:
			max8(d, a, b, flip8(dt))
		case Min:
			min8(d, a, b, flip8(dt))
		}
	case Int32, Uint32:
		d, a, b := u32s(d), u32s(a), u32s(b)
		switch op {
		case Sum:
			add32(d, a, b)
		case Prod:
			mul32(d, a, b)
		case Max:
			if dt == Int32 {
				maxI32(i32s(d), i32s(a), i32s(b))
			} else {
				maxU32(d, a, b)
			}
		case Min:
			if dt == Int32 {
				minI32(i32s(d), i32s(a), i32s(b))
			} else {
				minU32(d, a, b)
			}
		}
	case Int64, Uint64:
		d, a, b := u64s(d), u64s(a), u64s(b)
		switch op {
		case Sum:
			add64(d, a, b)
		case Prod:
			mul64(d, a, b)
		case Max:
			if dt == Int64 {
				maxI64(i64s(d), i64s(a), i64s(b))
			} else {
				maxU64(d, a, b)
			}
		case Min:
			if dt == Int64 {
				minI64(i64s(d), i64s(a), i64s(b))
			} else {
				minU64(d, a, b)
			}
		}
	case Float32:
		switch op {
		case Sum:
			addF32(f32s(d), f32s(a), f32s(b))
		case Prod:
			mulF32(f32s(d), f32s(a), f32s(b))
		case Max:
			maxF32(u32s(d), u32s(a), u32s(b))
		case Min:
			minF32(u32s(d), u32s(a), u32s(b))
		}
	case Float64:
		switch op {
		case Sum:
			addF64(f64s(d), f64s(a), f64s(b))
		case Prod:
			mulF64(f64s(d), f64s(a), f64s(b))
		case Max:
			maxF64(u64s(d), u64s(a), u64s(b))
		case Min:
			minF64(u64s(d), u64s(a), u64s(b))
		}
	case Float16:
		switch op {
		case Sum:
			addF16(u16s(d), u16s(a), u16s(b))
		case Prod:
			mulF16(u16s(d), u16s(a), u16s(b))
		case Max:
			max16(d, a, b, f16Inf)
		case Min:
			min16(d, a, b, f16Inf)
		}
	case BFloat16:
		switch op {
		case Sum:
			addBF16(u16s(d), u16s(a), u16s(b))
		case Prod:
			mulBF16(u16s(d), u16s(a), u16s(b))
		case Max:
			max16(d, a, b, bf16Inf)
		case Min:
			min16(d, a, b, bf16Inf)
		}
	}
}

// flip8 is what max8 and min8 XOR into lanes to compare them unsigned.
func flip8(dt DType) uint64 {
	if dt == Int8 {
		return lanes8
	}
	return 0
}

// divide runs buf[i] /= n (Avg's Finish) on an aligned, native-endian buffer.
func divide(buf []byte, dt DType, n int) {
	switch dt {
	case Int8:
		divI8(buf, n)
	case Uint8:
		divU8(buf, n)
	case Int32:
		divI32(i32s(u32s(buf)), n)
	case Uint32:
		divU32(u32s(buf), n)
	case Int64:
		divI64(i64s(u64s(buf)), n)
	case Uint64:
		divU64(u64s(buf), n)
	case Float16:
		divF16(u16s(buf), n)
	case BFloat16:
		divBF16(u16s(buf), n)
	case Float32:
		divF32(f32s(buf), n)
	case Float64:
		divF64(f64s(buf), n)
	}
}

// loadLE decodes little-endian elements of src into native ones in dst:
// a copy on a little-endian host, a byte swap per element on a big-endian
// one (tested on little-endian hosts by clearing littleEndian).
func loadLE(dst, src []byte, size int) {
	if littleEndian {
		copy(dst, src)
		return
	}
	switch size {
	case 1:
		copy(dst, src)
	case 2:
		d := u16s(dst)
		for i := range d {
			d[i] = binary.LittleEndian.Uint16(src[2*i:])
		}
	case 4:
		d := u32s(dst)
		for i := range d {
			d[i] = binary.LittleEndian.Uint32(src[4*i:])
		}
	case 8:
		d := u64s(dst)
		for i := range d {
			d[i] = binary.LittleEndian.Uint64(src[8*i:])
		}
	}
}

// storeLE is the inverse of loadLE.
func storeLE(dst, src []byte, size int) {
	if littleEndian {
		copy(dst, src)
		return
	}
	switch size {
	case 1:
		copy(dst, src)
	case 2:
		for i, v := range u16s(src) {
			binary.LittleEndian.PutUint16(dst[2*i:], v)
		}
	case 4:
		for i, v := range u32s(src) {
			binary.LittleEndian.PutUint32(dst[4*i:], v)
		}
	case 8:
		for i, v := range u64s(src) {
			binary.LittleEndian.PutUint64(dst[8*i:], v)
		}
	}
}
