//go:build !race

package udp_test

// netnsSize is what the network-namespace tests write and read back per
// transfer: 256 MiB, issue 17's size (race_test.go has the other).
const netnsSize = 256 << 20

// routedSize is TestNetnsRoutedLoss's transfer size.
const routedSize = netnsSize

// raceBuild: the race detector is on (CI). Timing figures mean nothing
// then, so tests that measure skip the transfers that only measure.
const raceBuild = false
