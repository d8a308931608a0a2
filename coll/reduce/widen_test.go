package reduce

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// TestWidenNarrow: every 16-bit value survives Widen then Narrow bit for
// bit (NaNs stay NaNs); Narrow of random float32 values, divided or not,
// is the nearest 16-bit value to the float64 quotient, ties to even.
func TestWidenNarrow(t *testing.T) {
	for _, dt := range []DType{Float16, BFloat16} {
		src := make([]byte, 2<<16)
		for i := range 1 << 16 {
			binary.LittleEndian.PutUint16(src[2*i:], uint16(i))
		}
		wide := make([]byte, 4<<16)
		back := make([]byte, 2<<16)
		if err := Widen(wide, src, dt); err != nil {
			t.Fatal(err)
		}
		if err := Narrow(back, wide, dt, 1); err != nil {
			t.Fatal(err)
		}
		for i := range 1 << 16 {
			a, b := binary.LittleEndian.Uint16(src[2*i:]), binary.LittleEndian.Uint16(back[2*i:])
			if math.IsNaN(Value(src, dt, i)) {
				if !math.IsNaN(Value(back, dt, i)) {
					t.Fatalf("%v %#04x: NaN came back as %#04x", dt, a, b)
				}
				continue
			}
			if a != b {
				t.Fatalf("%v %#04x came back as %#04x", dt, a, b)
			}
		}
		seed := rand.Uint64()
		rng := rand.New(rand.NewPCG(seed, 1))
		f := make([]byte, 4)
		got, want := make([]byte, 2), make([]byte, 2)
		for range 100000 {
			v := math.Float32frombits(rng.Uint32())
			if v != v {
				continue
			}
			div := 1 + rng.IntN(9)
			binary.LittleEndian.PutUint32(f, math.Float32bits(v))
			if err := Narrow(got, f, dt, div); err != nil {
				t.Fatal(err)
			}
			q := float64(v) / float64(div)
			h := binary.LittleEndian.Uint16(got)
			// Nearest: no neighbour of h (one step towards or away from
			// zero) is closer to q; on a tie h is even. Beyond the
			// largest finite value the result is Inf.
			gv := Value(got, dt, 0)
			if math.IsInf(gv, 0) {
				binary.LittleEndian.PutUint16(want, h-1)
				if lim := Value(want, dt, 0); math.Abs(q) < math.Abs(lim) {
					t.Fatalf("%v: %g/%d = %g narrowed to Inf (seed %d)", dt, v, div, q, seed)
				}
				continue
			}
			for _, nb := range []uint16{h - 1, h + 1} {
				if nb&0x7fff == 0x7fff || (h&0x7fff == 0 && nb == h-1) {
					continue
				}
				binary.LittleEndian.PutUint16(want, nb)
				nv := Value(want, dt, 0)
				if math.IsNaN(nv) || math.IsInf(nv, 0) {
					continue
				}
				d, dn := math.Abs(gv-q), math.Abs(nv-q)
				if dn < d || dn == d && h&1 == 1 {
					t.Fatalf("%v: %g/%d = %g narrowed to %g, but %g is nearer or even (seed %d)", dt, v, div, q, gv, nv, seed)
				}
			}
		}
	}
	if err := Widen(make([]byte, 8), make([]byte, 4), Float32); err == nil {
		t.Fatal("Widen of float32 accepted")
	}
}
