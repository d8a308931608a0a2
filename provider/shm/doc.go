// Package shm is ibex's shared-memory provider: RDMA between processes on
// one host, with one-sided operations performed by the initiator alone.
//
// The device is "shm0". Every Context that opens it is a node: a memfd
// pool (sparse, IBEX_SHM_POOL bytes, default 16 GiB of address space),
// sealed against shrinking and mapped MAP_SHARED, and an abstract unix
// socket (@ibex-shm-PID-N) that peers dial. The port's GID names the node
// (fe80::6978:PID:N), so the ConnInfo a QP exchanges is all a peer needs:
// at RTR the provider dials the peer node (once per pair), both sides send
// their pool's memfd with SCM_RIGHTS, and each QP announces the offset of
// its half (published state and outgoing ring) in its pool.
//
// Data paths:
//
//   - RDMA WRITE, READ and atomics are done by the initiator. It reads the
//     target's key table (in the target's pool) to check the rkey, PD,
//     access and bounds, and the target QP's published state, access flags
//     and max_dest_rd_atomic; then it copies into or out of its mapping of
//     the target's pool (memory from PD.AllocMR) or uses
//     process_vm_writev/readv (memory registered with RegMR). Atomics on
//     pool memory use sync/atomic on the shared mapping, so they are atomic
//     against the target's CPU too. The target runs no code.
//   - Atomics on ordinary memory, SEND/RECV and WRITE_WITH_IMM's
//     completion go through a single-producer single-consumer ring per QP
//     and direction (64 slots of 8 KiB) and are served by the target's
//     progress goroutine, which places SEND data with the verbs responder
//     helpers. A sender needs a receive credit: the receiver publishes how
//     many receives it posted, so a missing receive is an RNR wait at the
//     sender, with rnr_retry and the receiver's min_rnr_timer, and never a
//     message the receiver has to refuse.
//   - Each node's progress goroutine polls its ready bits for 20 µs after
//     work and then sleeps on a futex in its pool (100 ms at most); a
//     producer sets the QP's ready bit and wakes the node only when its
//     sleeping flag is set, so a busy node takes no system calls.
//
// Shared memory holds integers and offsets only. Everything a peer wrote
// is checked before use (lengths, offsets, generations); a peer that
// breaks the ring protocol moves the QP to ERR. A peer that dies closes
// its sockets: every QP linked to it moves to ERR (QP_FATAL, with the
// pid in the cause), its work requests are flushed, and its pool is
// unmapped once no access is in flight. Deregistration waits for peers'
// accesses in flight (mr.go), so a peer never writes memory after Dereg.
//
// Requests complete in order. A one-sided request waits until earlier
// SENDs and ring atomics are acknowledged (they could still fail and must
// not be overtaken); WRITE_WITH_IMM notices, which cannot fail at the
// responder, do not hold later requests back.
package shm
