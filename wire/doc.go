// Package wire encodes and decodes RoCEv2 packets (IBA Annex A17) byte for
// byte as Linux Soft-RoCE (rxe) puts them on the wire: the IB transport
// headers, the ICRC, PSN arithmetic, and the Ethernet/IP/UDP encapsulation.
//
// # Layers
//
// A UDP socket on port 4791 sees the IB transport packet: BTH, extension
// headers, payload, pad, ICRC. DecodeIB and AppendIB work on that. Captures,
// AF_PACKET and raw sockets see whole frames: DecodeFrame, DecodeIP and
// AppendFrame add Ethernet (optionally 802.1Q), IPv4 or IPv6, and UDP.
//
// The data path allocates nothing: decoders fill a caller's Packet or Frame
// whose Payload aliases the input, encoders append to a caller's buffer and
// allocate only if it is too small. Errors (built only on failure) are
// *Error values wrapping sentinels such as ErrTruncated, ErrBadOpcode and
// ErrBadICRC, with messages like "bth: opcode 0x1f unknown" or
// "icrc: got 0x18e00ae6, want 0x0f5a2b3c".
//
// # Opcodes
//
// Every RC opcode (0x00–0x14, 0x16, 0x17) encodes and decodes; UC SEND and
// RDMA WRITE (0x20–0x2b) and UD SEND (0x64, 0x65, with DETH) decode too, so
// rxe captures of perftest -c UC/UD, rdma_cm and GSI MADs on QP1 can be read.
// Opcode.Mask says which extension headers an opcode carries and what kind
// of operation it is, like rxe_opcode.c. The RoCEv2 CNP (0x81: BTH, 16
// reserved bytes, ICRC) encodes and decodes too. FLUSH, ATOMIC WRITE and RD
// are rejected as ErrBadOpcode.
//
// # ICRC
//
// The ICRC is the IEEE CRC-32 (hash/crc32) of
//
//	8×0xff ‖ IP header ‖ UDP header ‖ BTH ‖ extension headers ‖ payload ‖ pad
//
// stored little-endian in the last 4 bytes of the UDP payload, with these
// fields replaced by all ones: IPv4 TOS, TTL and header checksum; IPv6
// traffic class, flow label and hop limit; the UDP checksum; BTH byte 4
// (FECN, BECN, reserved). Everything else is covered, in particular:
//
//   - the IP source and destination addresses and the UDP ports;
//   - the IPv4 identification, flags and fragment offset, and the IPv4 total
//     length / IPv6 payload length and the UDP length (which follow from the
//     packet length);
//   - the IP version, header length and protocol (no options or extension
//     headers: rxe supports none).
//
// DecodeFrame verifies the ICRC against the real headers. A receiver on a UDP
// socket does not see them. It knows the addresses and ports (the peer from
// the socket, the local address from the bound address or IP_PKTINFO) and
// the lengths; it assumes version 4 without options or 6 without extension
// headers, and for IPv4 the DF flag (rxe always sets it). Put these in an
// Encap and build an ICRCPrefix once per peer. Then:
//
//   - IPv6: everything covered is known; ICRCPrefix.Check verifies all 32
//     bits.
//   - IPv4: the identification is not known. rxe fills it from the kernel's
//     per-destination counter (non-zero, counting up); a Linux UDP socket
//     sends 0 when unconnected with DF set, a per-socket counter when
//     connected. Check verifies all 32 bits when the sender's ID is known
//     (0 for a sender following the advice below). CheckAnyID handles rxe:
//     the ICRC is affine in the 16 ID bits, so it solves for the ID (table
//     look-ups, no search) and returns it; that leaves a 16-bit check, and
//     a random corruption passes with probability 2^-16. Neither can tell
//     a sender that cleared DF; its packets fail unless the Encap says so.
//
// The UDP checksum is masked, and rxe sends 0 for IPv4 and IPv6 alike and
// never reads it; the ICRC is RoCE's end-to-end check. DecodeFrame does not
// verify it either: captures are full of checksum-offload partial sums. A UDP-socket sender
// lets the kernel build the IP header, so it must know the ID the kernel
// will use: send unconnected with DF (IP_PMTUDISC_DO) and compute the ICRC
// for ID 0, as the host-built frame in the rxe captures does.
//
// ICRCPrefix precomputes the CRC state after the masked headers of a flow;
// because CRC-32 is linear, the per-packet lengths and ID are folded in with
// a few table look-ups, so a packet costs the CRC of its IB part only.
//
// # Also
//
// PSNAdd, PSNDiff and PSNCompare do 24-bit PSN arithmetic with rxe's
// wrap-around window. FlowLabel, SourcePort and QPSourcePort reproduce the
// UDP source ports Linux picks. RNRTimeout decodes RNR NAK timer codes.
package wire
