package reduce

import (
	"encoding/binary"
	"math"
)

// SetValue stores v as element i of b (little-endian dt elements):
// integers truncate, float16 and bfloat16 round to nearest even. For
// inputs, checks and tools; the kernels never go through float64.
func SetValue(b []byte, dt DType, i int, v float64) {
	switch dt {
	case Int8, Uint8:
		b[i] = byte(int64(v))
	case Int32, Uint32:
		binary.LittleEndian.PutUint32(b[4*i:], uint32(int64(v)))
	case Int64, Uint64:
		binary.LittleEndian.PutUint64(b[8*i:], uint64(int64(v)))
	case Float16:
		binary.LittleEndian.PutUint16(b[2*i:], f32ToF16(float32(v)))
	case BFloat16:
		binary.LittleEndian.PutUint16(b[2*i:], f32ToBF16(float32(v)))
	case Float32:
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
	default:
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
	}
}

// Value reads element i of b as a float64 (exact for every type but
// 64-bit integers beyond 2^53).
func Value(b []byte, dt DType, i int) float64 {
	switch dt {
	case Int8:
		return float64(int8(b[i]))
	case Uint8:
		return float64(b[i])
	case Int32:
		return float64(int32(binary.LittleEndian.Uint32(b[4*i:])))
	case Uint32:
		return float64(binary.LittleEndian.Uint32(b[4*i:]))
	case Int64:
		return float64(int64(binary.LittleEndian.Uint64(b[8*i:])))
	case Uint64:
		return float64(binary.LittleEndian.Uint64(b[8*i:]))
	case Float16:
		return float64(f16ToF32(binary.LittleEndian.Uint16(b[2*i:])))
	case BFloat16:
		return float64(bf16ToF32(binary.LittleEndian.Uint16(b[2*i:])))
	case Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
}
