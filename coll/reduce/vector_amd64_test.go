package reduce

import (
	"math"
	"strings"
	"testing"

	"golang.org/x/sys/cpu"
)

// missingFeatures names the CPU features level l needs that this CPU (or
// its OS, which must save the wider registers) lacks.
func missingFeatures(l level) string {
	var miss []string
	for _, f := range []struct {
		name string
		has  bool
		l    level
	}{
		{"AVX2", cpu.X86.HasAVX2, levelAVX2},
		{"F16C", cpu.X86.HasF16C, levelAVX2},
		{"AVX512F", cpu.X86.HasAVX512F, levelAVX512},
		{"AVX512BW", cpu.X86.HasAVX512BW, levelAVX512},
		{"AVX512VL", cpu.X86.HasAVX512VL, levelAVX512},
		{"AVX512DQ", cpu.X86.HasAVX512DQ, levelAVX512},
	} {
		if f.l <= l && !f.has {
			miss = append(miss, f.name)
		}
	}
	return "CPU lacks " + strings.Join(miss, ", ")
}

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
