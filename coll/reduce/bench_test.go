package reduce

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Benchmarks report MB/s of dst: the bytes reduced per second. The kernel
// moves three times that (read dst and src, write dst).

// benchBuf holds n bytes of realistic elements: floats of magnitude below
// 1, so sums repeated b.N times stay finite; integers of any bits.
func benchBuf(dt DType, n int, seed uint64) []byte {
	return fillBench(make([]byte, n), dt, seed)
}

func fillBench(b []byte, dt DType, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	for i := range len(b) / dt.Size() {
		x := rng.NormFloat64() / 4
		var v uint64
		switch dt {
		case Float16:
			v = uint64(f32ToF16(float32(x)))
		case BFloat16:
			v = uint64(f32ToBF16(float32(x)))
		case Float32:
			v = uint64(math.Float32bits(float32(x)))
		case Float64:
			v = math.Float64bits(x)
		default:
			v = rng.Uint64()
		}
		putElem(b, dt, i, v)
	}
	return b
}

// benchArena is allocated once for all of BenchmarkReduce: allocating and
// freeing 64 MiB buffers per sub-benchmark made the following ones up to
// 2x slower (page placement after the GC returned the memory), which
// measured the heap, not the kernels.
var benchArena [2][]byte

var benchSizes = []struct {
	name string
	n    int
}{{"1MiB", 1 << 20}, {"64MiB", 64 << 20}}

func BenchmarkReduce(b *testing.B) {
	for _, dt := range allDTypes {
		for _, op := range []Op{Sum, Max} {
			for _, sz := range benchSizes {
				b.Run(dt.String()+"/"+op.String()+"/"+sz.name, func(b *testing.B) {
					if benchArena[0] == nil {
						benchArena = [2][]byte{make([]byte, 64<<20), make([]byte, 64<<20)}
					}
					d, s := fillBench(benchArena[0][:sz.n], dt, 1), fillBench(benchArena[1][:sz.n], dt, 2)
					b.SetBytes(int64(sz.n))
					b.ReportAllocs()
					for b.Loop() {
						if err := Reduce(d, s, dt, op); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// BenchmarkReduceMisaligned: src one byte off its alignment, so the
// elements go through the stack bounce buffer.
func BenchmarkReduceMisaligned(b *testing.B) {
	const n = 1 << 20
	for _, dt := range []DType{Float16, Float32, Int64} {
		b.Run(dt.String()+"/sum/1MiB", func(b *testing.B) {
			d, s := benchBuf(dt, n, 1), benchBuf(dt, n+1, 2)[1:]
			b.SetBytes(n)
			b.ReportAllocs()
			for b.Loop() {
				if err := Reduce(d, s, dt, Sum); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFinishAvg divides by 3; each iteration first restores the
// data with a copy (included in the time), so it does not shrink to zero.
func BenchmarkFinishAvg(b *testing.B) {
	const n = 1 << 20
	for _, dt := range []DType{Int32, Int64, Float16, BFloat16, Float32, Float64} {
		b.Run(dt.String()+"/1MiB", func(b *testing.B) {
			orig, d := benchBuf(dt, n, 1), make([]byte, n)
			b.SetBytes(n)
			b.ReportAllocs()
			for b.Loop() {
				copy(d, orig)
				if err := Finish(d, dt, Avg, 3); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkKernel compares the kernels of each level (impl=scalar,
// impl=avx2, impl=avx512) on the main cases, aligned, dst = dst op src:
//
//	go test -run XXX -bench Kernel -count 6 ./coll/reduce > k.txt
//	benchstat -col /impl k.txt
func BenchmarkKernel(b *testing.B) {
	cases := []struct {
		dt DType
		op Op
	}{{Float32, Sum}, {Float16, Sum}, {BFloat16, Sum}, {Int32, Sum}, {Float32, Max}, {Int64, Max}}
	for _, c := range cases {
		for _, sz := range benchSizes {
			for _, l := range allLevels {
				b.Run(c.dt.String()+"/"+c.op.String()+"/"+sz.name+"/impl="+l.String(), func(b *testing.B) {
					setLevel(b, l)
					if benchArena[0] == nil {
						benchArena = [2][]byte{make([]byte, 64<<20), make([]byte, 64<<20)}
					}
					d, s := fillBench(benchArena[0][:sz.n], c.dt, 1), fillBench(benchArena[1][:sz.n], c.dt, 2)
					b.SetBytes(int64(sz.n))
					b.ReportAllocs()
					for b.Loop() {
						if err := Reduce(d, s, c.dt, c.op); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// BenchmarkWidenNarrow: float16 <-> float32 at 1 MiB of float16, at each
// level. MB/s counts the float16 bytes.
func BenchmarkWidenNarrow(b *testing.B) {
	const n = 1 << 20
	h := benchBuf(Float16, n, 1)
	f := make([]byte, 2*n)
	for _, l := range allLevels {
		for _, dir := range []string{"widen", "narrow"} {
			b.Run("half/"+dir+"/1MiB/impl="+l.String(), func(b *testing.B) {
				setLevel(b, l)
				b.SetBytes(n)
				b.ReportAllocs()
				for b.Loop() {
					var err error
					if dir == "widen" {
						err = Widen(f, h, Float16)
					} else {
						err = Narrow(h, f, Float16, 1)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
