package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStoreCLI: `ibex store serve` in a child process on shm0; ls, get
// (a whole file to -o, a range to stdout, in both modes) and bench --json
// against it from this process; SIGTERM ends the server with its summary.
func TestStoreCLI(t *testing.T) {
	dir := t.TempDir()
	data := map[string][]byte{}
	for i, n := range []int{300_000, 1000, 70_000} {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(j*7 + i)
		}
		name := []string{"a.bin", "sub/b.txt", "c.bin"}[i]
		data[name] = b
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := childCommand(ctx, nil, "store", "serve", dir, "--listen", "127.0.0.122:0", "-d", "shm0", "--pool", "1M", "--chunk", "64K")
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	rd := bufio.NewReader(out)
	line, err := rd.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^serving 3 files, 0\.000 GB \(371000 bytes\) of .* on (127\.0\.0\.122:\d+), device shm0$`).FindStringSubmatch(strings.TrimSpace(line))
	if m == nil {
		t.Fatalf("serve said %q", line)
	}
	addr := m[1]
	if line, _ = rd.ReadString('\n'); !strings.HasPrefix(line, "pool 1M registered: 16 buffers of 64K (page cache)") {
		t.Fatalf("serve said %q", line)
	}

	ls, err := run(t, "store", "ls", "--server", addr, "-d", "shm0")
	if err != nil {
		t.Fatal(err)
	}
	want := "      300000  a.bin\n       70000  c.bin\n        1000  sub/b.txt\n3 files, 371000 bytes (0.000 GB)\n"
	if ls != want {
		t.Fatalf("ls:\n%s\nwant:\n%s", ls, want)
	}
	for _, mode := range []string{"read", "write"} {
		o := filepath.Join(t.TempDir(), "a.out")
		if _, err := run(t, "store", "get", "--server", addr, "-d", "shm0", "--mode", mode, "a.bin", "-o", o); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(o); !bytes.Equal(got, data["a.bin"]) {
			t.Fatalf("%s: get a.bin: %d bytes differ from the file", mode, len(got))
		}
		got, err := run(t, "store", "get", "--server", addr, "-d", "shm0", "--mode", mode, "sub/b.txt", "--offset", "10", "--length", "500")
		if err != nil || got != string(data["sub/b.txt"][10:510]) {
			t.Fatalf("%s: get a range: %v", mode, err)
		}
	}
	if _, err := run(t, "store", "get", "--server", addr, "-d", "shm0", "nope"); err == nil || !strings.Contains(err.Error(), "nope: no such file") {
		t.Fatalf("get of a missing file: %v", err)
	}
	js, err := run(t, "store", "bench", "--server", addr, "-d", "shm0", "--mode", "write", "--size", "64K", "--batch", "4", "--duration", "300ms", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(js), &res); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"bytes", "seconds", "gbps", "reads_per_sec", "client_cpu_s_per_gb"} {
		if v, ok := res[k].(float64); !ok || v <= 0 {
			t.Fatalf("bench JSON %s = %v: %s", k, res[k], js)
		}
	}
	if err := srv.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, _ := rd.ReadString('\n')
	if err := srv.Wait(); err != nil {
		t.Fatalf("serve after SIGTERM: %v (%q)", err, rest)
	}
	if !strings.HasPrefix(rest, "served ") {
		t.Fatalf("serve's summary %q", rest)
	}
}

// TestStoreFlags: bad values are refused naming the flag or field.
func TestStoreFlags(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"store", "serve", dir, "--chunk", "1K", "-d", "loop0"}, "ChunkBytes 1024"},
		{[]string{"store", "serve", dir, "--pool", "1M", "--chunk", "2M", "-d", "loop0"}, "PoolBytes 1048576"},
		{[]string{"store", "serve", dir, "--pool", "lots"}, "invalid argument \"lots\""},
		{[]string{"store", "ls", "--server", "127.0.0.122:1", "--mode", "sideways"}, "mode \"sideways\""},
		{[]string{"store", "ls"}, "\"server\" not set"},
	} {
		_, err := run(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}
