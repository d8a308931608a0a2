package reduce

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// The vector kernels come in two levels, decided once at init:
//
//   - useAVX2: the AVX2 kernels of vector_amd64.s (F16C comes with every
//     AVX2 CPU, but is checked: the float16 kernels need it);
//   - useAVX512: the AVX-512 kernels of vector512_amd64.s, which need
//     AVX512F, BW (byte and word lanes), DQ (VPMULLQ) and the AVX2 level,
//     as a remaining 32-byte block runs with AVX2. VL is required too,
//     though the kernels use only 512-bit forms: every CPU with BW and DQ
//     has it, and with it the rule is x86-64-v4's (but CD, unused).
//
// The AVX-512 level runs the 64-byte blocks, AVX2 a last 32-byte one, the
// scalar kernels the tail. In cache (1 MiB) it is 6-8% faster than AVX2
// on the one-instruction sums and 1.5-1.9x on the kernels with more work
// per byte (float16 and bfloat16 Sum, Max by keys, 64-bit Max, which AVX2
// does by keys); at 64 MiB memory bounds both (ARCHITECTURE.md has the
// figures). Tests lower the level to run and compare each set of kernels.
var (
	useAVX2   = cpu.X86.HasAVX2 && cpu.X86.HasF16C
	useAVX512 = useAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW &&
		cpu.X86.HasAVX512VL && cpu.X86.HasAVX512DQ
)

// vecBlock is what the AVX2 kernels process at a time, in bytes.
const vecBlock = 32

// The AVX2 kernels run d = a op b over n bytes, n a multiple of
// vecBlock; the buffers need only element alignment.

//go:noescape
func add8AVX2(d, a, b *byte, n int)

//go:noescape
func add32AVX2(d, a, b *byte, n int)

//go:noescape
func add64AVX2(d, a, b *byte, n int)

//go:noescape
func mul32AVX2(d, a, b *byte, n int)

//go:noescape
func addF32AVX2(d, a, b *byte, n int)

//go:noescape
func mulF32AVX2(d, a, b *byte, n int)

//go:noescape
func addF64AVX2(d, a, b *byte, n int)

//go:noescape
func mulF64AVX2(d, a, b *byte, n int)

//go:noescape
func maxI8AVX2(d, a, b *byte, n int)

//go:noescape
func maxU8AVX2(d, a, b *byte, n int)

//go:noescape
func minI8AVX2(d, a, b *byte, n int)

//go:noescape
func minU8AVX2(d, a, b *byte, n int)

//go:noescape
func maxI32AVX2(d, a, b *byte, n int)

//go:noescape
func maxU32AVX2(d, a, b *byte, n int)

//go:noescape
func minI32AVX2(d, a, b *byte, n int)

//go:noescape
func minU32AVX2(d, a, b *byte, n int)

// ksel16AVX2, ksel32AVX2 and ksel64AVX2 are Min and Max by keys; see
// kselConsts.
//
//go:noescape
func ksel16AVX2(d, a, b *byte, n int, km, c1, c2 uint64)

//go:noescape
func ksel32AVX2(d, a, b *byte, n int, km, c1, c2 uint64)

//go:noescape
func ksel64AVX2(d, a, b *byte, n int, km, c1, c2 uint64)

//go:noescape
func addF16AVX2(d, a, b *byte, n int)

//go:noescape
func mulF16AVX2(d, a, b *byte, n int)

//go:noescape
func addBF16AVX2(d, a, b *byte, n int)

//go:noescape
func mulBF16AVX2(d, a, b *byte, n int)

//go:noescape
func widenF16AVX2(dst, src *byte, n int)

//go:noescape
func narrowF16AVX2(dst, src *byte, n int)

// vector runs the leading whole blocks of d = a op b (op is not Avg) with
// the assembly kernels and returns how many bytes they did: 0 when the
// CPU lacks AVX2, the buffer is shorter than a block, or the pair has no
// vector kernel (8-bit Prod; 64-bit Prod without AVX-512). The caller does
// the rest. With AVX-512 the 64-byte blocks go to its kernel, and what
// remains, at most one 32-byte block, to the AVX2 one; a pair AVX-512 has
// no kernel for falls through to AVX2 whole. The calls are direct: through
// a func value the pointers would escape, and with them the bounce buffers
// on the caller's stack.
func vector(d, a, b []byte, dt DType, op Op) int {
	done := 0
	if n := len(d) &^ (vecBlock512 - 1); useAVX512 && n > 0 && vector512(d[:n], a[:n], b[:n], dt, op) {
		done = n
	}
	if n := (len(d) - done) &^ (vecBlock - 1); useAVX2 && n > 0 {
		m := done + n
		if vector256(d[done:m], a[done:m], b[done:m], dt, op) {
			done = m
		}
	}
	return done
}

// vector256 runs d = a op b with an AVX2 kernel over all of d (whole
// vecBlocks), or reports false when the pair has none (8- and 64-bit Prod).
func vector256(d, a, b []byte, dt DType, op Op) bool {
	n := len(d)
	pd, pa, pb := unsafe.SliceData(d), unsafe.SliceData(a[:n]), unsafe.SliceData(b[:n])
	switch dt {
	case Int8, Uint8:
		switch {
		case op == Sum:
			add8AVX2(pd, pa, pb, n)
		case op == Max && dt == Int8:
			maxI8AVX2(pd, pa, pb, n)
		case op == Max:
			maxU8AVX2(pd, pa, pb, n)
		case op == Min && dt == Int8:
			minI8AVX2(pd, pa, pb, n)
		case op == Min:
			minU8AVX2(pd, pa, pb, n)
		default:
			return false
		}
	case Int32, Uint32:
		switch {
		case op == Sum:
			add32AVX2(pd, pa, pb, n)
		case op == Prod:
			mul32AVX2(pd, pa, pb, n)
		case op == Max && dt == Int32:
			maxI32AVX2(pd, pa, pb, n)
		case op == Max:
			maxU32AVX2(pd, pa, pb, n)
		case op == Min && dt == Int32:
			minI32AVX2(pd, pa, pb, n)
		default:
			minU32AVX2(pd, pa, pb, n)
		}
	case Int64, Uint64, Float64:
		switch {
		case op == Max || op == Min:
			km, c1, c2 := kselConsts(64, dt, op)
			ksel64AVX2(pd, pa, pb, n, km, c1, c2)
		case dt != Float64 && op == Sum:
			add64AVX2(pd, pa, pb, n)
		case dt == Float64 && op == Sum:
			addF64AVX2(pd, pa, pb, n)
		case dt == Float64:
			mulF64AVX2(pd, pa, pb, n)
		default:
			return false
		}
	case Float32:
		switch op {
		case Sum:
			addF32AVX2(pd, pa, pb, n)
		case Prod:
			mulF32AVX2(pd, pa, pb, n)
		default:
			km, c1, c2 := kselConsts(32, dt, op)
			ksel32AVX2(pd, pa, pb, n, km, c1, c2)
		}
	case Float16, BFloat16:
		switch {
		case op == Max || op == Min:
			km, c1, c2 := kselConsts(16, dt, op)
			ksel16AVX2(pd, pa, pb, n, km, c1, c2)
		case dt == Float16 && op == Sum:
			addF16AVX2(pd, pa, pb, n)
		case dt == Float16:
			mulF16AVX2(pd, pa, pb, n)
		case op == Sum:
			addBF16AVX2(pd, pa, pb, n)
		default:
			mulBF16AVX2(pd, pa, pb, n)
		}
	default:
		return false
	}
	return true
}

// kselConsts gives the key-select kernels' constants, each w-bit lane
// repeated across 64 bits. A lane's key is ((x ^ (x<0 ? km : 0)) + c1) ^ c2,
// and the kernel takes b where b's key is greater, signed:
//
//   - floats: km flips the magnitude bits of negatives (minmax.go's key),
//     c1 is the rotation that puts NaNs at the top (Max: +(Inf+1)) or the
//     bottom (Min: -(Inf+1)) of the unsigned order, and c2 turns unsigned
//     order into signed order (the sign bit) or reverses it too (Min: all
//     bits but the sign);
//   - integers: km and c1 are 0, and c2 as for floats when unsigned, 0
//     (Max) or all ones (Min) when signed.
func kselConsts(w int, dt DType, op Op) (km, c1, c2 uint64) {
	ones := uint64(1)<<w - 1
	if w == 64 {
		ones = ^uint64(0)
	}
	sign := uint64(1) << (w - 1)
	var inf uint64
	switch dt {
	case Float16:
		inf = f16Inf
	case BFloat16:
		inf = bf16Inf
	case Float32:
		inf = f32Rot - 1
	case Float64:
		inf = f64Rot - 1
	}
	switch {
	case inf != 0:
		km = ones >> 1
		c1 = inf + 1
		c2 = sign
		if op == Min {
			c1 = -c1 & ones
			c2 = ones >> 1
		}
	case dt == Int64:
		if op == Min {
			c2 = ones
		}
	default: // Uint64
		c2 = sign
		if op == Min {
			c2 = ones >> 1
		}
	}
	return splat(km, w), splat(c1, w), splat(c2, w)
}

// splat repeats the low w bits of x across 64 bits.
func splat(x uint64, w int) uint64 {
	for s := w; s < 64; s *= 2 {
		x |= x << s
	}
	return x
}

// widenF16Vec widens the leading multiple of 8 of n float16 elements
// with F16C (16 at a time with AVX-512, then 8 with AVX2) and returns how
// many it did.
func widenF16Vec(dst, src []byte, n int) int {
	done := 0
	if m := n &^ 15; useAVX512 && m > 0 {
		widenF16AVX512(unsafe.SliceData(dst[:4*m]), unsafe.SliceData(src[:2*m]), m)
		done = m
	}
	if m := (n - done) &^ 7; useAVX2 && m > 0 {
		widenF16AVX2(unsafe.SliceData(dst[4*done:4*(done+m)]), unsafe.SliceData(src[2*done:2*(done+m)]), m)
		done += m
	}
	return done
}

// narrowF16Vec is widenF16Vec for Narrow with div = 1.
func narrowF16Vec(dst, src []byte, n int) int {
	done := 0
	if m := n &^ 15; useAVX512 && m > 0 {
		narrowF16AVX512(unsafe.SliceData(dst[:2*m]), unsafe.SliceData(src[:4*m]), m)
		done = m
	}
	if m := (n - done) &^ 7; useAVX2 && m > 0 {
		narrowF16AVX2(unsafe.SliceData(dst[2*done:2*(done+m)]), unsafe.SliceData(src[4*done:4*(done+m)]), m)
		done += m
	}
	return done
}
