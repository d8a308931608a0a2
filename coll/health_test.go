package coll

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/coll/reduce"
)

// TestHealthStalledAndDead: 4 ranks in this process all-reduce twice;
// then rank 2 stalls before its third call and rank 3 "dies" (its
// heartbeat connection drops without a goodbye, and it makes no more
// calls). The survivors' third call times out, and their errors name
// rank 2 stalled and rank 3 dead, from rank 0's status service; the
// service's text and JSON say the same; each survivor dumped its flight
// record with the third call failed. The real thing, with processes and
// SIGKILL, is proctest's TestHealth.
func TestHealthStalledAndDead(t *testing.T) {
	dir := t.TempDir()
	opt := Options{Transport: "shm0", Health: HealthOptions{StatusAddr: "127.0.0.1:0", Heartbeat: 50 * time.Millisecond, DumpDir: dir}}
	release := make(chan struct{})
	var mu sync.Mutex
	errs := map[int]error{}
	var service, id string
	var text string
	var st Status
	survivorsDone := make(chan struct{})
	var survivors sync.WaitGroup
	survivors.Add(2)
	go func() { survivors.Wait(); close(survivorsDone) }()
	runRanksRaw(t, 4, opt, func(c *Comm) error {
		defer c.Close()
		buf := make([]byte, 4096)
		for k := 1; k <= 2; k++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := c.AllReduce(ctx, buf, buf, 1024, reduce.Float32, reduce.Sum)
			cancel()
			if err != nil {
				return fmt.Errorf("all-reduce %d: %w", k, err)
			}
		}
		switch c.Rank() {
		case 3:
			_ = c.health.rep.conn.Close() // as a killed process's kernel would
			<-release
			return nil
		case 2:
			<-release
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		err := c.AllReduce(ctx, buf, buf, 1024, reduce.Float32, reduce.Sum)
		cancel()
		mu.Lock()
		errs[c.Rank()] = err
		mu.Unlock()
		if c.Rank() == 0 {
			// The service lives as long as rank 0's communicator: ask it
			// before closing.
			service, id = c.StatusAddr(), c.ID()
			survivors.Done()
			<-survivorsDone
			// The service hears of rank 1's failure with its next
			// heartbeat: ask until it has (or 5 s).
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			defer close(release)
			for {
				var qerr error
				if st, qerr = ReadStatus(ctx, service); qerr != nil {
					return qerr
				}
				if cs := commOf(st, id); cs == nil || cs.Ranks[1].Health == HealthFailed || cs.Ranks[1].Health == HealthClosed || ctx.Err() != nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			b, qerr := QueryStatus(ctx, service, "verbose status\n")
			text = string(b)
			if qerr != nil {
				return qerr
			}
			// The process's port (127.0.0.1:0 asked for) answers too.
			port := StatusPortAddr()
			b, qerr = QueryStatus(ctx, port, "status "+id+"\n")
			if qerr == nil && !strings.Contains(string(b), "#"+id) {
				qerr = fmt.Errorf("the status port %s does not list communicator %s:\n%s", port, id, b)
			}
			return qerr
		}
		survivors.Done()
		return nil
	})
	for _, r := range []int{0, 1} {
		err := errs[r]
		t.Logf("rank %d: %v", r, err)
		switch {
		case err == nil:
			t.Fatalf("rank %d: the third all-reduce succeeded without ranks 2 and 3", r)
		case !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrAborted):
			t.Errorf("rank %d: error is neither a deadline nor an abort", r)
		}
		for _, want := range []string{"rank 2 stalled", "rank 3 dead"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("rank %d: the error does not say %q", r, want)
			}
		}
		checkDump(t, dir, id, r, 3)
	}
	t.Logf("status:\n%s", text)
	for _, want := range []string{"STALLED\n  rank 2 (pid", "DEAD\n  rank 3 (pid", "is dead: its heartbeat connection closed without a goodbye"} {
		if !strings.Contains(text, want) {
			t.Errorf("the text status does not say %q", want)
		}
	}
	cs := commOf(st, id)
	if cs == nil {
		t.Fatalf("the JSON status has no communicator %s: %+v", id, st)
	}
	// Rank 1 may have closed its communicator by now; rank 0 has not.
	for r, want := range []string{HealthFailed, HealthFailed, HealthStalled, HealthDead} {
		if got := cs.Ranks[r].Health; got != want && (r != 1 || got != HealthClosed) {
			t.Errorf("JSON status: rank %d is %q, want %q", r, got, want)
		}
	}
	if got := cs.Ranks[2].Call; got == nil || got.Seq != 2 || got.State != "done" || got.Op != "all_reduce" {
		t.Errorf("JSON status: rank 2's call is %+v, want all_reduce #2 done", got)
	}
}

// commOf is communicator id's status in st (nil if none).
func commOf(st Status, id string) *CommStatus {
	for i := range st.Comms {
		if st.Comms[i].ID == id {
			return &st.Comms[i]
		}
	}
	return nil
}

// checkDump reads rank r's flight record in dir and checks that it holds
// its calls 1..n, the last failed and the others done.
func checkDump(t *testing.T, dir, id string, r, n int) {
	t.Helper()
	path := filepath.Join(dir, fmt.Sprintf("ibex-coll-%s-rank%d-%d.json", id, r, os.Getpid()))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("rank %d: no flight record: %v", r, err)
		return
	}
	var d flightDump
	if err := json.Unmarshal(b, &d); err != nil {
		t.Errorf("rank %d: flight record %s: %v", r, path, err)
		return
	}
	if len(d.Records) != n {
		t.Fatalf("rank %d: %d records, want %d:\n%s", r, len(d.Records), n, b)
	}
	for i, rec := range d.Records {
		want := "done"
		if i == n-1 {
			want = "failed"
		}
		if rec.Seq != uint64(i+1) || rec.State != want || rec.Op != "all_reduce" || rec.Bytes != 4096 || rec.DType != "float" {
			t.Errorf("rank %d: record %d: %+v, want all_reduce #%d of 4096 B float, %s", r, i, rec, i+1, want)
		}
	}
	if last := d.Records[n-1]; last.Error == "" || last.End.IsZero() {
		t.Errorf("rank %d: the failed record has no error or end: %+v", r, last)
	}
}
