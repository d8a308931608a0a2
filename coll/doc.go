// Package coll is ibex's collectives library: NCCL-class communicators over
// verbs. This file set so far holds the bootstrap: a unique ID (rendezvous
// address and random magic, as ncclUniqueId), the launchers' environments
// (torchrun, Open MPI, Slurm, MPICH), the TCP rendezvous at rank 0 that
// gives every rank every rank's published data, and the host grouping that
// decides shared memory (same machine and network namespace) or UDP.
// Algorithms are generated as schedules in coll/algo; element-wise
// reductions are in coll/reduce.
package coll
