// Package algo describes collective algorithms as data. A Schedule says,
// for every rank, in which step it sends which slots of its working buffer
// to which peer, and whether the receiver reduces them into its own slots
// or overwrites them. Schedules are deterministic, know nothing of
// providers, and are cheap to make for thousands of ranks; Verify proves
// symbolically that a schedule computes its collective. The executor in
// package coll runs them over RDMA; the fabric simulator turns them into
// flows. The package does no I/O and starts no goroutines.
//
// # Buffers and slots
//
// Every rank has one working buffer of Schedule.Slots equal slots (W). For
// the blocked collectives the buffer is a row of equal blocks, each cut into
// W/blocks slots: block b is slots [b·W/blocks, (b+1)·W/blocks).
// SlotRange(count, slot) gives a slot's elements for a call on count
// elements, count meaning what it means in NCCL:
//
//   - all_reduce, reduce, broadcast: count elements, no blocks. Every
//     rank's input is copied into the buffer before step 0 (broadcast:
//     Root's only; the other ranks' buffers hold nothing of use). The
//     output is the buffer after the last step, on every rank (reduce: on
//     Root only).
//   - reduce_scatter: count is the output per rank (recvcount); N blocks of
//     count elements. The input (N·count elements) is copied in; rank r's
//     output is block r.
//   - all_gather: count is the input per rank (sendcount); N blocks of count
//     elements. Rank r's input is copied into block r; the output is the
//     whole buffer.
//   - all_to_all: count is elements per peer; 2N blocks of count elements,
//     two separate ranges: send blocks 0..N-1, then receive blocks
//     N..2N-1. The input (N·count, block j meant for rank j) is copied into
//     the send blocks, and the executor itself copies send block r into
//     receive block r (no transfer does). The output is the receive blocks:
//     receive block j holds rank j's send block r.
//
// A block's slots split it evenly, the first count mod (W/blocks) holding
// one element more. When count is smaller than that some slots are empty;
// an executor may send empty messages for them or skip them on both ends
// (SlotRange gives every rank the same answer).
//
// # Steps
//
// Program(r) is rank r's program: NumSteps steps, some empty. A Step lists
// Sends and Recvs; each Transfer moves Len consecutive slots, from slot Src
// of the sender to slot Dst of the receiver (Src = Dst except in
// all_to_all), overwriting or reducing.
//
// Data rules:
//
//   - A send in step i reads its slots as the rank's steps before i left
//     them. A receive in step i writes its slots; the result is what the
//     rank's steps from i+1 on see.
//   - A slot may be both sent and received in one step only in rd
//     all-reduce (Step.Overlaps reports it): the send carries the old
//     value, so the executor applies received data to such a slot only
//     once the step's send of that slot has completed — per slot or piece,
//     not per transfer, which could deadlock two ranks exchanging more
//     pieces than they have credits. Elsewhere a step's sends and receives
//     touch disjoint slots, and receives may be applied as they land.
//   - Two receives of one step write the same slot only if both reduce
//     (tree parents, direct reduce); any order of applying them gives the
//     right set of contributions, and applying them in list order gives
//     the same rounding on every run.
//
// Ordering rules (checked by Verify):
//
//   - Matching: for every ordered pair of ranks (a, b), the sends from a
//     to b in a's program order (steps in order, list order within a step)
//     and the receives from a in b's program order correspond one to one,
//     and each corresponding send and receive carry the same Src, Dst, Len
//     and Reduce and are in the same step index. So a per-peer FIFO of
//     landing slots, with pieces of a transfer in order, needs no tags.
//   - No deadlock: run the steps in order; in each, offer credits for the
//     step's receives, post its sends as credits allow, and end the step
//     when its sends have completed and its receives have been applied.
//     With at least one credit (landing slot) per peer and each link's
//     pieces in program order, every rank finishes: by induction on i, once
//     every rank has finished step i-1, every transfer of step i has both
//     ends in step i, and what a receiver is waiting for is always at the
//     head of its link. Offering credits for later steps early (keeping
//     early arrivals for their step) is safe too.
//
// Flows lists the sends for a simulator; a flow of rank r's step i depends
// on r's steps before i.
//
// # Pipelining
//
// Generate's pipeline P cuts every slot of the basic algorithm into P
// slots. For chains and trees the pieces are skewed in time so that hops
// overlap: piece k leaves a node one step after piece k-1. For the ring
// algorithms the ring runs once per piece, like NCCL's loop over the
// buffer in chunks: more, smaller messages (bounded landing space), the
// same bandwidth. For rhd, rd and direct, P only makes slots finer: their
// messages are ranges of slots, whatever P is.
//
// # Algorithms
//
// Step counts for N ranks and pipeline P (N = 1: no steps; pof2 is the
// largest power of two ≤ N; +2 when N is not a power of two):
//
//	algorithm  collective      steps                 slots W   source
//	ring       all_reduce      2(N-1)·P              N·P       NCCL ring (runRing); Patarasuk & Yuan 2009
//	           reduce_scatter  (N-1)·P               N·P
//	           all_gather      (N-1)·P               N·P
//	           broadcast       N+P-2 (chain)         P         NCCL ring broadcast, pipelined chain
//	           reduce          N+P-2 (chain to Root) P
//	tree       all_reduce      2H+P-1                2P        NCCL double binary tree (trees.cc)
//	           broadcast       H+P-1                 2P        same trees, the second re-rooted at Root
//	           reduce          H+P-1                 2P
//	rhd        all_reduce      2·log2(pof2) (+2)     N·P       Rabenseifner; Thakur, Rabenseifner &
//	           reduce_scatter  log2(pof2) (+2)       N·P       Gropp 2005; MPICH reduce_scatter_allgather
//	rd         all_reduce      log2(pof2) (+2)       P         MPICH allreduce recursive_doubling
//	           all_gather      log2(pof2) (+2)       N·P       recursive doubling, fold in/out
//	direct     all_to_all      1                     2N·P      pairwise exchange in one step
//	           all_reduce      2                     N·P       direct reduce-scatter + all-gather
//	           reduce_scatter, all_gather, broadcast, reduce: 1
//
// H is the height of the taller tree, about log2 N + 1. Per rank and step,
// ring and chain send one message, rhd and rd one (two in the last step of
// rd all-gather), tree one per parent and child in each tree, direct N-1.
// The files ring.go, tree.go, rhd.go and direct.go describe each algorithm.
package algo
