package kv

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/ibex-rdma/ibex/verbs"
)

// region is registered memory and how to give it back.
type region struct {
	mr   *verbs.MR
	free func()
}

func (r *region) bytes() []byte { return r.mr.Bytes() }

func (r *region) release() {
	if r == nil || r.mr == nil {
		return
	}
	_ = r.mr.Dereg()
	if r.free != nil {
		r.free()
	}
	r.mr = nil
}

// allocRegion registers n bytes outside the Go heap. A device whose peers
// do one-sided work from other processes (shm) or that runs in another
// process (ibexd) gets the memory it can map (PD.AllocMR), so peers copy
// without a system call; any other gets an anonymous mapping. Either way
// the garbage collector never scans it, and the race detector does not
// watch it: the one-sided READs that race with the server's writes are
// by design, and the checksums and versions are what make them safe.
func allocRegion(pd *verbs.PD, n int, access verbs.Access) (*region, error) {
	caps := pd.Context().QueryDevice().Caps
	if caps.Has(verbs.CapAllocatedMemory) || caps.Has(verbs.CapSameHost|verbs.CapOneSided) {
		mr, err := pd.AllocMR(n, access)
		if err != nil {
			return nil, err
		}
		return &region{mr: mr}, nil
	}
	buf, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes: %w", n, err)
	}
	mr, err := pd.RegMR(buf, access)
	if err != nil {
		_ = unix.Munmap(buf)
		return nil, err
	}
	return &region{mr: mr, free: func() { _ = unix.Munmap(buf) }}, nil
}
