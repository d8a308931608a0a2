//go:build race

package udp_test

// routedSize is what TestNetnsRoutedLoss writes and reads back per
// transfer. Under the race detector (CI) 64 MiB, not 256: at 256 MiB its
// four transfers per mode took 66 s under -race for both modes (lossless
// 51 MB/s, lossy about 30), beyond the minute CI can give it.
const routedSize = 64 << 20

// raceBuild: the race detector is on (CI). Timing figures mean nothing
// then, so tests that measure skip the transfers that only measure.
const raceBuild = true
