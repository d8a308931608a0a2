package rctest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/rc"
)

// Region is memory the peer may access: rkey, the bytes [Addr, Addr+Len)
// and the rights granted.
type Region struct {
	RKey   uint32
	Addr   uint64
	Len    uint64
	Access ib.Access
}

// SendCompletion is one Host.SendComplete call.
type SendCompletion struct {
	ID     uint64
	Status ib.WCStatus
	Len    uint32
	Cause  error
}

// RecvCompletion is one Host.RecvComplete call, with the receive's ID.
type RecvCompletion struct {
	ID       uint64
	Status   ib.WCStatus
	Len, Imm uint32
	HasImm   bool
	Write    bool // taken by an RDMA WRITE with immediate
}

// Host is an rc.Host over one flat memory: address Base+i is Mem[i]. It
// holds the local buffers of posted requests, a receive queue and the
// regions the peer may access, logs completions in Sends and Recvs, and
// checks every call against the Host contract and the state it knows:
//
//   - send completions: each request exactly once, in posting order, none
//     after the engine stopped; success without a cause and with the
//     request's length, an error with one;
//   - local data: Payload and ReadResponse within the request's length,
//     for a SEND or WRITE and a READ respectively, AtomicResult for an
//     atomic, all for an outstanding request;
//   - remote access: RemoteWrite inside the range the last write
//     RemoteCheck accepted, RemoteRead inside one of the last 64 ranges a
//     read RemoteCheck accepted, RemoteAtomic at the 8 bytes the last atomic
//     RemoteCheck accepted, always inside a registered region with the
//     right access;
//   - receives: RecvBegin only with none current, RecvPlace and
//     RecvComplete only with one;
//   - Fatal at most once, never after an error completion (which already
//     stopped the engine).
//
// Err returns the first breach. A Host is not safe for concurrent use; the
// engine calls it synchronously.
type Host struct {
	Name  string
	Base  uint64
	Mem   []byte
	Sends []SendCompletion
	Recvs []RecvCompletion
	// Stop is why the engine stopped: the cause given to Fatal or with an
	// error completion; nil while it runs.
	Stop error

	pend    []pending      // outstanding requests, in posting order
	byID    map[uint64]int // request ID to its posting number
	done    int            // requests completed: pend[0] is posting number done
	regions []Region
	gone    map[uint32]bool // deregistered rkeys
	write   access          // the last write RemoteCheck accepted
	atomic  access          // the last atomic RemoteCheck accepted
	reads   [64]access      // the last read RemoteChecks accepted, a ring
	nreads  int
	recvQ   []recvBuf
	recvCur bool // recvQ[0] is current (RecvBegin)
	err     error
}

type pending struct {
	req   rc.Request
	local uint64
}

type access struct {
	rkey   uint32
	va, n  uint64
	active bool
}

type recvBuf struct {
	id   uint64
	addr uint64
	size uint32
}

// NewHost returns a host with size bytes of memory at base.
func NewHost(name string, base uint64, size int) *Host {
	return &Host{Name: name, Base: base, Mem: make([]byte, size), byID: map[uint64]int{}, gone: map[uint32]bool{}}
}

// Bytes returns the n bytes of memory at addr, aliasing Mem.
func (h *Host) Bytes(addr uint64, n int) []byte {
	off := addr - h.Base
	return h.Mem[off : off+uint64(n)]
}

// Register lets the peer access r.
func (h *Host) Register(r Region) {
	delete(h.gone, r.RKey)
	h.regions = append(h.regions, r)
}

// Deregister revokes rkey: RemoteCheck refuses it from now on and
// accesses the engine already checked fail (false), as when an MR is
// deregistered under a message in progress.
func (h *Host) Deregister(rkey uint32) {
	h.gone[rkey] = true
	h.regions = slices.DeleteFunc(h.regions, func(r Region) bool { return r.RKey == rkey })
}

// Post records that req's local data (its source, its READ sink or its
// atomic's 8-byte result) is at local, then posts it to c.
func (h *Host) Post(c *rc.Conn, req rc.Request, local uint64) error {
	if _, dup := h.byID[req.ID]; dup {
		return fmt.Errorf("rctest: %s: request %d is outstanding already", h.Name, req.ID)
	}
	h.byID[req.ID] = h.done + len(h.pend)
	h.pend = append(h.pend, pending{req: req, local: local})
	if err := c.Post(req); err != nil {
		h.pend = h.pend[:len(h.pend)-1]
		delete(h.byID, req.ID)
		return err
	}
	return nil
}

// Outstanding returns how many posted requests have not completed.
func (h *Host) Outstanding() int { return len(h.pend) }

// PostRecv queues a receive of size bytes at addr.
func (h *Host) PostRecv(id, addr uint64, size uint32) {
	h.recvQ = append(h.recvQ, recvBuf{id: id, addr: addr, size: size})
}

// RecvsPosted returns how many receives are queued, the current one included.
func (h *Host) RecvsPosted() int { return len(h.recvQ) }

// Err returns the first breach of the Host contract, or nil.
func (h *Host) Err() error { return h.err }

func (h *Host) breach(format string, args ...any) {
	if h.err == nil {
		h.err = fmt.Errorf("rctest: host %s: "+format, append([]any{h.Name}, args...)...)
	}
}

// local returns the memory at addr+off for n bytes, or nil if it is
// outside Mem.
func (h *Host) local(addr uint64, off uint32, n int) []byte {
	a := addr + uint64(off)
	if a < h.Base || a-h.Base > uint64(len(h.Mem)) || uint64(len(h.Mem))-(a-h.Base) < uint64(n) {
		return nil
	}
	return h.Mem[a-h.Base : a-h.Base+uint64(n)]
}

func (h *Host) outstanding(call string, id uint64) *pending {
	i, ok := h.byID[id]
	if !ok {
		h.breach("%s(%d): no such request outstanding", call, id)
		return nil
	}
	return &h.pend[i-h.done]
}

// Payload implements rc.Host.
func (h *Host) Payload(id uint64, off uint32, dst []byte) bool {
	p := h.outstanding("Payload", id)
	if p == nil {
		return false
	}
	if op := p.req.Op; op != ib.WRSend && op != ib.WRSendWithImm && op != ib.WRRDMAWrite && op != ib.WRRDMAWriteWithImm {
		h.breach("Payload(%d) for %v", id, op)
		return false
	}
	if uint64(off)+uint64(len(dst)) > uint64(p.req.Len) {
		h.breach("Payload(%d, off %d, %d bytes) beyond its length %d", id, off, len(dst), p.req.Len)
		return false
	}
	m := h.local(p.local, off, len(dst))
	if m == nil {
		return false
	}
	copy(dst, m)
	return true
}

// ReadResponse implements rc.Host.
func (h *Host) ReadResponse(id uint64, off uint32, src []byte) bool {
	p := h.outstanding("ReadResponse", id)
	if p == nil {
		return false
	}
	if p.req.Op != ib.WRRDMARead {
		h.breach("ReadResponse(%d) for %v", id, p.req.Op)
		return false
	}
	if uint64(off)+uint64(len(src)) > uint64(p.req.Len) {
		h.breach("ReadResponse(%d, off %d, %d bytes) beyond its length %d", id, off, len(src), p.req.Len)
		return false
	}
	m := h.local(p.local, off, len(src))
	if m == nil {
		return false
	}
	copy(m, src)
	return true
}

// AtomicResult implements rc.Host.
func (h *Host) AtomicResult(id uint64, orig uint64) bool {
	p := h.outstanding("AtomicResult", id)
	if p == nil {
		return false
	}
	if !p.req.Op.IsAtomic() {
		h.breach("AtomicResult(%d) for %v", id, p.req.Op)
		return false
	}
	m := h.local(p.local, 0, 8)
	if m == nil {
		return false
	}
	binary.LittleEndian.PutUint64(m, orig)
	return true
}

// SendComplete implements rc.Host.
func (h *Host) SendComplete(id uint64, st ib.WCStatus, n uint32, cause error) {
	h.Sends = append(h.Sends, SendCompletion{ID: id, Status: st, Len: n, Cause: cause})
	switch {
	case h.Stop != nil:
		h.breach("SendComplete(%d, %v) after the engine stopped (%v)", id, st, h.Stop)
	case len(h.pend) == 0:
		h.breach("SendComplete(%d, %v) with no request outstanding", id, st)
	case h.pend[0].req.ID != id:
		if _, ok := h.byID[id]; ok {
			h.breach("SendComplete(%d, %v) out of order: %d was posted first", id, st, h.pend[0].req.ID)
		} else {
			h.breach("SendComplete(%d, %v): no such request outstanding (completed twice?)", id, st)
		}
	case st == ib.WCSuccess && cause != nil:
		h.breach("SendComplete(%d, SUCCESS) with a cause: %v", id, cause)
	case st == ib.WCSuccess && n != h.pend[0].req.Len:
		h.breach("SendComplete(%d, SUCCESS, %d bytes) for a request of %d", id, n, h.pend[0].req.Len)
	case st != ib.WCSuccess && cause == nil:
		h.breach("SendComplete(%d, %v) without a cause", id, st)
	}
	if st != ib.WCSuccess && h.Stop == nil {
		h.Stop = cause
		if h.Stop == nil {
			h.Stop = errors.New(st.String())
		}
	}
	if len(h.pend) > 0 && h.pend[0].req.ID == id {
		delete(h.byID, id)
		h.pend = h.pend[1:]
		h.done++
	}
}

// RecvBegin implements rc.Host.
func (h *Host) RecvBegin() bool {
	if h.recvCur {
		h.breach("RecvBegin with receive %d current", h.recvQ[0].id)
		return true
	}
	if len(h.recvQ) == 0 {
		return false
	}
	h.recvCur = true
	return true
}

// RecvPlace implements rc.Host.
func (h *Host) RecvPlace(off uint32, src []byte) ib.WCStatus {
	if !h.recvCur {
		h.breach("RecvPlace(off %d, %d bytes) with no receive current", off, len(src))
		return ib.WCLocProtErr
	}
	r := h.recvQ[0]
	if uint64(off)+uint64(len(src)) > uint64(r.size) {
		return ib.WCLocLenErr
	}
	m := h.local(r.addr, off, len(src))
	if m == nil {
		return ib.WCLocProtErr
	}
	copy(m, src)
	return ib.WCSuccess
}

// RecvComplete implements rc.Host.
func (h *Host) RecvComplete(st ib.WCStatus, n uint32, imm uint32, hasImm, write bool) {
	if !h.recvCur {
		h.breach("RecvComplete(%v, %d bytes) with no receive current", st, n)
		h.Recvs = append(h.Recvs, RecvCompletion{Status: st, Len: n, Imm: imm, HasImm: hasImm, Write: write})
		return
	}
	r := h.recvQ[0]
	if st == ib.WCSuccess && n > r.size && !write {
		h.breach("RecvComplete(SUCCESS, %d bytes) into a receive of %d", n, r.size)
	}
	h.Recvs = append(h.Recvs, RecvCompletion{ID: r.id, Status: st, Len: n, Imm: imm, HasImm: hasImm, Write: write})
	h.recvQ = h.recvQ[1:]
	h.recvCur = false
}

// region returns the registered region of rkey that holds [va, va+n) with
// the rights need, or nil.
func (h *Host) region(rkey uint32, va, n uint64, need ib.Access) *Region {
	for i := range h.regions {
		r := &h.regions[i]
		if r.RKey == rkey && r.Access&need == need && va >= r.Addr && va-r.Addr <= r.Len && r.Len-(va-r.Addr) >= n {
			return r
		}
	}
	return nil
}

// RemoteCheck implements rc.Host.
func (h *Host) RemoteCheck(rkey uint32, va uint64, n uint32, need ib.Access) ib.WCStatus {
	if h.gone[rkey] || h.region(rkey, va, uint64(n), need) == nil {
		return ib.WCRemAccessErr
	}
	a := access{rkey: rkey, va: va, n: uint64(n), active: true}
	switch need {
	case ib.AccessRemoteWrite:
		h.write = a
	case ib.AccessRemoteRead:
		h.reads[h.nreads%len(h.reads)] = a
		h.nreads++
	case ib.AccessRemoteAtomic:
		h.atomic = a
	default:
		h.breach("RemoteCheck(rkey %#x, %#x, %d) for rights %v", rkey, va, n, need)
	}
	return ib.WCSuccess
}

func (a access) holds(rkey uint32, va, n uint64) bool {
	return a.active && a.rkey == rkey && va >= a.va && va-a.va <= a.n && a.n-(va-a.va) >= n
}

// remote checks an access the engine makes: false if it must fail.
func (h *Host) remote(call string, rkey uint32, va, n uint64, need ib.Access, checked bool) bool {
	if h.gone[rkey] {
		return false
	}
	if !checked {
		h.breach("%s(rkey %#x, %#x, %d bytes) outside what RemoteCheck accepted", call, rkey, va, n)
		return false
	}
	if h.region(rkey, va, n, need) == nil {
		h.breach("%s(rkey %#x, %#x, %d bytes) outside every registered region", call, rkey, va, n)
		return false
	}
	return true
}

// RemoteWrite implements rc.Host.
func (h *Host) RemoteWrite(rkey uint32, va uint64, src []byte) bool {
	n := uint64(len(src))
	if !h.remote("RemoteWrite", rkey, va, n, ib.AccessRemoteWrite, h.write.holds(rkey, va, n)) {
		return false
	}
	copy(h.Mem[va-h.Base:], src)
	return true
}

// RemoteRead implements rc.Host.
func (h *Host) RemoteRead(rkey uint32, va uint64, dst []byte) bool {
	n := uint64(len(dst))
	checked := false
	for i := range min(h.nreads, len(h.reads)) { // newest first
		if h.reads[(h.nreads-1-i)%len(h.reads)].holds(rkey, va, n) {
			checked = true
			break
		}
	}
	if !h.remote("RemoteRead", rkey, va, n, ib.AccessRemoteRead, checked) {
		return false
	}
	copy(dst, h.Mem[va-h.Base:])
	return true
}

// RemoteAtomic implements rc.Host.
func (h *Host) RemoteAtomic(rkey uint32, va uint64, op ib.WROpcode, cmp, swap uint64) (uint64, bool) {
	if !op.IsAtomic() {
		h.breach("RemoteAtomic(rkey %#x, %#x) with %v", rkey, va, op)
		return 0, false
	}
	if va&7 != 0 {
		h.breach("RemoteAtomic(rkey %#x, %#x) unaligned", rkey, va)
		return 0, false
	}
	if !h.remote("RemoteAtomic", rkey, va, 8, ib.AccessRemoteAtomic, h.atomic.holds(rkey, va, 8)) {
		return 0, false
	}
	h.atomic.active = false // one check, one execution
	p := h.Mem[va-h.Base:]
	old := binary.LittleEndian.Uint64(p)
	switch {
	case op == ib.WRAtomicFetchAndAdd:
		binary.LittleEndian.PutUint64(p, old+cmp)
	case old == cmp:
		binary.LittleEndian.PutUint64(p, swap)
	}
	return old, true
}

// Fatal implements rc.Host.
func (h *Host) Fatal(cause error) {
	switch {
	case cause == nil:
		h.breach("Fatal(nil)")
	case h.Stop != nil:
		h.breach("Fatal(%v) after the engine stopped (%v)", cause, h.Stop)
	}
	if h.Stop == nil {
		h.Stop = cause
		if cause == nil {
			h.Stop = errors.New("Fatal(nil)")
		}
	}
}
