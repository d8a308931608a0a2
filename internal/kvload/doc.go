// Package kvload is a memtier-style closed-loop load generator for key-value
// servers: Conns connections, each its own goroutine, each sending Pipeline
// operations at once and waiting for all their replies before it sends the
// next batch, for a Duration or a number of Requests; it reports throughput
// and per-operation latency percentiles from a log-linear (HDR-style)
// histogram.
//
// The server is reached through a Client, one per connection; DialRedis
// (RESP2) and DialMemcached (text protocol) are the real peers' clients, and
// ibex's key-value store brings its own. The load loop allocates nothing per
// operation after setup, so that the generator's garbage does not show in
// the server's figures.
//
// A run is fixed by its Config: the same Seed gives every connection the
// same sequence of operations and keys.
package kvload
