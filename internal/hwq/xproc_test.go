//go:build linux

package hwq

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/internal/shmem"
	"golang.org/x/sys/unix"
)

// mix is splitmix64: the content of word k of entry i, which both
// processes compute.
func mix(i, k uint64) uint64 {
	z := i*0x9e3779b97f4a7c15 + k + 1
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// fillEntry writes entry i of the test stream; checkEntry verifies it and
// returns its checksum contribution.
func fillEntry(b []byte, i uint64) {
	binary.LittleEndian.PutUint64(b, i)
	for k := 8; k+8 <= len(b); k += 8 {
		binary.LittleEndian.PutUint64(b[k:], mix(i, uint64(k)))
	}
}

func checkEntry(b []byte, i uint64) (uint64, error) {
	if got := binary.LittleEndian.Uint64(b); got != i {
		return 0, fmt.Errorf("entry %d: sequence word %d", i, got)
	}
	sum := i
	for k := 8; k+8 <= len(b); k += 8 {
		w := binary.LittleEndian.Uint64(b[k:])
		if w != mix(i, uint64(k)) {
			return 0, fmt.Errorf("entry %d: word %d is %#x, want %#x", i, k/8, w, mix(i, uint64(k)))
		}
		sum = sum*31 + w
	}
	return sum, nil
}

const xprocEnvN = "IBEX_HWQ_N"

// childProduce maps the segment it got as fd 3 and produces IBEX_HWQ_N
// entries of the test stream into the queue at its start, in batches.
func childProduce() error {
	n, err := strconv.ParseUint(os.Getenv(xprocEnvN), 10, 64)
	if err != nil {
		return err
	}
	seg, err := shmem.Map(3)
	if err != nil {
		return err
	}
	defer seg.Close()
	r, err := Attach(seg.Mem)
	if err != nil {
		return err
	}
	p, err := r.Producer()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for i := uint64(0); i < n; {
		k, err := p.Reserve(int(min(n-i, 16)))
		if errors.Is(err, ErrFull) {
			if time.Now().After(deadline) {
				return fmt.Errorf("ring full for 30s at entry %d", i)
			}
			runtime.Gosched()
			continue
		}
		if err != nil {
			return err
		}
		for j := range k {
			fillEntry(p.Entry(j), i+uint64(j))
		}
		before := i
		i += uint64(p.Publish())
		if i/4096 != before/4096 {
			// Pause now and then so that the parent falls asleep and
			// the doorbell's futex wake has to cross processes.
			time.Sleep(200 * time.Microsecond)
		}
	}
	return nil
}

// TestCrossProcess: a child process produces into a memfd queue, the
// parent consumes (sleeping in Wait when the ring is empty, so the futex
// doorbell crosses processes), and every entry arrives intact and in
// order.
func TestCrossProcess(t *testing.T) {
	const n, size, count = 200_000, 64, 256
	rs, _ := RegionSize(size, count)
	seg, err := shmem.Create("hwq-test-"+t.Name(), int64(rs))
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	r, err := Init(seg.Mem, Config{EntrySize: size, Count: count})
	if err != nil {
		t.Fatal(err)
	}
	// MaxSleep beyond the deadline: a wake-up lost between processes
	// fails the test instead of being covered by a timed re-check.
	c, err := r.Consumer(WaitOptions{Spin: 20 * time.Microsecond, MaxSleep: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Dup(seg.FD)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "segment")
	cmd := childCmd("produce", xprocEnvN+"="+strconv.Itoa(n))
	cmd.ExtraFiles = []*os.File{f}
	out := &limitedBuf{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	buf := make([]byte, size)
	var sum, want uint64
	for i := uint64(0); i < n; {
		a, err := c.Wait(ctx)
		if err != nil {
			t.Fatalf("at entry %d: %v (child: %s)", i, err, out)
		}
		for j := range a {
			c.CopyOut(j, buf)
			s, err := checkEntry(buf, i+uint64(j))
			if err != nil {
				t.Fatal(err)
			}
			sum += s
		}
		c.Release(a)
		i += uint64(a)
	}
	for i := uint64(0); i < n; i++ {
		fillEntry(buf, i)
		s, _ := checkEntry(buf, i)
		want += s
	}
	if sum != want {
		t.Fatalf("checksum %#x, want %#x", sum, want)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("child: %v: %s", err, out)
		}
	case <-ctx.Done():
		t.Fatal("child did not exit")
	}
	if a, err := c.Available(); a != 0 || err != nil {
		t.Fatalf("after the child: Available %d, %v", a, err)
	}
	t.Logf("%d entries from the child; the parent slept %d times", n, c.sleeps)
	if c.sleeps < 5 {
		t.Fatalf("the parent slept %d times: the cross-process doorbell was not exercised", c.sleeps)
	}
}

// limitedBuf keeps the first 4 KiB a child writes.
type limitedBuf struct {
	mu sync.Mutex
	b  []byte
}

func (l *limitedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := 4096 - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (l *limitedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}
