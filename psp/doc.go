// Package psp secures RoCEv2 packets the way Google's PSP security protocol
// secures UDP: per-connection AES-GCM keys derived from a device master key
// and an SPI, an anti-replay window, and key rotation under traffic.
//
// # Trust
//
// Every host of a cluster holds the same master keys (a cluster secret the
// operator provisions, as PSP's control plane distributes device keys):
// whoever holds them can derive every connection's key. Only SPIs travel in
// the connection exchange, never a key. The network is not trusted: a packet
// that does not authenticate under the receive SA its SPI names, or whose
// IV the SA already saw or left behind, is dropped.
//
// # Wire format
//
// IP, UDP (4791) and the BTH stay in the clear; the BTH's TVer is 1 (rxe
// and Wireshark treat a non-zero TVer as an unknown transport version, so a
// sealed packet is never taken for plain RoCE). Then:
//
//	bytes 0-11   BTH, TVer = 1                       authenticated
//	bytes 12-15  SPI, big-endian                     authenticated
//	bytes 16-23  IV, big-endian (the SA's counter)   authenticated
//	bytes 24-    AES-GCM ciphertext of what followed the BTH in the plain
//	             packet: extension headers, payload, pad
//	last 16      the GCM tag, in place of the 4-byte ICRC
//
// AAD = bytes 0-23; nonce = SPI || IV. A sealed packet is Overhead (24)
// bytes longer than the plain one. A retransmission is sealed again, under a
// new IV.
//
// # Keys
//
// An SA's key is HKDF-SHA256(master[SPI>>31], info = "ibex-psp-v1" || SPI
// || source GID || destination GID || source QPN || destination QPN), 16
// bytes (AES-128-GCM, PSP's default; see BenchmarkSeal for the measured
// difference with AES-256). The receiver picks the SPI (random, top bit the
// master-key generation); the sender derives the same key from the SPI it
// was told. Two master-key generations may be live at once, so the operator
// rotates master keys without breaking connections.
//
// # Rotation
//
// A Sender moves to the successor SPI (Successor: the next 31-bit value
// under the active generation) when told (Rotate) or after RotateAfter
// packets. A Receiver accepts its current SA, the previous one (packets
// still in flight) and the successor (a sender that rotated), and moves on
// when the successor's first packet authenticates. No announcement is
// needed, and no packet is lost.
package psp
