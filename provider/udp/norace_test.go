//go:build !race

package udp_test

// routedSize is what TestNetnsRoutedLoss writes and reads back per
// transfer: 256 MiB, issue 17's size (race_test.go has the other).
const routedSize = netnsSize
