package coll

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/coll/reduce"
)

// The matrix test runs every collective on every element type with every
// reduction op, at several rank counts, counts, roots and both buffer
// layouts (in place and out of place), and every algorithm of every
// collective at 1 to 8 ranks, and compares the output bytes with
// expectations computed here, independently of package reduce's kernels:
//
//   - Integer inputs are pseudo-random over the full width, because integer
//     Sum and Prod are exact modulo 2^w in any order; the expectation wraps
//     explicitly, and Avg is the wrapped sum divided by the rank count,
//     truncated toward zero (reduce/doc.go).
//   - Float inputs are chosen so that every partial result, in any order,
//     is exact in every float type (the nccl-tests method): Sum and Avg add
//     quarters k/4 with |k| ≤ 32, so a partial sum over at most 8 ranks is
//     K/4 with |K| ≤ 256, which bfloat16's 8 significant bits hold; Prod
//     multiplies values of ±{1/2, 1, 2}, so every partial product is ±2^k
//     with |k| ≤ 8; Min and Max compare values ±(1+m/8)·2^e, which differ
//     in sign, exponent and mantissa. Avg's expectation is the exact sum
//     divided by the rank count, rounded to nearest even at the type's
//     precision with math/big.
//   - Except: every odd element of a float16 or bfloat16 Sum or Avg has
//     all of the type's significant bits, so partial sums are exact in
//     float32 but not in the 16-bit type. The collectives accumulate
//     float16 and bfloat16 in float32 and round once at the end
//     (reduce/doc.go), so the result is still independent of order: the
//     exact sum (or sum/n) rounded once to nearest even. Rounding after
//     every step, or ties away from zero, shows there.
//   - Broadcast, all_gather and all_to_all only move data, so their inputs
//     are raw pseudo-random bytes (NaN payloads and all): a copy that went
//     through a float conversion, or landed at the wrong offset, shows.
//
// Each rank count gets one communicator (setting one up is the slow part)
// with a small landing buffer, 8 credits of 4 KiB, so the larger calls are
// cut into many pieces and the credits wrap. The counts are 0, 1, N+3 (not
// a multiple of N) and 4099 (many pieces); the dtype × op product leaves
// out count 0, which moves no data whatever the type (the algorithm cases
// keep it), so that the test stays within its time budget under -race.

// matrixOptions: 8 landing slots of 4 KiB per peer.
var matrixOptions = Options{Transport: "loop0", Landing: 8 * 4096, Credits: 8}

// matrixLarge is the large count: 4099 elements are 16 to 32 KiB of
// float32 or float64 per block, not a multiple of any slot or rank count.
const matrixLarge = 4099

// matrixCallTimeout bounds one call, so a hang fails the test.
const matrixCallTimeout = 20 * time.Second

// matrixSeed seeds every input; the inputs of a case are a pure function
// of it, so a failure replays exactly.
const matrixSeed = 0x1bec_c011_ec71_7e5d

var (
	matrixDTypes = []reduce.DType{reduce.Int8, reduce.Uint8, reduce.Int32, reduce.Uint32, reduce.Int64,
		reduce.Uint64, reduce.Float16, reduce.BFloat16, reduce.Float32, reduce.Float64}
	matrixOps = []reduce.Op{reduce.Sum, reduce.Prod, reduce.Max, reduce.Min, reduce.Avg}
	// fullMatrixSizes are the rank counts that run the whole dtype × op
	// product; every rank count from 1 to 8 runs every algorithm.
	fullMatrixSizes = map[int]bool{1: true, 2: true, 3: true, 5: true, 8: true}
)

// matrixCase is one collective call, made by every rank.
type matrixCase struct {
	coll    algo.Collective
	alg     algo.Algorithm // 0: the one the communicator picks (its cost model)
	dt      reduce.DType
	op      reduce.Op // all_reduce, reduce_scatter and reduce only
	count   int
	root    int // broadcast and reduce only
	inPlace bool
}

func (k matrixCase) String() string {
	var b strings.Builder
	b.WriteString(k.coll.String())
	if k.alg != 0 {
		fmt.Fprintf(&b, "/%v", k.alg)
	}
	fmt.Fprintf(&b, " %v", k.dt)
	if reduces(k.coll) {
		fmt.Fprintf(&b, " %v", k.op)
	}
	fmt.Fprintf(&b, " count=%d", k.count)
	if k.coll == algo.Broadcast || k.coll == algo.Reduce {
		fmt.Fprintf(&b, " root=%d", k.root)
	}
	if k.inPlace {
		b.WriteString(" in-place")
	} else {
		b.WriteString(" out-of-place")
	}
	return b.String()
}

func reduces(c algo.Collective) bool {
	return c == algo.AllReduce || c == algo.ReduceScatter || c == algo.Reduce
}

// matrixCases lists the calls of the N-rank communicator: every supported
// algorithm of every collective on float32 sum, then (at the rank counts
// of fullMatrixSizes) every collective on every dtype and op, with the
// algorithm the communicator picks.
func matrixCases(N int) []matrixCase {
	allCounts := []int{0, 1, N + 3, matrixLarge}
	roots := []int{0}
	if N > 1 {
		roots = append(roots, N-1)
	}
	var cs []matrixCase
	add := func(c algo.Collective, a algo.Algorithm, dts []reduce.DType, ops []reduce.Op, counts []int) {
		if !reduces(c) {
			ops = []reduce.Op{reduce.Sum} // unused
		}
		rs := []int{0}
		if c == algo.Broadcast || c == algo.Reduce {
			rs = roots
		}
		for _, dt := range dts {
			for _, op := range ops {
				for _, count := range counts {
					for _, root := range rs {
						for _, inPlace := range []bool{false, true} {
							cs = append(cs, matrixCase{coll: c, alg: a, dt: dt, op: op, count: count, root: root, inPlace: inPlace})
						}
					}
				}
			}
		}
	}
	for c := algo.AllReduce; c <= algo.AllToAll; c++ {
		for _, a := range algo.Supported(c) {
			add(c, a, []reduce.DType{reduce.Float32}, []reduce.Op{reduce.Sum}, allCounts)
		}
	}
	// Count 0 moves nothing, whatever the type and op, so the product runs
	// without it (the algorithm cases above have it).
	fullCounts := allCounts[1:]
	if fullMatrixSizes[N] {
		for c := algo.AllReduce; c <= algo.AllToAll; c++ {
			add(c, 0, matrixDTypes, matrixOps, fullCounts)
		}
	}
	return cs
}

// TestMatrix checks every collective, dtype, op and algorithm bit for bit
// (see the comment at the top of this file for the cases and why their
// expectations are exact). Every rank must get the same all_reduce bytes.
func TestMatrix(t *testing.T) {
	for N := 1; N <= 8; N++ {
		t.Run(fmt.Sprintf("ranks=%d", N), func(t *testing.T) {
			testMatrix(t, N)
		})
	}
}

func testMatrix(t *testing.T, N int) {
	cases := matrixCases(N)
	data := newMatrixData(N, cases)
	// digests[i][r] is a hash of rank r's output of case i (all_reduce
	// only), compared across ranks once they are done.
	digests := make([][]uint64, len(cases))
	for i := range digests {
		digests[i] = make([]uint64, N)
	}
	// A rank whose call fails cancels the others' calls, which would
	// otherwise wait for it until their deadline.
	parent, abort := context.WithCancel(context.Background())
	defer abort()
	runRanks(t, N, matrixOptions, func(c *Comm) error {
		r := c.Rank()
		reported := 0
		for i, k := range cases {
			ctx := parent
			if k.alg != 0 {
				ctx = WithAlgorithm(ctx, k.alg)
			}
			ctx, cancel := context.WithTimeout(ctx, matrixCallTimeout)
			res, err := runMatrixCase(ctx, c, k, data)
			cancel()
			if err != nil {
				if parent.Err() == nil {
					t.Errorf("ranks=%d rank %d: %v: %v", N, r, k, err)
				}
				abort()
				return fmt.Errorf("%v: %w", k, err)
			}
			if k.coll == algo.AllReduce {
				h := fnv.New64a()
				h.Write(res.got)
				digests[i][r] = h.Sum64()
			}
			for _, m := range res.mismatches() {
				if reported++; reported <= 20 {
					t.Errorf("ranks=%d rank %d: %v: %s", N, r, k, m)
				}
			}
		}
		if reported > 20 {
			t.Errorf("ranks=%d rank %d: %d more mismatches not shown", N, r, reported-20)
		}
		return nil
	})
	for i, k := range cases {
		for r := 1; r < N; r++ {
			if digests[i][r] != digests[i][0] {
				t.Errorf("ranks=%d: %v: rank %d's output (hash %#x) differs from rank 0's (%#x)", N, k, r, digests[i][r], digests[i][0])
			}
		}
	}
}

// matrixResult is what one rank saw of one call.
type matrixResult struct {
	dt         reduce.DType
	got, want  []byte // want nil: the output is not checked (reduce off the root)
	send, sent []byte // out of place: the send buffer after the call, and before
}

// mismatches describes what differs from the expectation: the output (up
// to 4 elements, with their index, value and bits) and an out-of-place
// send buffer that the call modified.
func (m matrixResult) mismatches() []string {
	var out []string
	if m.want != nil && !bytes.Equal(m.got, m.want) {
		out = append(out, describeDiff("output", m.dt, m.got, m.want))
	}
	if m.sent != nil && !bytes.Equal(m.send, m.sent) {
		out = append(out, describeDiff("send buffer (must not change out of place)", m.dt, m.send, m.sent))
	}
	return out
}

func describeDiff(what string, dt reduce.DType, got, want []byte) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%s: %d bytes, want %d", what, len(got), len(want))
	}
	es := dt.Size()
	var b strings.Builder
	bad := 0
	for i := 0; i < len(got)/es; i++ {
		g, w := got[i*es:(i+1)*es], want[i*es:(i+1)*es]
		if bytes.Equal(g, w) {
			continue
		}
		if bad++; bad <= 4 {
			fmt.Fprintf(&b, "; element %d = %s, want %s", i, showElem(dt, g), showElem(dt, w))
		}
	}
	return fmt.Sprintf("%s: %d of %d elements differ%s", what, bad, len(got)/es, b.String())
}

// runMatrixCase makes rank c's call of case k and returns its output and
// what it should be.
func runMatrixCase(ctx context.Context, c *Comm, k matrixCase, d *matrixData) (matrixResult, error) {
	r, N, es := c.Rank(), c.Size(), k.dt.Size()
	n := k.count * es // bytes of one block
	inN, outN := n, n
	switch k.coll {
	case algo.ReduceScatter:
		inN = N * n
	case algo.AllGather:
		outN = N * n
	case algo.AllToAll:
		inN, outN = N*n, N*n
	}
	in := d.input(k, r)[:inN] // shared by the ranks: read only

	res := matrixResult{dt: k.dt}
	var send, recv []byte
	switch {
	case !k.inPlace:
		send, recv = bytes.Clone(in), garbage(outN)
		res.sent = in
	case k.coll == algo.ReduceScatter:
		// NCCL's in-place reduce_scatter: recvbuf = sendbuf + r·count.
		send = bytes.Clone(in)
		recv = send[r*n : (r+1)*n]
	case k.coll == algo.AllGather:
		// NCCL's in-place all_gather: sendbuf = recvbuf + r·count.
		recv = garbage(outN)
		copy(recv[r*n:], in)
		send = recv[r*n : (r+1)*n]
	default:
		send = bytes.Clone(in)
		recv = send
	}

	var err error
	switch k.coll {
	case algo.AllReduce:
		err = c.AllReduce(ctx, send, recv, k.count, k.dt, k.op)
	case algo.ReduceScatter:
		err = c.ReduceScatter(ctx, send, recv, k.count, k.dt, k.op)
	case algo.AllGather:
		err = c.AllGather(ctx, send, recv, k.count, k.dt)
	case algo.Broadcast:
		err = c.Broadcast(ctx, send, recv, k.count, k.dt, k.root)
	case algo.Reduce:
		err = c.Reduce(ctx, send, recv, k.count, k.dt, k.op, k.root)
	case algo.AllToAll:
		err = c.AllToAll(ctx, send, recv, k.count, k.dt)
	}
	if err != nil {
		return res, err
	}
	res.got, res.send = recv, send

	switch ref := d.refs[refKey{k.dt, k.op}]; k.coll {
	case algo.AllReduce:
		res.want = ref[:n]
	case algo.Reduce:
		if r == k.root {
			res.want = ref[:n]
		}
	case algo.ReduceScatter:
		res.want = ref[r*n : (r+1)*n]
	case algo.AllGather:
		// Block q is rank q's input.
		res.want = make([]byte, 0, outN)
		for q := range N {
			res.want = append(res.want, d.input(k, q)[:n]...)
		}
	case algo.Broadcast:
		res.want = d.input(k, k.root)[:n]
	case algo.AllToAll:
		// Block q is block r of rank q's input.
		res.want = make([]byte, 0, outN)
		for q := range N {
			res.want = append(res.want, d.input(k, q)[r*n:(r+1)*n]...)
		}
	}
	return res, nil
}

// garbage is an output buffer before the call: a pattern the expected
// outputs hardly ever hold, so an element the call did not write shows.
func garbage(n int) []byte { return bytes.Repeat([]byte{0xa5}, n) }

// mix is splitmix64's finalizer: a well-spread hash of its input.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// moveTag marks the inputs of the collectives that only move data.
const moveTag = 15

// elemHash is the pseudo-random word behind element j of rank r's input
// for dt and op (or moveTag).
func elemHash(dt reduce.DType, op uint64, r, j int) uint64 {
	return mix(matrixSeed ^ uint64(dt)<<60 ^ op<<56 ^ uint64(r)<<48 ^ uint64(j))
}

// moveInput is rank r's input for broadcast, all_gather and all_to_all:
// n raw pseudo-random bytes.
func moveInput(dt reduce.DType, r, n int) []byte {
	b := make([]byte, (n+7)&^7)
	for w := range len(b) / 8 {
		binary.LittleEndian.PutUint64(b[8*w:], elemHash(dt, moveTag, r, w))
	}
	return b[:n]
}

// reduceInput is element j of rank r's input to a reduction: its bits
// (little-endian in the low dt.Size() bytes) and, for a float type, its
// value. The float values keep every partial result exact (see the top of
// this file).
func reduceInput(dt reduce.DType, op reduce.Op, r, j int) (uint64, float64) {
	op = inputClass(op)
	h := elemHash(dt, uint64(op), r, j)
	if !isFloat(dt) {
		if op == reduce.Prod && j%4 != 0 {
			// Odd factors keep most products from wrapping to zero in
			// the narrow types; every fourth element may still.
			h |= 1
		}
		return h & widthMask(dt), 0
	}
	var v float64
	switch {
	case op == reduce.Sum && (dt == reduce.Float16 || dt == reduce.BFloat16) && j%2 == 1:
		// A 16-bit value k·2^e with up to p significant bits and
		// e in [-2, 0]: a sum of up to 8 needs at most p+5 bits, so it is
		// exact in float32, where the collectives accumulate, but not in
		// the 16-bit type (ties included).
		p := map[reduce.DType]uint64{reduce.Float16: 11, reduce.BFloat16: 8}[dt]
		k := int64(h%(1<<(p+1))) - 1<<p + 1 // |k| < 2^p
		v = math.Ldexp(float64(k), -int(h>>16%3))
	case op == reduce.Sum: // and Avg
		v = float64(int64(h%65)-32) / 4
	case op == reduce.Prod:
		v = [...]float64{-2, -1, -0.5, 0.5, 1, 2}[h%6]
	default: // Max and Min
		v = math.Ldexp(1+float64(h%8)/8, int((h>>3)%21)-10)
		if h>>8&1 == 1 {
			v = -v
		}
	}
	return exactBits(dt, v), v
}

type refKey struct {
	dt reduce.DType
	op reduce.Op
}

// inputClass is the op whose inputs op uses: Avg adds what Sum does, and
// Min compares what Max does.
func inputClass(op reduce.Op) reduce.Op {
	switch op {
	case reduce.Avg:
		return reduce.Sum
	case reduce.Min:
		return reduce.Max
	}
	return op
}

// matrixData holds, for the cases of one rank count N, every rank's inputs
// and the expected reductions, computed once before the ranks start (the
// ranks then only copy and compare). Each buffer holds N·count elements
// of the largest count, enough for the blocked collectives.
type matrixData struct {
	red  map[refKey][][]byte       // [dt, inputClass(op)][r]: rank r's input to a reduction
	move map[reduce.DType][][]byte // [dt][r]: rank r's input to a data movement
	// refs[dt, op] is the element-wise reduction over the ranks of red:
	// all_reduce and reduce expect its first count elements,
	// reduce_scatter rank r its block r.
	refs map[refKey][]byte
}

func (d *matrixData) input(k matrixCase, r int) []byte {
	if reduces(k.coll) {
		return d.red[refKey{k.dt, inputClass(k.op)}][r]
	}
	return d.move[k.dt][r]
}

func newMatrixData(N int, cases []matrixCase) *matrixData {
	// The largest count of each input and of each reduction.
	inCount, refCount := map[refKey]int{}, map[refKey]int{}
	for _, k := range cases {
		in := refKey{k.dt, moveTag}
		if reduces(k.coll) {
			in.op = inputClass(k.op)
			refCount[refKey{k.dt, k.op}] = max(refCount[refKey{k.dt, k.op}], k.count)
		}
		inCount[in] = max(inCount[in], k.count)
	}
	d := &matrixData{red: map[refKey][][]byte{}, move: map[reduce.DType][][]byte{}, refs: map[refKey][]byte{}}
	// Fill the buffers on every core: the race detector makes this slow.
	var wg sync.WaitGroup
	var mu sync.Mutex
	for key, count := range inCount {
		ins := make([][]byte, N)
		if key.op == moveTag {
			d.move[key.dt] = ins
		} else {
			d.red[key] = ins
		}
		for r := range N {
			wg.Go(func() {
				if key.op == moveTag {
					ins[r] = moveInput(key.dt, r, N*count*key.dt.Size())
					return
				}
				es := key.dt.Size()
				b := make([]byte, N*count*es)
				for j := range N * count {
					bits, _ := reduceInput(key.dt, key.op, r, j)
					storeBits(b, es, j, bits)
				}
				ins[r] = b
			})
		}
	}
	for key, count := range refCount {
		wg.Go(func() {
			es := key.dt.Size()
			b := make([]byte, N*count*es)
			for j := range N * count {
				storeBits(b, es, j, expectElem(key.dt, key.op, N, j))
			}
			mu.Lock()
			d.refs[key] = b
			mu.Unlock()
		})
	}
	wg.Wait()
	return d
}

// expectElem is element j of the reduction over N ranks, as bits.
func expectElem(dt reduce.DType, op reduce.Op, N, j int) uint64 {
	if !isFloat(dt) {
		return expectInt(dt, op, N, j)
	}
	_, acc := reduceInput(dt, op, 0, j)
	for r := 1; r < N; r++ {
		_, v := reduceInput(dt, op, r, j)
		switch op {
		case reduce.Sum, reduce.Avg:
			acc += v // exact in float64: see the top of this file
		case reduce.Prod:
			acc *= v // exact: powers of two
		case reduce.Max:
			acc = math.Max(acc, v)
		case reduce.Min:
			acc = math.Min(acc, v)
		}
	}
	switch op {
	case reduce.Sum:
		// Rounded once: a no-op but for the wide float16 and bfloat16
		// inputs.
		acc = roundQuotient(dt, acc, 1)
	case reduce.Avg:
		acc = roundQuotient(dt, acc, N)
	}
	return exactBits(dt, acc)
}

// expectInt reduces integers: Sum and Prod wrap at the type's width, Min
// and Max compare signed or unsigned, Avg is the wrapped sum divided by N
// truncating toward zero, as reduce/doc.go says.
func expectInt(dt reduce.DType, op reduce.Op, N, j int) uint64 {
	mask, signed := widthMask(dt), isSigned(dt)
	less := func(a, b uint64) bool {
		if signed {
			return signExtend(dt, a) < signExtend(dt, b)
		}
		return a < b
	}
	acc, _ := reduceInput(dt, op, 0, j)
	for r := 1; r < N; r++ {
		v, _ := reduceInput(dt, op, r, j)
		switch op {
		case reduce.Sum, reduce.Avg:
			acc = (acc + v) & mask
		case reduce.Prod:
			acc = (acc * v) & mask
		case reduce.Max:
			if less(acc, v) {
				acc = v
			}
		case reduce.Min:
			if less(v, acc) {
				acc = v
			}
		}
	}
	if op == reduce.Avg {
		if signed {
			acc = uint64(signExtend(dt, acc)/int64(N)) & mask // Go's / truncates toward zero
		} else {
			acc /= uint64(N)
		}
	}
	return acc
}

// roundQuotient is sum/n rounded to nearest even at dt's precision (sum is
// exact, the results are normal numbers).
func roundQuotient(dt reduce.DType, sum float64, n int) float64 {
	prec := map[reduce.DType]uint{reduce.Float16: 11, reduce.BFloat16: 8, reduce.Float32: 24, reduce.Float64: 53}[dt]
	q := new(big.Float).SetPrec(prec).SetMode(big.ToNearestEven)
	q.Quo(new(big.Float).SetFloat64(sum), new(big.Float).SetInt64(int64(n)))
	v, _ := q.Float64() // exact: prec ≤ 53
	return v
}

func isFloat(dt reduce.DType) bool {
	return dt == reduce.Float16 || dt == reduce.BFloat16 || dt == reduce.Float32 || dt == reduce.Float64
}

func isSigned(dt reduce.DType) bool {
	return dt == reduce.Int8 || dt == reduce.Int32 || dt == reduce.Int64
}

func widthMask(dt reduce.DType) uint64 {
	if dt.Size() == 8 {
		return math.MaxUint64
	}
	return 1<<(8*dt.Size()) - 1
}

func signExtend(dt reduce.DType, v uint64) int64 {
	s := 64 - 8*uint(dt.Size())
	return int64(v<<s) >> s
}

func storeBits(b []byte, es, j int, v uint64) {
	switch es {
	case 1:
		b[j] = byte(v)
	case 2:
		binary.LittleEndian.PutUint16(b[2*j:], uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(b[4*j:], uint32(v))
	default:
		binary.LittleEndian.PutUint64(b[8*j:], v)
	}
}

func loadBits(b []byte) uint64 {
	var w [8]byte
	copy(w[:], b)
	return binary.LittleEndian.Uint64(w[:])
}

// exactBits encodes v in float type dt; v must be representable exactly
// (a zero or a normal number), or the test itself is wrong.
func exactBits(dt reduce.DType, v float64) uint64 {
	var bits uint64
	switch dt {
	case reduce.Float64:
		bits = math.Float64bits(v)
	case reduce.Float32:
		bits = uint64(math.Float32bits(float32(v)))
	case reduce.BFloat16:
		bits = uint64(math.Float32bits(float32(v)) >> 16)
	case reduce.Float16:
		if math.Signbit(v) {
			bits = 0x8000
		}
		if a := math.Abs(v); a != 0 {
			frac, exp := math.Frexp(a) // a = frac·2^exp, frac in [0.5, 1)
			e := uint64(exp - 1 + 15)  // biased exponent of 1.m·2^(exp-1)
			if e < 1 || e > 30 {
				panic(fmt.Sprintf("matrix test: %v is not a normal float16", v))
			}
			bits |= e<<10 | uint64(frac*2048-1024)
		}
	}
	if got := floatValue(dt, bits); got != v || math.Signbit(got) != math.Signbit(v) {
		panic(fmt.Sprintf("matrix test: %v is not exact in %v (%v)", v, dt, got))
	}
	return bits
}

// floatValue decodes bits of float type dt.
func floatValue(dt reduce.DType, bits uint64) float64 {
	switch dt {
	case reduce.Float64:
		return math.Float64frombits(bits)
	case reduce.Float32:
		return float64(math.Float32frombits(uint32(bits)))
	case reduce.BFloat16:
		return float64(math.Float32frombits(uint32(bits) << 16))
	}
	sign, e, m := bits>>15&1, int(bits>>10&31), float64(bits&1023)
	var v float64
	switch e {
	case 0:
		v = math.Ldexp(m, -24)
	case 31:
		v = math.Inf(1)
		if m != 0 {
			v = math.NaN()
		}
	default:
		v = math.Ldexp(1024+m, e-25)
	}
	if sign == 1 {
		v = -v
	}
	return v
}

// showElem prints an element's value and bits.
func showElem(dt reduce.DType, b []byte) string {
	bits := loadBits(b)
	switch {
	case isFloat(dt):
		return fmt.Sprintf("%g (%#0*x)", floatValue(dt, bits), 2*dt.Size(), bits)
	case isSigned(dt):
		return fmt.Sprintf("%d (%#0*x)", signExtend(dt, bits), 2*dt.Size(), bits)
	}
	return fmt.Sprintf("%d (%#0*x)", bits, 2*dt.Size(), bits)
}
