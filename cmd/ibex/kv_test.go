package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKVCLI: `ibex kv serve` in a child process on shm0; put, get, del
// and stats from other processes, then bench --json against it (its
// GETs never reach the server: server_requests counts only its own
// STATS), and against redis-server and memcached when they are installed;
// SIGTERM ends the server.
func TestKVCLI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srv := childCommand(ctx, nil, "kv", "serve", "--listen", "127.0.0.137:0", "-d", "shm0", "--index", "1M", "--values", "16M", "--max-value", "1M")
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^kv: serving on (127\.0\.0\.137:\d+), device shm0, index 1M, values 16M$`).FindStringSubmatch(strings.TrimSpace(line))
	if m == nil {
		t.Fatalf("serve said %q", line)
	}
	addr := m[1]
	cli := func(args ...string) []string { return append(args, "--server", addr, "-d", "shm0") }

	if o, e, code := runMain(t, cli("kv", "put", "greeting", "hello, world")...); code != 0 {
		t.Fatalf("put: %d %q %q", code, o, e)
	}
	if o, e, code := runMain(t, cli("kv", "get", "greeting")...); code != 0 || o != "hello, world" {
		t.Fatalf("get: %d %q %q", code, o, e)
	}
	if _, e, code := runMain(t, cli("kv", "get", "nothing")...); code != 1 || !strings.Contains(e, `"nothing": not found`) {
		t.Fatalf("get of a missing key: %d %q", code, e)
	}
	if o, e, code := runMain(t, cli("kv", "del", "greeting")...); code != 0 {
		t.Fatalf("del: %d %q %q", code, o, e)
	}
	if _, e, code := runMain(t, cli("kv", "del", "greeting")...); code != 1 || !strings.Contains(e, "not found") {
		t.Fatalf("second del: %d %q", code, e)
	}
	o, e, code := runMain(t, cli("kv", "stats")...)
	var st struct{ Puts, Deletes uint64 }
	if code != 0 || json.Unmarshal([]byte(o), &st) != nil || st.Puts != 1 || st.Deletes != 1 {
		t.Fatalf("stats: %d %q %q", code, o, e)
	}

	bench := func(target string) benchOut {
		t.Helper()
		o, e, code := runMain(t, "kv", "bench", "--target", target, "-d", "shm0", "--conns", "2", "--pipeline", "8",
			"--size", "100", "--keys", "500", "--get-ratio", "0.9", "--duration", "300ms", "--preload", "--seed", "3", "--json")
		var b benchOut
		if code != 0 || json.Unmarshal([]byte(o), &b) != nil {
			t.Fatalf("bench %s: %d %q %q", target, code, o, e)
		}
		if b.Ops == 0 || b.Gets == 0 || b.Sets == 0 || b.Misses != 0 || b.OpsPerSec <= 0 || b.P50 <= 0 || b.P99 < b.P50 || b.P999 < b.P99 {
			t.Fatalf("bench %s: %+v", target, b)
		}
		t.Logf("%s: %.0f ops/s, p50 %.1f µs, p99 %.1f µs", target, b.OpsPerSec, b.P50, b.P99)
		return b
	}
	b := bench("ibex://" + addr)
	if b.ServerCPU == nil || b.ServerRequests == nil || *b.ServerRequests != b.Sets+1 {
		t.Fatalf("bench ibex: server cpu %v, requests %v for %d sets", b.ServerCPU, b.ServerRequests, b.Sets)
	}
	if _, e, code := runMain(t, "kv", "bench", "--target", "gopher://x"); code != 1 || !strings.Contains(e, "want ibex, redis or memcached") {
		t.Fatalf("bad target: %d %q", code, e)
	}

	for _, peer := range []struct{ name, bin string }{{"redis", "redis-server"}, {"memcached", "memcached"}} {
		path, err := exec.LookPath(peer.bin)
		if err != nil {
			t.Logf("%s not installed: not compared", peer.bin)
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.137:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		var args []string
		if peer.name == "redis" {
			args = []string{"--bind", "127.0.0.137", "--port", fmt.Sprint(port), "--save", "", "--appendonly", "no"}
		} else {
			args = []string{"-l", "127.0.0.137", "-p", fmt.Sprint(port), "-U", "0", "-u", "nobody"}
		}
		p := exec.CommandContext(ctx, path, args...)
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		target := fmt.Sprintf("%s://127.0.0.137:%d", peer.name, port)
		for i := 0; ; i++ {
			c, err := net.Dial("tcp", target[len(peer.name)+3:])
			if err == nil {
				c.Close()
				break
			}
			if i == 200 {
				t.Fatalf("%s did not listen", peer.bin)
			}
			time.Sleep(10 * time.Millisecond)
		}
		b := bench(target)
		_ = p.Process.Kill()
		_ = p.Wait()
		if b.ServerCPU != nil {
			t.Fatalf("%s: a server CPU figure", target)
		}
	}

	if err := srv.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := srv.Wait(); err != nil {
		t.Fatalf("serve after SIGTERM: %v", err)
	}
}

type benchOut struct {
	Ops, Gets, Sets, Misses uint64
	OpsPerSec               float64  `json:"ops_per_sec"`
	P50                     float64  `json:"p50_us"`
	P99                     float64  `json:"p99_us"`
	P999                    float64  `json:"p999_us"`
	ServerCPU               *float64 `json:"server_cpu_s_per_million_gets"`
	ServerRequests          *uint64  `json:"server_requests"`
}
