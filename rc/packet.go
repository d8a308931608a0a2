package rc

// Packet is the transport part of an RC packet as the engine sees it: the
// BTH fields it uses and the extension headers the opcode carries. The
// caller encodes and decodes it with package wire.
type Packet struct {
	Opcode   uint8
	SE       bool // solicited event
	AckReq   bool
	DestQPN  uint32
	PSN      uint32
	VA       uint64 // RETH or AtomicETH
	RKey     uint32 // RETH or AtomicETH
	DMALen   uint32 // RETH
	Syndrome uint8  // AETH
	MSN      uint32 // AETH
	SwapAdd  uint64 // AtomicETH swap or add value
	Compare  uint64 // AtomicETH compare value
	Orig     uint64 // AtomicAckETH
	Imm      uint32 // ImmDt
	Payload  []byte
}

// RC opcodes (IBA table 38).
const (
	OpcSendFirst        = 0x00
	OpcSendMiddle       = 0x01
	OpcSendLast         = 0x02
	OpcSendLastImm      = 0x03
	OpcSendOnly         = 0x04
	OpcSendOnlyImm      = 0x05
	OpcWriteFirst       = 0x06
	OpcWriteMiddle      = 0x07
	OpcWriteLast        = 0x08
	OpcWriteLastImm     = 0x09
	OpcWriteOnly        = 0x0a
	OpcWriteOnlyImm     = 0x0b
	OpcReadRequest      = 0x0c
	OpcReadRespFirst    = 0x0d
	OpcReadRespMiddle   = 0x0e
	OpcReadRespLast     = 0x0f
	OpcReadRespOnly     = 0x10
	OpcAck              = 0x11
	OpcAtomicAck        = 0x12
	OpcCmpSwap          = 0x13
	OpcFetchAdd         = 0x14
	lastKnownRequestOpc = OpcFetchAdd
)

// AETH syndromes.
const (
	synACK       = 0x1f // ACK, credits invalid (what rxe sends)
	synRNR       = 0x20 // | timer code
	synNAKSeq    = 0x60
	synNAKInvReq = 0x61
	synNAKAccess = 0x62
	synNAKRemOp  = 0x63
)

func isResponse(op uint8) bool { return op >= OpcReadRespFirst && op <= OpcAtomicAck }

// HasRETH, HasAETH, ... say which extension headers an RC opcode carries.
func HasRETH(op uint8) bool {
	return op == OpcWriteFirst || op == OpcWriteOnly || op == OpcWriteOnlyImm || op == OpcReadRequest
}

// HasAETH reports whether op carries an AETH.
func HasAETH(op uint8) bool {
	return op == OpcReadRespFirst || op == OpcReadRespLast || op == OpcReadRespOnly || op == OpcAck || op == OpcAtomicAck
}

// HasImm reports whether op carries ImmDt.
func HasImm(op uint8) bool {
	return op == OpcSendLastImm || op == OpcSendOnlyImm || op == OpcWriteLastImm || op == OpcWriteOnlyImm
}

// HasAtomicETH reports whether op carries an AtomicETH.
func HasAtomicETH(op uint8) bool { return op == OpcCmpSwap || op == OpcFetchAdd }

// HasPayload reports whether op may carry payload.
func HasPayload(op uint8) bool {
	return op <= OpcWriteOnlyImm || (op >= OpcReadRespFirst && op <= OpcReadRespOnly)
}

// PSN arithmetic on 24-bit sequence numbers.
const psnMask = 1<<24 - 1

func psnAdd(p uint32, n uint32) uint32 { return (p + n) & psnMask }

// psnDiff returns a-b as a signed distance in [-2^23, 2^23).
func psnDiff(a, b uint32) int32 { return int32((a-b)<<8) >> 8 }
