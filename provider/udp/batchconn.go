package udp

import (
	"net/netip"
	"sync/atomic"
	"time"
)

// batchConn is a device's network: a datagram socket that sends and
// receives in batches, into and out of buffers its caller owns, as
// wireguard-go's conn.Bind does. The device's progress loop is its only
// user, but for SetReadDeadline, which post calls from any goroutine to
// wake the loop. *sockIO (io_linux.go, a UDP socket driven by sendmmsg and
// recvmmsg) is the real one; tests run devices over an in-memory network.
//
// A message is one datagram or, with segmentation offload, a
// super-datagram: a run of datagrams to or from one peer, all of one size
// but the last, which may be shorter.
type batchConn interface {
	// LocalAddr is the address the conn is bound to, in its socket's
	// family: an IPv6 address (IPv4-mapped ones included) means that the
	// conn sends to IPv6 and IPv4 peers alike, an IPv4 one that it sends
	// to IPv4 peers only.
	LocalAddr() netip.AddrPort

	// BatchSize is the most datagrams one Send takes, in all its messages,
	// and the most messages one Recv fills.
	BatchSize() int

	// Offload reports the segmentation offloads in use. gso: Send takes
	// messages of several datagrams, and datagram k of a message leaves
	// with IPv4 ID k (the loop computes each ICRC for that ID); it turns
	// false for good once the network refuses a super-datagram, whose
	// datagrams Send then sends one by one. gro: Recv may return messages
	// of several datagrams, which need receive buffers of groSlot bytes
	// (in a shorter one such a message arrives truncated: dropped).
	Offload() (gso, gro bool)

	// RecvBuffer is how many bytes of datagrams the receiving side holds
	// before it drops; the device sizes its QPs' send windows from it.
	RecvBuffer() int

	// Send sends msgs in order: message i is the datagrams msgs[i].Buffers
	// to msgs[i].Addr, which must be valid and, unless LocalAddr is IPv6,
	// IPv4. It blocks while the socket has no room, and returns how many
	// datagrams it sent and their bytes; the others it dropped (refused,
	// or a full queue on the way), which the protocol's retransmission
	// repairs as it does a loss in the network. It keeps no buffer.
	Send(msgs []message) (pkts, bytes int)

	// Recv receives up to len(msgs) messages, message i into
	// msgs[i].Buffers[0], and sets their N, Seg and Addr (and ID, CE).
	// Without wait it returns at once, 0 if nothing has arrived. With wait
	// it first reads without blocking — also when the read deadline has
	// passed — and then blocks until something arrives, the read deadline
	// passes (os.ErrDeadlineExceeded) or the conn is closed; a deadline
	// set to now is how post wakes a sleeping loop. So a busy loop and a
	// sleeping one cost one system call alike, and a deadline that is
	// always due (a thousand QPs' timers) never starves the receive.
	Recv(msgs []message, wait bool) (n int, err error)

	// SetReadDeadline sets when a waiting Recv gives up (zero: never),
	// also while one waits: a time not in the future wakes it. It may be
	// called from any goroutine.
	SetReadDeadline(t time.Time) error

	// SourcePorts reports whether Send honours message.SrcPort (a conn
	// that writes its own UDP headers: AF_XDP). A socket sends every
	// datagram from the port it is bound to.
	SourcePorts() bool

	// Close releases the socket; the device closes it once its loop has
	// ended.
	Close() error
}

// message is one entry of a Send or Recv batch.
type message struct {
	// Send: the datagrams, one per buffer (several only with gso, all
	// len(Buffers[0]) bytes but the last). Recv: Buffers[0] is the buffer
	// to receive into.
	Buffers [][]byte
	Addr    netip.AddrPort // Send: the peer; Recv: the source
	N       int            // Recv: bytes received; 0 for a message to drop (empty, truncated, or from an address that does not parse)
	Seg     int            // Recv: the size of its datagrams (N when it holds one)

	// Send: the UDP source port of the datagrams (the QP's entropy port,
	// as rxe picks it) if the conn's SourcePorts; 0 or a conn without
	// SourcePorts: the port the conn is bound to. The ICRC covers it.
	SrcPort uint16
	// Recv: the IPv4 identification of the datagram(s), if the conn saw
	// the IP header (AF_XDP); the ICRC is then checked against it, all 32
	// bits. -1: unknown (a socket), and the ICRC is checked for any ID.
	ID int32
	// Recv: the IP header's ECN field was CE (Congestion Experienced).
	CE bool
}

// groSlot is the receive buffer a message needs with gro: a
// super-datagram is at most 64 KiB.
const groSlot = 65536

// listenFunc opens the batchConn of a device bound to addr. The conn may
// count in c how datagrams cross it (messages, super-datagrams, system
// calls); the device counts the port counters itself.
type listenFunc func(addr netip.AddrPort, c *counters) (batchConn, error)

// wireClock carries happens-before across the kernel for the race
// detector: a datagram sent by one device loop and received by another in
// the same process orders what the sender did before it (the application's
// writes to memory it then asked to send) before what the receiver does
// after. The kernel's socket buffers already order them; the detector
// cannot see through a syscall. An atomic add per batch sent and a load per
// batch received cost nothing measurable.
var wireClock atomic.Uint64
