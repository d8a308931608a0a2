// Package cost prices a fabric: from a topology graph and a parameter
// table it counts the switches, NICs, cables and transceivers, and adds up
// their power and cost, per link tier and per GPU.
//
// # The table
//
// No price or power is written in Go. Every number comes from a Table,
// and every number in a Table is a Value that carries its provenance: a
// source and a confidence (measured, primary, secondary, estimate). The
// default table is default.yaml, embedded in the binary (Default); a user
// file of the same schema overrides some of it (Load, Table.Override): a
// value it gives replaces the default's whole (value, confidence and
// source together), a field of a part replaces that field, and a part the
// default lacks is added and must be complete. Unknown fields are errors
// that name the field and its line.
//
// # The rules
//
// The caller says which link layer the fabric is built of (InfiniBand or
// Ethernet); the table has separate switch and NIC entries for each.
//
// Switches. Each switch is priced by the table's switch entry of the same
// link layer whose rate equals the switch's rate and whose port count
// equals the switch's radix (topo.Node.Radix). A switch's rate is the
// highest rate among its links; a switch with no link takes the highest
// link rate in the graph. No matching entry is an error (*NoPartError)
// that names the rate and radix and lists the entries there are.
//
// NICs. Each NIC (one per GPU) is priced by the NIC entry of the link layer
// and its link's rate, found the same way.
//
// Cables. Every link is one cable. A link no longer than copper_max_m is
// passive copper (DAC): a copper cable and no transceivers. A longer link
// is optical: a fibre cable (fibre_cable_usd plus fibre_cable_usd_per_m
// times its length) and a transceiver at each end.
//
// Transceivers. A switch or NIC entry lists the transceivers it takes
// (optics). For an optical link, each end takes the one of its optics with
// the shortest reach_m that covers the link's length (the first listed on
// a tie); if none reaches, that is an error. So with the default table,
// links up to 50 m get multimode SR optics and longer ones single-mode DR.
// A transceiver may serve several ports (ports: 2 for a twin-port 2×400G
// OSFP in a Quantum-2 cage). On each node, the optical ports that take
// one transceiver type are packed in port order into modules: a switch
// with n such ports holds ceil(n / ports per module) of them, and each
// module is counted in the link tier of its first port. Types never share
// a module (a twin-port module's two ports have the same optics). A NIC
// has one port, so it takes one transceiver when its link is optical.
//
// Power is the switches' and NICs' power_w (without their pluggable
// optics) plus the transceivers' power_w; cables draw none (passive copper
// and fibre). Cost adds the cables. Per-GPU figures divide by the graph's
// NICs, one per GPU.
//
// Compute applies the rules and returns a Report (JSON tags for --json);
// Report.WriteText prints it as fixed-width tables.
package cost
