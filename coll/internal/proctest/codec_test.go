package proctest

import (
	"testing"

	"github.com/ibex-rdma/ibex/coll/reduce"
)

// TestCodec: this package's own element codec (put, get) agrees with
// coll/reduce's on every value the tests use, and float16 round-trips
// every integer it claims to.
func TestCodec(t *testing.T) {
	for _, dt := range []reduce.DType{reduce.Int32, reduce.Float32, reduce.Float16} {
		b := make([]byte, dt.Size())
		for v := int64(0); v <= 2048; v++ {
			put(b, dt, 0, v)
			if got := get(b, dt, 0); got != float64(v) {
				t.Fatalf("%v: put then get of %d gives %v", dt, v, got)
			}
			if got := reduce.Value(b, dt, 0); got != float64(v) {
				t.Fatalf("%v: coll/reduce reads our encoding of %d as %v", dt, v, got)
			}
		}
	}
	b := make([]byte, 4)
	poison(b)
	for _, dt := range []reduce.DType{reduce.Int32, reduce.Float32, reduce.Float16} {
		if v := get(b, dt, 0); !(v < 0) {
			t.Errorf("%v: the poison byte pattern reads as %v, want a negative number", dt, v)
		}
	}
}
