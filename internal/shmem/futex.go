//go:build linux

package shmem

import (
	"math"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// futex(2) operations. FUTEX_PRIVATE_FLAG is deliberately absent: a private
// futex is keyed by (mm, address) and would never meet a waiter in another
// process; the shared form is keyed by the page's backing file and offset,
// which is the same in every process that maps the segment.
const (
	futexWait = 0 // FUTEX_WAIT
	futexWake = 1 // FUTEX_WAKE
)

// FutexWait sleeps while *addr == val, for at most timeout. It returns
// woken=true when a FutexWake (or a spurious wakeup) ended the sleep, and
// false when *addr was not val to begin with, a signal interrupted the
// sleep, or the timeout passed. The caller re-checks the word either way.
//
// There is no wait without a timeout: a peer that dies holding our wake-up
// never sends it. A timeout <= 0 returns at once.
//
// addr may be in memory shared with other processes (a Segment's Mem); it
// must stay mapped for the duration of the call.
func FutexWait(addr *atomic.Uint32, val uint32, timeout time.Duration) (woken bool) {
	if timeout <= 0 {
		return false
	}
	ts := unix.NsecToTimespec(int64(timeout))
	_, _, errno := unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWait, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
	return errno == 0
}

// FutexWake wakes at most n processes or threads sleeping in FutexWait on
// addr, in this process or any other that maps the same memory, and returns
// how many it woke. Store the new value before waking: a waiter that has not
// gone to sleep yet sees the value instead of the wake.
func FutexWake(addr *atomic.Uint32, n int) int {
	if n <= 0 {
		return 0
	}
	n = min(n, math.MaxInt32)
	r, _, errno := unix.Syscall(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWake, uintptr(n))
	if errno != 0 {
		return 0
	}
	return int(r)
}
