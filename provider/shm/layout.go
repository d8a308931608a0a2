package shm

import (
	"sync/atomic"
	"unsafe"
)

// Shared memory layout. Every node (one opened shm device: one Context)
// owns one memfd, its pool, mapped by itself and by every peer node it
// talks to. Offsets below are from the start of the pool. Shared memory
// holds integers and offsets only, never Go pointers. A process writes
// only into its own pool, with two exceptions guarded by a protocol: RDMA
// WRITE and atomics into a peer's registered memory (the key table entry
// and the access word, see mr.go), and a peer node's ready bits and
// doorbell.
//
//	0      node header: magic, version, pid, node number
//	64     doorbell (futex word), on its own cache line
//	128    sleeping flag: the node's progress loop is (about to be) asleep
//	192    last poll: when an application thread last drove progress
//	4096   ready bits, one per QP slot: "look at this QP's peer half"
//	8192   key table: maxMR entries of 64 bytes
//	1 MiB  allocatable: QP halves and AllocMR memory
const (
	offMagic    = 0
	offPid      = 8
	offNode     = 12
	offDoorbell = 64
	offSleeping = 128
	offPolled   = 192 // CLOCK_MONOTONIC ns of the last application poll (Progress)
	offReady    = 4096
	offKeys     = 8192
	poolStart   = 1 << 20

	maxQP    = 4096
	maxMR    = 8192
	keySize  = 64
	magic    = 0x314d485358454249 // "IBEXSHM1" little-endian
	pageSize = 4096
)

// Key table entry, written only by the owner node.
//
//	0  state: gen<<1 | live; readers check it before and after reading
//	   the fields (a seqlock) and again when they finish an access
//	8  rkey, 12 pd id, 16 access, 20 kind, 24 va (the region's name:
//	its address, or its iova), 32 len, 40 where its bytes are: the offset
//	in the owner's pool (kindPool) or the owner's process address
//	(kindPVM)
const (
	keyState  = 0
	keyRKey   = 8
	keyPD     = 12
	keyAccess = 16
	keyKind   = 20
	keyVA     = 24
	keyLen    = 32
	keyPool   = 40

	kindPool = 1 // in the owner's pool: peers copy into their mapping
	kindPVM  = 2 // ordinary memory: peers use process_vm_readv/writev
)

// A QP half is the part of one connected QP pair that one side owns: its
// published state, its outgoing ring, and its consumer position in the
// peer's ring. Allocated in the owner's pool at RTR.
//
//	0    gen (nonzero while the half is valid; 0 once retired)
//	8    owner QPN, 12 peer QPN, 16 owner's QP slot, 20 owner's PD id
//	24   owner QP state, 28 access flags, 32 max_dest_rd_atomic,
//	36   min_rnr_timer, 40 ring slots, 44 slot size
//	64   recvPosted: receives posted since RESET (credits granted)
//	128  acked: peer messages fully processed; 136 errSeq; 144 errStatus
//	192  tail: slots of the peer's ring consumed
//	256  head: slots of this ring produced
//	320  access word: the peer MR entry this QP is touching (mr.go)
//	512  atomic results, indexed by message number mod resultSlots
//	4096 ring slots
const (
	hGen       = 0
	hOwnerQPN  = 8
	hPeerQPN   = 12
	hSlot      = 16
	hPD        = 20
	hState     = 24
	hAccess    = 28
	hMaxDest   = 32
	hMinRNR    = 36
	hSlots     = 40
	hSlotSize  = 44
	hRecvPost  = 64
	hAcked     = 128
	hErrSeq    = 136
	hErrStatus = 144
	hTail      = 192
	hHead      = 256
	hAccessing = 320
	hResults   = 512
	hRing      = 4096

	resultSlots = 64
	ringSlots   = 64
	slotSize    = 8192
	slotHdr     = 64
	slotPayload = slotSize - slotHdr
	halfSize    = hRing + ringSlots*slotSize
)

// Ring slot header.
//
//	0 op, 1 flags (first/last fragment), 4 payload length, 8 message
//	number, 16 message length, 24 imm, 28 atomic opcode, 32 remote
//	address, 40 rkey, 48 compare/add, 56 swap
const (
	sOp     = 0
	sFlags  = 1
	sLen    = 4
	sSeq    = 8
	sTotal  = 16
	sImm    = 24
	sAtomOp = 28
	sRAddr  = 32
	sRKey   = 40
	sCmp    = 48
	sSwap   = 56

	flagFirst = 1
	flagLast  = 2
	flagImm   = 4
)

// Message kinds in a ring.
const (
	msgSend     = 1 // SEND / SEND_WITH_IMM payload, in fragments
	msgWriteImm = 2 // the data went one-sided; consume a receive
	msgAtomic   = 3 // an atomic on ordinary memory, executed by the target
	msgReqErr   = 4 // a one-sided request failed at the responder's checks
)

// Statuses a responder reports in errStatus (and a msgReqErr carries).
const (
	stOK        = 0
	stInvReq    = 1 // REM_INV_REQ_ERR at the requester
	stAccess    = 2 // REM_ACCESS_ERR
	stRemOp     = 3 // REM_OP_ERR
	stProtocol  = 4 // the peer broke the protocol (a bug or corruption)
	stStatusMax = 4
)

// mem is a view of shared memory with atomic and plain accessors. Offsets
// are trusted (computed by this package); values read are not.
type mem []byte

func (m mem) u32(off uint64) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&m[off]))
}

func (m mem) u64(off uint64) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&m[off]))
}
