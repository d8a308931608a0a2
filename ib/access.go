package ib

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

	// AccessAll is every access right ibex knows.
	AccessAll = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
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
	if rest := a &^ AccessAll; rest != 0 {
		parts = append(parts, fmt.Sprintf("%#x", uint32(rest)))
	}
	return strings.Join(parts, "|")
}
