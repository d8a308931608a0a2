//go:build race

package udp_test

// netnsSize is what the network-namespace tests (TestNetnsLossyWriteRead,
// TestNetnsLossGoodput, TestNetnsRoutedLoss) write and read back per
// transfer. Under the race detector (CI) 64 MiB, not issue 17's 256: at
// 256 MiB TestNetnsRoutedLoss's four transfers per mode took 66 s under
// -race for both modes (lossless 51 MB/s, lossy about 30), and
// TestNetnsLossyWriteRead and TestNetnsLossGoodput 28 s and 31 s. 64 MiB are still 16,384 packets each way
// at a 4096-byte MTU (65,536 at 1024), some 160 (650) of them lost at 1%:
// loss, go-back-N, READ retries and the read-back's comparison are all
// exercised.
const netnsSize = 64 << 20

// routedSize is TestNetnsRoutedLoss's transfer size.
const routedSize = netnsSize

// raceBuild: the race detector is on (CI). Timing figures mean nothing
// then, so tests that measure skip the transfers that only measure.
const raceBuild = true
