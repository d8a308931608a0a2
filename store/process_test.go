package store

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ibex-rdma/ibex/provider/udp"
)

// TestMain runs a child role when the test binary is started as one
// (STORE_CHILD), else the tests.
func TestMain(m *testing.M) {
	if role := os.Getenv("STORE_CHILD"); role != "" {
		if err := runChild(role); err != nil {
			fmt.Fprintf(os.Stderr, "store child %s: %v\n", role, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// runChild is a client process: "verify" reads STORE_ROUNDS random batches
// and checks them against the files in STORE_DIR, then prints "ok";
// "loop" prints "running" after its first batch and reads until killed.
func runChild(role string) error {
	if role == "daemon" {
		return runDaemon()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	mode, err := ParseMode(os.Getenv("STORE_MODE"))
	if err != nil {
		return err
	}
	c, err := Dial(ctx, ClientConfig{Server: os.Getenv("STORE_ADDR"), Device: os.Getenv("STORE_DEV"), Mode: mode, Depth: 4})
	if err != nil {
		return err
	}
	defer c.Close()
	files := c.Files()
	want := map[string][]byte{}
	dir := os.Getenv("STORE_DIR")
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f.Name))
		if err != nil {
			return err
		}
		want[f.Name] = b
	}
	mem, err := c.Alloc(4 << 20)
	if err != nil {
		return err
	}
	rounds, _ := strconv.Atoi(os.Getenv("STORE_ROUNDS"))
	r := rand.New(rand.NewPCG(uint64(os.Getpid()), 1))
	for i := 0; role == "loop" || i < rounds; i++ {
		exts, dst := randomBatch(r, files, 64, 200_000, mem)
		if err := c.ReadBatch(ctx, exts, dst); err != nil {
			return err
		}
		if err := diffBatch(files, want, exts, dst); err != nil {
			return err
		}
		if i == 0 && role == "loop" {
			fmt.Println("running")
		}
	}
	fmt.Println("ok")
	return nil
}

type childProc struct {
	cmd *exec.Cmd
	out *bufio.Reader
}

func startChild(t *testing.T, role string, s *Server, dev, dir string, mode Mode, env ...string) *childProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "STORE_CHILD="+role, "STORE_ADDR="+s.Addr().String(), "STORE_DEV="+dev,
		"STORE_DIR="+dir, "STORE_MODE="+mode.String(), "STORE_ROUNDS=6")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &childProc{cmd: cmd, out: bufio.NewReader(out)}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return p
}

func (p *childProc) expect(t *testing.T, line string) {
	t.Helper()
	got, err := p.out.ReadString('\n')
	if strings.TrimSpace(got) != line {
		t.Fatalf("child said %q (%v), want %q", got, err, line)
	}
}

var (
	udpOnce sync.Once
	udpErr  error
)

// addUDP adds the udp device the servers of these tests use.
func addUDP() { udpErr = udp.AddDevice("st-udp120", netip.MustParseAddrPort("127.0.0.120:0")) }

// TestProcesses: a server in this process and clients in others, over
// shm0 and udp0 (devices on 127.0.0.120 and .121), in both modes, checked
// byte for byte by the child.
func TestProcesses(t *testing.T) {
	dir := t.TempDir()
	dataset(t, dir, testSizes, 7)
	udpOnce.Do(addUDP)
	if udpErr != nil {
		t.Fatal(udpErr)
	}
	for _, tc := range []struct {
		srvDev, cliDev string
		env            []string
	}{
		{"shm0", "shm0", nil},
		{"st-udp120", "udp0", []string{"IBEX_UDP_ADDR=127.0.0.121"}},
	} {
		t.Run(tc.cliDev, func(t *testing.T) {
			s := startServer(t, ServerConfig{Dir: dir, Device: tc.srvDev, PoolBytes: 2 << 20, ChunkBytes: 128 << 10})
			var wg sync.WaitGroup
			for _, mode := range []Mode{ModeRead, ModeWrite} {
				p := startChild(t, "verify", s, tc.cliDev, dir, mode, tc.env...)
				wg.Add(1)
				go func() {
					defer wg.Done()
					got, err := p.out.ReadString('\n')
					if strings.TrimSpace(got) != "ok" {
						t.Errorf("%s child: %q %v", mode, got, err)
					}
				}()
				if tc.cliDev == "udp0" {
					// One udp0 per address: the second child waits.
					wg.Wait()
				}
			}
			wg.Wait()
			waitPoolFull(t, s)
		})
	}
}

// TestClientKilled: a client process killed with SIGKILL while it holds
// pool buffers costs the server nothing: another client reading at the
// same time goes on, the dead client's buffers come back, the pool is full.
func TestClientKilled(t *testing.T) {
	dir := t.TempDir()
	want := dataset(t, dir, testSizes, 8)
	s := startServer(t, ServerConfig{Dir: dir, Device: "shm0", PoolBytes: 16 * 65536, ChunkBytes: 65536})
	p := startChild(t, "loop", s, "shm0", dir, ModeRead)
	p.expect(t, "running")

	// A client in this process reads throughout.
	c := dial(t, s, "shm0", ModeWrite, 4)
	mem, err := c.Alloc(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		r := rand.New(rand.NewPCG(9, 9))
		for {
			select {
			case <-stop:
				errc <- nil
				return
			default:
			}
			exts, dst := randomBatch(r, c.Files(), 32, 200_000, mem)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			err := c.ReadBatch(ctx, exts, dst)
			cancel()
			if err == nil {
				err = diffBatch(c.Files(), want, exts, dst)
			}
			if err != nil {
				errc <- err
				return
			}
		}
	}()
	// Kill it while it holds buffers.
	deadline := time.Now().Add(10 * time.Second)
	for held := 0; held == 0; {
		st := s.Stats()
		held = st.PoolBuffers - st.PoolFree
		if time.Now().After(deadline) {
			t.Fatal("the child never held a buffer")
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
	deadline = time.Now().Add(10 * time.Second)
	for s.Stats().Clients != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("server still has %d clients", s.Stats().Clients)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // the other client goes on
	close(stop)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	waitPoolFull(t, s)
}
