package metrics

import (
	"slices"

	"github.com/ibex-rdma/ibex/verbs"
)

// PortNames are the InfiniBand PMA port counters (IBA 16.1.3.5
// PortCounters, 16.1.4 PortCountersExtended) in perfquery's order. Where
// each comes from in ibex (pmaOf):
//
//   - PortXmitData, PortRcvData (4-byte words, as IBA counts them),
//     PortXmitPkts, PortRcvPkts, PortRcvErrors (malformed datagrams and bad
//     ICRCs), PortXmitDiscards (datagrams the socket refused or that had no
//     route), PortXmitWait: the provider's port counters
//     (verbs.Context.PortCounters; provider/udp's PortCounters). udp's
//     PortXmitWait counts the times a transmit waited for room (a UDP
//     socket's full send buffer, EAGAIN; no free AF_XDP TX chunk), not IBA's
//     ticks without credits: a socket has no link credits, its full buffer
//     is the back-pressure.
//   - PortUnicastXmitPkts, PortUnicastRcvPkts: PortXmitPkts and PortRcvPkts
//     unless the provider counts them itself: ibex's transports are RC, so
//     every packet is unicast.
//   - PortMulticastXmitPkts, PortMulticastRcvPkts: 0; ibex has no UD QPs
//     and no multicast groups.
//   - LinkDownedCounter: the port's transitions to DOWN the process heard of
//     (verbs.Context.LinkDowned: PORT_ERR events after the port was up;
//     loopback's and shm's SetPortState make them; a udp port never goes
//     down).
//   - SymbolErrorCounter, LinkErrorRecoveryCounter,
//     LocalLinkIntegrityErrors, PortRcvRemotePhysicalErrors: 0; they count
//     events of a physical link (lanes, training, EBP-marked packets) that
//     ibex does not drive: its frames reach it whole through the kernel's
//     UDP or AF_XDP socket, or not at all.
//   - ExcessiveBufferOverrunErrors: 0; it counts link-level flow-control
//     credit violations, and ibex has no link-level credits (a datagram the
//     kernel drops for a full receive buffer is a loss, which shows as
//     rcvd_seq_err, retransmits and completer_retry_err).
//   - PortRcvSwitchRelayErrors: 0; a switch's counter, ibex ports are
//     channel adapters.
//   - PortRcvConstraintErrors: the provider's PKeyViolations where it
//     enforces partitions (udp: packets dropped because their P_Key does
//     not match their QP's; PortInfo's P_KeyViolations, the counter IBA
//     10.9.3 has a channel adapter keep, also in Extra). IBA defines
//     PortRcvConstraintErrors for a switch port's inbound enforcement, the
//     same check. 0 for the other providers.
//   - PortXmitConstraintErrors: 0; ibex ports do not filter what they send
//     (a QP's P_Key is always an entry of its port's table).
//   - VL15Dropped: 0; ibex has no subnet management agent and no VL15.
//
// The provider's counters with no PMA name (udp's ICRCErrors, UnknownQP,
// SrcAddrErrors: RC packets not from the QP's peer, dropped;
// PKeyViolations)
// are in Port.Extra.
var PortNames = []string{
	"SymbolErrorCounter",
	"LinkErrorRecoveryCounter",
	"LinkDownedCounter",
	"PortRcvErrors",
	"PortRcvRemotePhysicalErrors",
	"PortRcvSwitchRelayErrors",
	"PortXmitDiscards",
	"PortXmitConstraintErrors",
	"PortRcvConstraintErrors",
	"LocalLinkIntegrityErrors",
	"ExcessiveBufferOverrunErrors",
	"VL15Dropped",
	"PortXmitWait",
	"PortXmitData",
	"PortRcvData",
	"PortXmitPkts",
	"PortRcvPkts",
	"PortUnicastXmitPkts",
	"PortUnicastRcvPkts",
	"PortMulticastXmitPkts",
	"PortMulticastRcvPkts",
}

// HWNames are Linux rxe's hw_counters (drivers/infiniband/sw/rxe
// rxe_hw_counters.c), in rxe's order, as `rdma statistic` prints them.
// rxe counts them per device; ibex counts most per QP (verbs.QPStats), and
// a port's value is the sum over its QPs, those destroyed included
// (verbs.Context.DestroyedQPStats), so it never goes backwards. Where each
// comes from (hwOf), with rxe's meaning (the function that counts it):
//
//   - sent_pkts (rxe_xmit_packet: every packet a QP sent, requests and
//     responses): PktsSent.
//   - rcvd_pkts (rxe_rcv: packets that passed the header and ICRC checks
//     for a QP of the device): PktsRecv.
//   - duplicate_request (check_psn: a request below the expected PSN):
//     Duplicates.
//   - out_of_seq_request (check_psn: a request beyond the expected PSN,
//     counted once per sequence NAK sent, not per packet): SeqNaksSent, as
//     ibex's responder also NAKs once per gap. Every packet beyond the
//     expected PSN is Extra's out_of_seq_pkts (OutOfSequence).
//   - rcvd_rnr_err (check_ack: an RNR NAK received): RNRNaks.
//   - send_rnr_err (the responder sent an RNR NAK): RNRNaksSent.
//   - rcvd_seq_err (check_ack: a sequence NAK received): SeqNaksRecv. rxe
//     leaves out a NAK for a PSN already completed; ibex counts every one.
//   - ack_deferred (rxe_comp_queue_pkt: a response queued behind another
//     for the completer task, which then runs later): 0. ibex's transport
//     handles each response in the pass that received it; nothing is
//     queued for another task.
//   - retry_exceeded_err, retry_rnr_exceeded_err (the completer gave up:
//     completions with RETRY_EXC_ERR, RNR_RETRY_EXC_ERR): RetryExceeded,
//     RNRRetryExceeded.
//   - completer_retry_err (a go-back-N retry started, after a timeout or a
//     sequence NAK): Retries (timeouts) + SeqNaksRecv. ibex's requester
//     starts a retry for each sequence NAK except one for a retry already
//     under way from the same PSN, which rxe leaves out too: the sum can
//     exceed rxe's figure by those. (Only timeouts count against retry_cnt
//     in ibex; Extra's timeout_retries is Retries alone.)
//   - send_err (rxe_xmit_packet: the IP stack refused a packet): the
//     port's PortXmitDiscards; 0 for a QP (udp counts refusals per device).
//   - link_downed (rxe_port_down): the port's LinkDownedCounter; 0 for a
//     QP.
//   - rdma_sends (do_complete: SEND work requests completed): SendOps.
//   - rdma_recvs (the responder's do_complete: receive completions without
//     error): Recvs - RecvErrs.
var HWNames = []string{
	"sent_pkts",
	"rcvd_pkts",
	"duplicate_request",
	"out_of_seq_request",
	"rcvd_rnr_err",
	"send_rnr_err",
	"rcvd_seq_err",
	"ack_deferred",
	"retry_exceeded_err",
	"retry_rnr_exceeded_err",
	"completer_retry_err",
	"send_err",
	"link_downed",
	"rdma_sends",
	"rdma_recvs",
}

// hwOf maps a QP's counters to HWNames, in order (send_err and link_downed
// are the port's: 0 here).
func hwOf(s *verbs.QPStats) []Counter {
	v := [...]uint64{
		s.PktsSent,
		s.PktsRecv,
		s.Duplicates,
		s.SeqNaksSent,
		s.RNRNaks,
		s.RNRNaksSent,
		s.SeqNaksRecv,
		0, // ack_deferred
		s.RetryExceeded,
		s.RNRRetryExceeded,
		s.Retries + s.SeqNaksRecv,
		0, // send_err
		0, // link_downed
		s.SendOps,
		s.Recvs - min(s.RecvErrs, s.Recvs),
	}
	return named(HWNames, v[:])
}

// qpExtraNames are ibex's own per-QP counters (verbs.QPStats fields with
// no rxe name), in snake_case.
var qpExtraNames = []string{
	"retransmits",     // packets sent again (go-back-N)
	"cnps_sent",       // RoCEv2 CNPs sent as responder (mlx5: np_cnp_sent)
	"cnps_recv",       // CNPs received as requester (mlx5: rp_cnp_handled)
	"ecn_marked",      // packets received CE-marked (mlx5: np_ecn_marked_roce_packets)
	"window_cuts",     // send window reductions (timeout, NAK, CNP, CE)
	"paced",           // retransmissions the device's pacer put off
	"seq_naks_sent",   // PSN sequence error NAKs sent (= out_of_seq_request)
	"err_naks_sent",   // invalid request, remote access, remote operational NAKs sent
	"err_naks_recv",   // and received
	"rnr_naks_sent",   // RNR NAKs sent (= send_rnr_err)
	"out_of_seq_pkts", // requests received beyond the expected PSN, each packet
	"timeout_retries", // retries after a timeout (what retry_cnt bounds)
	"sends",           // send completions, any opcode and status, flushes included
	"recvs",           // receive completions, any status, flushes not included
	"out_of_window",   // ACKs/NAKs/responses outside the requester's window, ignored (stale or forged)
}

func qpExtraOf(s *verbs.QPStats) []Counter {
	v := [...]uint64{
		s.Retransmits,
		s.CNPsSent,
		s.CNPsRecv,
		s.ECNMarked,
		s.WindowCuts,
		s.Paced,
		s.SeqNaksSent,
		s.ErrNaksSent,
		s.ErrNaksRecv,
		s.RNRNaksSent,
		s.OutOfSequence,
		s.Retries,
		s.Sends,
		s.Recvs,
		s.OutOfWindow,
	}
	return named(qpExtraNames, v[:])
}

// pmaOf maps a provider's port counters (nil: it keeps none) and the
// port's link-down count to PortNames, in order; the provider's counters
// with no PMA name come back as extra, in the provider's order.
func pmaOf(pcs []verbs.PortCounter, linkDowned uint64) (pma, extra []Counter) {
	have := map[string]uint64{}
	for _, c := range pcs {
		if slices.Contains(PortNames, c.Name) {
			have[c.Name] = c.Value
		} else {
			extra = append(extra, Counter(c))
		}
	}
	if _, ok := have["PortRcvConstraintErrors"]; !ok {
		// A CA's partition enforcement (udp): PortInfo's P_KeyViolations.
		for _, c := range pcs {
			if c.Name == "PKeyViolations" {
				have["PortRcvConstraintErrors"] = c.Value
			}
		}
	}
	if _, ok := have["PortUnicastXmitPkts"]; !ok {
		have["PortUnicastXmitPkts"] = have["PortXmitPkts"]
	}
	if _, ok := have["PortUnicastRcvPkts"]; !ok {
		have["PortUnicastRcvPkts"] = have["PortRcvPkts"]
	}
	have["LinkDownedCounter"] += linkDowned
	pma = make([]Counter, len(PortNames))
	for i, n := range PortNames {
		pma[i] = Counter{Name: n, Value: have[n]}
	}
	return pma, extra
}

// portOf builds a port from its PMA counters, the provider's other
// counters and the sum of its QPs' counters.
func portOf(device string, port uint8, pma, provExtra []Counter, qps *verbs.QPStats) Port {
	p := Port{Device: device, Port: port, PMA: pma}
	p.HW = hwOf(qps)
	pv, _ := p.Value("PortXmitDiscards")
	p.HW[slices.Index(HWNames, "send_err")].Value = pv
	pv, _ = p.Value("LinkDownedCounter")
	p.HW[slices.Index(HWNames, "link_downed")].Value = pv
	p.Extra = append(slices.Clip(provExtra), qpExtraOf(qps)...)
	return p
}

func named(names []string, v []uint64) []Counter {
	out := make([]Counter, len(names))
	for i, n := range names {
		out[i] = Counter{Name: n, Value: v[i]}
	}
	return out
}
