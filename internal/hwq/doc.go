// Package hwq is the format of HCA-style work and completion queues in
// memory shared by two processes, and the two ends of each queue: a
// Producer that fills entries and rings a doorbell, and a Consumer that
// polls, copies entries out and sleeps when there is nothing to do. Its one
// job is to move fixed-size entries from one process to another without a
// syscall while both are awake, and to survive a peer that writes garbage
// into the shared memory.
//
// The queues are single-producer, single-consumer rings (layout.go). The
// typed entries the verbs data path puts in them (send and receive WQEs,
// CQEs) are encoded little-endian into fixed-size entries (entry.go).
//
// # Trust
//
// Everything read from shared memory may have been written by a hostile or
// broken peer, at any moment, including after it was checked. So:
//
//   - the geometry (entry size, count) is read and validated once, at
//     Attach, and kept in private memory; a header rewritten later changes
//     nothing;
//   - each end keeps its own index privately and only publishes it; the
//     peer's index is loaded once per refresh and checked against what is
//     possible (never backwards, never more than a ring ahead), and a
//     violation is ErrCorrupt, never a panic or an out-of-range slice;
//   - entries are copied out (Consumer.CopyOut) before they are decoded, so
//     what was validated is what is used (no time-of-check/time-of-use);
//   - a full ring is ErrFull for the producer: it never overwrites entries
//     the consumer has not released (a CQ overflow is the daemon's to report).
//
// A peer can still make the other end waste work (spurious wake-ups, a
// ring that never fills), but it cannot make it crash, block past its
// deadline or touch memory outside the region.
package hwq
