package units

import "testing"

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "8": 8, "64K": 64 << 10, "128m": 128 << 20, " 16G": 16 << 30, "1T": 1 << 40} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "K", "-1", "1.5M", "12X", "9999999999999T"} {
		if got, err := ParseBytes(in); err == nil {
			t.Errorf("ParseBytes(%q) = %d, want an error", in, got)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 8: "8", 1536: "1536", 512 << 10: "512K", 64 << 20: "64M", 3 << 30: "3G", 1 << 40: "1T"} {
		got := FormatBytes(n)
		if got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
		if back, err := ParseBytes(got); err != nil || back != n {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", got, back, err, n)
		}
	}
}
