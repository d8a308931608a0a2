// Package route tells the fabric simulator which output port a packet for
// destination NIC d takes at each switch (and NIC) of a topo.Graph, with
// some links failed.
//
// New precomputes, per switch, the eligible ports for every destination:
// up/down (minimal) routing on the generated trees (fattree, superpod) and
// shortest paths on explicit graphs. The policies choose among them per
// call without allocating: DModK (OpenSM ftree-like, by destination),
// ECMP (by a flow hash, e.g. per QP) and Adaptive (least-loaded port by
// the engine's own queue lengths). Eligible returns the whole set, Path the
// whole route of one packet.
//
// In a multi-plane graph a packet stays in the plane of its source NIC:
// routes join the NICs of one plane only.
//
// A Router is immutable: failing links builds a new one (WithFailed), and
// any number of goroutines may read one.
package route
