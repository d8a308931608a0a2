//go:build race

package udp_test

// routedSize is what TestNetnsRoutedLoss writes and reads back per
// transfer. Under the race detector (CI) 32 MiB, not 256: its four
// transfers per mode took 179 s for both modes at 256 MiB under -race
// (lossless 52-82 MB/s, and the lossy ones bound by the recovery from
// loss at 5-6 MB/s, with or without the detector).
const routedSize = 32 << 20
