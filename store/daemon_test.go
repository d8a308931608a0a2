package store

import (
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/daemon"
	"github.com/ibex-rdma/ibex/provider/ibexd"
)

// runDaemon is the "daemon" child: an ibexd with udp0 on 127.0.0.127 on
// STORE_DAEMON_SOCK, until SIGTERM.
func runDaemon() error {
	cfg := daemon.DefaultConfig()
	cfg.Socket = os.Getenv("STORE_DAEMON_SOCK")
	cfg.Devices = []daemon.DeviceConfig{{Name: "udp0", Address: "127.0.0.127", XDP: "off"}}
	d, err := daemon.New(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	return d.Serve(ctx)
}

// TestDaemon: a client on ibexd/udp0 (an ibexd in this process, its udp0
// on 127.0.0.127) reads from a server on its own udp device (127.0.0.120),
// both modes, byte for byte: the client's memory is the daemon's to reach
// (Alloc is PD.AllocMR), and so is the server's pool when it runs there.
func TestDaemon(t *testing.T) {
	dir := t.TempDir()
	want := dataset(t, dir, testSizes, 12)
	// The daemon runs in a child: in this process its MRs' keys would
	// collide with the client's (one key table per process).
	sock := filepath.Join(t.TempDir(), "d.sock")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "STORE_CHILD=daemon", "STORE_DAEMON_SOCK="+sock, "IBEX_DAEMON=off")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := <-exited; err != nil {
			t.Errorf("daemon: %v", err)
		}
	}()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := ibexd.QueryStatus(sock, time.Second); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon does not answer")
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Setenv("IBEX_DAEMON_SOCKET", sock)
	udpOnce.Do(addUDP)
	if udpErr != nil {
		t.Fatal(udpErr)
	}
	s := startServer(t, ServerConfig{Dir: dir, Device: "st-udp120", PoolBytes: 2 << 20, ChunkBytes: 128 << 10})
	for _, mode := range []Mode{ModeRead, ModeWrite} {
		c := dial(t, s, "ibexd/udp0", mode, 4)
		mem, err := c.Alloc(4 << 20)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(13, uint64(mode)))
		bctx, bcancel := context.WithTimeout(context.Background(), 20*time.Second)
		for round := 0; round < 3; round++ {
			exts, dst := randomBatch(r, c.Files(), 64, 200_000, mem)
			if err := c.ReadBatch(bctx, exts, dst); err != nil {
				t.Fatal(err)
			}
			checkBatch(t, c.Files(), want, exts, dst)
		}
		bcancel()
		_ = c.Close()
	}
	waitPoolFull(t, s)
}
