// Package prom serves ibex's counters to Prometheus: its one job is to
// turn a metrics.Snapshot into Prometheus metrics, and to serve them on
// /metrics (and the snapshot itself as JSON on /counters).
//
// The names are node_exporter's infiniband collector's, with its labels
// (device, port), so a dashboard or alert written for hosts with
// InfiniBand or RoCE HCAs works on ibex devices unchanged:
//
//	PMA counter          metric (node_infiniband_...)
//	PortXmitData         port_data_transmitted_bytes_total (4-byte words × 4, as node_exporter does)
//	PortRcvData          port_data_received_bytes_total
//	PortXmitPkts         port_packets_transmitted_total
//	PortRcvPkts          port_packets_received_total
//	PortUnicastXmitPkts  unicast_packets_transmitted_total (and Rcv: received)
//	PortMulticastXmitPkts multicast_packets_transmitted_total (and Rcv: received)
//	PortXmitWait         port_transmit_wait_total
//	PortXmitDiscards     port_discards_transmitted_total
//	PortRcvErrors        port_errors_received_total
//	SymbolErrorCounter   symbol_error_total
//	LinkDownedCounter    link_downed_total
//	... the rest of metrics.PortNames: see portMetrics.
//
// node_exporter also reads a port's hw_counters, under mlx5's counter
// names; ibex's counters with the same meaning are given those names:
// duplicate_request (the same file on rxe and mlx5):
// duplicate_requests_packets_total; out_of_seq_pkts:
// out_of_sequence_packets_received_total; rcvd_seq_err:
// packet_sequence_errors_total; rcvd_rnr_err:
// rnr_nak_retry_packets_received_total; timeout_retries:
// local_ack_timeout_errors_total; cnps_sent, ecn_marked, cnps_recv:
// np_cnp_packets_sent_total, np_ecn_marked_roce_packets_received_total,
// rp_cnp_packets_handled_total; ICRCErrors:
// rx_icrc_encapsulated_errors_total (hwMetrics). Every hardware counter is
// also exported under its rxe name as ibex_rdma_hw_<name>_total{device,port},
// the port's other counters (metrics.Port.Extra) as
// ibex_port_<name>_total{device,port}, each QP's counters as
// ibex_qp_<name>_total{device,qpn,pid} (ibex_qp_retransmits_total, ...),
// and each QP's state as ibex_qp_info{device,qpn,pid,state} = 1; a
// daemon's tenants as ibex_tenant_{processes,qps,cqs,mrs,mr_bytes}{tenant},
// ibex_tenant_quota{tenant,quota} and ibex_tenant_rate_held_total{tenant}. ibex_up is
// 1 when the snapshot could be taken (0: a daemon that does not answer,
// say). node_exporter's state_id, physical_state_id, rate_bytes_per_second,
// info and legacy_* are not exported: a snapshot holds counters only, and
// ibex's counters are 64 bits wide already. A /metrics page also has
// Prometheus's standard go_ and process_ metrics.
//
// The collector takes the snapshot when Prometheus scrapes, with no
// goroutine of its own: nothing runs between scrapes, and a scrape reads
// the counters the data path keeps anyway (atomic loads), under the
// control-path locks only. The data path never waits for it.
//
// A process serves its own counters with ServeFromEnv when IBEX_METRICS
// holds a listen address (the ibex command calls it; a program of its own
// calls it once, after it starts); ibexd serves the daemon's with its
// `metrics:` setting or --metrics.
package prom
