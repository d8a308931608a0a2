package perf

import (
	"math"
	"strings"
	"testing"
)

// TestParseSize: perftest's -s forms (strtol base 0, K and M suffixes),
// ibex's G, and perftest's range and message.
func TestParseSize(t *testing.T) {
	for in, want := range map[string]int{"1": 1, "64": 64, "64K": 64 << 10, "4M": 4 << 20, "1G": 1 << 30,
		"0x1000": 4096, "010": 8, "2147483647": MaxMsgSize, "1k": 1024} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"0", "-1", "2G", "2147483648", "3G", "0K"} {
		if _, err := ParseSize(in); err == nil || err.Error() != "Message Size should be between 1 and 2147483647" {
			t.Errorf("ParseSize(%q): %v, want perftest's range message", in, err)
		}
	}
	for _, in := range []string{"", "K", "64X", "1.5M", "abc"} {
		if _, err := ParseSize(in); err == nil || !strings.Contains(err.Error(), "should be a number") {
			t.Errorf("ParseSize(%q): %v, want a parse error", in, err)
		}
	}
}

// TestBWConversion: a passive server prints the client's figures in its
// own unit.
func TestBWConversion(t *testing.T) {
	// 1000 MiB/s is 8.388608 Gb/s.
	if got := 1000 * bwConversion(false, true); math.Abs(got-8.388608) > 1e-9 {
		t.Errorf("1000 MiB/s = %v Gb/s", got)
	}
	if got := 8.388608 * bwConversion(true, false); math.Abs(got-1000) > 1e-6 {
		t.Errorf("8.388608 Gb/s = %v MiB/s", got)
	}
	if bwConversion(true, true) != 1 || bwConversion(false, false) != 1 {
		t.Errorf("same units convert")
	}
}

// TestDefaultDeviceWithoutOtherProcesses: with only loop0 registered (this
// package's tests), the default is the first device.
func TestDefaultDeviceWithoutOtherProcesses(t *testing.T) {
	d, err := DefaultDevice()
	if err != nil || d != "loop0" {
		t.Fatalf("DefaultDevice() = %q, %v; want loop0", d, err)
	}
}
