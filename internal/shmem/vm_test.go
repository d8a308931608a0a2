//go:build linux

package shmem

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

const vmBufLen = 1 << 16

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

func vmPattern(i int) byte { return byte(i*13 + i>>9) }

// childVM holds a buffer with a known pattern, prints "pid addr len", and
// prints the buffer in hex for every line it reads, until stdin closes.
func childVM() error {
	buf := make([]byte, vmBufLen)
	for i := range buf {
		buf[i] = vmPattern(i)
	}
	fmt.Printf("%d %d %d\n", os.Getpid(), addrOf(buf), len(buf))
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		fmt.Println(hex.EncodeToString(buf))
	}
	runtime.KeepAlive(buf)
	return in.Err()
}

// childVMWrite tries to write into the process and address named by
// IBEX_SHMEM_TARGET and prints what the error was.
func childVMWrite() error {
	var pid int
	var addr uint64
	if _, err := fmt.Sscan(os.Getenv("IBEX_SHMEM_TARGET"), &pid, &addr); err != nil {
		return err
	}
	err := WriteTo(pid, addr, [][]byte{[]byte("intruder")})
	fmt.Printf("permission=%t eperm=%t\n%v\n", errors.Is(err, ErrPermission), errors.Is(err, unix.EPERM), err)
	return nil
}

// splitRandom cuts b into n slices of random lengths (some empty).
func splitRandom(rng *rand.Rand, b []byte, n int) [][]byte {
	cuts := make([]int, n-1)
	for i := range cuts {
		cuts[i] = rng.IntN(len(b) + 1)
	}
	cuts = append(cuts, 0, len(b))
	sortInts(cuts)
	out := make([][]byte, n)
	for i := range out {
		out[i] = b[cuts[i]:cuts[i+1]]
	}
	return out
}

func sortInts(a []int) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

func TestVMAcrossProcesses(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 2))

	cmd := childCmd("", "vm")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("child: %v\n%s", err, stderr.Bytes())
		}
	}()
	out := bufio.NewReader(stdout)
	var pid, n int
	var addr uint64
	if _, err := fmt.Fscanln(out, &pid, &addr, &n); err != nil || pid != cmd.Process.Pid || n != vmBufLen {
		t.Fatalf("child said pid %d addr %#x len %d (%v); want pid %d len %d", pid, addr, n, err, cmd.Process.Pid, vmBufLen)
	}
	// childSees asks the child to print its buffer.
	childSees := func() []byte {
		t.Helper()
		if _, err := io.WriteString(stdin, "dump\n"); err != nil {
			t.Fatal(err)
		}
		line, err := out.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		b, err := hex.DecodeString(strings.TrimSpace(line))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	// Read the child's pattern into few and into more slices than one
	// syscall takes (iovBatch) and than IOV_MAX.
	want := make([]byte, vmBufLen)
	for i := range want {
		want[i] = vmPattern(i)
	}
	for _, pieces := range []int{1, 3, iovBatch, iovBatch + 1, 2000} {
		got := make([]byte, vmBufLen)
		if err := ReadFrom(pid, addr, splitRandom(rng, got, pieces)); err != nil {
			t.Fatalf("ReadFrom in %d pieces: %v", pieces, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("ReadFrom in %d pieces: bytes differ from the child's", pieces)
		}
	}

	// Write new contents, at an offset, in many pieces; the child must see them.
	for _, pieces := range []int{1, 7, 2000} {
		src := make([]byte, vmBufLen/2)
		for i := range src {
			src[i] = byte(rng.Uint32())
		}
		const at = 1000
		if err := WriteTo(pid, addr+at, splitRandom(rng, src, pieces)); err != nil {
			t.Fatalf("WriteTo in %d pieces: %v", pieces, err)
		}
		copy(want[at:], src)
		if !bytes.Equal(childSees(), want) {
			t.Fatalf("after WriteTo in %d pieces the child sees different bytes", pieces)
		}
	}

	if err := WriteTo(pid, addr, nil); err != nil {
		t.Errorf("WriteTo of nothing: %v", err)
	}
	if err := ReadFrom(pid, addr, [][]byte{{}, {}}); err != nil {
		t.Errorf("ReadFrom into empty slices: %v", err)
	}
}

func TestVMNoProcess(t *testing.T) {
	cmd := childCmd("", "exit")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	// Reaped, so the pid names no process (until it is reused, which takes
	// the kernel a whole lap of pid_max).
	pid := cmd.Process.Pid
	err := ReadFrom(pid, 0x10000, [][]byte{make([]byte, 8)})
	if !errors.Is(err, ErrNoProcess) || !errors.Is(err, unix.ESRCH) {
		t.Fatalf("ReadFrom an exited pid = %v; want ErrNoProcess and ESRCH", err)
	}
	if want := fmt.Sprintf("process %d no longer exists", pid); !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
}

// TestVMFault reads across the end of a mapping: the first page arrives
// (a partial transfer the loop must take), then the fault is reported with
// how far it got.
func TestVMFault(t *testing.T) {
	page := os.Getpagesize()
	mem, err := unix.Mmap(-1, 0, 2*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	for i := range page {
		mem[i] = 0x5A
	}
	if err := unix.Mprotect(mem[page:], unix.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 2*page)
	err = ReadFrom(os.Getpid(), addrOf(mem), [][]byte{got[:100], got[100:]})
	var ve *VMError
	if !errors.As(err, &ve) || !errors.Is(err, ErrFault) || !errors.Is(err, unix.EFAULT) {
		t.Fatalf("ReadFrom across a PROT_NONE page = %v; want a VMError wrapping ErrFault and EFAULT", err)
	}
	if ve.Done != uint64(page) || !bytes.Equal(got[:page], mem[:page]) {
		t.Errorf("transferred %d bytes before the fault; want the first page (%d)", ve.Done, page)
	}
	for _, want := range []string{"process_vm_readv from pid", fmt.Sprintf("%#x+%d", addrOf(mem), 2*page), "not mapped in pid"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestVMPermission has an unprivileged child try to write into this (root)
// process's memory; the kernel's ptrace access check must refuse it.
func TestVMPermission(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: CAP_SETUID/CAP_SETGID to start the child as nobody (and our CAP_SYS_PTRACE is what the child lacks)")
	}
	// The child runs as nobody, who cannot reach the go build cache: give it
	// a world-readable copy of the test binary.
	dir, err := os.MkdirTemp("", "shmem-vm-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	exe := filepath.Join(dir, "shmem.test")
	if err := copyFile(exe, os.Args[0]); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}

	target := bytes.Repeat([]byte("root's"), 8)
	before := bytes.Clone(target)
	cmd := childCmd(exe, "vmwrite", fmt.Sprintf("IBEX_SHMEM_TARGET=%d %d", os.Getpid(), addrOf(target)))
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("child: %v\n%s", err, ee.Stderr)
		}
		if errors.Is(err, unix.EPERM) {
			t.Skipf("cannot start a child as nobody (no CAP_SETUID/CAP_SETGID here?): %v", err)
		}
		t.Fatal(err)
	}
	runtime.KeepAlive(target)
	lines := strings.SplitN(string(out), "\n", 2)
	t.Logf("child (nobody) got: %s", lines[len(lines)-1])
	if lines[0] != "permission=true eperm=true" {
		t.Errorf("child's WriteTo error: %s; want it to wrap ErrPermission and EPERM", out)
	}
	if len(lines) < 2 || !strings.Contains(lines[1], "not permitted") || !strings.Contains(lines[1], "CAP_SYS_PTRACE") {
		t.Errorf("child's error message %q should say \"not permitted\" and why", out)
	}
	if !bytes.Equal(target, before) {
		t.Errorf("an unprivileged child changed our memory to %q", target)
	}
}

func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// TestVMAllocs pins the hot-path promise: no allocation for any number of
// slices, including more than one syscall's batch.
func TestVMAllocs(t *testing.T) {
	const piece = 64
	pid := os.Getpid()
	src := make([]byte, 40*piece)
	dst := make([]byte, 40*piece)
	for k := 1; k <= 40; k++ {
		local := make([][]byte, k)
		for i := range local {
			local[i] = src[i*piece : (i+1)*piece]
		}
		var err error
		if a := testing.AllocsPerRun(20, func() { err = WriteTo(pid, addrOf(dst), local) }); a != 0 || err != nil {
			t.Errorf("WriteTo with %d slices: %v allocs/op, err %v; want 0, nil", k, a, err)
		}
		if a := testing.AllocsPerRun(20, func() { err = ReadFrom(pid, addrOf(dst), local) }); a != 0 || err != nil {
			t.Errorf("ReadFrom with %d slices: %v allocs/op, err %v; want 0, nil", k, a, err)
		}
	}
}

func TestAllowPtrace(t *testing.T) {
	if err := AllowPtrace(); err != nil {
		t.Fatal(err)
	}
}
