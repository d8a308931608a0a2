package proctest

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/coll"
	"github.com/ibex-rdma/ibex/coll/reduce"
)

// The bounds of TestHealth. healthCall is each all-reduce's deadline in
// the ranks; the service's heartbeats come every healthBeat, so a rank
// behind the others is stalled after 5 of them. Neither is a timing
// assertion: the test waits for what the status says, and bounds only
// hangs (liveness).
const (
	healthCall = 3 * time.Second
	healthBeat = 100 * time.Millisecond
	envRelease = "IBEX_PROCTEST_RELEASE" // a file: rank 0 (the service) and rank 2 wait for it
)

func init() { rankCases["health"] = healthCase }

// TestHealth: 4 rank processes all-reduce twice; rank 2 then stalls
// before its third call and rank 3, once the status names rank 2
// stalled, is SIGKILLed. The survivors' third call fails (a link to the
// dead rank, or its deadline) with an error naming rank 2 stalled and
// rank 3 dead; the status port (IBEX_RAS_ADDR, NCCL's text protocol) says
// the same in text and JSON (what `ibex coll status` prints), and each
// survivor dumped its flight record (IBEX_COLL_DUMP_DIR) with the third
// call failed. On shm0 (the dead rank's links fail at once) and udp0
// (they do not: the survivors' deadline ends the call).
func TestHealth(t *testing.T) {
	for _, tr := range []string{"shm0", "udp0"} {
		t.Run(tr, func(t *testing.T) { testHealth(t, tr) })
	}
}

func testHealth(t *testing.T, tr string) {
	dir := t.TempDir()
	port := freeAddr(t)
	release := filepath.Join(dir, "release")
	s := spec{Case: "health", Size: 4, ID: newID(t, freeAddr(t)), Limit: 60 * time.Second,
		Env: func(r int) []string {
			env := []string{"IBEX_RAS_ADDR=" + port, "IBEX_RAS_HEARTBEAT=" + healthBeat.String(), "IBEX_COLL_DUMP_DIR=" + dir, envRelease + "=" + release}
			if tr == "udp0" {
				env = append(env, fmt.Sprintf("IBEX_UDP_ADDR=127.0.%d.%d", 150+os.Getpid()%50, 10+r))
			}
			return env
		}}
	if tr == "udp0" {
		s.Transport = "udp0"
	}
	j := start(t, s)
	p := j.procs
	defer func() { _ = os.WriteFile(release, nil, 0o644) }()
	if !p[3].waitLine(30*time.Second, func(l string) bool { return l == "iter 2" }) ||
		!p[2].waitLine(30*time.Second, func(l string) bool { return l == "stalling" }) {
		t.Fatalf("ranks 2 and 3 did not complete 2 all-reduces\n%s", j.report())
	}
	// The status port names rank 2 stalled (ranks 0 and 1 wait for it in
	// their third call); then rank 3 dies.
	ask := func() (coll.Status, *coll.CommStatus) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := coll.ReadStatus(ctx, port)
		if err != nil {
			t.Fatalf("status port %s: %v\n%s", port, err, j.report())
		}
		if len(st.Comms) != 1 || st.Comms[0].Size != 4 || st.PID != p[0].cmd.Process.Pid {
			t.Fatalf("status port %s: %+v, want rank 0's (pid %d) one communicator of 4 ranks", port, st, p[0].cmd.Process.Pid)
		}
		return st, &st.Comms[0]
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(healthBeat) {
		_, cs := ask()
		if cs.Ranks[2].Health == coll.HealthStalled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rank 2 not stalled in the status after 30 s: %+v", cs.Ranks[2])
		}
	}
	if err := p[3].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// The survivors' errors name both.
	for _, r := range []int{0, 1} {
		if !p[r].waitLine(30*time.Second, func(l string) bool { return strings.HasPrefix(l, "failed 3: ") }) {
			t.Fatalf("rank %d: its third all-reduce did not fail\n%s", r, j.report())
		}
		msg := p[r].line("failed 3: ")
		t.Logf("rank %d: %s", r, msg)
		for _, want := range []string{"rank 2 stalled (idle after all_reduce #2 for ", "rank 3 dead (its heartbeat connection"} {
			if !strings.Contains(msg, want) {
				t.Errorf("rank %d: its error does not say %q", r, want)
			}
		}
	}
	// The status, in text as nc gets it and in JSON.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	text, err := coll.QueryStatus(ctx, port, "verbose status\n")
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("echo verbose status | nc %s:\n%s", port, text)
	for _, want := range []string{
		fmt.Sprintf("STALLED\n  rank 2 (pid %d on ", p[2].cmd.Process.Pid),
		fmt.Sprintf("DEAD\n  rank 3 (pid %d on ", p[3].cmd.Process.Pid),
		"is dead: its heartbeat connection closed without a goodbye",
	} {
		if !strings.Contains(string(text), want) {
			t.Errorf("the text status lacks %q", want)
		}
	}
	_, cs := ask()
	// Rank 1 may have closed by now (it exits once its call failed).
	for r, want := range []string{coll.HealthFailed, coll.HealthFailed, coll.HealthStalled, coll.HealthDead} {
		if got := cs.Ranks[r]; got.Health != want && (r != 1 || got.Health != coll.HealthClosed) || got.PID != p[r].cmd.Process.Pid {
			t.Errorf("JSON status: rank %d: %s (pid %d), want %s (pid %d)", r, got.Health, got.PID, want, p[r].cmd.Process.Pid)
		}
	}
	// The survivors' flight records: calls 1 and 2 done, 3 failed.
	for _, r := range []int{0, 1} {
		path := filepath.Join(dir, fmt.Sprintf("ibex-coll-%s-rank%d-%d.json", cs.ID, r, p[r].cmd.Process.Pid))
		if !strings.Contains(p[r].line("failed 3: "), path) {
			t.Errorf("rank %d: its error does not name its flight record %s", r, path)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
			continue
		}
		var d struct {
			Rank    int           `json:"rank"`
			Records []coll.Record `json:"records"`
		}
		if err := json.Unmarshal(b, &d); err != nil || d.Rank != r || len(d.Records) != 3 {
			t.Errorf("rank %d: flight record %s: %v:\n%s", r, path, err, b)
			continue
		}
		for i, rec := range d.Records {
			want := map[bool]string{true: "failed", false: "done"}[i == 2]
			if rec.Seq != uint64(i+1) || rec.Op != "all_reduce" || rec.State != want || rec.Bytes != 4*healthCount {
				t.Errorf("rank %d: record %d: %+v, want all_reduce #%d of %d bytes, %s", r, i, rec, i+1, 4*healthCount, want)
			}
		}
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if hung := j.waitExit(30*time.Second, p...); len(hung) > 0 {
		t.Fatalf("ranks %v did not exit once released\n%s", hung, j.report())
	}
}

// healthCount is the elements of healthCase's all-reduces.
const healthCount = 1024

// healthCase is one rank of TestHealth: all-reduces (each bounded by
// healthCall), "iter K" after each. Rank 2 prints "stalling" before its
// third and waits for the release file; rank 3 waits after its second
// (for the SIGKILL). A failed call prints "failed K: error" (rank 0, the
// status service, then waits for the release file so the test can ask it).
func healthCase(ctx context.Context, c *coll.Comm, _ uint64) error {
	release := os.Getenv(envRelease)
	waitRelease := func() {
		for ctx.Err() == nil {
			if _, err := os.Stat(release); err == nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	buf := make([]byte, 4*healthCount)
	for k := 1; ; k++ {
		if c.Rank() == 2 && k == 3 {
			fmt.Println("stalling")
			waitRelease()
		}
		if c.Rank() == 3 && k == 3 {
			<-ctx.Done()
			return ctx.Err()
		}
		for i := range healthCount {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(1))
		}
		cctx, cancel := context.WithTimeout(ctx, healthCall)
		err := c.AllReduce(cctx, buf, buf, healthCount, reduce.Float32, reduce.Sum)
		cancel()
		if err != nil {
			fmt.Printf("failed %d: %s\n", k, strings.ReplaceAll(err.Error(), "\n", " "))
			if c.Rank() == 0 {
				waitRelease()
			}
			return fmt.Errorf("all-reduce %d: %w", k, err)
		}
		fmt.Println("iter " + strconv.Itoa(k))
	}
}

// line is the first line the rank printed that begins with prefix ("" if
// none).
func (p *proc) line(prefix string) string {
	p.stdout.mu.Lock()
	defer p.stdout.mu.Unlock()
	for _, l := range p.stdout.done {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}
