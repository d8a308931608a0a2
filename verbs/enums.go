package verbs

import (
	"fmt"
)

// MTU is an InfiniBand path MTU code (ibv_mtu): 1 = 256 bytes ... 5 = 4096.
type MTU uint8

// Path MTUs.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the MTU in bytes, or 0 for an invalid code.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// Valid reports whether m is one of the five IB MTU codes.
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

func (m MTU) String() string {
	if !m.Valid() {
		return fmt.Sprintf("invalid MTU (%d)", uint8(m))
	}
	return fmt.Sprintf("%d (%d)", m.Bytes(), uint8(m))
}

// MTUFromBytes converts 256, 512, 1024, 2048 or 4096 to its code.
func MTUFromBytes(n int) (MTU, error) {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m, nil
		}
	}
	return 0, fmt.Errorf("%w: MTU %d bytes: must be 256, 512, 1024, 2048 or 4096", ErrInvalidArgument, n)
}

// QPState is a queue pair state (ibv_qp_state), numbered as in libibverbs.
type QPState uint8

// QP states.
const (
	QPSReset QPState = 0
	QPSInit  QPState = 1
	QPSRTR   QPState = 2
	QPSRTS   QPState = 3
	QPSSQD   QPState = 4
	QPSSQE   QPState = 5
	QPSErr   QPState = 6
)

func (s QPState) String() string {
	switch s {
	case QPSReset:
		return "RESET"
	case QPSInit:
		return "INIT"
	case QPSRTR:
		return "RTR"
	case QPSRTS:
		return "RTS"
	case QPSSQD:
		return "SQD"
	case QPSSQE:
		return "SQE"
	case QPSErr:
		return "ERR"
	}
	return fmt.Sprintf("QPState(%d)", uint8(s))
}

// wcOpcodeOf is the completion opcode a requester reports for o.
func wcOpcodeOf(o Opcode) WCOpcode {
	switch o {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return WCRDMAWrite
	case WRSend, WRSendWithImm:
		return WCSend
	case WRRDMARead:
		return WCRDMARead
	case WRAtomicCmpAndSwp:
		return WCCompSwap
	default:
		return WCFetchAdd
	}
}

// WCOpcode says what a completion completed (ibv_wc_opcode).
type WCOpcode uint8

// Completion opcodes, numbered as in libibverbs.
const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCCompSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return fmt.Sprintf("WCOpcode(%d)", uint8(o))
}

// WCFlags qualify a completion (ibv_wc_flags).
type WCFlags uint8

// Completion flags.
const (
	// WCWithImm says WC.Imm holds immediate data.
	WCWithImm WCFlags = 1 << 1
)

// PortState is a port's logical state (ibv_port_state).
type PortState uint8

// Port states.
const (
	PortNop    PortState = 0
	PortDown   PortState = 1
	PortInit   PortState = 2
	PortArmed  PortState = 3
	PortActive PortState = 4
)

func (s PortState) String() string {
	switch s {
	case PortNop:
		return "PORT_NOP"
	case PortDown:
		return "PORT_DOWN"
	case PortInit:
		return "PORT_INIT"
	case PortArmed:
		return "PORT_ARMED"
	case PortActive:
		return "PORT_ACTIVE"
	}
	return fmt.Sprintf("PortState(%d)", uint8(s))
}

// AtomicCap is a device's atomic capability (ibv_atomic_cap).
type AtomicCap uint8

// Atomic capabilities.
const (
	AtomicNone AtomicCap = 0
	// AtomicHCA: atomic with respect to other atomics through this device.
	AtomicHCA AtomicCap = 1
	// AtomicGlob: atomic with respect to the CPU's atomics on the same memory too.
	AtomicGlob AtomicCap = 2
)

func (a AtomicCap) String() string {
	switch a {
	case AtomicNone:
		return "ATOMIC_NONE"
	case AtomicHCA:
		return "ATOMIC_HCA"
	case AtomicGlob:
		return "ATOMIC_GLOB"
	}
	return fmt.Sprintf("AtomicCap(%d)", uint8(a))
}
