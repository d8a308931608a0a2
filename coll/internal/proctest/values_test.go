package proctest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"

	"github.com/ibex-rdma/ibex/coll/reduce"
)

// value is element i of rank r's input table under seed (see pattern): a
// small integer 1..11 (the nccl-tests method: sums, products of four
// ranks, minima and maxima are exact in every type here, in any order),
// hashed from (seed, r, i) so that a misplaced block or piece shows up as
// wrong values.
func value(seed uint64, r, i int) int64 {
	return int64(mix(seed^uint64(r)<<48^uint64(i))%11) + 1
}

// mix is splitmix64's finalizer.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// fold is op over every rank's element i, in int64: the expected result,
// computed without coll/reduce.
func fold(op reduce.Op, seed uint64, size, i int) int64 {
	acc := value(seed, 0, i)
	for r := 1; r < size; r++ {
		v := value(seed, r, i)
		switch op {
		case reduce.Sum:
			acc += v
		case reduce.Prod:
			acc *= v
		case reduce.Min:
			acc = min(acc, v)
		case reduce.Max:
			acc = max(acc, v)
		default:
			panic(fmt.Sprintf("fold: op %v", op))
		}
	}
	return acc
}

// put and get encode and decode the element types these tests use, by
// hand rather than with coll/reduce, so a codec bug cannot hide a wrong
// result. put takes integers in [0, 2048] (exact in every one of them).
func put(b []byte, dt reduce.DType, i int, v int64) {
	switch dt {
	case reduce.Int32:
		binary.LittleEndian.PutUint32(b[4*i:], uint32(int32(v)))
	case reduce.Float32:
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
	case reduce.Float16:
		binary.LittleEndian.PutUint16(b[2*i:], half(v))
	default:
		panic(fmt.Sprintf("put: dtype %v", dt))
	}
}

func get(b []byte, dt reduce.DType, i int) float64 {
	switch dt {
	case reduce.Int32:
		return float64(int32(binary.LittleEndian.Uint32(b[4*i:])))
	case reduce.Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	case reduce.Float16:
		return unhalf(binary.LittleEndian.Uint16(b[2*i:]))
	}
	panic(fmt.Sprintf("get: dtype %v", dt))
}

// half is the IEEE binary16 of an integer in [0, 2048].
func half(v int64) uint16 {
	if v < 0 || v > 2048 {
		panic(fmt.Sprintf("half: %d is not exact", v))
	}
	if v == 0 {
		return 0
	}
	e := bits.Len64(uint64(v)) - 1 // v = 1.m × 2^e, e ≤ 11
	return uint16(e+15)<<10 | uint16(uint64(v)<<10>>e)&0x3ff
}

func unhalf(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	e, m := int(h>>10&0x1f), float64(h&0x3ff)
	switch e {
	case 0:
		return sign * math.Ldexp(m, -24)
	case 31:
		if m != 0 {
			return math.NaN()
		}
		return math.Inf(int(sign))
	}
	return sign * math.Ldexp(1024+m, e-25)
}

// poison fills b with a byte pattern that decodes, in every type here, to
// a negative number: never a valid result (results are at least 1).
func poison(b []byte) {
	// By doubling copies: a byte loop over megabytes is slow under -race.
	if len(b) == 0 {
		return
	}
	b[0] = 0xa5
	for k := 1; k < len(b); k *= 2 {
		copy(b[k:], b[:k])
	}
}

// guard is the poisoned tail after every output buffer: a write past the
// output's end changes it.
const guard = 64

// grow returns b resliced to n bytes, reallocated if too small: the
// large buffers are reused from call to call, since allocating megabytes
// per call is slow under -race.
func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

// checkGuard fails if the guard after n bytes of b changed.
func checkGuard(what string, b []byte, n int) error {
	for k, c := range b[n : n+guard] {
		if c != 0xa5 {
			return fmt.Errorf("%s: byte %d past the output's end was overwritten (0x%02x)", what, k, c)
		}
	}
	return nil
}

// The inputs of a run are tables of period elements per rank and type,
// hashed from the seed; a call's input is its rank's table from a shift
// the call draws (so no call's data equals the previous one's), wrapping
// around. The expected outputs are tables too, folded per op in int64.
// Filling and checking are then copies and comparisons of bytes, which
// stay fast under -race, where element loops in all ranks on 2 cores
// would take most of the test's time.
//
// period is prime, so no piece size (a power of two) or block size of
// these tests is a multiple of it: a misplaced piece shows.
const period = 65521

type pattern struct {
	seed uint64
	size int
	in   map[reduce.DType][][]byte             // by rank
	out  map[reduce.DType]map[reduce.Op][]byte // op over every rank
}

func newPattern(seed uint64, size int) *pattern {
	return &pattern{seed: seed, size: size, in: map[reduce.DType][][]byte{}, out: map[reduce.DType]map[reduce.Op][]byte{}}
}

// input is rank r's table of dt.
func (p *pattern) input(dt reduce.DType, r int) []byte {
	if p.in[dt] == nil {
		for q := range p.size {
			b := make([]byte, period*dt.Size())
			for i := range period {
				put(b, dt, i, value(p.seed, q, i))
			}
			p.in[dt] = append(p.in[dt], b)
		}
	}
	return p.in[dt][r]
}

// output is the table of op over every rank's input of dt.
func (p *pattern) output(dt reduce.DType, op reduce.Op) []byte {
	if p.out[dt] == nil {
		p.out[dt] = map[reduce.Op][]byte{}
	}
	if p.out[dt][op] == nil {
		b := make([]byte, period*dt.Size())
		for i := range period {
			put(b, dt, i, fold(op, p.seed, p.size, i))
		}
		p.out[dt][op] = b
	}
	return p.out[dt][op]
}

// fill copies n elements of table t from element start (wrapping) to dst.
func fill(dst, t []byte, dt reduce.DType, start, n int) {
	es := dt.Size()
	start %= period
	for n > 0 {
		k := min(n, period-start)
		copy(dst[:k*es], t[start*es:(start+k)*es])
		dst, n, start = dst[k*es:], n-k, 0
	}
}

// check compares count elements of got with table t from element start
// (wrapping), reporting the first wrong one and how many are wrong.
func check(what string, got, t []byte, dt reduce.DType, start, count int) error {
	es := dt.Size()
	at := func(i int) []byte { j := (start + i) % period; return t[j*es : (j+1)*es] }
	ok := true
	for i, j := 0, start%period; i < count; j = 0 {
		k := min(count-i, period-j)
		ok = ok && bytes.Equal(got[i*es:(i+k)*es], t[j*es:(j+k)*es])
		i += k
	}
	if ok {
		return nil
	}
	bad, first := 0, -1
	for i := range count {
		if !bytes.Equal(got[i*es:(i+1)*es], at(i)) {
			if bad == 0 {
				first = i
			}
			bad++
		}
	}
	return fmt.Errorf("%s: element %d = %v, want %v (%d of %d elements wrong)", what, first, get(got, dt, first), get(at(first), dt, 0), bad, count)
}
