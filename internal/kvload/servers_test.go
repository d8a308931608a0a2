package kvload

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// freeAddr is a 127.0.0.1 port nobody listens on (for a moment).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startServer runs bin (skipping the test, naming it, if it is not
// installed) with args built for addr's host and port, waits until addr
// accepts, and stops it when the test ends.
func startServer(t *testing.T, bin, pkg string, args func(host, port string) []string) string {
	t.Helper()
	path, err := exec.LookPath(bin)
	if err != nil {
		t.Skipf("%s not installed (apt-get install %s)", bin, pkg)
	}
	addr := freeAddr(t)
	host, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(path, args(host, port)...)
	cmd.Dir = t.TempDir()
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	for deadline := time.Now().Add(5 * time.Second); ; {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return addr
		}
		select {
		case <-exited:
			t.Fatalf("%s %v exited: %v\n%s", bin, cmd.Args[1:], waitErr, out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-exited
			t.Fatalf("%s did not listen on %s within 5s\n%s", bin, addr, out.String())
		}
	}
}

func startRedis(t *testing.T) string {
	return startServer(t, "redis-server", "redis-server", func(host, port string) []string {
		return []string{"--bind", host, "--port", port, "--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", ""}
	})
}

func startMemcached(t *testing.T) string {
	return startServer(t, "memcached", "memcached", func(host, port string) []string {
		args := []string{"-l", host, "-p", port, "-U", "0", "-t", "1", "-m", "16", "-I", "1k", "-o", "slab_chunk_max=512"}
		if os.Geteuid() == 0 {
			args = append(args, "-u", "nobody") // it refuses to run as root otherwise
		}
		return args
	})
}

// raw sends one text line to addr and returns the reply's first line.
func raw(t *testing.T, addr, line string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "%s\r\n", line)
	reply, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(reply)
}

func do(t *testing.T, c Client, ops ...Op) ([]Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res := make([]Result, len(ops))
	return res, c.Do(ctx, ops, res)
}

func get(k string) Op        { return Op{Kind: Get, Key: []byte(k)} }
func set(k string, n int) Op { return Op{Kind: Set, Key: []byte(k), Value: make([]byte, n)} }
func dial(t *testing.T, d Dialer) Client {
	t.Helper()
	c, err := d(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// testServer is what both servers must do: a pipeline of SETs and GETs with
// hits and a miss, then Run with a preload.
func testServer(t *testing.T, d Dialer) {
	c := dial(t, d)
	res, err := do(t, c, set("a", 10), set("b", 500), get("a"), get("b"), get("nope"), set("a", 3), get("a"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Result{{true, 0}, {true, 0}, {true, 10}, {true, 500}, {false, 0}, {true, 0}, {true, 3}}
	for i := range want {
		if res[i] != want[i] {
			t.Errorf("op %d: %+v, want %+v", i, res[i], want[i])
		}
	}
	r, err := Run(context.Background(), Config{Conns: 4, Pipeline: 16, Requests: 2000, Keys: 500, Preload: true, ValueSize: 700}, d)
	if err != nil {
		t.Fatal(err)
	}
	if r.Ops != 8000 || r.Misses != 0 || r.Gets < 6800 {
		t.Errorf("%v: want 8000 ops, ~90%% GETs, no misses after the preload", r)
	}
	t.Log(r)
}

func TestRedis(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the server's cleanup
	addr := startRedis(t)
	d := DialRedis(addr)
	testServer(t, d)

	// An error reply names the server and the command, and the replies
	// after it are still read: the connection goes on.
	if r := raw(t, addr, "LPUSH key:list x"); r != ":1" {
		t.Fatalf("LPUSH: %q", r)
	}
	c := dial(t, d)
	res, err := do(t, c, set("x", 5), get("key:list"), get("x"))
	var se *ServerError
	if !errors.As(err, &se) || !errors.Is(err, ErrServer) || !strings.HasPrefix(se.Msg, "WRONGTYPE") ||
		!strings.Contains(err.Error(), "redis "+addr+": GET key:list: WRONGTYPE") {
		t.Fatalf("GET of a list: %v, want a ServerError naming redis %s and GET key:list", err, addr)
	}
	if res[2] != (Result{true, 5}) {
		t.Errorf("the GET after the error: %+v", res[2])
	}
	if _, err := do(t, c, get("x")); err != nil {
		t.Errorf("the connection after an error reply: %v", err)
	}
	// A run that meets it stops with it.
	_, err = Run(context.Background(), Config{Keys: 1, GetRatio: 1, Requests: 10}, func(ctx context.Context) (Client, error) {
		return &renamed{dial(t, d), "key:list"}, nil
	})
	if !errors.Is(err, ErrServer) || !strings.Contains(err.Error(), "conn 0") {
		t.Errorf("Run: %v", err)
	}
}

// renamed sends every op to one key.
type renamed struct {
	Client
	key string
}

func (r *renamed) Do(ctx context.Context, ops []Op, res []Result) error {
	for i := range ops {
		ops[i].Key = []byte(r.key)
	}
	return r.Client.Do(ctx, ops, res)
}

func TestMemcached(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	addr := startMemcached(t)
	d := DialMemcached(addr)
	testServer(t, d)

	// memcached -I 1k refuses a 2000 B value with SERVER_ERROR and
	// swallows its data: the replies after it are read.
	c := dial(t, d)
	res, err := do(t, c, set("y", 5), set("big", 2000), get("y"))
	var se *ServerError
	if !errors.As(err, &se) || !strings.HasPrefix(se.Msg, "SERVER_ERROR") ||
		!strings.Contains(err.Error(), "memcached "+addr+": set big: SERVER_ERROR") {
		t.Fatalf("set of 2000 B under -I 1k: %v, want a ServerError naming memcached %s and set big", err, addr)
	}
	if res[2] != (Result{true, 5}) {
		t.Errorf("the get after the error: %+v", res[2])
	}
	// A key with a space breaks the command line: CLIENT_ERROR or ERROR,
	// and the connection is dropped.
	c = dial(t, d)
	_, err = do(t, c, set("two words", 5))
	if !errors.As(err, &se) || !strings.Contains(se.Msg, "ERROR") || !strings.Contains(err.Error(), "set two words") {
		t.Fatalf("set of a key with a space: %v", err)
	}
	if _, err := do(t, c, get("y")); err == nil || !strings.Contains(err.Error(), "unusable") {
		t.Errorf("the connection after CLIENT_ERROR: %v, want it unusable", err)
	}
}

// silent is a server that accepts and reads but never replies, or replies
// reply to every line.
func silent(t *testing.T, reply string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { l.Close(); <-done })
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			go func() {
				s := bufio.NewScanner(c)
				for s.Scan() {
					if reply != "" {
						c.Write([]byte(reply))
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

func TestClientContext(t *testing.T) {
	for name, d := range map[string]func(string) Dialer{"redis": DialRedis, "memcached": DialMemcached} {
		t.Run(name, func(t *testing.T) {
			c := dial(t, d(silent(t, "")))
			// Cancellation interrupts a blocked read.
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
			start := time.Now()
			err := c.Do(ctx, []Op{get("a")}, make([]Result, 1))
			if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), name+" 127.0.0.1:") {
				t.Errorf("cancelled Do: %v, want context.Canceled naming the server", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("cancelled Do returned after %v", d)
			}
			// A deadline bounds it.
			c = dial(t, d(silent(t, "")))
			ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			if err := c.Do(ctx, []Op{get("a")}, make([]Result, 1)); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Do past its deadline: %v", err)
			}
			// A reply outside the protocol is an ErrProtocol naming the
			// command.
			c = dial(t, d(silent(t, "?what\r\n")))
			if _, err := do(t, c, get("k")); !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "k: unexpected reply \"?what\"") {
				t.Errorf("garbage reply: %v", err)
			}
			// Dialling a closed port names the server.
			addr := freeAddr(t)
			if _, err := d(addr)(context.Background()); err == nil || !strings.Contains(err.Error(), name+" "+addr) {
				t.Errorf("dial of a closed port: %v", err)
			}
		})
	}
}

func TestClientAllocs(t *testing.T) {
	addr := startRedis(t)
	for name, d := range map[string]Dialer{"redis": DialRedis(addr), "memcached": DialMemcached(startMemcached(t))} {
		cfg, _ := Config{Pipeline: 16, Keys: 100}.withDefaults()
		w := newWorker(0, dial(t, d), &cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if a := testing.AllocsPerRun(200, func() {
			if err := w.step(ctx, 16); err != nil {
				t.Fatal(err)
			}
		}); a != 0 {
			t.Errorf("%s: a Do of 16 ops allocates %v times", name, a)
		}
	}
}
