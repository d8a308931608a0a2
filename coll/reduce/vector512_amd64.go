package reduce

import "unsafe"

// The AVX-512 kernels of vector512_amd64.s, used when useAVX512 is set:
// d = a op b over n bytes, n a multiple of vecBlock512, the buffers
// aligned for the element only.

// vecBlock512 is what the AVX-512 kernels process at a time, in bytes.
const vecBlock512 = 64

//go:noescape
func add8AVX512(d, a, b *byte, n int)

//go:noescape
func add32AVX512(d, a, b *byte, n int)

//go:noescape
func add64AVX512(d, a, b *byte, n int)

//go:noescape
func mul32AVX512(d, a, b *byte, n int)

//go:noescape
func mul64AVX512(d, a, b *byte, n int)

//go:noescape
func addF32AVX512(d, a, b *byte, n int)

//go:noescape
func mulF32AVX512(d, a, b *byte, n int)

//go:noescape
func addF64AVX512(d, a, b *byte, n int)

//go:noescape
func mulF64AVX512(d, a, b *byte, n int)

//go:noescape
func maxI8AVX512(d, a, b *byte, n int)

//go:noescape
func maxU8AVX512(d, a, b *byte, n int)

//go:noescape
func minI8AVX512(d, a, b *byte, n int)

//go:noescape
func minU8AVX512(d, a, b *byte, n int)

//go:noescape
func maxI32AVX512(d, a, b *byte, n int)

//go:noescape
func maxU32AVX512(d, a, b *byte, n int)

//go:noescape
func minI32AVX512(d, a, b *byte, n int)

//go:noescape
func minU32AVX512(d, a, b *byte, n int)

//go:noescape
func maxI64AVX512(d, a, b *byte, n int)

//go:noescape
func maxU64AVX512(d, a, b *byte, n int)

//go:noescape
func minI64AVX512(d, a, b *byte, n int)

//go:noescape
func minU64AVX512(d, a, b *byte, n int)

// ksel16AVX512, ksel32AVX512 and ksel64AVX512 are Min and Max of floats
// by keys; see kselConsts.
//
//go:noescape
func ksel16AVX512(d, a, b *byte, n int, km, c1, c2 uint64)

//go:noescape
func ksel32AVX512(d, a, b *byte, n int, km, c1, c2 uint64)

//go:noescape
func ksel64AVX512(d, a, b *byte, n int, km, c1, c2 uint64)

//go:noescape
func addF16AVX512(d, a, b *byte, n int)

//go:noescape
func mulF16AVX512(d, a, b *byte, n int)

//go:noescape
func addBF16AVX512(d, a, b *byte, n int)

//go:noescape
func mulBF16AVX512(d, a, b *byte, n int)

//go:noescape
func widenF16AVX512(dst, src *byte, n int)

//go:noescape
func narrowF16AVX512(dst, src *byte, n int)

// vector512 runs d = a op b with an AVX-512 kernel over all of d (whole
// vecBlock512s), or reports false when the pair has none (8-bit Prod).
func vector512(d, a, b []byte, dt DType, op Op) bool {
	n := len(d)
	pd, pa, pb := unsafe.SliceData(d), unsafe.SliceData(a[:n]), unsafe.SliceData(b[:n])
	switch dt {
	case Int8, Uint8:
		switch {
		case op == Sum:
			add8AVX512(pd, pa, pb, n)
		case op == Max && dt == Int8:
			maxI8AVX512(pd, pa, pb, n)
		case op == Max:
			maxU8AVX512(pd, pa, pb, n)
		case op == Min && dt == Int8:
			minI8AVX512(pd, pa, pb, n)
		case op == Min:
			minU8AVX512(pd, pa, pb, n)
		default:
			return false
		}
	case Int32, Uint32:
		switch {
		case op == Sum:
			add32AVX512(pd, pa, pb, n)
		case op == Prod:
			mul32AVX512(pd, pa, pb, n)
		case op == Max && dt == Int32:
			maxI32AVX512(pd, pa, pb, n)
		case op == Max:
			maxU32AVX512(pd, pa, pb, n)
		case op == Min && dt == Int32:
			minI32AVX512(pd, pa, pb, n)
		default:
			minU32AVX512(pd, pa, pb, n)
		}
	case Int64, Uint64:
		switch {
		case op == Sum:
			add64AVX512(pd, pa, pb, n)
		case op == Prod:
			mul64AVX512(pd, pa, pb, n)
		case op == Max && dt == Int64:
			maxI64AVX512(pd, pa, pb, n)
		case op == Max:
			maxU64AVX512(pd, pa, pb, n)
		case op == Min && dt == Int64:
			minI64AVX512(pd, pa, pb, n)
		default:
			minU64AVX512(pd, pa, pb, n)
		}
	case Float64:
		switch op {
		case Sum:
			addF64AVX512(pd, pa, pb, n)
		case Prod:
			mulF64AVX512(pd, pa, pb, n)
		default:
			km, c1, c2 := kselConsts(64, dt, op)
			ksel64AVX512(pd, pa, pb, n, km, c1, c2)
		}
	case Float32:
		switch op {
		case Sum:
			addF32AVX512(pd, pa, pb, n)
		case Prod:
			mulF32AVX512(pd, pa, pb, n)
		default:
			km, c1, c2 := kselConsts(32, dt, op)
			ksel32AVX512(pd, pa, pb, n, km, c1, c2)
		}
	case Float16, BFloat16:
		switch {
		case op == Max || op == Min:
			km, c1, c2 := kselConsts(16, dt, op)
			ksel16AVX512(pd, pa, pb, n, km, c1, c2)
		case dt == Float16 && op == Sum:
			addF16AVX512(pd, pa, pb, n)
		case dt == Float16:
			mulF16AVX512(pd, pa, pb, n)
		case op == Sum:
			addBF16AVX512(pd, pa, pb, n)
		default:
			mulBF16AVX512(pd, pa, pb, n)
		}
	default:
		return false
	}
	return true
}
