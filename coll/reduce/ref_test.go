package reduce

import (
	"encoding/binary"
	"math"
	"math/big"
)

// The reference: every element is decoded into an exact value (big.Int
// for integers, big.Rat for finite floats), the operation is done
// exactly, and the result is rounded to the element type by refRound,
// which follows the IEEE 754 definition (nearest, ties to even, with
// subnormals and overflow) and shares no code with the kernels.

// format describes an IEEE binary format: p significand bits (with the
// implicit one), exponents emin..emax for normals, width in bits.
type format struct{ p, emin, emax, width int }

var formats = map[DType]format{
	Float16:  {11, -14, 15, 16},
	BFloat16: {8, -126, 127, 16},
	Float32:  {24, -126, 127, 32},
	Float64:  {53, -1022, 1023, 64},
}

func isFloat(dt DType) bool { _, ok := formats[dt]; return ok }

func isSigned(dt DType) bool { return dt == Int8 || dt == Int32 || dt == Int64 }

// elem reads element i of buf as raw little-endian bits.
func elem(buf []byte, dt DType, i int) uint64 {
	switch s := dt.Size(); s {
	case 1:
		return uint64(buf[i])
	case 2:
		return uint64(binary.LittleEndian.Uint16(buf[2*i:]))
	case 4:
		return uint64(binary.LittleEndian.Uint32(buf[4*i:]))
	default:
		return binary.LittleEndian.Uint64(buf[8*i:])
	}
}

func putElem(buf []byte, dt DType, i int, v uint64) {
	switch s := dt.Size(); s {
	case 1:
		buf[i] = byte(v)
	case 2:
		binary.LittleEndian.PutUint16(buf[2*i:], uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(buf[4*i:], uint32(v))
	default:
		binary.LittleEndian.PutUint64(buf[8*i:], v)
	}
}

// fclass is a decoded float: NaN, ±Inf, or a finite exact value with the
// sign kept separately so that -0 survives.
type fclass struct {
	nan, inf, neg bool
	v             *big.Rat // |value| when finite
}

func (f format) decode(bits uint64) fclass {
	mbits := f.p - 1
	ebits := f.width - 1 - mbits
	neg := bits>>(f.width-1)&1 == 1
	e := int(bits >> mbits & (1<<ebits - 1))
	m := new(big.Int).SetUint64(bits & (1<<mbits - 1))
	switch {
	case e == 1<<ebits-1:
		return fclass{nan: m.Sign() != 0, inf: m.Sign() == 0, neg: neg}
	case e == 0: // m × 2^(emin-mbits)
		return fclass{neg: neg, v: ratShift(new(big.Rat).SetInt(m), f.emin-mbits)}
	default:
		m.SetBit(m, mbits, 1)
		return fclass{neg: neg, v: ratShift(new(big.Rat).SetInt(m), e-f.emax-mbits)}
	}
}

// float64 is the value as a float64 (exact for all formats up to float64).
func (c fclass) float64() float64 {
	switch {
	case c.nan:
		return math.NaN()
	case c.inf && c.neg:
		return math.Inf(-1)
	case c.inf:
		return math.Inf(1)
	}
	x, _ := c.v.Float64()
	if c.neg {
		x = -x
	}
	return x
}

func (c fclass) signed() *big.Rat {
	r := new(big.Rat).Set(c.v)
	if c.neg {
		r.Neg(r)
	}
	return r
}

func ratShift(r *big.Rat, k int) *big.Rat {
	p := new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), uint(abs(k))))
	if k >= 0 {
		return r.Mul(r, p)
	}
	return r.Quo(r, p)
}

func abs(k int) int {
	if k < 0 {
		return -k
	}
	return k
}

// nanBits is the format's default quiet NaN.
func (f format) nanBits() uint64 {
	return (1<<(f.width-f.p)-1)<<(f.p-1) | 1<<(f.p-2)
}

func (f format) infBits(neg bool) uint64 {
	b := uint64(1<<(f.width-f.p)-1) << (f.p - 1)
	if neg {
		b |= 1 << (f.width - 1)
	}
	return b
}

// round rounds the exact value x to the format, to nearest, ties to
// even; negZero says which zero an exact zero is.
func (f format) round(x *big.Rat, negZero bool) uint64 {
	neg := x.Sign() < 0 || x.Sign() == 0 && negZero
	var sign uint64
	if neg {
		sign = 1 << (f.width - 1)
	}
	ax := new(big.Rat).Abs(x)
	if ax.Sign() == 0 {
		return sign
	}
	// e = floor(log2(ax)), clamped to emin: the quantum is 2^(e-p+1).
	e := ax.Num().BitLen() - ax.Denom().BitLen()
	for ratShift(big.NewRat(1, 1), e).Cmp(ax) > 0 {
		e--
	}
	for ratShift(big.NewRat(1, 1), e+1).Cmp(ax) <= 0 {
		e++
	}
	e = max(e, f.emin)
	m := ratShift(new(big.Rat).Set(ax), f.p-1-e) // ax / quantum
	q, r := new(big.Int).QuoRem(m.Num(), m.Denom(), new(big.Int))
	// Compare the remainder with half: 2r vs denom.
	switch new(big.Int).Lsh(r, 1).Cmp(m.Denom()) {
	case 1:
		q.Add(q, big.NewInt(1))
	case 0:
		if q.Bit(0) == 1 {
			q.Add(q, big.NewInt(1))
		}
	}
	if q.BitLen() > f.p { // rounded up into the next binade
		q.Rsh(q, 1)
		e++
	}
	if e > f.emax {
		return f.infBits(neg)
	}
	mbits := f.p - 1
	if q.BitLen() < f.p { // subnormal (e == emin)
		return sign | q.Uint64()
	}
	q.SetBit(q, mbits, 0)
	return sign | uint64(e+f.emax)<<mbits | q.Uint64()
}

// refFloat computes a op b for one float element. The result is exact
// bits; or nan=true when any NaN is acceptable (IEEE leaves the payload
// to the hardware); or, for Min and Max of two NaNs, either operand
// (alt=true: bits or altBits), the choice being checked for order
// independence elsewhere.
func refFloat(dt DType, op Op, a, b uint64) want {
	f := formats[dt]
	x, y := f.decode(a), f.decode(b)
	if op == Max || op == Min {
		switch {
		case x.nan && y.nan:
			return want{bits: a, alt: true, altBits: b}
		case x.nan:
			return want{bits: a}
		case y.nan:
			return want{bits: b}
		}
		xv, yv := x.float64(), y.float64()
		switch {
		case xv < yv:
			if op == Max {
				return want{bits: b}
			}
			return want{bits: a}
		case xv > yv:
			if op == Max {
				return want{bits: a}
			}
			return want{bits: b}
		}
		// Equal: only ±0 can differ; Max prefers +0, Min prefers -0.
		if x.neg != y.neg && (op == Max) == x.neg {
			return want{bits: b}
		}
		return want{bits: a}
	}
	if x.nan || y.nan || x.inf || y.inf {
		var r float64
		if op == Prod {
			r = x.float64() * y.float64()
		} else {
			r = x.float64() + y.float64()
		}
		switch {
		case math.IsNaN(r):
			return want{nan: true}
		case math.IsInf(r, 0):
			return want{bits: f.infBits(r < 0)}
		}
		panic("finite result from a non-finite operand")
	}
	if op == Prod {
		return want{bits: f.round(new(big.Rat).Mul(x.signed(), y.signed()), x.neg != y.neg)}
	}
	// IEEE: an exact zero sum is +0 unless both operands are -0.
	return want{bits: f.round(new(big.Rat).Add(x.signed(), y.signed()), x.neg && y.neg)}
}

// refFinishFloat is a/n for Avg.
func refFinishFloat(dt DType, a uint64, n int) (bits uint64, nan bool) {
	f := formats[dt]
	x := f.decode(a)
	switch {
	case x.nan:
		return 0, true
	case x.inf:
		return a, false
	}
	return f.round(new(big.Rat).Quo(x.signed(), big.NewRat(int64(n), 1)), x.neg), false
}

// intValue is element bits as the integer the type means.
func intValue(dt DType, bits uint64) *big.Int {
	w := uint(dt.Size() * 8)
	v := new(big.Int).SetUint64(bits)
	if isSigned(dt) && bits>>(w-1)&1 == 1 {
		v.Sub(v, new(big.Int).Lsh(big.NewInt(1), w))
	}
	return v
}

// wrap reduces v modulo 2^width into element bits.
func wrap(dt DType, v *big.Int) uint64 {
	w := uint(dt.Size() * 8)
	m := new(big.Int).Lsh(big.NewInt(1), w)
	r := new(big.Int).Mod(v, m) // Euclidean: 0 <= r < m
	return r.Uint64()
}

func refInt(dt DType, op Op, a, b uint64) uint64 {
	x, y := intValue(dt, a), intValue(dt, b)
	switch op {
	case Sum, Avg:
		return wrap(dt, new(big.Int).Add(x, y))
	case Prod:
		return wrap(dt, new(big.Int).Mul(x, y))
	case Max:
		if y.Cmp(x) > 0 {
			return b
		}
		return a
	case Min:
		if y.Cmp(x) < 0 {
			return b
		}
		return a
	}
	panic("op")
}

func refFinishInt(dt DType, a uint64, n int) uint64 {
	return wrap(dt, new(big.Int).Quo(intValue(dt, a), big.NewInt(int64(n)))) // Quo truncates toward zero
}
