// Package loader keeps a training loop fed: it reads a dataset's samples in a
// shuffled order that is a pure function of (Seed, Epoch), a few batches
// ahead of the consumer, into buffers it allocates once from its Source
// (registered memory, when the Source is a store client), and measures
// itself the way MLPerf Storage does (Bench, Search: samples/s while a
// simulated accelerator stays busy at least 90% of the time).
//
// The pieces:
//
//   - Source: where bytes come from. store's Client is one; LocalSource
//     (pread from a directory) is the local baseline and what the tests use.
//   - Dataset: the Source's files (optionally those matching a glob) cut
//     into fixed-size samples.
//   - Loader: Next hands out batches in the epoch's order, Release gives a
//     batch's buffer back; Ahead batches are read while the consumer works.
//   - Bench and Search: the simulated accelerator and the AU ≥ 90% search.
package loader
