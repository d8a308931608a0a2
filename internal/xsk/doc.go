// Package xsk is an AF_XDP socket for one queue of one network interface:
// an XDP program, built in Go with cilium/ebpf's asm package, that
// redirects UDP datagrams to one destination address and port into the
// socket and passes everything else to the kernel; the UMEM (the frame memory the
// kernel and the process share) and its four rings; the blocking wait;
// the Ethernet/IP/UDP headers of the frames (Flow, Parse); and the
// neighbour and route look-ups that give a frame its destination MAC
// (Netlink).
//
// The shapes follow Linux's Documentation/networking/af_xdp.rst: the
// process gives the kernel empty frames on the fill ring and takes
// received ones off the RX ring; it puts frames to send on the TX ring and
// takes them back, sent, off the completion ring. Producer and consumer
// indices are free-running 32-bit counters in the shared mapping, read and
// written with atomics; nothing on the data path makes a system call but
// the transmit kick (copy mode: the kernel sends only inside sendto) and
// the wait.
//
// Frames are 4096-byte chunks (the UMEM's chunk size). A frame larger than
// one chunk (a RoCE frame at IB MTU 4096 is up to 4,202 bytes) travels as
// two descriptors, the first flagged XDP_PKT_CONTD, when the kernel takes
// XDP_USE_SG (Linux 6.6); the XDP program is then loaded with
// BPF_F_XDP_HAS_FRAGS, which a driver-mode program needs to see frames
// larger than a page. Socket.MaxFrame says what the socket can carry.
//
// Everything that touches the kernel is Linux-only; Flow and Parse are
// plain byte work and build everywhere.
package xsk
