// AVX2 (and F16C) kernels: d = a op b over n bytes, n a multiple of 32.
// The Go side (vector_amd64.go) passes the whole 32-byte blocks and
// finishes the tail with the scalar kernels. Loads and stores are
// unaligned (VEX allows unaligned memory operands), so any element-aligned
// buffer works. Every block loads a and b before it stores d, so d may be
// a or b.

#include "textflag.h"

// LOOP runs BODY(X, off) over the n = CX bytes at DI, SI, DX: two 32-byte
// blocks per iteration, then the odd block. AX is the byte offset.
#define LOOP(BODY, X) \
	XORQ AX, AX; \
	MOVQ CX, BX; \
	ANDQ $-64, BX; \
	JZ   tail; \
loop: \
	BODY(X, 0); \
	BODY(X, 32); \
	ADDQ $64, AX; \
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
// (the operand whose NaN a float op returns when both are NaNs, as the
// scalar code's a + b does).
#define BIN(OP, o) \
	VMOVDQU o(SI)(AX*1), Y0; \
	OP o(DX)(AX*1), Y0, Y0; \
	VMOVDQU Y0, o(DI)(AX*1)

// The key-select bodies serve Min and Max on floats (and 64-bit integers,
// which AVX2 has no min or max for). For each lane of x = a and y = b:
//   k = ((x ^ (x < 0 ? km : 0)) + c1) ^ c2
// and d = y if k(y) > k(x) as signed integers, else x. With km all ones
// but the sign bit, k is minmax.go's key, c1 its rotation, and c2 maps the
// unsigned order to the signed one (or reverses it for Min); with km = 0,
// the integers' own order. Y13 = km, Y14 = c1, Y15 = c2, Y12 = 0.
#define KSEL16(_, o) \
	VMOVDQU o(SI)(AX*1), Y0; \
	VMOVDQU o(DX)(AX*1), Y1; \
	VPSRAW  $15, Y0, Y2; \
	VPSRAW  $15, Y1, Y3; \
	VPAND   Y13, Y2, Y2; \
	VPAND   Y13, Y3, Y3; \
	VPXOR   Y0, Y2, Y2; \
	VPXOR   Y1, Y3, Y3; \
	VPADDW  Y14, Y2, Y2; \
	VPADDW  Y14, Y3, Y3; \
	VPXOR   Y15, Y2, Y2; \
	VPXOR   Y15, Y3, Y3; \
	VPCMPGTW Y2, Y3, Y3; \
	VPBLENDVB Y3, Y1, Y0, Y0; \
	VMOVDQU Y0, o(DI)(AX*1)

#define KSEL32(_, o) \
	VMOVDQU o(SI)(AX*1), Y0; \
	VMOVDQU o(DX)(AX*1), Y1; \
	VPSRAD  $31, Y0, Y2; \
	VPSRAD  $31, Y1, Y3; \
	VPAND   Y13, Y2, Y2; \
	VPAND   Y13, Y3, Y3; \
	VPXOR   Y0, Y2, Y2; \
	VPXOR   Y1, Y3, Y3; \
	VPADDD  Y14, Y2, Y2; \
	VPADDD  Y14, Y3, Y3; \
	VPXOR   Y15, Y2, Y2; \
	VPXOR   Y15, Y3, Y3; \
	VPCMPGTD Y2, Y3, Y3; \
	VPBLENDVB Y3, Y1, Y0, Y0; \
	VMOVDQU Y0, o(DI)(AX*1)

// AVX2 has no 64-bit arithmetic shift: the sign mask is 0 > x.
#define KSEL64(_, o) \
	VMOVDQU o(SI)(AX*1), Y0; \
	VMOVDQU o(DX)(AX*1), Y1; \
	VPCMPGTQ Y0, Y12, Y2; \
	VPCMPGTQ Y1, Y12, Y3; \
	VPAND   Y13, Y2, Y2; \
	VPAND   Y13, Y3, Y3; \
	VPXOR   Y0, Y2, Y2; \
	VPXOR   Y1, Y3, Y3; \
	VPADDQ  Y14, Y2, Y2; \
	VPADDQ  Y14, Y3, Y3; \
	VPXOR   Y15, Y2, Y2; \
	VPXOR   Y15, Y3, Y3; \
	VPCMPGTQ Y2, Y3, Y3; \
	VPBLENDVB Y3, Y1, Y0, Y0; \
	VMOVDQU Y0, o(DI)(AX*1)

// F16 widens 16 float16 elements of a and of b to float32 (exactly),
// applies OP in float32, and rounds back to nearest even (immediate 0:
// round to nearest even regardless of MXCSR), subnormals kept: what the
// scalar addF16 and mulF16 do, element by element.
#define F16(OP, o) \
	VCVTPH2PS o(SI)(AX*1), Y0; \
	VCVTPH2PS o+16(SI)(AX*1), Y1; \
	VCVTPH2PS o(DX)(AX*1), Y2; \
	VCVTPH2PS o+16(DX)(AX*1), Y3; \
	OP        Y2, Y0, Y0; \
	OP        Y3, Y1, Y1; \
	VCVTPS2PH $0, Y0, o(DI)(AX*1); \
	VCVTPS2PH $0, Y1, o+16(DI)(AX*1)

// BF16RND rounds the float32 lanes of R to bfloat16 in the top half of
// each lane of U, as f32ToBF16 does: b + 0x7fff + (b>>16)&1, or for a NaN
// b | 0x400000 (made quiet). T and N are scratch. Y8 = 0x7fff, Y9 = 1,
// Y10 = 0x400000 in every lane.
#define BF16RND(R, T, U, N) \
	VPSRLD    $16, R, T; \
	VPAND     Y9, T, T; \
	VPADDD    Y8, T, T; \
	VPADDD    R, T, U; \
	VCMPPS    $3, R, R, N; \
	VPOR      Y10, R, T; \
	VPBLENDVB N, T, U, U

// BF16 widens 16 bfloat16 elements of a and of b (the top halves of
// float32s) where they are, the even ones shifted up and the odd ones
// masked, applies OP in float32 and rounds back into the same places.
// Y11 = 0xffff0000 in every lane.
#define BF16(OP, o) \
	VMOVDQU   o(SI)(AX*1), Y0; \
	VMOVDQU   o(DX)(AX*1), Y2; \
	VPAND     Y11, Y0, Y1; \
	VPAND     Y11, Y2, Y3; \
	VPSLLD    $16, Y0, Y0; \
	VPSLLD    $16, Y2, Y2; \
	OP        Y2, Y0, Y0; \
	OP        Y3, Y1, Y1; \
	BF16RND(Y0, Y2, Y4, Y5); \
	BF16RND(Y1, Y3, Y6, Y7); \
	VPSRLD    $16, Y4, Y4; \
	VPAND     Y11, Y6, Y6; \
	VPOR      Y6, Y4, Y4; \
	VMOVDQU   Y4, o(DI)(AX*1)

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
	VPBROADCASTQ km+32(FP), Y13; \
	VPBROADCASTQ c1+40(FP), Y14; \
	VPBROADCASTQ c2+48(FP), Y15; \
	VPXOR        Y12, Y12, Y12

// The bfloat16 kernels' constants.
DATA bf16c<>+0(SB)/4, $0x7fff
DATA bf16c<>+4(SB)/4, $1
DATA bf16c<>+8(SB)/4, $0x400000
DATA bf16c<>+12(SB)/4, $0xffff0000
GLOBL bf16c<>(SB), RODATA|NOPTR, $16

#define BARGS \
	ARGS; \
	VPBROADCASTD bf16c<>+0(SB), Y8; \
	VPBROADCASTD bf16c<>+4(SB), Y9; \
	VPBROADCASTD bf16c<>+8(SB), Y10; \
	VPBROADCASTD bf16c<>+12(SB), Y11

DATA f16q<>+0(SB)/4, $0x00400000
GLOBL f16q<>(SB), RODATA|NOPTR, $4

// func add8AVX2(d, a, b *byte, n int)
TEXT ·add8AVX2(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPADDB)

// func add32AVX2(d, a, b *byte, n int)
TEXT ·add32AVX2(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPADDD)

// func add64AVX2(d, a, b *byte, n int)
TEXT ·add64AVX2(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPADDQ)

// func mul32AVX2(d, a, b *byte, n int)
TEXT ·mul32AVX2(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPMULLD)

// func addF32AVX2(d, a, b *byte, n int)
TEXT ·addF32AVX2(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VADDPS)

// func mulF32AVX2(d, a, b *byte, n int)
TEXT ·mulF32AVX2(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VMULPS)

// func addF64AVX2(d, a, b *byte, n int)
TEXT ·addF64AVX2(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VADDPD)

// func mulF64AVX2(d, a, b *byte, n int)
TEXT ·mulF64AVX2(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VMULPD)

// func maxI8AVX2(d, a, b *byte, n int)
TEXT ·maxI8AVX2(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPMAXSB)

// func maxU8AVX2(d, a, b *byte, n int)
TEXT ·maxU8AVX2(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPMAXUB)

// func minI8AVX2(d, a, b *byte, n int)
TEXT ·minI8AVX2(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPMINSB)

// func minU8AVX2(d, a, b *byte, n int)
TEXT ·minU8AVX2(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPMINUB)

// func maxI32AVX2(d, a, b *byte, n int)
TEXT ·maxI32AVX2(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPMAXSD)

// func maxU32AVX2(d, a, b *byte, n int)
TEXT ·maxU32AVX2(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPMAXUD)

// func minI32AVX2(d, a, b *byte, n int)
TEXT ·minI32AVX2(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPMINSD)

// func minU32AVX2(d, a, b *byte, n int)
TEXT ·minU32AVX2(SB), NOSPLIT, $0-32
	ARGS
	LOOP(BIN, VPMINUD)

// func ksel16AVX2(d, a, b *byte, n int, km, c1, c2 uint64)
TEXT ·ksel16AVX2(SB), NOSPLIT, $0-56
	KARGS
	LOOP(KSEL16, _)

// func ksel32AVX2(d, a, b *byte, n int, km, c1, c2 uint64)
TEXT ·ksel32AVX2(SB), NOSPLIT, $0-56
	KARGS
	LOOP(KSEL32, _)

// func ksel64AVX2(d, a, b *byte, n int, km, c1, c2 uint64)
TEXT ·ksel64AVX2(SB), NOSPLIT, $0-56
	KARGS
	LOOP(KSEL64, _)

// func addF16AVX2(d, a, b *byte, n int)
TEXT ·addF16AVX2(SB), NOSPLIT, $0-32
	ARGS
	LOOP(F16, VADDPS)

// func mulF16AVX2(d, a, b *byte, n int)
TEXT ·mulF16AVX2(SB), NOSPLIT, $0-32
	ARGS
	LOOP(F16, VMULPS)

// func addBF16AVX2(d, a, b *byte, n int)
TEXT ·addBF16AVX2(SB), NOSPLIT, $0-32
	BARGS
	LOOP(BF16, VADDPS)

// func mulBF16AVX2(d, a, b *byte, n int)
TEXT ·mulBF16AVX2(SB), NOSPLIT, $0-32
	BARGS
	LOOP(BF16, VMULPS)

// widenF16AVX2 widens n float16 elements (n a multiple of 8) at src to
// float32 at dst. VCVTPH2PS quiets a signalling NaN; the scalar Widen
// keeps its bits, so the quiet bit (22) is cleared again in NaN lanes
// whose float16 had its quiet bit (9) clear.
//
// func widenF16AVX2(dst, src *byte, n int)
TEXT ·widenF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VPBROADCASTD f16q<>+0(SB), Y15
	SHRQ $3, CX
	JZ   wdone
wloop:
	VCVTPH2PS (SI), Y0
	VPMOVZXWD (SI), Y1
	VPSLLD    $13, Y1, Y1
	VCMPPS    $3, Y0, Y0, Y2
	VPANDN    Y2, Y1, Y1
	VPAND     Y15, Y1, Y1
	VPANDN    Y0, Y1, Y0
	VMOVDQU   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       wloop
wdone:
	VZEROUPPER
	RET

// narrowF16AVX2 rounds n float32 elements (n a multiple of 8) at src to
// float16 at dst, to nearest even: Narrow with div = 1.
//
// func narrowF16AVX2(dst, src *byte, n int)
TEXT ·narrowF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   ndone
nloop:
	VMOVDQU   (SI), Y0
	VCVTPS2PH $0, Y0, (DI)
	ADDQ      $32, SI
	ADDQ      $16, DI
	DECQ      CX
	JNZ       nloop
ndone:
	VZEROUPPER
	RET
