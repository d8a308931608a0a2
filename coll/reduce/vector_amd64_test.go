package reduce

import (
	"math"
	"testing"
)

// TestKselConsts pins the key-select constants for one lane width against
// minmax.go's rotations.
func TestKselConsts(t *testing.T) {
	km, c1, c2 := kselConsts(32, Float32, Max)
	if km != 0x7fffffff7fffffff || c1 != f32Rot*0x100000001 || c2 != 0x8000000080000000 {
		t.Errorf("float max: %#x %#x %#x", km, c1, c2)
	}
	km, c1, c2 = kselConsts(64, Float64, Min)
	if km != 1<<63-1 || c1 != 0x800fffffffffffff || c2 != 1<<63-1 {
		t.Errorf("double min: %#x %#x %#x", km, c1, c2)
	}
	if km, c1, c2 = kselConsts(16, Float16, Min); c1 != 0x83ff83ff83ff83ff || km != 0x7fff7fff7fff7fff || c2 != km {
		t.Errorf("half min: %#x %#x %#x", km, c1, c2)
	}
	if km, c1, c2 = kselConsts(64, Int64, Min); km != 0 || c1 != 0 || c2 != math.MaxUint64 {
		t.Errorf("int64 min: %#x %#x %#x", km, c1, c2)
	}
}
