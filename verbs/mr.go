package verbs

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/ibex-rdma/ibex/verbs/internal/wq"
)

// PD is a protection domain (ibv_pd): MRs and QPs of one PD can reach each
// other; nothing crosses PDs.
type PD struct {
	ctx *Context
	id  uint32

	mu   sync.Mutex
	dead bool
	nmr  int
	nqp  int
}

// AllocPD allocates a protection domain.
func (c *Context) AllocPD() (*PD, error) {
	if err := c.count(&c.npd, 1, c.attr.MaxPD, "alloc pd"); err != nil {
		return nil, err
	}
	return &PD{ctx: c, id: randKey()}, nil
}

// Context returns the context the PD belongs to.
func (pd *PD) Context() *Context { return pd.ctx }

// Dealloc frees the PD. Its MRs and QPs must be gone first.
func (pd *PD) Dealloc() error {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.dead {
		return errorf(ErrClosed, "dealloc pd")
	}
	if pd.nmr > 0 || pd.nqp > 0 {
		return errorf(ErrBusy, "dealloc pd: %d MRs and %d QPs still use it", pd.nmr, pd.nqp)
	}
	pd.dead = true
	return pd.ctx.count(&pd.ctx.npd, -1, 0, "dealloc pd")
}

func (pd *PD) use(mr, qp int) error {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.dead {
		return errorf(ErrClosed, "pd deallocated")
	}
	pd.nmr += mr
	pd.nqp += qp
	return nil
}

// MR is a registered memory region (ibv_mr).
//
// The region's address is the virtual address of its first byte, as in
// libibverbs: peers name remote memory by (rkey, address).
type MR struct {
	pd   *PD
	lkey uint32
	rkey uint32
	free func() // returns AllocMR memory to the driver, after Dereg

	// reg is the memory, its access and its pin count: Dereg marks it dead
	// and waits for the pins to drain, so no access touches the memory
	// after Dereg returns.
	reg wq.Region
}

// RegMR registers buf for the given access. The buffer must stay alive and
// must not be resized while registered; remote write and remote atomic need
// local write, as in libibverbs.
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) {
	return pd.regMR(buf, 0, false, access, nil, nil)
}

// RegMRIOVA registers buf as the region [iova, iova+len(buf)) of the
// PD's address space (ibv_reg_mr_iova): work requests and peers name its
// bytes by iova rather than by buf's virtual address. A daemon that
// serves another process's memory registers it at the address that
// process sees.
func (pd *PD) RegMRIOVA(buf []byte, iova uint64, access Access) (*MR, error) {
	if iova+uint64(len(buf)) < iova {
		return nil, errorf(ErrInvalidArgument, "reg mr: iova %#x + length %d overflows", iova, len(buf))
	}
	return pd.regMR(buf, iova, true, access, nil, nil)
}

// RestoreMR registers buf at iova with the keys an MR had in another
// process: a daemon that takes over the MRs of the daemon it replaces
// (ibexd's upgrade) keeps the keys the processes and their peers hold.
// Keys in use in this process are refused.
func (pd *PD) RestoreMR(buf []byte, iova uint64, access Access, lkey, rkey uint32) (*MR, error) {
	if iova+uint64(len(buf)) < iova {
		return nil, errorf(ErrInvalidArgument, "restore mr: iova %#x + length %d overflows", iova, len(buf))
	}
	if lkey == 0 || rkey == 0 || lkey == rkey {
		return nil, errorf(ErrInvalidArgument, "restore mr: lkey %#x, rkey %#x: must be distinct and non-zero", lkey, rkey)
	}
	return pd.regMR(buf, iova, true, access, nil, &[2]uint32{lkey, rkey})
}

// AllocBuf allocates n bytes that every device of the context can
// register with RegMR (and RegMRIOVA): where the device's peers or its
// transport map memory (shared memory, ibexd), memory they can map;
// ordinary Go memory otherwise. free releases it once no MR covers it.
// A device with CapAllocatedMemory registers only such memory.
func (c *Context) AllocBuf(n int) (buf []byte, free func(), err error) {
	if n <= 0 {
		return nil, nil, errorf(ErrInvalidArgument, "alloc buf: length %d", n)
	}
	a, ok := c.dev.(memAllocator)
	if !ok {
		return make([]byte, n), func() {}, nil
	}
	buf, free, err = a.AllocMem(n)
	if err != nil {
		return nil, nil, fmt.Errorf("alloc buf: %w", err)
	}
	return buf, free, nil
}

// AllocMR allocates n bytes and registers them, the allocate-and-register
// call. A provider whose peers reach memory without the CPU (shared
// memory) allocates it where they can map it; others use ordinary Go
// memory. Dereg frees it: the memory must not be used after Dereg.
//
// The region's address (Addr) is a random page-aligned I/O virtual
// address, as ibv_reg_mr_iova gives one, not the memory's: consecutive
// allocations come from one pool, and their addresses would tell a peer
// given one where its neighbours are (ReDMArk's "consecutive MR
// addresses"). Work requests and peers name its bytes by Addr, as for
// any MR; Bytes is the memory. RegMR keeps libibverbs' rule (Addr is the
// buffer's virtual address).
func (pd *PD) AllocMR(n int, access Access) (*MR, error) {
	if n <= 0 {
		return nil, errorf(ErrInvalidArgument, "alloc mr: length %d", n)
	}
	if uint64(n) > pd.ctx.attr.MaxMRSize {
		return nil, errorf(ErrInvalidArgument, "alloc mr: length %d exceeds max_mr_size %d", n, pd.ctx.attr.MaxMRSize)
	}
	a, ok := pd.ctx.dev.(memAllocator)
	if !ok {
		return pd.regMR(make([]byte, n), randIOVA(), true, access, nil, nil)
	}
	buf, free, err := a.AllocMem(n)
	if err != nil {
		return nil, fmt.Errorf("alloc mr: %w", err)
	}
	mr, err := pd.regMR(buf, randIOVA(), true, access, free, nil)
	if err != nil {
		free()
		return nil, err
	}
	return mr, nil
}

func (pd *PD) regMR(buf []byte, iova uint64, useIOVA bool, access Access, free func(), given *[2]uint32) (*MR, error) {
	c := pd.ctx
	switch {
	case len(buf) == 0:
		return nil, errorf(ErrInvalidArgument, "reg mr: length 0")
	case uint64(len(buf)) > c.attr.MaxMRSize:
		return nil, errorf(ErrInvalidArgument, "reg mr: length %d exceeds max_mr_size %d", len(buf), c.attr.MaxMRSize)
	case access&^accessAll != 0:
		return nil, errorf(ErrInvalidArgument, "reg mr: unknown access flags %#x", uint32(access&^accessAll))
	case access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0:
		return nil, errorf(ErrInvalidArgument, "reg mr: %v requires LOCAL_WRITE", access)
	case access&AccessRemoteAtomic != 0 && c.attr.AtomicCap == AtomicNone:
		return nil, errorf(ErrUnsupported, "reg mr: device %s has no atomics", c.name)
	}
	if err := c.count(&c.nmr, 1, c.attr.MaxMR, "reg mr"); err != nil {
		return nil, err
	}
	if err := pd.use(1, 0); err != nil {
		_ = c.count(&c.nmr, -1, 0, "reg mr")
		return nil, errorf(ErrClosed, "reg mr: pd deallocated")
	}
	mr := &MR{pd: pd, free: free}
	mr.reg.Buf, mr.reg.Addr, mr.reg.Access = buf, uint64(uintptr(unsafe.Pointer(&buf[0]))), access
	if useIOVA {
		mr.reg.Addr = iova
	}
	undo := func() {
		_ = pd.use(-1, 0)
		_ = c.count(&c.nmr, -1, 0, "reg mr")
	}
	var lkey, rkey uint32
	var assigned bool
	var err error
	if given != nil {
		lkey, rkey, assigned = given[0], given[1], true
	} else {
		lkey, rkey, assigned, err = c.bind.AssignKeys(mr)
	}
	if err != nil {
		undo()
		return nil, fmt.Errorf("reg mr: %w", err)
	}
	if assigned {
		mr.lkey, mr.rkey = lkey, rkey
		if err := keys.insertGiven(mr); err != nil {
			c.bind.DeregMR(mr)
			undo()
			return nil, fmt.Errorf("reg mr: %w", err)
		}
	} else {
		keys.insert(mr)
	}
	if err := c.bind.RegMR(mr); err != nil {
		mr.reg.Kill()
		keys.remove(mr)
		_ = pd.use(-1, 0)
		_ = c.count(&c.nmr, -1, 0, "reg mr")
		return nil, fmt.Errorf("reg mr: %w", err)
	}
	return mr, nil
}

// LKey is the local key, for SGEs of this QP's PD.
func (mr *MR) LKey() uint32 { return mr.lkey }

// RKey is the remote key a peer names in RDMA requests.
func (mr *MR) RKey() uint32 { return mr.rkey }

// Addr is the virtual address of the region's first byte.
func (mr *MR) Addr() uint64 { return mr.reg.Addr }

// Len is the region's length in bytes.
func (mr *MR) Len() int { return len(mr.reg.Buf) }

// Bytes is the registered memory.
func (mr *MR) Bytes() []byte { return mr.reg.Buf }

// Access is the region's access rights.
func (mr *MR) Access() Access { return mr.reg.Access }

// PD is the protection domain the region belongs to.
func (mr *MR) PD() *PD { return mr.pd }

// Dereg deregisters the region. Accesses already in progress finish first;
// any later use of its keys fails (LOC_PROT_ERR locally, REM_ACCESS_ERR for
// a peer) and never touches the memory.
func (mr *MR) Dereg() error {
	if !mr.reg.Kill() {
		return errorf(ErrClosed, "dereg mr: lkey %#x already deregistered", mr.lkey)
	}
	keys.remove(mr)
	mr.pd.ctx.bind.DeregMR(mr)
	for spins := 0; !mr.reg.Drained(); spins++ {
		if spins < 100 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
	if mr.free != nil {
		mr.free()
	}
	_ = mr.pd.use(-1, 0)
	return mr.pd.ctx.count(&mr.pd.ctx.nmr, -1, 0, "dereg mr")
}

// keyTable maps lkeys and rkeys to MRs for the whole process. Keys are
// random 32-bit values from crypto/rand, so a peer cannot guess a live rkey
// from one it was given.
type keyTable struct {
	mu   sync.RWMutex
	lkey map[uint32]*MR
	rkey map[uint32]*MR
}

var keys = keyTable{lkey: map[uint32]*MR{}, rkey: map[uint32]*MR{}}

// randIOVA is a random page-aligned address in [2^32, 2^47) for an MR
// AllocMR made: far from zero (a null or small address is never valid)
// and with room above for any region (max_mr_size is below 2^47).
func randIOVA() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("verbs: crypto/rand failed: " + err.Error())
	}
	v := binary.LittleEndian.Uint64(b[:]) % (1<<47 - 1<<32)
	return (1<<32 + v) &^ 0xfff
}

func randKey() uint32 {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("verbs: crypto/rand failed: " + err.Error())
	}
	return binary.LittleEndian.Uint32(b[:])
}

func (t *keyTable) insert(mr *MR) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for {
		k := randKey()
		if _, used := t.lkey[k]; k != 0 && !used {
			mr.lkey = k
			break
		}
	}
	for {
		k := randKey()
		if _, used := t.rkey[k]; k != 0 && k != mr.lkey && !used {
			mr.rkey = k
			break
		}
	}
	t.lkey[mr.lkey] = mr
	t.rkey[mr.rkey] = mr
}

// insertGiven enters keys a device assigned; it refuses keys another MR
// of this process holds (a device of another provider picked them).
func (t *keyTable) insertGiven(mr *MR) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, lused := t.lkey[mr.lkey]
	_, rused := t.rkey[mr.rkey]
	if lused || rused || mr.lkey == 0 || mr.rkey == 0 {
		return errorf(ErrInvalidArgument, "device assigned lkey %#x rkey %#x, which are zero or already in use in this process", mr.lkey, mr.rkey)
	}
	t.lkey[mr.lkey] = mr
	t.rkey[mr.rkey] = mr
	return nil
}

func (t *keyTable) remove(mr *MR) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.lkey, mr.lkey)
	delete(t.rkey, mr.rkey)
}

// lookupLKey finds a live MR of pd by lkey.
func (pd *PD) lookupLKey(lkey uint32) *MR {
	keys.mu.RLock()
	mr := keys.lkey[lkey]
	keys.mu.RUnlock()
	if mr == nil || mr.pd != pd {
		return nil
	}
	return mr
}

// lookupRKey finds a live MR of pd by rkey.
func (pd *PD) lookupRKey(rkey uint32) *MR {
	keys.mu.RLock()
	mr := keys.rkey[rkey]
	keys.mu.RUnlock()
	if mr == nil || mr.pd != pd {
		return nil
	}
	return mr
}
