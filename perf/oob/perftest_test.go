package oob

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/internal/perftestrun"
)

// The real thing: Debian's perftest 4.5 binaries against this package.
// They need an RDMA device before they open the socket: they run on
// internal/perftestrun's libibexverbs.so, a libibverbs whose verbs are
// ibex's on a real udp0, which moves data. The whole run, exchange and data,
// against ibex perf in both roles is cmd/ibex's TestPerf18RealPerftest;
// here the exchange alone, where it must fail. The exchanges of the real
// programs with each other are recorded in testdata (recorded_test.go).

// A real perftest server with one QP against an ibex client with two: the
// server's second round arrives as QP 1, which the client reports. The
// server runs on internal/perftestrun's libibexverbs.so, a real ibex device
// (udp0 on its own address): only the exchange is needed here, and the
// data-less stand-in is not.
func TestRealPerftestQPMismatch(t *testing.T) {
	lib := perftestrun.Build(t)
	port := perftestrun.FreePort(t)
	run := perftestrun.Start(t, lib, []string{"IBEX_UDP_ADDR=127.0.73.2"}, "ib_write_bw",
		"--use_old_post_send", "-F", "-d", "udp0", "-p", strconv.Itoa(port))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var c *Conn
	var err error
	for {
		if c, err = Dial(ctx, fmt.Sprintf("127.0.0.1:%d", port)); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _, _, err = runIbex(ctx, c, Params{Test: Test{Name: WriteBW, QPs: 2}})
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "fewer QPs") {
		t.Fatalf("got %v, want a QP count mismatch", err)
	}
	t.Log(err)
	// perftest fails on the closed socket and exits.
	if err := run.Wait(10 * time.Second); err == nil || strings.Contains(err.Error(), "still running") {
		t.Errorf("ib_write_bw after the ibex end closed: %v, want a failed exit", err)
	} else {
		t.Logf("ib_write_bw: %v", err)
	}
}
