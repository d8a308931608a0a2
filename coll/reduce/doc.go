// Package reduce holds the element-wise reduction kernels of the
// collectives: dst = a op b over buffers of little-endian elements, and the
// step that must follow the last reduction once (Avg's division).
//
// DType and Op carry NCCL's ncclDataType_t and ncclRedOp_t values and
// print as nccl-tests names them. The functions allocate nothing and take
// buffers at any alignment: aligned ones, the usual case, are processed in
// place, others in 2 KiB chunks through an aligned stack buffer by the same
// kernels. The output depends only on the inputs, not on alignment, chunking
// or CPU features, so every rank that reduces or finishes the same bytes
// gets the same bytes (on different architectures too, except for the
// payload of a NaN that Sum or Prod produces).
//
// # Numerics
//
// Integers: Sum and Prod wrap around (two's complement), as in NCCL.
// Min and Max compare as signed or unsigned by the type. Avg is the
// wrapped Sum, which Finish divides by n, truncating toward zero (NCCL's
// SumPostDiv); a sum that wrapped gives a meaningless average, as in NCCL.
//
// float32 and float64: Sum and Prod are the IEEE operations, rounded to
// nearest even, subnormals kept. A NaN result is a NaN; its payload is
// whatever the hardware gives.
//
// float16 and bfloat16: the kernels here widen each element to float32
// (exactly), operate in float32, and round the result back to nearest,
// ties to even, subnormals kept, overflow to ±Inf: for one operation on
// two 16-bit operands that is the correctly rounded 16-bit result (float32
// has at least 2p+2 significand bits, p = 11 for float16, 8 for bfloat16),
// what NCCL's __hadd and __hmul compute. The collectives in package coll
// go further: they Widen a float16 or bfloat16 input to float32 before the
// first step, reduce in float32 across every step (sending float32, twice
// the bytes), and Narrow the result once at the end, dividing first for
// Avg, so the sum over n ranks is rounded to 16 bits once, not n-1 times
// (as NCCL's newer symmetric kernels accumulate in float32).
//
// Min and Max on floats: a NaN wins. If either operand is a NaN the result
// is a NaN, and -0 < +0. This is IEEE 754-2019 minimum/maximum and
// torch.minimum/maximum, and deliberately not NCCL's fminf/fmaxf and
// __hmin/__hmax, which drop a NaN operand and so hide a diverged value.
// The result is always one operand's exact bits, and Min and Max are
// commutative and associative bit for bit, two NaNs included (which of the
// two wins is fixed by their bits), so the order in which a collective
// combines ranks does not change the result.
//
// Avg on floats: Reduce sums (Avg reduces as Sum), and Finish divides each
// element by n once, the quotient correctly rounded to the element type
// (computed in float64; correct for any n < 2^28). NCCL instead multiplies
// every input by 1/n, rounded to the element type, before summing
// (PreMulSum); nccl-tests allows avg 2 ULP for that reason, and results
// may differ from NCCL's by that much. Summing first is more accurate (one
// rounding for the division, none for 1/n) but can overflow where the
// scaled sum would not: float16 sums past 65504 become Inf. Gloo and
// PyTorch's gloo backend also sum, then divide.
//
// Order: floating-point Sum and Prod are not associative, so a result over
// more than two contributions depends on the order in which the collective
// combines them. The result is still the same on every rank when each
// element is reduced and finished once and then copied, as a ring or tree
// all-reduce does, or when every rank finishes the same bytes.
package reduce
