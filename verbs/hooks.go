package verbs

import (
	"github.com/ibex-rdma/ibex/verbs/internal/hook"
	"github.com/ibex-rdma/ibex/verbs/internal/wq"
)

// providerSide is what verbs/driver calls on a provider's behalf. Its
// methods are the provider hooks; they are not methods of QP, PD, MR or
// Context, so an application cannot reach them. verbs/driver documents
// each on the handle that wraps it.
type providerSide struct{}

func init() {
	hook.Verbs = providerSide{}
	hook.ExecuteLocal = executeLocal
	hook.QPDestroyed = (*QP).destroyedFast
}

func (providerSide) Register(p any) { register(p.(providerBinding)) }

func (providerSide) PostEvent(c *Context, ev AsyncEvent) { c.postEvent(ev) }

func (providerSide) CompleteSend(qp *QP, ssn uint64, st WCStatus, byteLen uint32, cause error) {
	qp.completeSend(ssn, st, byteLen, cause)
}

func (providerSide) Fail(qp *QP, cause error, ev AsyncEventType, post bool) {
	qp.fail(cause, ev, post)
}

func (providerSide) RecvBegin(qp *QP) (uint64, bool) { return qp.recvBegin() }

func (providerSide) RecvPlace(qp *QP, rsn uint64, off uint64, src []byte) WCStatus {
	return qp.recvPlace(rsn, off, src)
}

func (providerSide) RecvComplete(qp *QP, rsn uint64, st WCStatus, byteLen uint32, imm uint32, hasImm, write bool, srcQP uint32) bool {
	return qp.recvComplete(rsn, st, byteLen, imm, hasImm, write, srcQP)
}

func (providerSide) RecvPosted(qp *QP) uint64 { return qp.recvPosted() }

func (providerSide) AddStats(qp *QP, d QPStats) { qp.addStats(d) }

func (providerSide) PDID(pd *PD) uint32 { return pd.id }

func (providerSide) RemoteCheck(pd *PD, rkey uint32, va uint64, n uint64, need Access) error {
	return pd.remoteCheck(rkey, va, n, need)
}

func (providerSide) RemoteWrite(pd *PD, rkey uint32, va uint64, src []byte) bool {
	return pd.remoteWrite(rkey, va, src)
}

func (providerSide) RemoteRead(pd *PD, rkey uint32, va uint64, dst []byte) bool {
	return pd.remoteRead(rkey, va, dst)
}

func (providerSide) RemoteAtomic(pd *PD, rkey uint32, va uint64, op Opcode, compareAdd, swap uint64) (uint64, bool) {
	return pd.remoteAtomic(rkey, va, op, compareAdd, swap)
}

func (providerSide) Region(mr *MR) *wq.Region { return &mr.reg }
