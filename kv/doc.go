// Package kv is a key-value store whose GETs are one-sided: a client
// RDMA-READs the key's buckets from the server's index and then the
// value's entry from its value arena, checks versions and a checksum, and
// retries a read it finds torn; the server's CPU never sees a GET. PUTs,
// DELETEs and STATS are requests the server's one worker goroutine
// handles (SEND/RECV), so writes are serialised and need no locks.
//
// The design follows Pilaf (self-verifying structures read with RDMA
// READ: checksums over buckets and entries, a reader retries what does
// not verify) and FaRM (versions a reader compares; a whole neighbourhood
// read at once), in the memory layout below (layout.go has it as
// offsets):
//
//   - Two MRs, registered once at NewServer and sized by ServerConfig
//     (Index, Values), whatever is stored: the registered bytes never
//     change.
//   - The index: a self-checksummed header (generation, bucket count,
//     table offset, hash seed) and a table of 128-byte buckets of 7
//     slots (tag, version, entry offset and length), each bucket with its
//     own CRC32C and its table's generation. A key may live in one of two
//     buckets (two-choice hashing); a GET READs both at once.
//   - The arena: entries written out of place (header with version and
//     lengths, key, value, the version again as a trailer, CRC32C of all
//     of it). A PUT writes the new entry, marks the old one dead, then
//     rewrites the bucket; the old entry is freed into its size class's
//     free list after a quarantine (ServerConfig.Quarantine).
//   - Resizing without stopping readers: past ServerConfig.LoadFactor,
//     the worker builds a table twice the size in the index's other area,
//     publishes the new header, then marks every old bucket moved. A
//     reader that finds a moved bucket, or a bucket of another
//     generation, re-reads the header. PUTs wait for the rebuild; GETs
//     do not.
//
// What a GET returns is the value of a PUT that completed before the GET
// began, or of a later one: never torn, never older. Why: a bucket a
// GET reads was read after the GET began, and a PUT rewrites the bucket
// before it answers; an entry is accepted only with the version its
// bucket named, intact, and not dead — and an entry is marked dead
// before any bucket stops naming it, so a GET that went straight to an
// entry from the client's location cache (one READ instead of two) finds
// out that it was superseded. TestRace and TestRaceProcesses check this
// with writers and readers racing; TestRaceCatchesStale shows the check
// catching a server that skips the dead mark.
//
// Values up to ServerConfig.MaxValue (default 4 MiB): up to
// ServerConfig.Inline bytes travel inside the request; a larger one the
// server READs from the client's registered buffer straight into the new
// entry.
//
// A client (Dial) keeps the index header, a location cache, and per GET
// in flight a staging slot; Client.Do runs a batch with every GET's READs
// posted before it waits (Pipeline at a time), and allocates nothing per
// GET. One client is one RC QP (internal/cm connects it); the server
// takes MaxClients of them, drops one that breaks the protocol or whose
// connection ends, and frees what it held.
package kv
