// AVX-512 (F, BW, VL, DQ) kernels: d = a op b over n bytes, n a multiple
// of 64. The Go side (vector_amd64.go) passes the whole 64-byte blocks,
// runs a remaining 32-byte block with the AVX2 kernel and finishes the
// tail with the scalar kernels. They compute what the AVX2 kernels of
// vector_amd64.s compute, lane for lane (read that file's comments for
// the NaN, rounding and signalling-NaN details), with 64-byte ZMM blocks,
// mask registers in place of VPBLENDVB, and what AVX2 lacks: 64-bit
// integer Min and Max (VPMAXSQ and kin) and Prod (VPMULLQ). Loads and
// stores are unaligned, and every block loads a and b before it stores
// d, so d may be a or b.

#include "textflag.h"

// LOOP runs BODY(X, off) over the n = CX bytes at DI, SI, DX: two 64-byte
// blocks per iteration, then the odd block. AX is the byte offset.
#define LOOP(BODY, X) \
	XORQ AX, AX; \
	MOVQ CX, BX; \
	ANDQ $-128, BX; \
	JZ   tail; \
loop: \
	BODY(X, 0); \
	BODY(X, 64); \
	ADDQ $128, AX; \
	CMPQ AX, BX; \
	JB   loop; \
tail: \
	CMPQ AX, CX; \
	JAE  done; \
	BODY(X, 0); \
done: \
	VZEROUPPER; \
	RET

// BIN is one instruction per block: d = a OP b, with a the first source
// (whose NaN a float op returns when both are NaNs, as a + b does in Go).
#define BIN(OP, o) \
	VMOVDQU64 o(SI)(AX*1), Z0; \
	OP        o(DX)(AX*1), Z0, Z0; \
	VMOVDQU64 Z0, o(DI)(AX*1)

// KSEL is the AVX2 key select with w-bit lanes: for x = a, y = b,
//   k = ((x ^ (x < 0 ? km : 0)) + c1) ^ c2
// and d = y where k(y) > k(x) as signed integers, else x. The sign mask
// is an arithmetic shift (AVX-512 has the 64-bit one AVX2 lacks), one
// VPTERNLOGD does x ^ (mask & km) (0x6c: B ^ (A & C) with A the mask, B
// x, C km), and the comparison lands in K1, which picks y's lanes.
// Z13 = km, Z14 = c1, Z15 = c2.
#define KSEL(SRA, SH, ADD, CMPGT, BLENDM, o) \
	VMOVDQU64  o(SI)(AX*1), Z0; \
	VMOVDQU64  o(DX)(AX*1), Z1; \
	SRA        $SH, Z0, Z2; \
	SRA        $SH, Z1, Z3; \
	VPTERNLOGD $0x6c, Z13, Z0, Z2; \
	VPTERNLOGD $0x6c, Z13, Z1, Z3; \
	ADD        Z14, Z2, Z2; \
	ADD        Z14, Z3, Z3; \
	VPXORD     Z15, Z2, Z2; \
	VPXORD     Z15, Z3, Z3; \
	CMPGT      Z2, Z3, K1; \
	BLENDM     Z1, Z0, K1, Z0; \
	VMOVDQU64  Z0, o(DI)(AX*1)

#define KSEL16(_, o) KSEL(VPSRAW, 15, VPADDW, VPCMPGTW, VPBLENDMW, o)
#define KSEL32(_, o) KSEL(VPSRAD, 31, VPADDD, VPCMPGTD, VPBLENDMD, o)
#define KSEL64(_, o) KSEL(VPSRAQ, 63, VPADDQ, VPCMPGTQ, VPBLENDMQ, o)

// F16 widens 32 float16 elements of a and of b to float32 (exactly),
// applies OP in float32 and rounds back to nearest even (immediate 0,
// whatever MXCSR says), subnormals kept: addF16 and mulF16, element by
// element.
#define F16(OP, o) \
	VCVTPH2PS o(SI)(AX*1), Z0; \
	VCVTPH2PS o+32(SI)(AX*1), Z1; \
	VCVTPH2PS o(DX)(AX*1), Z2; \
	VCVTPH2PS o+32(DX)(AX*1), Z3; \
	OP        Z2, Z0, Z0; \
	OP        Z3, Z1, Z1; \
	VCVTPS2PH $0, Z0, o(DI)(AX*1); \
	VCVTPS2PH $0, Z1, o+32(DI)(AX*1)

// BF16RND rounds the float32 lanes of R to bfloat16 in the top half of
// each lane of U, as f32ToBF16 does: b + 0x7fff + (b>>16)&1, or, in the
// NaN lanes K, b | 0x400000 (made quiet). T is scratch. Z8 = 0x7fff,
// Z9 = 1, Z10 = 0x400000 in every lane. In these kernels the NaN case
// never changes a result (a NaN out of VADDPS or VMULPS on widened
// bfloat16s is an operand's, quieted, or the default one: its low half is
// zero and the rounding cannot carry into it), but it keeps BF16RND
// f32ToBF16 for any float32, for two instructions per 16 lanes.
#define BF16RND(R, T, U, K) \
	VPSRLD $16, R, T; \
	VPANDD Z9, T, T; \
	VPADDD Z8, T, T; \
	VPADDD R, T, U; \
	VCMPPS $3, R, R, K; \
	VPORD  Z10, R, K, U

// BF16 widens 32 bfloat16 elements of a and of b where they are: the
// even ones shifted up, the odd ones with the even words zeroed (K3 =
// the odd words), applies OP in float32 and rounds back into the same
// places, the odd words merged in under K3.
#define BF16(OP, o) \
	VMOVDQU64   o(SI)(AX*1), Z0; \
	VMOVDQU64   o(DX)(AX*1), Z2; \
	VMOVDQU16.Z Z0, K3, Z1; \
	VMOVDQU16.Z Z2, K3, Z3; \
	VPSLLD      $16, Z0, Z0; \
	VPSLLD      $16, Z2, Z2; \
	OP          Z2, Z0, Z0; \
	OP          Z3, Z1, Z1; \
	BF16RND(Z0, Z2, Z4, K1); \
	BF16RND(Z1, Z3, Z6, K2); \
	VPSRLD      $16, Z4, Z4; \
	VMOVDQU16   Z6, K3, Z4; \
	VMOVDQU64   Z4, o(DI)(AX*1)

#define ARGS \
	MOVQ d+0(FP), DI; \
	MOVQ a+8(FP), SI; \
	MOVQ b+16(FP), DX; \
	MOVQ n+24(FP), CX

// The arguments of the key-select kernels, with their constants
// broadcast (macros that name arguments come before the first TEXT, where
// go vet reads them without a function).
#define KARGS \
	ARGS; \
	VPBROADCASTQ km+32(FP), Z13; \
	VPBROADCASTQ c1+40(FP), Z14; \
	VPBROADCASTQ c2+48(FP), Z15

// The bfloat16 kernels' constants (DATA symbols are private to a file,
// so vector_amd64.s's are not visible here).
DATA bf16z<>+0(SB)/4, $0x7fff
DATA bf16z<>+4(SB)/4, $1
DATA bf16z<>+8(SB)/4, $0x400000
GLOBL bf16z<>(SB), RODATA|NOPTR, $12

#define BARGS \
	ARGS; \
	VPBROADCASTD bf16z<>+0(SB), Z8; \
	VPBROADCASTD bf16z<>+4(SB), Z9; \
	VPBROADCASTD bf16z<>+8(SB), Z10; \
	MOVL         $0xaaaaaaaa, BX; \
	KMOVD        BX, K3

// Widen's constants: float16's quiet bit and float32's.
DATA f16z<>+0(SB)/4, $0x200
DATA f16z<>+4(SB)/4, $0x400000
GLOBL f16z<>(SB), RODATA|NOPTR, $8

// func add8AVX512(d, a, b *byte, n int)
TEXT ·add8AVX512(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPADDB)

// func add32AVX512(d, a, b *byte, n int)
TEXT ·add32AVX512(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPADDD)

// func add64AVX512(d, a, b *byte, n int)
TEXT ·add64AVX512(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPADDQ)

// func mul32AVX512(d, a, b *byte, n int)
TEXT ·mul32AVX512(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPMULLD)

// The low 64 bits of the product, the same for signed and unsigned
// (AVX512DQ; AVX2 has no 64-bit multiply).
//
// func mul64AVX512(d, a, b *byte, n int)
TEXT ·mul64AVX512(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPMULLQ)

// func addF32AVX512(d, a, b *byte, n int)
TEXT ·addF32AVX512(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VADDPS)

// func mulF32AVX512(d, a, b *byte, n int)
TEXT ·mulF32AVX512(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VMULPS)

// func addF64AVX512(d, a, b *byte, n int)
TEXT ·addF64AVX512(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VADDPD)

// func mulF64AVX512(d, a, b *byte, n int)
TEXT ·mulF64AVX512(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VMULPD)

// func maxI8AVX512(d, a, b *byte, n int)
TEXT ·maxI8AVX512(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPMAXSB)

// func maxU8AVX512(d, a, b *byte, n int)
TEXT ·maxU8AVX512(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPMAXUB)

// func minI8AVX512(d, a, b *byte, n int)
TEXT ·minI8AVX512(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPMINSB)

// func minU8AVX512(d, a, b *byte, n int)
TEXT ·minU8AVX512(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPMINUB)

// func maxI32AVX512(d, a, b *byte, n int)
TEXT ·maxI32AVX512(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPMAXSD)

// func maxU32AVX512(d, a, b *byte, n int)
TEXT ·maxU32AVX512(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPMAXUD)

// func minI32AVX512(d, a, b *byte, n int)
TEXT ·minI32AVX512(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPMINSD)

// func minU32AVX512(d, a, b *byte, n int)
TEXT ·minU32AVX512(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPMINUD)

// func maxI64AVX512(d, a, b *byte, n int)
TEXT ·maxI64AVX512(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPMAXSQ)

// func maxU64AVX512(d, a, b *byte, n int)
TEXT ·maxU64AVX512(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPMAXUQ)

// func minI64AVX512(d, a, b *byte, n int)
TEXT ·minI64AVX512(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPMINSQ)

// func minU64AVX512(d, a, b *byte, n int)
TEXT ·minU64AVX512(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPMINUQ)

// func ksel16AVX512(d, a, b *byte, n int, km, c1, c2 uint64)
TEXT ·ksel16AVX512(SB), NOSPLIT, $0-56
	KARGS
	LOOP(KSEL16, _)

// func ksel32AVX512(d, a, b *byte, n int, km, c1, c2 uint64)
TEXT ·ksel32AVX512(SB), NOSPLIT, $0-56
	KARGS
	LOOP(KSEL32, _)

// func ksel64AVX512(d, a, b *byte, n int, km, c1, c2 uint64)
TEXT ·ksel64AVX512(SB), NOSPLIT, $0-56
	KARGS
	LOOP(KSEL64, _)

// func addF16AVX512(d, a, b *byte, n int)
TEXT ·addF16AVX512(SB), NOSPLIT, $0-32
	ARGS
	LOOP(F16, VADDPS)

// func mulF16AVX512(d, a, b *byte, n int)
TEXT ·mulF16AVX512(SB), NOSPLIT, $0-32
	ARGS
	LOOP(F16, VMULPS)

// func addBF16AVX512(d, a, b *byte, n int)
TEXT ·addBF16AVX512(SB), NOSPLIT, $0-32
	BARGS
	LOOP(BF16, VADDPS)

// func mulBF16AVX512(d, a, b *byte, n int)
TEXT ·mulBF16AVX512(SB), NOSPLIT, $0-32
	BARGS
	LOOP(BF16, VMULPS)

// widenF16AVX512 widens n float16 elements (n a multiple of 16) at src to
// float32 at dst. VCVTPH2PS quiets a signalling NaN; the scalar Widen
// keeps its bits, so the quiet bit (22) is cleared again in the NaN
// lanes (K1) whose float16 has its quiet bit (9) clear (K2).
//
// func widenF16AVX512(dst, src *byte, n int)
TEXT ·widenF16AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VPBROADCASTD f16z<>+0(SB), Z15
	VPBROADCASTD f16z<>+4(SB), Z14
	SHRQ $4, CX
	JZ   wdone
wloop:
	VCVTPH2PS (SI), Z0
	VPMOVZXWD (SI), Z1
	VCMPPS    $3, Z0, Z0, K1
	VPTESTNMD Z15, Z1, K1, K2
	VPXORD    Z14, Z0, K2, Z0
	VMOVDQU64 Z0, (DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	DECQ      CX
	JNZ       wloop
wdone:
	VZEROUPPER
	RET

// narrowF16AVX512 rounds n float32 elements (n a multiple of 16) at src
// to float16 at dst, to nearest even: Narrow with div = 1.
//
// func narrowF16AVX512(dst, src *byte, n int)
TEXT ·narrowF16AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   ndone
nloop:
	VMOVDQU64 (SI), Z0
	VCVTPS2PH $0, Z0, (DI)
	ADDQ      $64, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       nloop
ndone:
	VZEROUPPER
	RET
