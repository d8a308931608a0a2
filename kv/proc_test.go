package kv_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/ibex-rdma/ibex/kv"
	_ "github.com/ibex-rdma/ibex/provider/shm"
	"github.com/ibex-rdma/ibex/provider/udp"
)

// Tests that need other processes start this test binary again with
// IBEX_KV_CHILD set to a role:
//
//   - server: serves IBEX_KV_DEVICE, prints "addr HOST:PORT", and exits
//     when its stdin closes (or is killed).
//   - writer: runs writeLoop against IBEX_KV_SERVER for keys
//     [IBEX_KV_FROM, IBEX_KV_TO) until its stdin closes (at most
//     IBEX_KV_FOR), with the progress table
//     in the file IBEX_KV_PROGRESS (mapped shared), and prints "puts N".
//   - putter: PUTs 300 KiB values (which the server READs from it) to
//     IBEX_KV_SERVER until killed; prints "putting" after a few.
func TestMain(m *testing.M) {
	if role := os.Getenv("IBEX_KV_CHILD"); role != "" {
		if err := childMain(role); err != nil {
			fmt.Fprintln(os.Stderr, "kv child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/ibex-rdma/ibex/provider/udp.(*device).loop"))
}

func childMain(role string) error {
	env := func(k string) string { return os.Getenv(k) }
	switch role {
	case "server":
		cfg := kv.ServerConfig{Device: env("IBEX_KV_DEVICE"), Listen: env("IBEX_KV_LISTEN"), Index: 8 << 20, Values: 64 << 20,
			Buckets: 16, LoadFactor: 0.3, Quarantine: time.Millisecond, MaxValue: 1<<20 + 64}
		srv, err := kv.NewServer(cfg)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			cancel()
		}()
		fmt.Printf("addr %s\n", srv.Addr())
		return srv.Serve(ctx)
	case "writer":
		from, _ := strconv.Atoi(env("IBEX_KV_FROM"))
		to, _ := strconv.Atoi(env("IBEX_KV_TO"))
		d, err := time.ParseDuration(env("IBEX_KV_FOR"))
		if err != nil {
			return err
		}
		p, unmap, err := mapProgress(env("IBEX_KV_PROGRESS"), 0)
		if err != nil {
			return err
		}
		defer unmap()
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			cancel()
		}()
		c, err := kv.Dial(ctx, kv.ClientConfig{Server: env("IBEX_KV_SERVER"), Device: env("IBEX_KV_DEVICE")})
		if err != nil {
			return err
		}
		defer c.Close()
		n, err := writeLoop(ctx, c, p, from, to)
		fmt.Printf("puts %d\n", n)
		return err
	case "putter":
		// PUTs of values the server READs from this process, until it is
		// killed.
		c, err := kv.Dial(context.Background(), kv.ClientConfig{Server: env("IBEX_KV_SERVER"), Device: env("IBEX_KV_DEVICE")})
		if err != nil {
			return err
		}
		val := make([]byte, 300<<10)
		for i := 0; ; i++ {
			if err := c.Put(context.Background(), []byte(fmt.Sprintf("putter-%d", i%8)), val); err != nil {
				return err
			}
			if i == 8 {
				fmt.Println("putting")
			}
		}
	}
	return fmt.Errorf("unknown role %q", role)
}

// mapProgress maps a progress table of n keys in file path (n 0: the
// file's size), shared with other processes.
func mapProgress(path string, nkeys int) (progress, func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	size := int64(nkeys * 16)
	if nkeys > 0 {
		if err := f.Truncate(size); err != nil {
			return nil, nil, err
		}
	} else if fi, err := f.Stat(); err != nil {
		return nil, nil, err
	} else {
		size = fi.Size()
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return progressOf(b), func() { _ = unix.Munmap(b) }, nil
}

// proc is a child process.
type proc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startProc(t testing.TB, role string, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "IBEX_KV_CHILD="+role), env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, in: in, out: bufio.NewReader(out)}
	t.Cleanup(func() {
		// A closed stdin asks the child to finish; what it would still
		// tidy (its device's teardown) is not this test's business.
		_ = in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(100 * time.Millisecond):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return p
}

// line reads the child's next line with the given prefix.
func (p *proc) line(t testing.TB, prefix string) string {
	t.Helper()
	type res struct {
		s   string
		err error
	}
	ch := make(chan res, 1)
	go func() {
		for {
			s, err := p.out.ReadString('\n')
			if err != nil || strings.HasPrefix(s, prefix) {
				ch <- res{strings.TrimSpace(strings.TrimPrefix(s, prefix)), err}
				return
			}
		}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("child %v: reading %q: %v", p.cmd.Args, prefix, r.err)
		}
		return r.s
	case <-time.After(30 * time.Second):
		t.Fatalf("child: no %q line in 30 s", prefix)
	}
	return ""
}

// fabric names the devices of a cross-process test: the server's and
// writer's (children, by environment) and the parent's.
type fabric struct {
	serverEnv, writerEnv []string
	device               string
}

var udpOnce sync.Once

func fabricFor(t *testing.T, name string) fabric {
	switch name {
	case "shm0":
		return fabric{serverEnv: []string{"IBEX_KV_DEVICE=shm0"}, writerEnv: []string{"IBEX_KV_DEVICE=shm0"}, device: "shm0"}
	case "udp0":
		var err error
		udpOnce.Do(func() { err = udp.AddDevice("kvtest0", netip.MustParseAddrPort("127.0.0.133:4791")) })
		if err != nil {
			t.Fatal(err)
		}
		return fabric{
			serverEnv: []string{"IBEX_KV_DEVICE=udp0", "IBEX_UDP_ADDR=127.0.0.131", "IBEX_KV_LISTEN=127.0.0.131:0"},
			writerEnv: []string{"IBEX_KV_DEVICE=udp0", "IBEX_UDP_ADDR=127.0.0.132"},
			device:    "kvtest0",
		}
	}
	t.Fatalf("no fabric %q", name)
	return fabric{}
}

// TestRaceProcesses: the race check with the server, a writer and the
// readers in three processes (readers here), over shm0 (the readers copy
// straight from the server's mapped memory while it writes) and udp0.
func TestRaceProcesses(t *testing.T) {
	for _, dev := range []string{"shm0", "udp0"} {
		t.Run(dev, func(t *testing.T) {
			fab := fabricFor(t, dev)
			const nkeys = 500
			srv := startProc(t, "server", fab.serverEnv...)
			addr := srv.line(t, "addr ")
			path := filepath.Join(t.TempDir(), "progress")
			p, unmap, err := mapProgress(path, nkeys)
			if err != nil {
				t.Fatal(err)
			}
			defer unmap()
			w := startProc(t, "writer", append(fab.writerEnv, "IBEX_KV_SERVER="+addr, "IBEX_KV_PROGRESS="+path,
				"IBEX_KV_FROM=0", fmt.Sprintf("IBEX_KV_TO=%d", nkeys), "IBEX_KV_FOR=30s")...)
			// 1.2 s, and then until 500 GETs were checked and 300 keys
			// written (the table has grown past 268: four resizes).
			raceRun(t, addr, fab.device, p, nkeys, 0, 2, 1200*time.Millisecond, func(gets int64) bool {
				return gets >= 500 && written(p, nkeys) >= 300
			})
			_ = w.in.Close()
			puts := w.line(t, "puts ")
			c := dial(t, kv.ClientConfig{Server: addr, Device: fab.device})
			st, err := c.ServerStats(testCtx(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("writer: %s PUTs; server: %d puts, %d resizes, %d buckets, %d keys, %d GET-unrelated requests",
				puts, st.Puts, st.Resizes, st.Buckets, st.Keys, st.Requests)
			if st.Resizes < 2 {
				t.Errorf("%d resizes during the race, want ≥ 2", st.Resizes)
			}
		})
	}
}

// TestDyingClient: a client process SIGKILLed in the middle of PUTs whose
// values the server READs from it costs the server nothing else: it drops
// the client, frees the entry it was filling, and serves others.
func TestDyingClient(t *testing.T) {
	fab := fabricFor(t, "shm0")
	srv := startProc(t, "server", fab.serverEnv...)
	addr := srv.line(t, "addr ")
	c := dial(t, kv.ClientConfig{Server: addr, Device: fab.device})
	ctx := testCtx(t)
	for round := 0; round < 3; round++ {
		p := startProc(t, "putter", append(fab.writerEnv, "IBEX_KV_SERVER="+addr)...)
		p.line(t, "putting")
		time.Sleep(20 * time.Millisecond)
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = p.cmd.Wait()
	}
	var st kv.ServerStats
	waitFor(t, "the killed clients dropped", func() bool {
		var err error
		st, err = c.ServerStats(ctx)
		return err == nil && st.Clients == 1
	})
	// Eight keys of 300 KiB (one entry each) and nothing else held.
	if st.Keys != 8 || st.ArenaUsed > 8*(300<<10+64<<10) {
		t.Fatalf("after the killed clients: %d keys, %d arena bytes in use", st.Keys, st.ArenaUsed)
	}
	if err := c.Put(ctx, []byte("after"), []byte("fine")); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 8)
	if n, found, err := c.Get(ctx, []byte("after"), dst); err != nil || !found || string(dst[:n]) != "fine" {
		t.Fatalf("get after: %q %v %v", dst[:n], found, err)
	}
	t.Logf("server after 3 killed clients: %d clients total, %d remote reads, %d keys", st.ClientsTotal, st.RemoteReads, st.Keys)
}

// written counts the keys with a completed PUT.
func written(p progress, nkeys int) int {
	n := 0
	for k := 0; k < nkeys; k++ {
		if p.completed(k).Load() > 0 {
			n++
		}
	}
	return n
}
