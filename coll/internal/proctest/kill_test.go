package proctest

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/coll"
	"github.com/ibex-rdma/ibex/coll/reduce"
)

// Bounds of TestRankKilled. callWait is each all-reduce's deadline in the
// ranks; liveness is how long the survivors may take to exit after the
// kill: well above callWait plus Close's own wait, so only a hang (or a
// deadline not honoured) exceeds it. Neither is a timing assertion.
const (
	loopCount = 1 << 20 // float32: 4 MiB per all-reduce
	callWait  = 5 * time.Second
	liveness  = 30 * time.Second
	warmIters = 3 // iterations every rank completes before the kill
)

// TestRankKilled runs 3 ranks that loop all-reduces of 4 MiB, and
// SIGKILLs one (rank 2; then, separately, rank 0) once every rank has
// completed a few: the two others must each exit with status 1 and an
// error on stderr that names another rank or a link, within the liveness
// bound. Over shm0 (the kernel closes the dead
// process's sockets) and over udp0 forced between processes of this host,
// each with its own RoCEv2 address (nothing tells a UDP peer it died; the
// retry limit or the call's deadline must end the call).
func TestRankKilled(t *testing.T) {
	for _, tr := range []string{"shm0", "udp0"} {
		// Rank 2 as asked; rank 0 too, the rendezvous root, through which
		// the bootstrap network (and Close's barrier) runs.
		for _, victim := range []int{2, 0} {
			t.Run(fmt.Sprintf("%s/kill%d", tr, victim), func(t *testing.T) { testRankKilled(t, tr, victim) })
		}
	}
}

func testRankKilled(t *testing.T, tr string, victim int) {
	s := spec{Case: "loop", Size: 3, ID: newID(t, freeAddr(t)), Limit: 90 * time.Second}
	if tr == "udp0" {
		// Like `ibex coll --np`, but a third octet of our own.
		s.Transport = "udp0"
		s.Env = func(r int) []string {
			return []string{fmt.Sprintf("IBEX_UDP_ADDR=127.0.%d.%d", 200+os.Getpid()%50, 10+r)}
		}
	}
	j := start(t, s)
	for _, p := range j.procs {
		if !p.waitLine(60*time.Second, func(l string) bool { return l == "iter "+strconv.Itoa(warmIters) }) {
			t.Fatalf("rank %d did not complete %d all-reduces\n%s", p.rank, warmIters, j.report())
		}
	}
	if err := j.procs[victim].cmd.Process.Kill(); err != nil {
		t.Fatalf("kill rank %d: %v", victim, err)
	}
	killed := time.Now()
	var survivors []*proc
	for _, p := range j.procs {
		if p.rank != victim {
			survivors = append(survivors, p)
		}
	}
	if hung := j.waitExit(liveness, survivors...); len(hung) > 0 {
		t.Fatalf("ranks %v still running %v after rank %d was killed (hung; killed now)\n%s", hung, liveness, victim, j.report())
	}
	<-j.procs[victim].done
	// A survivor's error names a peer, or says a link failed.
	rankRE := regexp.MustCompile(`rank ([0-9]+)`)
	namesPeer := func(self int, msg string) bool {
		for _, m := range rankRE.FindAllStringSubmatch(msg, -1) {
			if m[1] != strconv.Itoa(self) {
				return true
			}
		}
		return strings.Contains(msg, "link")
	}
	for _, p := range survivors {
		msg := strings.TrimSpace(p.stderr.String())
		t.Logf("rank %d: exit status %d after %v: %s", p.rank, p.exitCode(), p.exited.Sub(killed).Round(time.Millisecond), msg)
		switch {
		case p.exitCode() != 1:
			t.Errorf("rank %d: exit status %d (%v), want 1: a failed call", p.rank, p.exitCode(), p.err)
		case msg == "":
			t.Errorf("rank %d: no error on stderr", p.rank)
		case strings.Contains(msg, "DATA RACE"):
			t.Errorf("rank %d: the race detector reported a race", p.rank)
		case !namesPeer(p.rank, msg):
			t.Errorf("rank %d: the error names neither another rank nor a link", p.rank)
		}
		if !strings.Contains(msg, fmt.Sprintf("rank %d", victim)) {
			t.Logf("rank %d: (its error does not name rank %d; a peer's does)", p.rank, victim)
		}
	}
}

// loopCase is one rank of TestRankKilled: all-reduce 4 MiB of float32
// (rank r gives r+1 everywhere) until a call fails, printing "iter K"
// after each good one.
func loopCase(ctx context.Context, c *coll.Comm, _ uint64) error {
	r, N := c.Rank(), c.Size()
	buf := make([]byte, 4*loopCount)
	want := float32(N * (N + 1) / 2)
	for k := 1; ctx.Err() == nil; k++ {
		for i := range loopCount {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(float32(r+1)))
		}
		cctx, cancel := context.WithTimeout(ctx, callWait)
		err := c.AllReduce(cctx, buf, buf, loopCount, reduce.Float32, reduce.Sum)
		cancel()
		if err != nil {
			return fmt.Errorf("all-reduce %d: %w", k, err)
		}
		for _, i := range []int{0, loopCount / 2, loopCount - 1} {
			if got := math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:])); got != want {
				return fmt.Errorf("all-reduce %d: element %d = %v, want %v", k, i, got, want)
			}
		}
		fmt.Printf("iter %d\n", k)
	}
	return fmt.Errorf("no call failed before the rank's own deadline: %w", ctx.Err())
}
