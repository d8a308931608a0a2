package coll

import (
	"encoding/binary"
	"math"

	"github.com/ibex-rdma/ibex/coll/reduce"
)

// putValue and getValue write and read element i of a raw buffer as a
// float64, for the benchmark's inputs and checks (small integers, exact in
// every type).
func putValue(b []byte, dt reduce.DType, i int, v float64) {
	switch dt {
	case reduce.Int8, reduce.Uint8:
		b[i] = byte(int64(v))
	case reduce.Int32, reduce.Uint32:
		binary.LittleEndian.PutUint32(b[4*i:], uint32(int64(v)))
	case reduce.Int64, reduce.Uint64:
		binary.LittleEndian.PutUint64(b[8*i:], uint64(int64(v)))
	case reduce.Float16:
		binary.LittleEndian.PutUint16(b[2*i:], f32ToHalf(float32(v)))
	case reduce.BFloat16:
		binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(float32(v))>>16))
	case reduce.Float32:
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
	default:
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
	}
}

func getValue(b []byte, dt reduce.DType, i int) float64 {
	switch dt {
	case reduce.Int8:
		return float64(int8(b[i]))
	case reduce.Uint8:
		return float64(b[i])
	case reduce.Int32:
		return float64(int32(binary.LittleEndian.Uint32(b[4*i:])))
	case reduce.Uint32:
		return float64(binary.LittleEndian.Uint32(b[4*i:]))
	case reduce.Int64:
		return float64(int64(binary.LittleEndian.Uint64(b[8*i:])))
	case reduce.Uint64:
		return float64(binary.LittleEndian.Uint64(b[8*i:]))
	case reduce.Float16:
		return float64(halfToF32(binary.LittleEndian.Uint16(b[2*i:])))
	case reduce.BFloat16:
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16))
	case reduce.Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
}

// f32ToHalf converts a float32 that is exactly representable as a normal
// binary16 (the benchmark's small integers) or zero.
func f32ToHalf(f float32) uint16 {
	bits := math.Float32bits(f)
	sign := uint16(bits>>16) & 0x8000
	exp := int((bits>>23)&0xff) - 127 + 15
	mant := (bits >> 13) & 0x3ff
	if f == 0 {
		return sign
	}
	if exp <= 0 || exp >= 31 {
		return sign | 0x7c00 // out of the benchmark's range: infinity
	}
	return sign | uint16(exp)<<10 | uint16(mant)
}

func halfToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal
		return float32(math.Copysign(float64(mant)*math.Pow(2, -24), float64(math.Float32frombits(sign|0x3f800000))))
	case exp == 31:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	}
	return math.Float32frombits(sign | (exp-15+127)<<23 | mant<<13)
}
