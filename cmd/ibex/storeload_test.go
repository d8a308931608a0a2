package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ibex-rdma/ibex/store"
)

// runStoreLoad runs `ibex store load args...` and returns its output.
func runStoreLoadCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newStoreLoadCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

// storeLoadDir writes n shards of size bytes.
func storeLoadDir(t *testing.T, n, size int) string {
	t.Helper()
	dir := t.TempDir()
	for i := range n {
		b := bytes.Repeat([]byte{byte(i)}, size)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("s%02d.bin", i)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestStoreLoadLocal: --local, text and --json (the fields the issue
// names), with --search; no assertion on the machine's speed.
func TestStoreLoadLocal(t *testing.T) {
	dir := storeLoadDir(t, 3, 64<<10)
	out, err := runStoreLoadCmd(t, "--local", dir, "--sample-size", "4K", "--batch", "4", "--ahead", "2", "--compute", "100us")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"3 shards, 48 samples of 4K", "run: 12 batches, 48 samples", "AU "} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	out, err = runStoreLoadCmd(t, "--local", dir, "--sample-size", "4K", "--batch", "4", "--ahead", "2", "--compute", "200us",
		"--search", "--search-batches", "8", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	for _, k := range []string{"samples_per_sec", "au", "batches", "bytes", "seconds", "max_samples_per_sec_at_au90", "compute_per_batch_at_max", "search_points"} {
		if _, ok := m[k]; !ok && (k != "max_samples_per_sec_at_au90" && k != "compute_per_batch_at_max" || len(m["search_points"].([]any)) == 0) {
			t.Fatalf("--json lacks %q:\n%s", k, out)
		}
	}
	if m["batches"].(float64) != 12 || m["bytes"].(float64) != 48*4096 {
		t.Fatalf("--json: batches %v bytes %v, want 12 and %d", m["batches"], m["bytes"], 48*4096)
	}
	t.Logf("%s", out)
}

func TestStoreLoadErrors(t *testing.T) {
	dir := storeLoadDir(t, 1, 1000)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--sample-size", "4K"}, "want --server ADDR or --local DIR"},
		{[]string{"--local", dir}, "--sample-size 0: want a size in bytes"},
		{[]string{"--local", dir, "--sample-size", "x"}, `invalid argument "x" for "--sample-size"`},
		{[]string{"--local", dir, "--sample-size", "4K"}, `shard "s00.bin": 1000 bytes, smaller than one sample`},
		{[]string{"--local", dir, "--server", "h", "--sample-size", "100"}, "give one"},
		{[]string{"--local", dir, "--sample-size", "100", "--glob", "x*"}, `Glob "x*": no file of 1 matches`},
		{[]string{"--local", dir, "--sample-size", "100", "--batch", "0"}, "--batch 0"},
		{[]string{"--local", dir, "--sample-size", "100", "--readers", "9", "--ahead", "2"}, "Config.Readers 9"},
		{[]string{"--local", filepath.Join(dir, "none"), "--sample-size", "100"}, "no such file"},
	} {
		_, err := runStoreLoadCmd(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%v: error %v, want one with %q", tc.args, err, tc.want)
		}
	}
}

// TestStoreLoadServer: --server against a real store server over loop0
// (in this process), both modes, and the baseline row on the same files.
func TestStoreLoadServer(t *testing.T) {
	dir := storeLoadDir(t, 3, 64<<10)
	srv, err := store.NewServer(store.ServerConfig{Dir: dir, Listen: "127.0.0.141:0", Device: "loop0", PoolBytes: 1 << 20, ChunkBytes: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, args := range [][]string{
		{"--server", srv.Addr().String(), "--device", "loop0"},
		{"--server", srv.Addr().String(), "--device", "loop0", "--mode", "write"},
		{"--local", dir},
	} {
		out, err := runStoreLoadCmd(t, append(args, "--sample-size", "4K", "--batch", "4", "--compute", "100us", "--json")...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("%v: %v:\n%s", args, err, out)
		}
		if m["batches"].(float64) != 12 || m["bytes"].(float64) != 48*4096 {
			t.Fatalf("%v: batches %v bytes %v, want 12 and %d", args, m["batches"], m["bytes"], 48*4096)
		}
		t.Logf("%s: %.0f samples/s, AU %.3f", m["source"], m["samples_per_sec"], m["au"])
	}
	if _, err := runStoreLoadCmd(t, "--server", srv.Addr().String(), "--device", "loop0", "--mode", "sideways", "--sample-size", "4K"); err == nil || !strings.Contains(err.Error(), "sideways") {
		t.Fatalf("--mode sideways: %v", err)
	}
	if st := srv.Stats(); st.ClientsTotal != 2 {
		t.Fatalf("server: %d clients in all, want 2", st.ClientsTotal)
	}
}
