package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/coll"
	"github.com/ibex-rdma/ibex/coll/reduce"
)

// TestCollStatus: `ibex coll status` against a 3-rank job in this process
// whose rank 2 stalls before its second all-reduce: the text names rank 2
// stalled, -v lists every rank, --json decodes to the same, the default
// address is IBEX_RAS_ADDR's, and a port nobody serves is an error that
// says what to set. (coll/internal/proctest's TestHealth has the job in
// processes, with a rank killed.)
func TestCollStatus(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().String()
	l.Close()
	id, err := coll.NewUniqueID(freeRendezvous(t))
	if err != nil {
		t.Fatal(err)
	}
	opt := coll.Options{Transport: "loop0", Health: coll.HealthOptions{StatusAddr: port, Heartbeat: 20 * time.Millisecond}}
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer free()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	started := make(chan string, 1)
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := coll.NewComm(ctx, id, r, 3, opt)
			if err != nil {
				errs[r] = err
				if r == 0 {
					close(started)
				}
				return
			}
			defer c.Close()
			if r == 0 {
				started <- c.ID()
			}
			buf := make([]byte, 64)
			for k := 1; k <= 2 && errs[r] == nil; k++ {
				if r == 2 && k == 2 {
					<-release
				}
				errs[r] = c.AllReduce(ctx, buf, buf, 16, reduce.Float32, reduce.Sum)
			}
		}()
	}
	commID, ok := <-started
	if !ok {
		wg.Wait()
		t.Fatalf("rank 0: %v", errs[0])
	}
	// Ask until the service has seen rank 2 stalled (5 heartbeats).
	var text string
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(text, "STALLED"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no rank stalled after 20 s:\n%s", text)
		}
		if text, err = run(t, "coll", "status", "--addr", port); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("ibex coll status:\n%s", text)
	for _, want := range []string{
		"Communicators\n=============\n",
		"1-2   RUNNING  STALLED\n",
		fmt.Sprintf("#%s STALLED\n  rank 2 (pid %d on ", commID, os.Getpid()),
		"is stalled: idle after all_reduce #1 for ",
		"; past it: ",
		" in all_reduce #2 step ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("ibex coll status lacks %q", want)
		}
	}
	if strings.Contains(text, "\nRanks\n") {
		t.Errorf("ibex coll status lists the ranks without -v")
	}
	// -v, with the address from the environment, as the user's binary.
	t.Setenv("IBEX_RAS_ADDR", port)
	out, errOut, code := runMain(t, "coll", "status", "-v")
	if code != 0 || !strings.Contains(out, "\nRanks\n=====\n") || !strings.Contains(out, "stalled") {
		t.Errorf("ibex coll status -v: exit %d, stderr %q:\n%s", code, errOut, out)
	}
	out, err = run(t, "coll", "status", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var st coll.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("ibex coll status --json: %v:\n%s", err, out)
	}
	var cs *coll.CommStatus
	for i := range st.Comms {
		if st.Comms[i].ID == commID {
			cs = &st.Comms[i]
		}
	}
	if cs == nil || len(cs.Ranks) != 3 || cs.Ranks[2].Health != coll.HealthStalled || cs.Ranks[0].Call == nil || cs.Ranks[0].Call.State != "running" {
		t.Errorf("ibex coll status --json: %+v, want rank 2 stalled and rank 0 running", cs)
	}
	free()
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	// Nobody serves the port now.
	_, err = run(t, "coll", "status", "--addr", port, "-t", "2s")
	if err == nil || !strings.Contains(err.Error(), "IBEX_RAS_ADDR") {
		t.Errorf("ibex coll status with nothing at %s: %v, want an error naming IBEX_RAS_ADDR", port, err)
	}
}

// freeRendezvous is a loopback address free a moment ago.
func freeRendezvous(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
