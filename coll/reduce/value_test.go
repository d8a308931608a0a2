package reduce

import "testing"

func TestValueRoundTrip(t *testing.T) {
	for _, dt := range []DType{Int8, Uint8, Int32, Uint32, Int64, Uint64, Float16, BFloat16, Float32, Float64} {
		b := make([]byte, 4*dt.Size())
		for i, v := range []float64{0, 1, 7, 100} {
			SetValue(b, dt, i, v)
		}
		for i, v := range []float64{0, 1, 7, 100} {
			if got := Value(b, dt, i); got != v {
				t.Errorf("%v element %d: %v, want %v", dt, i, got, v)
			}
		}
	}
	b := make([]byte, 2)
	SetValue(b, Int8, 0, -3)
	if Value(b, Int8, 0) != -3 || Value(b, Uint8, 0) != 253 {
		t.Errorf("int8 -3 reads %v / uint8 %v", Value(b, Int8, 0), Value(b, Uint8, 0))
	}
}
