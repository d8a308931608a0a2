//go:build !amd64

package reduce

import "runtime"

func missingFeatures(level) string { return "no vector kernels for GOARCH=" + runtime.GOARCH }
