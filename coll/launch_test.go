package coll

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestExpandNodeList(t *testing.T) {
	for _, c := range []struct {
		in, want string // want: space-separated, or "error"
	}{
		{"node1", "node1"},
		{"a,b,c", "a b c"},
		{"node[01-03,07]", "node01 node02 node03 node07"},
		{"gpu[8-11],cpu1", "gpu8 gpu9 gpu10 gpu11 cpu1"},
		{"n[1-2]-ib", "n1-ib n2-ib"},
		{"r[1-2]n[01-02]", "r1n01 r1n02 r2n01 r2n02"},
		{"x[009-011]", "x009 x010 x011"},
		{"a[1,3],b[2]", "a1 a3 b2"},
		{"a[3-1]", "error"},
		{"a[1-", "error"},
		{"a]1", "error"},
		{"a[x]", "error"},
		{"a[0-99999999]", "error"},
		{"", "error"},
	} {
		got, err := ExpandNodeList(c.in)
		if c.want == "error" {
			if err == nil {
				t.Errorf("%q: %v, want an error", c.in, got)
			}
			continue
		}
		if err != nil || strings.Join(got, " ") != c.want {
			t.Errorf("%q: %v, %v; want %s", c.in, got, err, c.want)
		}
	}
}

func TestFromEnvNoLauncher(t *testing.T) {
	if _, err := FromEnv(func(string) string { return "" }, ""); !errors.Is(err, ErrNoLauncher) {
		t.Errorf("no variables: %v, want ErrNoLauncher", err)
	}
	// An incomplete launcher environment is not "no launcher".
	get := func(k string) string { return map[string]string{"RANK": "0", "WORLD_SIZE": "2"}[k] }
	if _, err := FromEnv(get, ""); err == nil || errors.Is(err, ErrNoLauncher) {
		t.Errorf("torchrun without MASTER_ADDR: %v, want an error other than ErrNoLauncher", err)
	}
}

// TestNewCommEnvFile: two ranks on one host meet through the rendezvous
// file, although an earlier job with the same id left a stale one (its
// listener gone) and rank 1 starts first and reads it; rank 0 replaces it
// and removes it once both are in.
func TestNewCommEnvFile(t *testing.T) {
	dir := t.TempDir()
	env := func(rank int) Env {
		e, err := FromEnv(func(k string) string {
			return map[string]string{"SLURM_PROCID": string(rune('0' + rank)), "SLURM_NTASKS": "2", "SLURM_JOB_ID": "77",
				"SLURM_STEP_ID": "1", "SLURM_NNODES": "1", "IBEX_RENDEZVOUS_DIR": dir}[k]
		}, "")
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	stale, err := NewUniqueID(freeAddr(t)) // nobody listens there any more
	if err != nil {
		t.Fatal(err)
	}
	file := env(0).File
	if err := os.WriteFile(file, []byte(stale.String()+" 77.1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for _, r := range []int{1, 0} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := NewCommEnv(ctx, env(r), Options{})
			if err == nil {
				err = c.Close()
			}
			errs[r] = err
		}()
		time.Sleep(100 * time.Millisecond) // rank 1 sees the stale file first
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("rendezvous file left behind: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("directory keeps %v", ents)
	}
}

// TestWaitFileTimeout: a rank whose rank 0 never publishes gives up at
// its deadline, naming the file and what to set; a file of another job
// id, or naming a listener that is gone, is not taken.
func TestWaitFileTimeout(t *testing.T) {
	dir := t.TempDir()
	e := Env{Rank: 1, Size: 2, Launcher: "openmpi", JobID: "5", File: filepath.Join(dir, "r.addr")}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	live, err := NewUniqueID(l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	gone, err := NewUniqueID(freeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ content, want string }{
		{"", "the file does not exist"},
		{live.String() + " 4\n", `it names job "4"`},
		{gone.String() + " 5\n", "which does not answer"},
		{"junk", `it holds "junk"`},
	} {
		_ = os.Remove(e.File)
		if c.content != "" {
			if err := os.WriteFile(e.File, []byte(c.content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		_, err := waitFile(ctx, e)
		cancel()
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), e.File) ||
			!strings.Contains(err.Error(), "IBEX_RENDEZVOUS_DIR") || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("file %q: %v; want a deadline error naming %s, IBEX_RENDEZVOUS_DIR and %q", c.content, err, e.File, c.want)
		}
	}
	if err := os.WriteFile(e.File, []byte(live.String()+" 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if id, err := waitFile(ctx, e); err != nil || id != live {
		t.Errorf("live file: %v, %v; want %v", id, err, live)
	}
}
