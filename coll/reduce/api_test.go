package reduce

import (
	"errors"
	"strings"
	"testing"
)

func TestErrors(t *testing.T) {
	b12, b16, b10 := make([]byte, 12), make([]byte, 16), make([]byte, 10)
	cases := []struct {
		err  error
		is   error
		want []string
	}{
		{Reduce(b12, b16, Float32, Sum), ErrLength, []string{"float sum", "len(dst)=12", "len(src)=16"}},
		{Reduce(b10, b10, Float32, Max), ErrLength, []string{"float max", "len(dst)=10", "multiple of the 4-byte"}},
		{Reduce3(b12, b12, b16, Int64, Prod), ErrLength, []string{"int64 prod", "len(dst)=12", "len(a)=12", "len(b)=16"}},
		{Reduce3(b16, b12, b16, Int8, Min), ErrLength, []string{"len(dst)=16", "len(a)=12", "len(b)=16"}},
		{Reduce3(b10, b10, b10, Float64, Avg), ErrLength, []string{"double avg", "len(dst)=10"}},
		{Finish(b10, Int32, Avg, 2), ErrLength, []string{"int32 avg", "len(buf)=10"}},
		{Finish(b12, Int32, Avg, 0), ErrInvalid, []string{"n=0"}},
		{Finish(b12, Int32, Sum, -1), ErrInvalid, []string{"n=-1"}},
		{Reduce(b12, b12, DType(10), Sum), ErrInvalid, []string{"DType(10)"}},
		{Reduce(b12, b12, Float32, Op(5)), ErrInvalid, []string{"Op(5)"}},
		{Finish(b12, DType(200), Avg, 2), ErrInvalid, []string{"DType(200)"}},
	}
	for i, c := range cases {
		if !errors.Is(c.err, c.is) {
			t.Errorf("case %d: got %v, want %v", i, c.err, c.is)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(c.err.Error(), w) {
				t.Errorf("case %d: %q does not say %q", i, c.err, w)
			}
		}
	}
	// Empty buffers are fine, and nil ones.
	if err := Reduce(nil, []byte{}, Float16, Sum); err != nil {
		t.Error(err)
	}
	if err := Finish(nil, Float16, Avg, 3); err != nil {
		t.Error(err)
	}
}

func TestNames(t *testing.T) {
	want := map[DType]string{Int8: "int8", Uint8: "uint8", Int32: "int32", Uint32: "uint32", Int64: "int64",
		Uint64: "uint64", Float16: "half", BFloat16: "bfloat16", Float32: "float", Float64: "double"}
	sizes := map[DType]int{Int8: 1, Uint8: 1, Int32: 4, Uint32: 4, Int64: 8, Uint64: 8, Float16: 2, BFloat16: 2, Float32: 4, Float64: 8}
	for dt, name := range want {
		if dt.String() != name || dt.Size() != sizes[dt] {
			t.Errorf("%d: %q size %d, want %q size %d", uint8(dt), dt.String(), dt.Size(), name, sizes[dt])
		}
		if got, err := ParseDType(name); got != dt || err != nil {
			t.Errorf("ParseDType(%q) = %v, %v", name, got, err)
		}
		if got, err := ParseDType(strings.ToUpper(name)); got != dt || err != nil {
			t.Errorf("ParseDType(%q) = %v, %v", strings.ToUpper(name), got, err)
		}
	}
	for s, dt := range map[string]DType{"float16": Float16, "fp16": Float16, "float32": Float32, "fp32": Float32,
		"float64": Float64, "fp64": Float64, "bf16": BFloat16} {
		if got, err := ParseDType(s); got != dt || err != nil {
			t.Errorf("ParseDType(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseDType("f8e4m3"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "bfloat16") {
		t.Errorf("ParseDType(f8e4m3): %v", err)
	}
	if DType(10).Size() != 0 || DType(10).String() != "DType(10)" {
		t.Errorf("DType(10): %q size %d", DType(10), DType(10).Size())
	}
	for op, name := range map[Op]string{Sum: "sum", Prod: "prod", Max: "max", Min: "min", Avg: "avg"} {
		if op.String() != name {
			t.Errorf("Op(%d) = %q, want %q", uint8(op), op, name)
		}
		if got, err := ParseOp(strings.ToUpper(name)); got != op || err != nil {
			t.Errorf("ParseOp(%q) = %v, %v", name, got, err)
		}
	}
	if _, err := ParseOp("premulsum"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseOp(premulsum): %v", err)
	}
	// The numbering is NCCL's.
	if Float16 != 6 || Float32 != 7 || Float64 != 8 || BFloat16 != 9 || Max != 2 || Min != 3 || Avg != 4 {
		t.Error("DType or Op values differ from ncclDataType_t / ncclRedOp_t")
	}
}

// TestAllocs: no path allocates, at any level, the misaligned one
// included (its bounce buffers live on the stack).
func TestAllocs(t *testing.T) {
	raw := make([]byte, 3*4096+8)
	eachLevel(t, allLevels, func(t *testing.T, _ level) {
		for _, dt := range allDTypes {
			for _, off := range []int{0, 1} {
				d, a, b := raw[off:off+4096], raw[4096+off:2*4096+off], raw[2*4096:3*4096]
				for _, op := range allOps {
					if n := testing.AllocsPerRun(20, func() {
						_ = Reduce(d, a, dt, op)
						_ = Reduce3(d, a, b, dt, op)
						_ = Finish(d, dt, op, 3)
					}); n != 0 {
						t.Errorf("%v %v offset %d: %v allocations per run", dt, op, off, n)
					}
				}
			}
		}
	})
}
