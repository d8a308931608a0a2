//go:build !amd64

package reduce

// Other architectures have no vector kernels: the scalar ones do all
// the work. useAVX2 and useAVX512 exist so that tests build everywhere.
var useAVX2, useAVX512 = false, false

func vector(d, a, b []byte, dt DType, op Op) int { return 0 }

func widenF16Vec(dst, src []byte, n int) int { return 0 }

func narrowF16Vec(dst, src []byte, n int) int { return 0 }
