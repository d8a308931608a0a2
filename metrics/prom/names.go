package prom

import (
	"strings"
	"unicode"
)

// nodeNamespace is node_exporter's prefix for its infiniband collector.
const nodeNamespace = "node_infiniband_"

// portMetric is one node_exporter metric and the counter it comes from.
type portMetric struct {
	counter string // the PMA name (metrics.PortNames) or hw_counters name
	name    string // after nodeNamespace
	help    string
	scale   uint64 // PortXmitData/PortRcvData count 4-byte words
}

// portMetrics are node_exporter's per-port counters (sysfs counters/) by
// the PMA names metrics.Port.PMA uses. PortRcvDiscards is not one of
// metrics.PortNames; it is exported should a snapshot carry it.
var portMetrics = []portMetric{
	{"PortXmitData", "port_data_transmitted_bytes_total", "Bytes transmitted on the port (PortXmitData, which counts 4-byte words, times 4).", 4},
	{"PortRcvData", "port_data_received_bytes_total", "Bytes received on the port (PortRcvData, which counts 4-byte words, times 4).", 4},
	{"PortXmitPkts", "port_packets_transmitted_total", "Packets transmitted from the port on all VLs, errors included.", 1},
	{"PortRcvPkts", "port_packets_received_total", "Packets received by the port on all VLs, errors included.", 1},
	{"PortUnicastXmitPkts", "unicast_packets_transmitted_total", "Unicast packets transmitted, errors included.", 1},
	{"PortUnicastRcvPkts", "unicast_packets_received_total", "Unicast packets received, errors included.", 1},
	{"PortMulticastXmitPkts", "multicast_packets_transmitted_total", "Multicast packets transmitted, errors included.", 1},
	{"PortMulticastRcvPkts", "multicast_packets_received_total", "Multicast packets received, errors included.", 1},
	{"PortXmitWait", "port_transmit_wait_total", "Ticks in which the port had data to send and sent none.", 1},
	{"PortXmitDiscards", "port_discards_transmitted_total", "Outbound packets the port discarded because it was down or congested.", 1},
	{"PortRcvDiscards", "port_discards_received_total", "Inbound packets the port discarded because it was down or congested.", 1},
	{"PortRcvErrors", "port_errors_received_total", "Packets with an error received on the port.", 1},
	{"PortRcvRemotePhysicalErrors", "port_receive_remote_physical_errors_total", "Packets received marked bad (EBP delimiter) by the sender.", 1},
	{"PortRcvSwitchRelayErrors", "port_receive_switch_relay_errors_total", "Received packets a switch could not forward.", 1},
	{"PortXmitConstraintErrors", "port_constraint_errors_transmitted_total", "Packets not transmitted because of a partition or rate constraint.", 1},
	{"PortRcvConstraintErrors", "port_constraint_errors_received_total", "Received packets discarded because of a partition or rate constraint.", 1},
	{"SymbolErrorCounter", "symbol_error_total", "Minor link errors detected on the port's physical lanes.", 1},
	{"LinkErrorRecoveryCounter", "link_error_recovery_total", "Times the link recovered from an error state.", 1},
	{"LinkDownedCounter", "link_downed_total", "Times the link failed to recover from an error state and went down.", 1},
	{"LocalLinkIntegrityErrors", "local_link_integrity_errors_total", "Times local physical errors exceeded their threshold.", 1},
	{"ExcessiveBufferOverrunErrors", "excessive_buffer_overrun_errors_total", "Times consecutive flow-control periods each had a buffer overrun.", 1},
	{"VL15Dropped", "vl15_dropped_total", "Incoming VL15 (management) packets dropped for lack of resources.", 1},
}

// hwMetrics are node_exporter's names for a port's hw_counters (the mlx5
// file names procfs reads), by the counter of metrics.Port.HW or .Extra
// they come from: where ibex has the counter, under rxe's name
// (duplicate_request is the same file on both) or ibex's own (Extra), the
// one that means what mlx5's does; the first found of a name wins. mlx5's
// own names are taken too, should a snapshot carry one.
var hwMetrics = []portMetric{
	{"duplicate_request", "duplicate_requests_packets_total", "Duplicate requests received: requests below the expected PSN, executed before.", 1},
	{"out_of_seq_pkts", "out_of_sequence_packets_received_total", "Out-of-sequence packets received: requests beyond the expected PSN, each packet (ibex: out_of_seq_pkts).", 1},
	{"rcvd_seq_err", "packet_sequence_errors_total", "NAK sequence error packets received (rxe: rcvd_seq_err).", 1},
	{"rcvd_rnr_err", "rnr_nak_retry_packets_received_total", "RNR NAK packets received (rxe: rcvd_rnr_err).", 1},
	{"timeout_retries", "local_ack_timeout_errors_total", "Times a QP's ACK timer expired at the sender and it retried (ibex: timeout_retries).", 1},
	{"cnps_sent", "np_cnp_packets_sent_total", "CNPs sent by the notification point for ECN-marked RoCEv2 packets (ibex: cnps_sent).", 1},
	{"ecn_marked", "np_ecn_marked_roce_packets_received_total", "RoCEv2 packets received ECN-marked, congestion experienced (ibex: ecn_marked).", 1},
	{"cnps_recv", "rp_cnp_packets_handled_total", "CNPs the reaction point handled to throttle its sending (ibex: cnps_recv).", 1},
	{"ICRCErrors", "rx_icrc_encapsulated_errors_total", "RoCE packets received with an ICRC error (ibex: ICRCErrors).", 1},
	{"out_of_sequence", "out_of_sequence_packets_received_total", "Out-of-sequence packets received.", 1},
	{"packet_seq_err", "packet_sequence_errors_total", "NAK sequence error packets received.", 1},
	{"rnr_nak_retry_err", "rnr_nak_retry_packets_received_total", "RNR NAK packets received.", 1},
	{"local_ack_timeout_err", "local_ack_timeout_errors_total", "Times a QP's ACK timer expired at the sender.", 1},
	{"implied_nak_seq_err", "implied_nak_seq_errors_total", "ACKs or READ responses with a PSN beyond the expected one (implied NAK).", 1},
	{"out_of_buffer", "out_of_buffer_drops_total", "Drops for lack of a posted receive WQE.", 1},
	{"np_cnp_sent", "np_cnp_packets_sent_total", "CNPs sent by the notification point for ECN-marked RoCEv2 packets.", 1},
	{"np_ecn_marked_roce_packets", "np_ecn_marked_roce_packets_received_total", "RoCEv2 packets received ECN-marked, congestion experienced.", 1},
	{"rp_cnp_handled", "rp_cnp_packets_handled_total", "CNPs the reaction point handled to throttle its sending.", 1},
	{"rp_cnp_ignored", "rp_cnp_ignored_packets_received_total", "CNPs received and ignored by the reaction point.", 1},
	{"rx_write_requests", "rx_write_requests_total", "WRITE requests received.", 1},
	{"rx_read_requests", "rx_read_requests_total", "READ requests received.", 1},
	{"rx_atomic_requests", "rx_atomic_requests_total", "Atomic requests received.", 1},
	{"rx_icrc_encapsulated", "rx_icrc_encapsulated_errors_total", "RoCE packets received with an ICRC error.", 1},
}

// hwHelp says what rxe's hw_counters count, for ibex_rdma_hw_<name>_total.
var hwHelp = map[string]string{
	"sent_pkts":              "Packets sent (rxe hw_counters sent_pkts).",
	"rcvd_pkts":              "Packets received (rxe hw_counters rcvd_pkts).",
	"duplicate_request":      "Duplicate requests received (rxe hw_counters duplicate_request).",
	"out_of_seq_request":     "Sequence error NAKs sent for requests beyond the expected PSN, one per gap (rxe hw_counters out_of_seq_request).",
	"rcvd_rnr_err":           "RNR NAKs received as requester (rxe hw_counters rcvd_rnr_err).",
	"send_rnr_err":           "RNR NAKs sent as responder (rxe hw_counters send_rnr_err).",
	"rcvd_seq_err":           "Sequence error NAKs received as requester (rxe hw_counters rcvd_seq_err).",
	"ack_deferred":           "Responses queued behind another for the completer (rxe hw_counters ack_deferred; 0 in ibex).",
	"retry_exceeded_err":     "Requests failed after the retry count ran out (rxe hw_counters retry_exceeded_err).",
	"retry_rnr_exceeded_err": "Requests failed after the RNR retry count ran out (rxe hw_counters retry_rnr_exceeded_err).",
	"completer_retry_err":    "Retries started by the requester: timeouts and sequence NAKs (rxe hw_counters completer_retry_err).",
	"send_err":               "Packets the network stack refused to send (rxe hw_counters send_err).",
	"link_downed":            "Times the link went down (rxe hw_counters link_downed).",
	"rdma_sends":             "SEND work requests completed (rxe hw_counters rdma_sends).",
	"rdma_recvs":             "Receive completions without error (rxe hw_counters rdma_recvs).",
}

// metricName turns a counter's name into the part of a Prometheus metric
// name after the prefix: snake case ("PktsSent": "pkts_sent"), characters
// a metric name cannot hold as '_', without a trailing "_total" (the
// caller adds one).
func metricName(s string) string {
	var b strings.Builder
	rs := []rune(s)
	for i, r := range rs {
		switch {
		case unicode.IsUpper(r):
			// A new word starts at an upper-case letter after a lower-case
			// one or a digit, and at the last upper-case letter of a run
			// followed by a lower-case one ("QPNum": "qp_num").
			if i > 0 && (unicode.IsLower(rs[i-1]) || unicode.IsDigit(rs[i-1]) ||
				unicode.IsUpper(rs[i-1]) && i+1 < len(rs) && unicode.IsLower(rs[i+1])) {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(r))
		case r < 0x80 && (unicode.IsLetter(r) || unicode.IsDigit(r)):
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	n := b.String()
	for strings.Contains(n, "__") {
		n = strings.ReplaceAll(n, "__", "_")
	}
	n = strings.Trim(n, "_")
	n = strings.TrimSuffix(n, "_total")
	if n == "" {
		n = "unnamed"
	}
	return n
}
