// Package shmem holds the Linux primitives a shared-memory provider is built
// from, and nothing else: sealed memfd segments, an extent allocator over
// offsets, cross-process futexes, process_vm_readv/writev, and descriptor
// passing over unix sockets. It knows nothing about queues or verbs.
//
// The rules every user of this package keeps:
//
//   - Shared memory holds offsets, never Go pointers. The same segment is
//     mapped at a different address in every process, and the Go garbage
//     collector neither sees nor may follow pointers stored there. Pool
//     therefore hands out offsets, not slices.
//   - Every futex wait has a timeout. A peer that dies never wakes you, so a
//     waiter must wake up on its own, re-check the word and the peer's
//     liveness, and decide whether to sleep again.
//   - Segments are sealed against shrinking before anyone maps them. A peer
//     that truncated a memfd under our mapping would turn our next access
//     into SIGBUS, which Go cannot recover from; Create seals and Map refuses
//     an unsealed descriptor.
//   - Descriptors are close-on-exec from birth (MFD_CLOEXEC, MSG_CMSG_CLOEXEC),
//     so a fork/exec elsewhere in the process never leaks a segment.
package shmem
