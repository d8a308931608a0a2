//go:build !race

package udp_test

// routedSize is what TestNetnsRoutedLoss writes and reads back per
// transfer: 256 MiB, issue 17's size (race_test.go has the other).
const routedSize = netnsSize

// raceBuild: the race detector is on (CI). Timing figures mean nothing
// then, so tests that measure skip the transfers that only measure.
const raceBuild = false
