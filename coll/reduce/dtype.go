package reduce

import (
	"fmt"
	"strings"
)

// DType is an element type. The values are NCCL's ncclDataType_t, so a
// DType can be logged or carried next to NCCL's numbers unchanged; as in
// NCCL, the zero value is Int8.
type DType uint8

// The element types. Signed and unsigned integers differ only for Min,
// Max and Avg; Sum and Prod give the same bits.
const (
	Int8     DType = 0
	Uint8    DType = 1
	Int32    DType = 2
	Uint32   DType = 3
	Int64    DType = 4
	Uint64   DType = 5
	Float16  DType = 6 // IEEE 754 binary16
	Float32  DType = 7
	Float64  DType = 8
	BFloat16 DType = 9 // bfloat16: the top half of a float32

	numDTypes = 10
)

// dtypeNames are nccl-tests' names (its -d flag and its "type" column).
var dtypeNames = [numDTypes]string{"int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16"}

var dtypeSizes = [numDTypes]int{1, 1, 4, 4, 8, 8, 2, 4, 8, 2}

// Size is the element size in bytes, 0 for an unknown DType.
func (t DType) Size() int {
	if t >= numDTypes {
		return 0
	}
	return dtypeSizes[t]
}

// String is nccl-tests' name: int8 uint8 int32 uint32 int64 uint64 half
// float double bfloat16.
func (t DType) String() string {
	if t >= numDTypes {
		return fmt.Sprintf("DType(%d)", uint8(t))
	}
	return dtypeNames[t]
}

// ParseDType accepts nccl-tests' names and the Go-ish float16, float32,
// float64, bf16 (and fp16, fp32, fp64), in any case.
func ParseDType(s string) (DType, error) {
	l := strings.ToLower(s)
	for t, name := range dtypeNames {
		if l == name {
			return DType(t), nil
		}
	}
	switch l {
	case "float16", "fp16":
		return Float16, nil
	case "float32", "fp32":
		return Float32, nil
	case "float64", "fp64":
		return Float64, nil
	case "bf16":
		return BFloat16, nil
	}
	return 0, fmt.Errorf("reduce: unknown data type %q (want one of %s, float16, float32, float64, bf16): %w",
		s, strings.Join(dtypeNames[:], ", "), ErrInvalid)
}

// Op is a reduction operation. The values are NCCL's ncclRedOp_t.
type Op uint8

// The operations. Avg reduces as Sum; Finish then divides by the number
// of contributions.
const (
	Sum  Op = 0
	Prod Op = 1
	Max  Op = 2
	Min  Op = 3
	Avg  Op = 4

	numOps = 5
)

var opNames = [numOps]string{"sum", "prod", "max", "min", "avg"}

// String is nccl-tests' name: sum prod max min avg.
func (o Op) String() string {
	if o >= numOps {
		return fmt.Sprintf("Op(%d)", uint8(o))
	}
	return opNames[o]
}

// ParseOp accepts sum, prod, min, max and avg, in any case.
func ParseOp(s string) (Op, error) {
	l := strings.ToLower(s)
	for o, name := range opNames {
		if l == name {
			return Op(o), nil
		}
	}
	return 0, fmt.Errorf("reduce: unknown op %q (want one of %s): %w", s, strings.Join(opNames[:], ", "), ErrInvalid)
}
