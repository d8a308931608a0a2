// Package coll is ibex's collectives library: NCCL-class communicators over
// verbs.
//
// # Communicators
//
// A communicator of N ranks is made by NewComm from a UniqueID (rank 0's
// rendezvous address and a random magic, as ncclUniqueId) or from a
// launcher's environment (FromEnv: torchrun, Open MPI, Slurm, MPICH). Rank
// 0 runs a TCP rendezvous; every rank publishes its host (HostID: machine
// and network namespace) and, per peer, an RC QP and a landing buffer.
// Ranks of one host talk over shm0 (one-sided, shared memory), ranks of
// different hosts over udp0 (RoCEv2); Options.Transport or IBEX_TRANSPORT
// forces one (any device, e.g. one added with udp.AddDevice). Split
// partitions a communicator by color and key; Close waits for every rank
// (unless the communicator was aborted) and releases everything. The
// package's Example (example_test.go; go doc -http shows it) runs four
// ranks in one process and all-reduces.
//
// # Calls
//
// AllReduce, ReduceScatter, AllGather, Broadcast, Reduce, AllToAll,
// Barrier, Send and Recv take a context, element counts and NCCL's types
// and ops (package reduce). Every rank must make the same collective calls
// in the same order; Send and Recv between two ranks match in order.
// sendbuf and recvbuf may be the same slice (in place).
//
// Each call runs a schedule from package coll/algo (ring, double binary
// tree, recursive halving-doubling, recursive doubling, direct) on one of
// three paths (protocols, as NCCL's), every rank choosing alike from the
// capabilities every rank published for its devices (verbs.DeviceCap),
// never from device names. When every link's device places writes in
// order (CapOrderedPlacement: shm0, udp devices): the LL path for small
// transfers (data and flags in 8-byte words, polled by the receiver, as
// NCCL's LL; up to 1 KiB when every link completes writes at post,
// CapCompleteAtPost, else 16 KiB) and, on amd64, the flagged path for
// larger ones (an RDMA WRITE of each piece into the peer's landing
// buffer, then a flagged header the receiver polls, as NCCL's Simple;
// Options.Chunk sizes the pieces). Otherwise the normal path: RDMA
// WRITE_WITH_IMM of pieces into the peer's landing buffer, a credit per
// landing slot, completion-driven. A rank whose device moves data on its
// own thread (CapProgressThread) yields its thread while it waits.
// Large all-reduce, all-gather and broadcast run on the caller's buffers
// (registered once and cached). After its first call of a shape, a call
// allocates nothing. The algorithm is chosen
// per call by an alpha-beta cost model of the schedules (Model, by device
// name, a device without an entry taking that of a device with the same
// capabilities; rank 0's model is every rank's, so all choose alike;
// Calibrate measures one, IBEX_COLL_MODEL loads one), unless
// WithAlgorithm or IBEX_ALGO names one.
//
// # Numerics
//
// Integers wrap (two's complement); Avg of integers is the wrapped sum
// divided by N, truncated toward zero. float32 and float64 reduce in their
// own precision. float16 and bfloat16 reductions run in float32 and round
// once at the end (Avg divides before that rounding). Every rank gets the
// same bytes: each output element is reduced once, by one rank, and
// copied to the others. Package reduce's documentation has the details
// (NaNs, Min and Max, rounding).
//
// # Faults
//
// A call whose context ends returns an error naming the ranks not heard
// from and the step it was at. Every data piece carries the call's number
// and a descriptor (collective, algorithm, type, op, root, count), so a
// rank that receives a piece of a different call returns ErrMismatch. Any
// failed call aborts the communicator (later calls fail at once with
// ErrAborted) and sends every peer an abort notice, which fails their
// calls too; Abort does the same from any goroutine. A peer that dies
// makes its links fail (shm0 at once; udp0 when retries run out) or, at
// worst, the deadline expire.
//
// # Health
//
// As NCCL's RAS: every rank sends rank 0's status service a heartbeat
// (Options.Health) with what its flight recorder says of its current call;
// the service tells dead, silent, stalled, failed and mismatched ranks, in
// NCCL's text protocol on a TCP port (ReadStatus, QueryStatus, `ibex coll
// status`). A failed call's error says what the service knows of the
// ranks it waited on and where the rank's flight record (its last calls,
// FlightRecord) was dumped. Stats gives per op the count, last time and
// bus bandwidth.
package coll
