package verbs

import (
	"time"

	"github.com/ibex-rdma/ibex/ib"
)

// The numbers below are declared once, in package ib, which wire and rc
// share; verbs gives them their libibverbs names.

// Access is a set of memory-region and QP access rights (ibv_access_flags).
// Remote write and remote atomic require local write, as in libibverbs.
type Access = ib.Access

// Access rights.
const (
	AccessLocalWrite   = ib.AccessLocalWrite
	AccessRemoteWrite  = ib.AccessRemoteWrite
	AccessRemoteRead   = ib.AccessRemoteRead
	AccessRemoteAtomic = ib.AccessRemoteAtomic

	accessAll = ib.AccessAll
)

// Opcode is a send work-request opcode (ibv_wr_opcode).
type Opcode = ib.WROpcode

// Send work-request opcodes, numbered as in libibverbs.
const (
	WRRDMAWrite         = ib.WRRDMAWrite
	WRRDMAWriteWithImm  = ib.WRRDMAWriteWithImm
	WRSend              = ib.WRSend
	WRSendWithImm       = ib.WRSendWithImm
	WRRDMARead          = ib.WRRDMARead
	WRAtomicCmpAndSwp   = ib.WRAtomicCmpAndSwp
	WRAtomicFetchAndAdd = ib.WRAtomicFetchAndAdd
)

// SendFlags modify a send work request (ibv_send_flags).
type SendFlags = ib.SendFlags

// Send flags.
const (
	// SendFence waits for every earlier RDMA READ and atomic on the QP to
	// complete before this request starts.
	SendFence = ib.SendFence
	// SendSignaled asks for a completion on success (errors always complete).
	SendSignaled = ib.SendSignaled
	// SendSolicited sets the solicited-event bit for the receiver.
	SendSolicited = ib.SendSolicited
	// SendInline copies the payload at post time; the SGEs need no lkey and
	// the buffers may be reused as soon as PostSend returns.
	SendInline = ib.SendInline
)

// WCStatus is a completion status (ibv_wc_status), numbered as in
// libibverbs; String gives the enum suffix, e.g. "REM_ACCESS_ERR".
type WCStatus = ib.WCStatus

// Completion statuses.
const (
	WCSuccess        = ib.WCSuccess
	WCLocLenErr      = ib.WCLocLenErr
	WCLocQPOpErr     = ib.WCLocQPOpErr
	WCLocEECOpErr    = ib.WCLocEECOpErr
	WCLocProtErr     = ib.WCLocProtErr
	WCWRFlushErr     = ib.WCWRFlushErr
	WCMWBindErr      = ib.WCMWBindErr
	WCBadRespErr     = ib.WCBadRespErr
	WCLocAccessErr   = ib.WCLocAccessErr
	WCRemInvReqErr   = ib.WCRemInvReqErr
	WCRemAccessErr   = ib.WCRemAccessErr
	WCRemOpErr       = ib.WCRemOpErr
	WCRetryExcErr    = ib.WCRetryExcErr
	WCRNRRetryExcErr = ib.WCRNRRetryExcErr
	WCLocRDDViolErr  = ib.WCLocRDDViolErr
	WCRemInvRDReqErr = ib.WCRemInvRDReqErr
	WCRemAbortErr    = ib.WCRemAbortErr
	WCInvEECNErr     = ib.WCInvEECNErr
	WCInvEECStateErr = ib.WCInvEECStateErr
	WCFatalErr       = ib.WCFatalErr
	WCRespTimeoutErr = ib.WCRespTimeoutErr
	WCGeneralErr     = ib.WCGeneralErr
)

// RNRDelay returns the wait an RNR NAK timer code asks for (IBA Table 45).
func RNRDelay(code uint8) time.Duration { return ib.RNRTimeout(code) }

// AckTimeout returns the local ACK timeout for a QP timeout attribute:
// 4.096 µs × 2^timeout; 0 means wait forever and returns 0.
func AckTimeout(timeout uint8) time.Duration { return ib.AckTimeout(timeout) }
