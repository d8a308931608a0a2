package rc

import "github.com/ibex-rdma/ibex/ib"

// Packet is the transport part of an RC packet as the engine sees it: the
// BTH fields it uses and the extension headers the opcode carries (which
// ones: Opcode.Has(ib.MaskRETH), ...). Opcode ib.CNP is a RoCEv2
// congestion notification: only DestQPN matters. Package rcwire maps it to and from
// wire.Packet.
type Packet struct {
	Opcode   ib.Opcode
	SE       bool // solicited event
	AckReq   bool
	DestQPN  uint32
	PSN      uint32
	VA       uint64      // RETH or AtomicETH
	RKey     uint32      // RETH or AtomicETH
	DMALen   uint32      // RETH
	Syndrome ib.Syndrome // AETH
	MSN      uint32      // AETH
	SwapAdd  uint64      // AtomicETH swap or add value
	Compare  uint64      // AtomicETH compare value
	Orig     uint64      // AtomicAckETH
	Imm      uint32      // ImmDt
	Payload  []byte
	// CE says the packet arrived with ECN Congestion Experienced in its IP
	// header (the provider sets it; it is not part of the BTH). A
	// responder answers a CE-marked request with a CNP.
	CE bool
}

// synReserved is bit 7 of an AETH syndrome, which must be zero; the engine
// drops an acknowledgement that sets it.
const synReserved ib.Syndrome = 0x80

// dataOpcode is the BTH opcode of a SEND or RDMA WRITE packet of work
// request op: first and last say where the packet is in its message.
func dataOpcode(op ib.WROpcode, first, last bool) ib.Opcode {
	base := ib.RCSendFirst
	if op == ib.WRRDMAWrite || op == ib.WRRDMAWriteWithImm {
		base = ib.RCWriteFirst
	}
	imm := op.HasImm()
	switch {
	case first && last && imm:
		return base + 5 // ONLY_WITH_IMMEDIATE
	case first && last:
		return base + 4 // ONLY
	case first:
		return base
	case last && imm:
		return base + 3 // LAST_WITH_IMMEDIATE
	case last:
		return base + 2
	}
	return base + 1 // MIDDLE
}

// atomicOpcode is the BTH opcode of an atomic work request
// (ib.WRAtomicCmpAndSwp or ib.WRAtomicFetchAndAdd).
func atomicOpcode(op ib.WROpcode) ib.Opcode {
	if op == ib.WRAtomicCmpAndSwp {
		return ib.RCCompareSwap
	}
	return ib.RCFetchAdd
}

// atomicOp is the work-request opcode the responder executes for an atomic
// request packet (RCCompareSwap or RCFetchAdd).
func atomicOp(op ib.Opcode) ib.WROpcode {
	if op == ib.RCCompareSwap {
		return ib.WRAtomicCmpAndSwp
	}
	return ib.WRAtomicFetchAndAdd
}

// placeStatus narrows a Host.RecvPlace answer to the three statuses the
// responder tells apart: any other failure (a receive flushed meanwhile)
// refuses the data as an MR would.
func placeStatus(st ib.WCStatus) ib.WCStatus {
	switch st {
	case ib.WCSuccess, ib.WCLocLenErr:
		return st
	}
	return ib.WCLocProtErr
}

// nakStatus is the completion status of a request the responder answered
// with error NAK s, and the NAK's name for the cause.
func nakStatus(s ib.Syndrome) (ib.WCStatus, string) {
	switch s {
	case ib.SynNAKInvalidRequest:
		return ib.WCRemInvReqErr, "invalid request"
	case ib.SynNAKRemoteAccess:
		return ib.WCRemAccessErr, "remote access error"
	}
	return ib.WCRemOpErr, "remote operational error"
}

// nakKind is the error a responder's cause wraps when it sends error NAK s.
func nakKind(s ib.Syndrome) error {
	switch s {
	case ib.SynNAKInvalidRequest:
		return ErrInvalidRequest
	case ib.SynNAKRemoteAccess:
		return ErrRemoteAccess
	}
	return ErrRemoteOperation
}
