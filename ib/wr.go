package ib

import "fmt"

// WROpcode is a send work-request opcode (ibv_wr_opcode).
type WROpcode uint8

// Send work-request opcodes, numbered as in libibverbs.
const (
	WRRDMAWrite         WROpcode = 0
	WRRDMAWriteWithImm  WROpcode = 1
	WRSend              WROpcode = 2
	WRSendWithImm       WROpcode = 3
	WRRDMARead          WROpcode = 4
	WRAtomicCmpAndSwp   WROpcode = 5
	WRAtomicFetchAndAdd WROpcode = 6
)

func (o WROpcode) String() string {
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
	return fmt.Sprintf("WROpcode(%d)", uint8(o))
}

// Valid reports whether o is one of the seven RC send opcodes.
func (o WROpcode) Valid() bool { return o <= WRAtomicFetchAndAdd }

// IsAtomic reports whether o is compare-and-swap or fetch-and-add.
func (o WROpcode) IsAtomic() bool { return o == WRAtomicCmpAndSwp || o == WRAtomicFetchAndAdd }

// IsRdAtomic reports whether o takes a responder resource (READ or atomic),
// what max_rd_atomic counts.
func (o WROpcode) IsRdAtomic() bool { return o == WRRDMARead || o.IsAtomic() }

// HasImm reports whether o carries immediate data.
func (o WROpcode) HasImm() bool { return o == WRSendWithImm || o == WRRDMAWriteWithImm }

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
