package reduce

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Wide reports whether the collectives reduce dt in float32: float16 and
// bfloat16 do (see the package documentation).
func Wide(dt DType) bool { return dt == Float16 || dt == BFloat16 }

// Widen converts len(src)/2 float16 or bfloat16 elements of src to float32
// elements in dst (exact: every 16-bit value is a float32).
func Widen(dst, src []byte, dt DType) error {
	n := len(src) / 2
	if !Wide(dt) || len(src)%2 != 0 || len(dst) < 4*n {
		return fmt.Errorf("coll/reduce: widen %v: %d bytes into %d: want float16 or bfloat16 into twice the bytes", dt, len(src), len(dst))
	}
	i0 := 0
	if dt == Float16 {
		i0 = widenF16Vec(dst, src, n) // F16C, where the CPU has it
	}
	for i := i0; i < n; i++ {
		h := binary.LittleEndian.Uint16(src[2*i:])
		f := bf16ToF32(h)
		if dt == Float16 {
			f = f16ToF32(h)
		}
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(f))
	}
	return nil
}

// Narrow converts len(dst)/2 float32 elements of src to float16 or
// bfloat16 in dst, each divided by div first (div > 1: Avg), rounding
// once to nearest, ties to even: the quotient is computed in float64
// (exact enough for div < 2^28) and rounded straight to 16 bits.
func Narrow(dst, src []byte, dt DType, div int) error {
	n := len(dst) / 2
	if !Wide(dt) || len(dst)%2 != 0 || len(src) < 4*n || div < 1 {
		return fmt.Errorf("coll/reduce: narrow %v: %d bytes from %d, divisor %d: want float16 or bfloat16 from twice the bytes", dt, len(dst), len(src), div)
	}
	i0 := 0
	if dt == Float16 && div == 1 {
		i0 = narrowF16Vec(dst, src, n) // F16C, where the CPU has it
	}
	fd := float64(div)
	for i := i0; i < n; i++ {
		f := math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		q := float64(f) / fd
		var h uint16
		switch {
		case q != q && dt == Float16:
			h = f16NaN(f)
		case q != q:
			h = f32ToBF16(f)
		case dt == Float16:
			h = f64ToF16Finite(q)
		default:
			h = f64ToBF16Finite(q)
		}
		binary.LittleEndian.PutUint16(dst[2*i:], h)
	}
	return nil
}
