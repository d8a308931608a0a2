package verbs

import (
	"fmt"
	"strings"
)

// Access is a set of memory-region and QP access rights (ibv_access_flags).
type Access uint32

// Access rights. Remote write and remote atomic require local write, as in
// libibverbs.
const (
	AccessLocalWrite   Access = 1 << 0
	AccessRemoteWrite  Access = 1 << 1
	AccessRemoteRead   Access = 1 << 2
	AccessRemoteAtomic Access = 1 << 3

	accessAll = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
)

func (a Access) String() string {
	if a == 0 {
		return "none"
	}
	var parts []string
	names := []struct {
		f Access
		n string
	}{{AccessLocalWrite, "LOCAL_WRITE"}, {AccessRemoteWrite, "REMOTE_WRITE"}, {AccessRemoteRead, "REMOTE_READ"}, {AccessRemoteAtomic, "REMOTE_ATOMIC"}}
	for _, n := range names {
		if a&n.f != 0 {
			parts = append(parts, n.n)
		}
	}
	if rest := a &^ accessAll; rest != 0 {
		parts = append(parts, fmt.Sprintf("%#x", uint32(rest)))
	}
	return strings.Join(parts, "|")
}

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

// Opcode is a send work-request opcode (ibv_wr_opcode).
type Opcode uint8

// Send work-request opcodes, numbered as in libibverbs.
const (
	WRRDMAWrite         Opcode = 0
	WRRDMAWriteWithImm  Opcode = 1
	WRSend              Opcode = 2
	WRSendWithImm       Opcode = 3
	WRRDMARead          Opcode = 4
	WRAtomicCmpAndSwp   Opcode = 5
	WRAtomicFetchAndAdd Opcode = 6
)

func (o Opcode) String() string {
	switch o {
	case WRRDMAWrite:
		return "RDMA_WRITE"
	case WRRDMAWriteWithImm:
		return "RDMA_WRITE_WITH_IMM"
	case WRSend:
		return "SEND"
	case WRSendWithImm:
		return "SEND_WITH_IMM"
	case WRRDMARead:
		return "RDMA_READ"
	case WRAtomicCmpAndSwp:
		return "ATOMIC_CMP_AND_SWP"
	case WRAtomicFetchAndAdd:
		return "ATOMIC_FETCH_AND_ADD"
	}
	return fmt.Sprintf("Opcode(%d)", uint8(o))
}

func (o Opcode) valid() bool    { return o <= WRAtomicFetchAndAdd }
func (o Opcode) isAtomic() bool { return o == WRAtomicCmpAndSwp || o == WRAtomicFetchAndAdd }
func (o Opcode) hasImm() bool   { return o == WRSendWithImm || o == WRRDMAWriteWithImm }

// wcOpcode is the completion opcode a requester reports for o.
func (o Opcode) wcOpcode() WCOpcode {
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

// SendFlags modify a send work request (ibv_send_flags).
type SendFlags uint8

// Send flags.
const (
	// SendFence waits for every earlier RDMA READ and atomic on the QP to
	// complete before this request starts.
	SendFence SendFlags = 1 << 0
	// SendSignaled asks for a completion on success (errors always complete).
	SendSignaled SendFlags = 1 << 1
	// SendSolicited sets the solicited-event bit for the receiver.
	SendSolicited SendFlags = 1 << 2
	// SendInline copies the payload at post time; the SGEs need no lkey and
	// the buffers may be reused as soon as PostSend returns.
	SendInline SendFlags = 1 << 3
)

// WCStatus is a completion status (ibv_wc_status), numbered as in libibverbs.
type WCStatus uint8

// Completion statuses.
const (
	WCSuccess        WCStatus = 0
	WCLocLenErr      WCStatus = 1
	WCLocQPOpErr     WCStatus = 2
	WCLocEECOpErr    WCStatus = 3
	WCLocProtErr     WCStatus = 4
	WCWRFlushErr     WCStatus = 5
	WCMWBindErr      WCStatus = 6
	WCBadRespErr     WCStatus = 7
	WCLocAccessErr   WCStatus = 8
	WCRemInvReqErr   WCStatus = 9
	WCRemAccessErr   WCStatus = 10
	WCRemOpErr       WCStatus = 11
	WCRetryExcErr    WCStatus = 12
	WCRNRRetryExcErr WCStatus = 13
	WCLocRDDViolErr  WCStatus = 14
	WCRemInvRDReqErr WCStatus = 15
	WCRemAbortErr    WCStatus = 16
	WCInvEECNErr     WCStatus = 17
	WCInvEECStateErr WCStatus = 18
	WCFatalErr       WCStatus = 19
	WCRespTimeoutErr WCStatus = 20
	WCGeneralErr     WCStatus = 21
)

var wcStatusNames = [...]string{
	"SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR", "LOC_PROT_ERR",
	"WR_FLUSH_ERR", "MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR", "REM_INV_REQ_ERR",
	"REM_ACCESS_ERR", "REM_OP_ERR", "RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR",
	"REM_INV_RD_REQ_ERR", "REM_ABORT_ERR", "INV_EECN_ERR", "INV_EEC_STATE_ERR", "FATAL_ERR",
	"RESP_TIMEOUT_ERR", "GENERAL_ERR",
}

// String gives the libibverbs enum suffix, e.g. "REM_ACCESS_ERR".
func (s WCStatus) String() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return fmt.Sprintf("WCStatus(%d)", uint8(s))
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
