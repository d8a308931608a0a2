package wire

// UDP source ports. The receiver accepts any source port; these reproduce
// Linux's choice, for byte-exact interop and ECMP spreading like rxe's.
//
// The captures in ../shared/testdata/rxe-pcaps show two rules (Linux 6.1):
// an RC or UC QP whose address vector is set by modify_qp uses
// rdma_get_udp_sport(flow_label, lqpn, rqpn), so its port depends on both
// QPNs, or on the flow label rdma_cm puts in the CM REQ; a QP whose address
// vector is never set that way — UD QPs and QP1 (GSI) — keeps rxe's initial
// port, a hash of its own QPN.

const sportMin = 0xc000 // IB_ROCE_UDP_ENCAP_VALID_PORT_MIN

// FlowLabel returns the 20-bit flow label Linux derives from a QP pair when
// the address vector carries none (rdma_calc_flow_label).
func FlowLabel(localQPN, remoteQPN uint32) uint32 {
	v := uint64(localQPN&mask24) * uint64(remoteQPN&mask24)
	v ^= v >> 20
	v ^= v >> 40
	return uint32(v & 0xfffff)
}

// SourcePort returns the UDP source port for a flow label, in
// 0xc000–0xffff (rdma_flow_label_to_udp_sport). For a connection set up
// without rdma_cm use SourcePort(FlowLabel(lqpn, rqpn)).
func SourcePort(flowLabel uint32) uint16 {
	fl := flowLabel & 0xfffff
	return uint16((fl&0x3fff)^(fl>>14)) | sportMin
}

// QPSourcePort returns rxe's initial source port of a QP:
// 0xc000 + hash_32(qpn, 14), kept by UD QPs and QP1.
func QPSourcePort(qpn uint32) uint16 {
	const goldenRatio32 = 0x61c88647
	return sportMin + uint16((qpn*goldenRatio32)>>(32-14))
}
