// Package units parses byte sizes as ibex's flags and environment
// variables take them: a decimal number with an optional K, M, G or T
// suffix (binary multiples, either case).
package units

import (
	"errors"
	"strconv"
	"strings"
)

// ParseBytes parses "8", "64K", "128M", "16G", "1T". The result is
// non-negative and does not overflow int64.
func ParseBytes(s string) (int64, error) {
	t, mult := SplitSuffix(strings.TrimSpace(s))
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 || v > (1<<63-1)/mult {
		return 0, errors.New("want a size in bytes like 8, 64K, 128M, 16G")
	}
	return v * mult, nil
}

// SplitSuffix splits a K, M, G or T suffix (binary multiples, either
// case) off s: "64K" is "64" and 1024; without a suffix, s and 1.
func SplitSuffix(s string) (string, int64) {
	if s == "" {
		return s, 1
	}
	var mult int64
	switch s[len(s)-1] {
	case 'K', 'k':
		mult = 1 << 10
	case 'M', 'm':
		mult = 1 << 20
	case 'G', 'g':
		mult = 1 << 30
	case 'T', 't':
		mult = 1 << 40
	default:
		return s, 1
	}
	return s[:len(s)-1], mult
}

// FormatBytes prints n with the largest binary suffix that divides it
// exactly ("512K", "64M", "4096"), the form ParseBytes reads back.
func FormatBytes(n int64) string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if n != 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
