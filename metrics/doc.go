// Package metrics gives ibex's counters the names RDMA people already read:
// its one job is a Snapshot of a process's or a daemon's ports and QPs, each
// counter under its InfiniBand PMA name (PortCounters and
// PortCountersExtended, what perfquery prints: PortNames) or its Linux rxe
// hw_counters name (what `rdma statistic` prints: HWNames), and ibex's own
// counters, which have no standard name, beside them (Extra).
//
// Process takes the snapshot of this process's open verbs contexts; Daemon
// asks a running ibexd for its status and FromStatus maps it. `ibex stat`
// prints snapshots; package metrics/prom serves them to Prometheus.
//
// Every counter is read where the transport keeps it anyway (atomic loads
// of verbs.QPStats and of a provider's port counters) under control-path
// locks only: taking a snapshot costs the data path nothing, and nothing is
// counted for it. Mapping.go says where each standard name comes from, and
// which names ibex has no source for and why.
//
// Daemon reuses provider/ibexd's status query, so importing this package
// links provider/ibexd, which registers the ibexd provider: in a program
// that did not import it already, verbs.Open("udp0") then goes through a
// running daemon, as it does in the ibex command.
package metrics
