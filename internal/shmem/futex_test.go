//go:build linux

package shmem

import (
	"bytes"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The futex test's layout of a one-page segment: words on separate cache
// lines, as a real ring would keep them.
const (
	offWord  = 0   // the child sleeps on this
	offReady = 64  // the child sets it to 1 when it is about to sleep
	offAck   = 128 // the child's report: ackWoken or ackGaveUp
)

const (
	ackWoken  = 1
	ackGaveUp = 2
)

func word(mem []byte, off int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&mem[off]))
}

// waitFor sleeps on w until it is non-zero or the deadline passes, and
// returns its value.
func waitFor(w *atomic.Uint32, d time.Duration) uint32 {
	deadline := time.Now().Add(d)
	for w.Load() == 0 && time.Now().Before(deadline) {
		FutexWait(w, 0, 100*time.Millisecond)
	}
	return w.Load()
}

// childFutex maps the segment it got as fd 3, sleeps on the word until a
// FutexWake from the parent ends the sleep, and acknowledges through shared
// memory.
func childFutex() error {
	seg, err := Map(3)
	if err != nil {
		return err
	}
	defer seg.Close()
	w, ready, ack := word(seg.Mem, offWord), word(seg.Mem, offReady), word(seg.Mem, offAck)
	ready.Store(1)
	FutexWake(ready, 1)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		if FutexWait(w, 0, time.Second) {
			ack.Store(ackWoken)
			FutexWake(ack, 1)
			return nil
		}
	}
	ack.Store(ackGaveUp)
	FutexWake(ack, 1)
	return errors.New("never woken")
}

// TestFutexAcrossProcesses checks that FutexWake reaches a waiter in another
// process that maps the same memfd: with FUTEX_PRIVATE_FLAG it would find
// nobody to wake.
func TestFutexAcrossProcesses(t *testing.T) {
	seg, err := Create(segName(t), 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	w, ready, ack := word(seg.Mem, offWord), word(seg.Mem, offReady), word(seg.Mem, offAck)

	// ExtraFiles[0] becomes fd 3 in the child. Hand it a duplicate so the
	// File's Close does not close the Segment's descriptor.
	dup, err := unix.FcntlInt(uintptr(seg.FD), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(dup), "memfd")
	cmd := childCmd("", "futex")
	cmd.ExtraFiles = []*os.File{f}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Start()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := cmd.Wait(); err != nil {
			t.Errorf("child: %v\n%s", err, stderr.Bytes())
		}
	}()

	if waitFor(ready, 10*time.Second) != 1 {
		t.Fatal("child never mapped the segment")
	}
	// The child sets ready just before it sleeps; wake until the kernel
	// reports that it woke someone, which only a shared futex can.
	woke := 0
	for deadline := time.Now().Add(10 * time.Second); woke == 0 && time.Now().Before(deadline); {
		if woke = FutexWake(w, 1); woke == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if woke != 1 {
		t.Fatal("FutexWake never found the child sleeping on the shared word")
	}
	if got := waitFor(ack, 10*time.Second); got != ackWoken {
		t.Fatalf("child acknowledged %d; want %d (woken)", got, ackWoken)
	}
}

func TestFutexWithinProcess(t *testing.T) {
	seg, err := Create(segName(t), 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	w := word(seg.Mem, 0)
	done := make(chan bool)
	go func() {
		woken := false
		for w.Load() == 0 {
			woken = FutexWait(w, 0, 10*time.Second) || woken
		}
		done <- woken
	}()
	// Store, then wake: a waiter that has not slept yet sees the value.
	time.Sleep(10 * time.Millisecond)
	w.Store(1)
	FutexWake(w, 1)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("waiter never returned after the word changed and FutexWake")
	}
}

func TestFutexWaitReturns(t *testing.T) {
	var w atomic.Uint32
	// Value differs: EAGAIN at once.
	if FutexWait(&w, 1, time.Hour) {
		t.Error("FutexWait reported a wake when the value already differed")
	}
	// Nobody wakes: it returns on its own (no timing bound: a signal may
	// legitimately end the sleep early).
	if FutexWait(&w, 0, 50*time.Millisecond) {
		t.Error("FutexWait reported a wake that nobody sent")
	}
	if FutexWait(&w, 0, 0) || FutexWait(&w, 0, -time.Second) {
		t.Error("FutexWait with no time left reported a wake")
	}
	if n := FutexWake(&w, 1); n != 0 {
		t.Errorf("FutexWake with no waiters = %d", n)
	}
}
