// Package topo turns a declarative topology file into an explicit graph of
// hosts, NICs, switches, ports and links, and checks it: the fabric that
// the simulator's routing, flow control and event engine run on.
//
// A Spec (YAML, see Spec) is one of three kinds: a fattree (2 or 3 tiers
// of k-port switches, full bisection or r:1 oversubscribed at the leaf,
// hosts of one or more GPUs ToR style), a superpod (NVIDIA's DGX SuperPOD
// rail-optimized layout, built from scalable units, with a core tier above
// 8 SUs of 64-port switches), or an explicit list of nodes and links. A
// fattree or superpod may be multi-plane (Alibaba HPN's dual plane):
// several independent copies of the switch fabric, each GPU's NIC split
// into one port per plane. Spec.Build expands it into a Graph; Graph.Check
// lists what is wrong with it; Graph.Counts sizes it.
//
// The graph is built for traversal: nodes, ports and links live in three
// slices with dense int32 IDs; a node's ports are a contiguous range, each
// port names its peer port and its link, each link carries its rate,
// length and tier. Hosts come first, then NICs, then switches, so host h
// is node h and its NICs (one per GPU and plane, numbered GPU by GPU and
// within a GPU plane by plane) a range after the hosts. A 3-tier k=64 fat
// tree (65,536 hosts) is built in a handful of allocations.
package topo
