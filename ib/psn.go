package ib

// PSNs are 24-bit sequence numbers that wrap. Comparisons use a window of
// ±2^23 around the reference, as rxe's psn_compare does.

// PSNMask keeps the low 24 bits of a PSN.
const PSNMask = 1<<24 - 1

// PSNAdd returns psn + n modulo 2^24; n may be negative.
func PSNAdd(psn uint32, n int) uint32 {
	return (psn + uint32(n)) & PSNMask
}

// PSNDiff returns the signed distance a − b in [−2^23, 2^23): positive when
// a is after b.
func PSNDiff(a, b uint32) int32 {
	return int32((a-b)<<8) >> 8
}

// PSNCompare returns −1, 0 or +1 as a is before, equal to or after b
// (rxe psn_compare).
func PSNCompare(a, b uint32) int {
	switch d := PSNDiff(a, b); {
	case d < 0:
		return -1
	case d > 0:
		return 1
	}
	return 0
}
