// Package rcwire maps the rc engine's packet to and from package wire's:
// the one place where rc.Packet meets the RoCEv2 formats. rc and wire
// import neither each other nor this package; provider/udp and the interop
// tests use it.
//
// Both directions copy exactly the headers the opcode carries
// (ib.Opcode.Mask) and allocate nothing; the payload is aliased, not
// copied.
package rcwire

import (
	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/rc"
	"github.com/ibex-rdma/ibex/wire"
)

// DefaultPKey is the P_Key ibex sends: the default partition, full
// membership (what rxe uses for a QP whose pkey_index is 0).
const DefaultPKey = 0xffff

// ToWire fills wp with p addressed to QP destQPN: the BTH (P_Key
// DefaultPKey; MigReq, FECN, BECN and TVer 0), the extension headers
// p.Opcode carries, and p.Payload (aliased). Headers the opcode does not
// carry are zero. A CNP (ib.CNP) gets BECN and PSN 0, and nothing else.
// p.CE is not carried: the provider marks ECN in the IP header.
func ToWire(p *rc.Packet, destQPN uint32, wp *wire.Packet) {
	*wp = wire.Packet{
		BTH:     wire.BTH{Opcode: p.Opcode, SE: p.SE, PKey: DefaultPKey, DestQP: destQPN, AckReq: p.AckReq, PSN: p.PSN},
		Payload: p.Payload,
	}
	if p.Opcode == ib.CNP {
		// As mlx5 sends it (RoCEv2 annex A17.9.3): BECN set, PSN 0.
		wp.BTH.BECN, wp.BTH.PSN, wp.BTH.AckReq, wp.BTH.SE, wp.Payload = true, 0, false, false, nil
		return
	}
	m := p.Opcode.Mask()
	if m&ib.MaskRETH != 0 {
		wp.RETH = wire.RETH{VA: p.VA, RKey: p.RKey, DMALen: p.DMALen}
	}
	if m&ib.MaskAtomicETH != 0 {
		wp.AtomicETH = wire.AtomicETH{VA: p.VA, RKey: p.RKey, SwapAdd: p.SwapAdd, Compare: p.Compare}
	}
	if m&ib.MaskAETH != 0 {
		wp.AETH = wire.AETH{Syndrome: p.Syndrome, MSN: p.MSN}
	}
	if m&ib.MaskAtomicAckETH != 0 {
		wp.AtomicAck = p.Orig
	}
	if m&ib.MaskImmDt != 0 {
		wp.Imm = p.Imm
	}
}

// FromWire fills p from a decoded packet: the BTH fields the engine uses,
// the extension headers wp's opcode carries, and wp.Payload (aliased).
// Fields of headers the opcode does not carry are zero. An IETH (SEND with
// invalidate, which rc does not implement) is not carried over.
func FromWire(wp *wire.Packet, p *rc.Packet) {
	op := wp.BTH.Opcode
	*p = rc.Packet{Opcode: op, SE: wp.BTH.SE, AckReq: wp.BTH.AckReq, DestQPN: wp.BTH.DestQP, PSN: wp.BTH.PSN, Payload: wp.Payload}
	m := op.Mask()
	if m&ib.MaskRETH != 0 {
		p.VA, p.RKey, p.DMALen = wp.RETH.VA, wp.RETH.RKey, wp.RETH.DMALen
	}
	if m&ib.MaskAtomicETH != 0 {
		p.VA, p.RKey, p.SwapAdd, p.Compare = wp.AtomicETH.VA, wp.AtomicETH.RKey, wp.AtomicETH.SwapAdd, wp.AtomicETH.Compare
	}
	if m&ib.MaskAETH != 0 {
		p.Syndrome, p.MSN = wp.AETH.Syndrome, wp.AETH.MSN
	}
	if m&ib.MaskAtomicAckETH != 0 {
		p.Orig = wp.AtomicAck
	}
	if m&ib.MaskImmDt != 0 {
		p.Imm = wp.Imm
	}
}
