//go:build linux

package shmem

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Sentinels for cross-process access failures. The errors WriteTo and
// ReadFrom return wrap one of these and the errno itself, so both
// errors.Is(err, ErrPermission) and errors.Is(err, unix.EPERM) (and
// os.ErrPermission) hold.
var (
	ErrPermission = errors.New("shmem: cross-process memory access not permitted")
	ErrNoProcess  = errors.New("shmem: no such process")
	ErrFault      = errors.New("shmem: remote address range not mapped")
)

// iovBatch is how many local slices go to the kernel per call. It bounds the
// on-stack iovec array (so the hot path allocates nothing) and stays far
// below IOV_MAX (1024); more slices are simply sent in more calls.
const iovBatch = 16

// VMError is the error of a failed WriteTo or ReadFrom.
type VMError struct {
	Op    string     // "process_vm_writev" or "process_vm_readv"
	Pid   int        // the other process
	Addr  uint64     // start of the whole request in the other process
	Len   uint64     // length of the whole request
	Done  uint64     // bytes transferred before the failure
	Errno unix.Errno // what the kernel said
	kind  error      // one of the sentinels, or nil
	yama  string     // ptrace_scope when the error is EPERM and Yama is present
}

func (e *VMError) Error() string {
	dir := "to"
	if e.Op == "process_vm_readv" {
		dir = "from"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s pid %d at %#x+%d", e.Op, dir, e.Pid, e.Addr, e.Len)
	if e.Done > 0 {
		fmt.Fprintf(&b, " (failed after %d bytes)", e.Done)
	}
	fmt.Fprintf(&b, ": %v", e.Errno)
	switch e.kind {
	case ErrPermission:
		b.WriteString(": the kernel refuses cross-process access (ptrace access check: different user or non-dumpable target, and no CAP_SYS_PTRACE")
		if e.yama != "" {
			fmt.Fprintf(&b, "; or Yama ptrace_scope=%s", e.yama)
			if e.yama == "1" {
				b.WriteString(", which admits only ancestors and processes the target allowed with AllowPtrace")
			}
		}
		b.WriteString(")")
	case ErrNoProcess:
		fmt.Fprintf(&b, ": process %d no longer exists", e.Pid)
	case ErrFault:
		fmt.Fprintf(&b, ": address range not mapped in pid %d", e.Pid)
	}
	return b.String()
}

// Unwrap exposes both the sentinel and the errno to errors.Is.
func (e *VMError) Unwrap() []error {
	if e.kind == nil {
		return []error{e.Errno}
	}
	return []error{e.kind, e.Errno}
}

// WriteTo copies the concatenation of local into process pid's memory at
// [remote, remote+total). ReadFrom is its mirror image.
//
// The kernel checks access as for ptrace attach: same user and (under Yama
// ptrace_scope=1) the target must be our descendant or have called
// AllowPtrace; or we hold CAP_SYS_PTRACE. Neither call allocates unless it
// fails.
func WriteTo(pid int, remote uint64, local [][]byte) error {
	return vmCopy(true, pid, remote, local)
}

// ReadFrom fills the slices of local, in order, from process pid's memory
// starting at remote. See WriteTo.
func ReadFrom(pid int, remote uint64, local [][]byte) error {
	return vmCopy(false, pid, remote, local)
}

func vmCopy(write bool, pid int, remote uint64, local [][]byte) error {
	var total uint64
	for _, b := range local {
		total += uint64(len(b))
	}
	var (
		iov  [iovBatch]unix.Iovec
		riov [1]unix.RemoteIovec
		done uint64
		i    int // next slice of local
		skip int // bytes of local[i] already transferred
	)
	for done < total {
		// Gather up to iovBatch non-empty pieces starting at local[i][skip:].
		k, chunk := 0, uint64(0)
		for j := i; j < len(local) && k < iovBatch; j++ {
			b := local[j]
			if j == i {
				b = b[skip:]
			}
			if len(b) == 0 {
				continue
			}
			iov[k].Base = &b[0]
			iov[k].SetLen(len(b))
			k++
			chunk += uint64(len(b))
		}
		// One remote range covers the whole chunk: the remote side is contiguous.
		riov[0].Base = uintptr(remote + done)
		riov[0].Len = int(chunk)
		var n int
		var err error
		if write {
			n, err = unix.ProcessVMWritev(pid, iov[:k], riov[:], 0)
		} else {
			n, err = unix.ProcessVMReadv(pid, iov[:k], riov[:], 0)
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return vmError(write, pid, remote, total, done, err)
		}
		if n <= 0 {
			// A short count means the next page faulted; a zero count would
			// loop forever, so report it as the fault it is.
			return vmError(write, pid, remote, total, done, unix.EFAULT)
		}
		// Advance the cursor by n bytes, which may end mid-slice.
		done += uint64(n)
		for left := n; left > 0; {
			rem := len(local[i]) - skip
			if left < rem {
				skip += left
				break
			}
			left -= rem
			i, skip = i+1, 0
		}
	}
	return nil
}

// vmError builds the VMError for a failure; it is off the hot path, so it
// may read /proc.
func vmError(write bool, pid int, remote, total, done uint64, err error) error {
	errno, ok := err.(unix.Errno)
	if !ok {
		return fmt.Errorf("shmem: process_vm pid %d: %w", pid, err)
	}
	e := &VMError{Op: "process_vm_readv", Pid: pid, Addr: remote, Len: total, Done: done, Errno: errno}
	if write {
		e.Op = "process_vm_writev"
	}
	switch errno {
	case unix.EPERM, unix.EACCES:
		e.kind = ErrPermission
		if b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); err == nil {
			e.yama = strings.TrimSpace(string(b))
		}
	case unix.ESRCH:
		e.kind = ErrNoProcess
	case unix.EFAULT:
		e.kind = ErrFault
	}
	return e
}

// AllowPtrace lets any process of this user read and write this one's
// memory with process_vm_readv/writev (prctl PR_SET_PTRACER_ANY), which Yama
// ptrace_scope=1 otherwise allows only to ancestors. It does not get past a
// different user or ptrace_scope >= 2. Without Yama there is nothing to
// allow and it returns nil.
func AllowPtrace() error {
	err := unix.Prctl(unix.PR_SET_PTRACER, unix.PR_SET_PTRACER_ANY, 0, 0, 0)
	if err == unix.EINVAL { // Yama not built in
		return nil
	}
	if err != nil {
		return fmt.Errorf("shmem: prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY): %w", err)
	}
	return nil
}
