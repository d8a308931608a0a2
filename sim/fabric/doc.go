// Package fabric is what ibex's two fabric engines, sim/packet (packet by
// packet) and sim/flow (max-min fair flows), share: the link, switch, NIC
// and transport constants of a run (Params, their Defaults and
// CheckParams), the routing, link-layer and congestion-control choices,
// link failures, and the per-port statistics a run reports. It simulates
// nothing; the engines import it, and it imports neither.
package fabric
