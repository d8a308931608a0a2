package ib

import "fmt"

// Opcode is the BTH OpCode: bits 7:5 name the transport (RC, UC, RD, UD),
// bits 4:0 the operation.
type Opcode uint8

// RC opcodes (IBA 9.2, Table 38; include/rdma/ib_pack.h).
const (
	RCSendFirst          Opcode = 0x00
	RCSendMiddle         Opcode = 0x01
	RCSendLast           Opcode = 0x02
	RCSendLastImm        Opcode = 0x03
	RCSendOnly           Opcode = 0x04
	RCSendOnlyImm        Opcode = 0x05
	RCWriteFirst         Opcode = 0x06
	RCWriteMiddle        Opcode = 0x07
	RCWriteLast          Opcode = 0x08
	RCWriteLastImm       Opcode = 0x09
	RCWriteOnly          Opcode = 0x0a
	RCWriteOnlyImm       Opcode = 0x0b
	RCReadRequest        Opcode = 0x0c
	RCReadResponseFirst  Opcode = 0x0d
	RCReadResponseMiddle Opcode = 0x0e
	RCReadResponseLast   Opcode = 0x0f
	RCReadResponseOnly   Opcode = 0x10
	RCAck                Opcode = 0x11
	RCAtomicAck          Opcode = 0x12
	RCCompareSwap        Opcode = 0x13
	RCFetchAdd           Opcode = 0x14
	RCSendLastInvalidate Opcode = 0x16
	RCSendOnlyInvalidate Opcode = 0x17
	UCSendFirst          Opcode = 0x20
	UCSendMiddle         Opcode = 0x21
	UCSendLast           Opcode = 0x22
	UCSendLastImm        Opcode = 0x23
	UCSendOnly           Opcode = 0x24
	UCSendOnlyImm        Opcode = 0x25
	UCWriteFirst         Opcode = 0x26
	UCWriteMiddle        Opcode = 0x27
	UCWriteLast          Opcode = 0x28
	UCWriteLastImm       Opcode = 0x29
	UCWriteOnly          Opcode = 0x2a
	UCWriteOnlyImm       Opcode = 0x2b
	UDSendOnly           Opcode = 0x64
	UDSendOnlyImm        Opcode = 0x65

	// CNP is the RoCEv2 Congestion Notification Packet (IBA RoCEv2 annex
	// A17.9.3): a BTH with this opcode, BECN set and DestQP naming the QP
	// whose traffic was marked, 16 reserved bytes, and the ICRC. It is
	// not part of any PSN sequence and is never acknowledged.
	CNP Opcode = 0x81
)

const opcodeTransportShift = 5

// Transport is the service type in bits 7:5 of an opcode.
type Transport uint8

// Transports (IBA 9.2 Table 38). ibex speaks RC; UC and UD are decoded so
// that captures of rxe traffic (perftest -c UC/UD, rdma_cm and GSI MADs on
// QP1) can be read.
const (
	RC Transport = 0 // Reliable Connection
	UC Transport = 1 // Unreliable Connection
	RD Transport = 2 // Reliable Datagram (not supported)
	UD Transport = 3 // Unreliable Datagram
)

var transportNames = [8]string{"RC", "UC", "RD", "UD", "CNP", "transport5", "transport6", "vendor"}

func (t Transport) String() string { return transportNames[t&7] }

// Transport returns the service type encoded in the opcode.
func (o Opcode) Transport() Transport { return Transport(o >> opcodeTransportShift) }

// Mask says which extension headers follow the BTH and what kind of
// operation an opcode is, like rxe's rxe_opcode[].mask.
type Mask uint32

// Header bits: the extension headers that follow the BTH, in wire order
// DETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH.
const (
	MaskDETH         Mask = 1 << iota // Datagram ETH (UD), 8 bytes
	MaskRETH                          // RDMA ETH, 16 bytes
	MaskAtomicETH                     // Atomic ETH, 28 bytes
	MaskAETH                          // ACK ETH, 4 bytes
	MaskAtomicAckETH                  // Atomic ACK ETH, 8 bytes
	MaskImmDt                         // Immediate data, 4 bytes
	MaskIETH                          // Invalidate ETH, 4 bytes
	MaskCNPReserved                   // the CNP's 16 reserved bytes
	MaskPayload                       // a payload may follow the headers

	// Kind bits.
	MaskRequest  // sent by the requester
	MaskResponse // sent by the responder: ACK, READ response, atomic ACK
	MaskSend     // SEND (with or without immediate or invalidate)
	MaskWrite    // RDMA WRITE (with or without immediate)
	MaskRead     // RDMA READ request or response
	MaskAtomic   // CmpSwap, FetchAdd, atomic ACK
	MaskRecv     // consumes a receive WQE at the responder (rxe RWR)
	MaskComplete // ends a message that completes at the responder (rxe COMP)
	MaskFirst    // first (or only) packet of a message
	MaskMiddle   // middle packet of a message
	MaskLast     // last (or only) packet of a message

	// MaskOnly marks a single-packet message.
	MaskOnly = MaskFirst | MaskLast

	// MaskHeaders is every extension-header bit.
	MaskHeaders = MaskDETH | MaskRETH | MaskAtomicETH | MaskAETH | MaskAtomicAckETH | MaskImmDt | MaskIETH | MaskCNPReserved
)

// Extension header sizes in bytes (IBA 9.3; rxe_hdr.h).
const (
	BTHLen          = 12
	DETHLen         = 8
	RETHLen         = 16
	AtomicETHLen    = 28
	AETHLen         = 4
	AtomicAckETHLen = 8
	ImmDtLen        = 4
	IETHLen         = 4
	CNPReservedLen  = 16
	ICRCLen         = 4
)

type opInfo struct {
	name   string // operation as tshark 4.0 prints it, after "<transport> - "
	mask   Mask
	hdrLen uint8 // BTH plus extension headers; 0 = unknown opcode
}

// opTable is indexed by opcode. Unknown opcodes have hdrLen 0.
var opTable = func() (t [256]opInfo) {
	const (
		req   = MaskRequest
		resp  = MaskResponse
		pay   = MaskPayload
		first = MaskFirst
		mid   = MaskMiddle
		last  = MaskLast
		only  = MaskOnly
		send  = MaskSend
		write = MaskWrite
		read  = MaskRead
		atom  = MaskAtomic
		recv  = MaskRecv
		comp  = MaskComplete
		imm   = MaskImmDt
	)
	rc := []struct {
		op   Opcode
		name string
		mask Mask
	}{
		{RCSendFirst, "SEND First", req | send | pay | recv | first},
		{RCSendMiddle, "SEND Middle", req | send | pay | mid},
		{RCSendLast, "SEND Last", req | send | pay | comp | last},
		{RCSendLastImm, "SEND Last with Immediate", req | send | pay | comp | last | imm},
		{RCSendOnly, "SEND Only", req | send | pay | recv | comp | only},
		{RCSendOnlyImm, "SEND Only with Immediate", req | send | pay | recv | comp | only | imm},
		{RCWriteFirst, "RDMA WRITE First", req | write | pay | first | MaskRETH},
		{RCWriteMiddle, "RDMA WRITE Middle", req | write | pay | mid},
		{RCWriteLast, "RDMA WRITE Last", req | write | pay | last},
		{RCWriteLastImm, "RDMA WRITE Last with Immediate", req | write | pay | recv | comp | last | imm},
		{RCWriteOnly, "RDMA WRITE Only", req | write | pay | only | MaskRETH},
		{RCWriteOnlyImm, "RDMA WRITE Only with Immediate", req | write | pay | recv | comp | only | MaskRETH | imm},
		{RCReadRequest, "RDMA READ Request", req | read | only | MaskRETH},
		{RCReadResponseFirst, "RDMA READ response First", resp | read | pay | first | MaskAETH},
		{RCReadResponseMiddle, "RDMA READ response Middle", resp | read | pay | mid},
		{RCReadResponseLast, "RDMA READ response Last", resp | read | pay | last | MaskAETH},
		{RCReadResponseOnly, "RDMA READ response Only", resp | read | pay | only | MaskAETH},
		{RCAck, "Acknowledge", resp | only | MaskAETH},
		{RCAtomicAck, "ATOMIC Acknowledge", resp | atom | only | MaskAETH | MaskAtomicAckETH},
		{RCCompareSwap, "CmpSwap", req | atom | only | MaskAtomicETH},
		{RCFetchAdd, "FetchAdd", req | atom | only | MaskAtomicETH},
		{RCSendLastInvalidate, "SEND Last with Invalidate", req | send | pay | comp | last | MaskIETH},
		{RCSendOnlyInvalidate, "SEND Only with Invalidate", req | send | pay | recv | comp | only | MaskIETH},
	}
	add := func(op Opcode, name string, mask Mask) {
		t[op] = opInfo{name: name, mask: mask, hdrLen: uint8(BTHLen + extLen(mask))}
	}
	for _, e := range rc {
		add(e.op, e.name, e.mask)
		// UC has the SEND and RDMA WRITE operations of RC, at 0x20 + op.
		if e.op <= RCWriteOnlyImm {
			add(e.op|UCSendFirst, e.name, e.mask)
		}
	}
	add(UDSendOnly, "SEND only", req|send|pay|recv|comp|only|MaskDETH)
	add(UDSendOnlyImm, "SEND only with Immediate", req|send|pay|recv|comp|only|MaskDETH|imm)
	add(CNP, "Congestion Notification", only|MaskCNPReserved)
	return t
}()

// extLen is the total size of the extension headers in mask.
func extLen(m Mask) int {
	n := 0
	for _, h := range [...]struct {
		bit Mask
		len int
	}{
		{MaskDETH, DETHLen}, {MaskRETH, RETHLen}, {MaskAtomicETH, AtomicETHLen},
		{MaskAETH, AETHLen}, {MaskAtomicAckETH, AtomicAckETHLen},
		{MaskImmDt, ImmDtLen}, {MaskIETH, IETHLen}, {MaskCNPReserved, CNPReservedLen},
	} {
		if m&h.bit != 0 {
			n += h.len
		}
	}
	return n
}

// Valid reports whether the package knows o: RC 0x00–0x14, 0x16, 0x17;
// UC 0x20–0x2b; UD 0x64, 0x65; CNP 0x81.
func (o Opcode) Valid() bool { return opTable[o].hdrLen != 0 }

// Mask returns the headers and kind bits of o; 0 for an unknown opcode.
func (o Opcode) Mask() Mask { return opTable[o].mask }

// Has reports whether o has every bit of m.
func (o Opcode) Has(m Mask) bool { return opTable[o].mask&m == m }

// HeaderLen is the size of the BTH and the extension headers of o; 0 for an
// unknown opcode.
func (o Opcode) HeaderLen() int { return int(opTable[o].hdrLen) }

// String returns the transport and the operation as tshark names them, e.g.
// "RC SEND Only", "RC RDMA READ response First", "UD SEND only"; unknown
// opcodes print as "opcode 0x1f".
func (o Opcode) String() string {
	if !o.Valid() {
		return fmt.Sprintf("opcode %#02x", uint8(o))
	}
	return o.Transport().String() + " " + opTable[o].name
}
