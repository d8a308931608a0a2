//go:build linux

package shmem

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// socketPair returns the two ends of a connected SOCK_SEQPACKET pair, the
// kind a provider uses to hand segments to a peer.
func socketPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var conns [2]*net.UnixConn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c.(*net.UnixConn)
		t.Cleanup(func() { c.Close() })
	}
	return conns[0], conns[1]
}

// segName makes a memfd name unique to this test and process, so that
// /proc/self/maps checks see only this test's mapping.
func segName(t *testing.T) string {
	return fmt.Sprintf("%s%s-%d", NamePrefix, t.Name(), os.Getpid())
}

func mapsContain(t *testing.T, name string) bool {
	t.Helper()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Contains(maps, []byte("/memfd:"+name+" "))
}

func TestCreateMapSharesBytes(t *testing.T) {
	seg, err := Create(segName(t), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	for i := range seg.Mem {
		seg.Mem[i] = byte(i*7 + i>>8)
	}

	a, b := socketPair(t)
	if err := SendFDs(a, []byte("seg"), seg.FD); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, fds, err := RecvFDs(b, buf, 4)
	if err != nil {
		t.Fatal(err)
	}
	if string(buf[:n]) != "seg" || len(fds) != 1 {
		t.Fatalf("RecvFDs = %q, %d fds; want \"seg\", 1 fd", buf[:n], len(fds))
	}
	if flags, err := unix.FcntlInt(uintptr(fds[0]), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("received fd flags = %#x, %v; want FD_CLOEXEC", flags, err)
	}

	peer, err := Map(fds[0])
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	if len(peer.Mem) != len(seg.Mem) {
		t.Fatalf("mapped %d bytes, created %d", len(peer.Mem), len(seg.Mem))
	}
	if unsafe.SliceData(peer.Mem) == unsafe.SliceData(seg.Mem) {
		t.Fatal("second mapping is at the same address as the first")
	}
	if !bytes.Equal(peer.Mem, seg.Mem) {
		t.Fatal("second mapping does not hold the bytes written through the first")
	}
	peer.Mem[12345] = ^seg.Mem[12345]
	if seg.Mem[12345] != peer.Mem[12345] {
		t.Fatal("a write through the second mapping is not visible through the first")
	}
}

func TestMapRefusesUnsealed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags int
		want  string
	}{
		// Without MFD_ALLOW_SEALING the memfd is born with F_SEAL_SEAL only.
		{"no-sealing", unix.MFD_CLOEXEC, "F_SEAL_SHRINK"},
		{"sealable-unsealed", unix.MFD_CLOEXEC | unix.MFD_ALLOW_SEALING, "F_SEAL_SHRINK"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fd, err := unix.MemfdCreate("ibex-shm:unsealed", tc.flags)
			if err != nil {
				t.Fatal(err)
			}
			if err := unix.Ftruncate(fd, 4096); err != nil {
				t.Fatal(err)
			}
			seg, err := Map(fd)
			if err == nil {
				seg.Close()
				t.Fatal("Map accepted a memfd without F_SEAL_SHRINK")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "SIGBUS") {
				t.Errorf("error %q should name %s and the SIGBUS it prevents", err, tc.want)
			}
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != unix.EBADF {
				t.Errorf("Map left fd %d open after failing (F_GETFD: %v)", fd, err)
			}
		})
	}
	t.Run("pipe", func(t *testing.T) {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		defer unix.Close(p[1])
		if _, err := Map(p[0]); err == nil || !strings.Contains(err.Error(), "not a sealable memfd") {
			t.Errorf("Map(pipe) = %v; want a not-a-memfd error", err)
		}
	})
}

func TestCreateHugeSparseAndClose(t *testing.T) {
	const size = 64 << 30
	name := segName(t)
	seg, err := Create(name, size)
	if err != nil {
		t.Fatal(err)
	}
	// Touch both ends; only these two pages get memory.
	seg.Mem[0], seg.Mem[size-1] = 1, 2
	if seg.Mem[0] != 1 || seg.Mem[size-1] != 2 {
		t.Fatal("ends of the mapping did not keep their writes")
	}
	var st unix.Stat_t
	if err := unix.Fstat(seg.FD, &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != size || st.Blocks*512 > 1<<20 {
		t.Errorf("fstat: size %d, %d bytes allocated; want %d and a few pages", st.Size, st.Blocks*512, int64(size))
	}
	seals, err := unix.FcntlInt(uintptr(seg.FD), unix.F_GET_SEALS, 0)
	if want := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL; err != nil || seals != want {
		t.Errorf("seals = %#x, %v; want %#x", seals, err, want)
	}
	if err := unix.Ftruncate(seg.FD, 4096); err != unix.EPERM {
		t.Errorf("ftruncate of a sealed segment: %v; want EPERM", err)
	}
	if !mapsContain(t, name) {
		t.Errorf("/proc/self/maps has no /memfd:%s", name)
	}

	if err := seg.Close(); err != nil {
		t.Fatal(err)
	}
	if seg.FD != -1 || seg.Mem != nil {
		t.Errorf("after Close: FD %d, %d bytes mapped; want -1, none", seg.FD, len(seg.Mem))
	}
	if mapsContain(t, name) {
		t.Errorf("/proc/self/maps still has /memfd:%s after Close", name)
	}
	if err := seg.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestCreateName(t *testing.T) {
	seg, err := Create("plain", 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	target, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", seg.FD))
	if err != nil {
		t.Fatal(err)
	}
	if want := "/memfd:" + NamePrefix + "plain (deleted)"; target != want {
		t.Errorf("memfd link = %q; want %q", target, want)
	}
	if _, err := Create(strings.Repeat("x", 300), 4096); err == nil {
		t.Error("Create accepted a 300-byte name")
	}
	if _, err := Create("zero", 0); err == nil {
		t.Error("Create accepted size 0")
	}
}

func TestPunchHole(t *testing.T) {
	page := int64(os.Getpagesize())
	seg, err := Create(segName(t), 3*page)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	for i := range seg.Mem {
		seg.Mem[i] = 0xAA
	}
	blocks := func() int64 {
		var st unix.Stat_t
		if err := unix.Fstat(seg.FD, &st); err != nil {
			t.Fatal(err)
		}
		return st.Blocks
	}
	before := blocks()

	if err := seg.PunchHole(page, page); err != nil {
		t.Fatal(err)
	}
	// Count blocks before reading the hole back: a shmem page fault
	// allocates a fresh page even for a read.
	if after := blocks(); after >= before {
		t.Errorf("allocated blocks %d -> %d; punching a page should release it", before, after)
	}
	for i, b := range seg.Mem {
		want := byte(0xAA)
		if int64(i) >= page && int64(i) < 2*page {
			want = 0
		}
		if b != want {
			t.Fatalf("byte %d = %#x after punching [%d, %d); want %#x", i, b, page, 2*page, want)
		}
	}

	for _, r := range [][2]int64{{-1, 1}, {0, 4*page + 1}, {3 * page, 1}, {page, -5}} {
		if err := seg.PunchHole(r[0], r[1]); err == nil {
			t.Errorf("PunchHole(%d, %d) outside the segment succeeded", r[0], r[1])
		}
	}
}

func TestRecvFDsClosesExtras(t *testing.T) {
	a, b := socketPair(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	wfd := int(w.Fd())
	if err := SendFDs(a, []byte("three"), wfd, wfd, wfd); err != nil {
		t.Fatal(err)
	}
	w.Close()

	n, fds, err := RecvFDs(b, make([]byte, 8), 1)
	if err != nil || n != 5 || len(fds) != 1 {
		t.Fatalf("RecvFDs = %d, %v, %v; want 5 bytes and 1 fd", n, fds, err)
	}
	unix.Close(fds[0])
	// Every write end is now closed only if RecvFDs closed the two extra
	// copies; otherwise the read blocks until the deadline.
	if err := r.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("read from pipe = %v; want EOF (an extra descriptor was left open)", err)
	}

	// A message longer than the buffer on SOCK_SEQPACKET is an error.
	if err := SendFDs(a, []byte("too long for it")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := RecvFDs(b, make([]byte, 4), 1); err == nil {
		t.Error("RecvFDs accepted a truncated message")
	}
}
