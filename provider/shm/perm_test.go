package shm

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/ibex-rdma/ibex/verbs"
)

// TestCrossUserWrite: a peer running as another user (nobody) may write
// into memory this process allocated in its pool (AllocMR: the peer maps
// it), but the kernel forbids process_vm_writev into this process's
// ordinary memory. That WRITE must fail with REM_ACCESS_ERR and a cause
// naming the kernel's refusal, and leave the memory alone.
func TestCrossUserWrite(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: CAP_SETUID/CAP_SETGID to start the peer as nobody")
	}
	// nobody cannot reach the go build cache: give it a world-readable
	// copy of the test binary.
	dir, err := os.MkdirTemp("", "shm-perm-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	exe := filepath.Join(dir, "shm.test")
	if err := copyExe(exe, os.Args[0]); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		pool  bool
		want  verbs.WCStatus
		cause string
	}{
		{"pool", true, verbs.WCSuccess, "<nil>"},
		{"gomem", false, verbs.WCRemAccessErr, "not permitted"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, err := newEnd(1<<16, c.pool, verbs.QPCap{})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := e.close(); err != nil {
					t.Error(err)
				}
			}()
			buf := e.mr.Bytes()
			for i := range buf {
				buf[i] = 0x5a
			}
			cmd := exec.Command(exe, "-test.run=^$")
			cmd.Dir = dir
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			ch := startChildCmd(t, "write-once", false, cmd)
			ch.connect(t, e)
			line, err := ch.out.ReadString('\n')
			if err != nil {
				t.Fatalf("child's result: %v", err)
			}
			st, cause, _ := strings.Cut(strings.TrimSpace(line), "|")
			t.Logf("WRITE from a peer running as nobody into %s memory of root: %s, cause %s", c.name, st, cause)
			if st != c.want.String() || !strings.Contains(cause, c.cause) {
				t.Fatalf("got %s (%s), want %v with a cause containing %q", st, cause, c.want, c.cause)
			}
			wantByte := byte(0xee)
			if c.want != verbs.WCSuccess {
				wantByte = 0x5a
			}
			if !bytes.Equal(buf[:64], bytes.Repeat([]byte{wantByte}, 64)) {
				t.Fatalf("memory after the WRITE: % x", buf[:8])
			}
			runtime.KeepAlive(buf)
		})
	}
}

func copyExe(dst, src string) error {
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
