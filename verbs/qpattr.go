package verbs

import (
	"fmt"
	"math/bits"
	"strings"
)

// AttrMask selects the QPAttr fields a Modify call sets (ibv_qp_attr_mask),
// with libibverbs' bit values.
type AttrMask uint32

// Attribute mask bits.
const (
	AttrState            AttrMask = 1 << 0
	AttrCurState         AttrMask = 1 << 1
	AttrEnSQDAsyncNotify AttrMask = 1 << 2
	AttrAccessFlags      AttrMask = 1 << 3
	AttrPKeyIndex        AttrMask = 1 << 4
	AttrPort             AttrMask = 1 << 5
	AttrAV               AttrMask = 1 << 7
	AttrPathMTU          AttrMask = 1 << 8
	AttrTimeout          AttrMask = 1 << 9
	AttrRetryCnt         AttrMask = 1 << 10
	AttrRNRRetry         AttrMask = 1 << 11
	AttrRQPSN            AttrMask = 1 << 12
	AttrMaxQPRdAtomic    AttrMask = 1 << 13
	AttrMinRNRTimer      AttrMask = 1 << 15
	AttrSQPSN            AttrMask = 1 << 16
	AttrMaxDestRdAtomic  AttrMask = 1 << 17
	AttrDestQPN          AttrMask = 1 << 20

	attrKnown = AttrState | AttrCurState | AttrEnSQDAsyncNotify | AttrAccessFlags | AttrPKeyIndex |
		AttrPort | AttrAV | AttrPathMTU | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrRQPSN |
		AttrMaxQPRdAtomic | AttrMinRNRTimer | AttrSQPSN | AttrMaxDestRdAtomic | AttrDestQPN
)

var attrNames = map[AttrMask]string{
	AttrState: "STATE", AttrCurState: "CUR_STATE", AttrEnSQDAsyncNotify: "EN_SQD_ASYNC_NOTIFY",
	AttrAccessFlags: "ACCESS_FLAGS", AttrPKeyIndex: "PKEY_INDEX", AttrPort: "PORT", AttrAV: "AV",
	AttrPathMTU: "PATH_MTU", AttrTimeout: "TIMEOUT", AttrRetryCnt: "RETRY_CNT", AttrRNRRetry: "RNR_RETRY",
	AttrRQPSN: "RQ_PSN", AttrMaxQPRdAtomic: "MAX_QP_RD_ATOMIC", AttrMinRNRTimer: "MIN_RNR_TIMER",
	AttrSQPSN: "SQ_PSN", AttrMaxDestRdAtomic: "MAX_DEST_RD_ATOMIC", AttrDestQPN: "DEST_QPN",
}

func (m AttrMask) String() string {
	if m == 0 {
		return "none"
	}
	var parts []string
	for v := uint32(m); v != 0; v &= v - 1 {
		bit := AttrMask(1 << bits.TrailingZeros32(v))
		if n, ok := attrNames[bit]; ok {
			parts = append(parts, n)
		} else {
			parts = append(parts, fmt.Sprintf("%#x", uint32(bit)))
		}
	}
	return strings.Join(parts, "|")
}

// AH is an address handle's attributes (ibv_ah_attr) for RoCE: the peer's GID.
type AH struct {
	DGID      GID
	DLID      uint16
	SL        uint8
	SGIDIndex uint8
	HopLimit  uint8
	PortNum   uint8
}

// QPAttr are a QP's modifiable attributes (ibv_qp_attr).
type QPAttr struct {
	State            QPState
	CurState         QPState
	EnSQDAsyncNotify bool
	AccessFlags      Access // remote rights granted to the peer: REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC
	PKeyIndex        uint16
	Port             uint8
	AH               AH
	PathMTU          MTU
	Timeout          uint8 // local ACK timeout: 4.096 µs × 2^Timeout; 0 waits forever
	RetryCnt         uint8 // 0..7 retries after a timeout
	RNRRetry         uint8 // 0..6 retries after an RNR NAK; 7 retries forever
	RQPSN            uint32
	SQPSN            uint32
	MaxQPRdAtomic    uint8 // outstanding READ/atomic as requester
	MaxDestRdAtomic  uint8 // READ/atomic accepted as responder
	MinRNRTimer      uint8 // RNR NAK timer code sent to a peer that finds no receive (1 = 10 µs ... 31, 0 = 655 ms)
	DestQPN          uint32
}

type transition struct{ req, opt AttrMask }

// rcTransitions is the RC column of the IBA modify-QP table (the kernel's
// qp_state_table), restricted to the attributes ibex implements. Moves to
// RESET and to ERR are legal from every state and take no attributes.
var rcTransitions = map[[2]QPState]transition{
	{QPSReset, QPSInit}: {req: AttrPKeyIndex | AttrPort | AttrAccessFlags},
	{QPSInit, QPSInit}:  {opt: AttrPKeyIndex | AttrPort | AttrAccessFlags},
	{QPSInit, QPSRTR}: {req: AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer,
		opt: AttrPKeyIndex | AttrAccessFlags},
	{QPSRTR, QPSRTS}: {req: AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic,
		opt: AttrCurState | AttrAccessFlags | AttrMinRNRTimer},
	{QPSRTS, QPSRTS}: {opt: AttrCurState | AttrAccessFlags | AttrMinRNRTimer},
	{QPSRTS, QPSSQD}: {opt: AttrEnSQDAsyncNotify},
	{QPSSQD, QPSRTS}: {opt: AttrCurState | AttrAccessFlags | AttrMinRNRTimer},
	{QPSSQD, QPSSQD}: {opt: AttrAV | AttrPKeyIndex | AttrAccessFlags | AttrMinRNRTimer | AttrMaxQPRdAtomic |
		AttrMaxDestRdAtomic | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrPathMTU},
}

// checkTransition validates a Modify's state change and mask against the
// table and names what is wrong.
func checkTransition(from, to QPState, mask AttrMask) error {
	if mask&^attrKnown != 0 {
		return errorf(ErrInvalidArgument, "unsupported attribute bits %v", mask&^attrKnown)
	}
	if to > QPSErr {
		return errorf(ErrInvalidArgument, "unknown target state %d", uint8(to))
	}
	if to == QPSReset || to == QPSErr {
		if extra := mask &^ (AttrState | AttrCurState); extra != 0 {
			return errorf(ErrInvalidArgument, "%v→%v: attributes %v not allowed", from, to, extra)
		}
		return nil
	}
	if to == QPSSQE {
		return errorf(ErrInvalidState, "%v→SQE: SQE is for UC/UD QPs; an RC send-queue error moves the QP to ERR", from)
	}
	t, ok := rcTransitions[[2]QPState{from, to}]
	if !ok {
		var legal []string
		for k := range rcTransitions {
			if k[0] == from {
				legal = append(legal, k[1].String())
			}
		}
		legal = append(legal, "RESET", "ERR")
		return errorf(ErrInvalidState, "%v→%v: illegal transition (from %v: %s)", from, to, from, strings.Join(sortStates(legal), ", "))
	}
	given := mask &^ AttrState
	if missing := t.req &^ given; missing != 0 {
		return errorf(ErrInvalidArgument, "%v→%v: missing required attributes %v", from, to, missing)
	}
	if extra := given &^ (t.req | t.opt); extra != 0 {
		return errorf(ErrInvalidArgument, "%v→%v: attributes %v not allowed in this transition", from, to, extra)
	}
	return nil
}

func sortStates(s []string) []string {
	order := map[string]int{"RESET": 0, "INIT": 1, "RTR": 2, "RTS": 3, "SQD": 4, "SQE": 5, "ERR": 6}
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && order[s[j]] < order[s[j-1]]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s
}

// checkValues validates the values of the attributes in mask against the
// device's limits.
func checkValues(a *QPAttr, mask AttrMask, dev *DeviceAttr) error {
	const psnMax = 1<<24 - 1
	switch {
	case mask&AttrAccessFlags != 0 && a.AccessFlags&^accessAll != 0:
		return errorf(ErrInvalidArgument, "access_flags: unknown bits %#x", uint32(a.AccessFlags&^accessAll))
	case mask&AttrAccessFlags != 0 && a.AccessFlags&AccessRemoteAtomic != 0 && dev.AtomicCap == AtomicNone:
		return errorf(ErrUnsupported, "access_flags: REMOTE_ATOMIC: device has no atomics")
	case mask&AttrPort != 0 && (a.Port < 1 || a.Port > dev.PhysPortCnt):
		return errorf(ErrInvalidArgument, "port_num %d: device has ports 1..%d", a.Port, dev.PhysPortCnt)
	case mask&AttrPathMTU != 0 && !a.PathMTU.Valid():
		return errorf(ErrInvalidArgument, "path_mtu %d: must be 1 (256) .. 5 (4096)", uint8(a.PathMTU))
	case mask&AttrTimeout != 0 && a.Timeout > 31:
		return errorf(ErrInvalidArgument, "timeout %d: must be 0..31", a.Timeout)
	case mask&AttrRetryCnt != 0 && a.RetryCnt > 7:
		return errorf(ErrInvalidArgument, "retry_cnt %d: must be 0..7", a.RetryCnt)
	case mask&AttrRNRRetry != 0 && a.RNRRetry > 7:
		return errorf(ErrInvalidArgument, "rnr_retry %d: must be 0..7 (7 = infinite)", a.RNRRetry)
	case mask&AttrMinRNRTimer != 0 && a.MinRNRTimer > 31:
		return errorf(ErrInvalidArgument, "min_rnr_timer %d: must be 0..31", a.MinRNRTimer)
	case mask&AttrRQPSN != 0 && a.RQPSN > psnMax:
		return errorf(ErrInvalidArgument, "rq_psn %#x: PSNs are 24 bits", a.RQPSN)
	case mask&AttrSQPSN != 0 && a.SQPSN > psnMax:
		return errorf(ErrInvalidArgument, "sq_psn %#x: PSNs are 24 bits", a.SQPSN)
	case mask&AttrDestQPN != 0 && a.DestQPN > psnMax:
		return errorf(ErrInvalidArgument, "dest_qp_num %#x: QPNs are 24 bits", a.DestQPN)
	case mask&AttrMaxQPRdAtomic != 0 && int(a.MaxQPRdAtomic) > dev.MaxQPInitRdAtom:
		return errorf(ErrInvalidArgument, "max_rd_atomic %d: device allows %d", a.MaxQPRdAtomic, dev.MaxQPInitRdAtom)
	case mask&AttrMaxDestRdAtomic != 0 && int(a.MaxDestRdAtomic) > dev.MaxQPRdAtom:
		return errorf(ErrInvalidArgument, "max_dest_rd_atomic %d: device allows %d", a.MaxDestRdAtomic, dev.MaxQPRdAtom)
	case mask&AttrAV != 0 && a.AH.PortNum > dev.PhysPortCnt:
		return errorf(ErrInvalidArgument, "ah_attr.port_num %d: device has ports 1..%d", a.AH.PortNum, dev.PhysPortCnt)
	}
	return nil
}

// apply copies the attributes in mask from src to dst.
func (dst *QPAttr) apply(src *QPAttr, mask AttrMask) {
	if mask&AttrEnSQDAsyncNotify != 0 {
		dst.EnSQDAsyncNotify = src.EnSQDAsyncNotify
	}
	if mask&AttrAccessFlags != 0 {
		dst.AccessFlags = src.AccessFlags
	}
	if mask&AttrPKeyIndex != 0 {
		dst.PKeyIndex = src.PKeyIndex
	}
	if mask&AttrPort != 0 {
		dst.Port = src.Port
	}
	if mask&AttrAV != 0 {
		dst.AH = src.AH
	}
	if mask&AttrPathMTU != 0 {
		dst.PathMTU = src.PathMTU
	}
	if mask&AttrTimeout != 0 {
		dst.Timeout = src.Timeout
	}
	if mask&AttrRetryCnt != 0 {
		dst.RetryCnt = src.RetryCnt
	}
	if mask&AttrRNRRetry != 0 {
		dst.RNRRetry = src.RNRRetry
	}
	if mask&AttrRQPSN != 0 {
		dst.RQPSN = src.RQPSN
	}
	if mask&AttrSQPSN != 0 {
		dst.SQPSN = src.SQPSN
	}
	if mask&AttrMaxQPRdAtomic != 0 {
		dst.MaxQPRdAtomic = src.MaxQPRdAtomic
	}
	if mask&AttrMaxDestRdAtomic != 0 {
		dst.MaxDestRdAtomic = src.MaxDestRdAtomic
	}
	if mask&AttrMinRNRTimer != 0 {
		dst.MinRNRTimer = src.MinRNRTimer
	}
	if mask&AttrDestQPN != 0 {
		dst.DestQPN = src.DestQPN
	}
}
