package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// -e (--events): ibex perf sleeps on the completion channel (verbs.CQ.Wait)
// instead of busy polling, as perftest's ibv_get_cq_event.

// TestPerf19Events: -e is accepted (perftest's "Test with events" line
// under the title), the runs complete over udp0 between two processes, and
// -e with -D fails at once with perftest's message. write_lat runs several
// times with -e on both ends: its server sees the client's last WRITE and
// closes its QP at once (ib_write_lat just exits); the QP's destroy must
// still send that WRITE's acknowledgement (udp's farewell), or the
// client's last WRITE ends in RETRY_EXC_ERR.
func TestPerf19Events(t *testing.T) {
	sub := 50 + os.Getpid()%50
	srvEnv := []string{"IBEX_DAEMON=off", fmt.Sprintf("IBEX_UDP_ADDR=127.%d.19.1", sub)}
	cliEnv := []string{"IBEX_DAEMON=off", fmt.Sprintf("IBEX_UDP_ADDR=127.%d.19.2", sub)}
	peer := fmt.Sprintf("127.%d.19.1", sub)
	for _, c := range []struct {
		test       string
		size, runs int
		srvEvents  bool
	}{
		{"write_bw", 1 << 20, 1, false}, // the bench's case: the client alone waits
		{"write_bw", 65536, 1, true},
		{"send_bw", 4096, 1, true},
		{"read_bw", 65536, 1, true},
		{"write_lat", 8, 10, true},
		{"send_lat", 8, 1, true},
	} {
		t.Run(fmt.Sprintf("%s-%d", c.test, c.size), func(t *testing.T) {
			latency := strings.HasSuffix(c.test, "_lat")
			for range c.runs {
				port := strconv.Itoa(freePort(t))
				args := []string{c.test, "-d", "udp0", "-p", port, "-s", strconv.Itoa(c.size), "-n", "500"}
				srvArgs := args
				if c.srvEvents {
					srvArgs = append(args, "-e")
				}
				srv := startServer(t, srvEnv, srvArgs...)
				out, err := runClient(t, cliEnv, append(args, "-e", peer)...)
				if err != nil {
					t.Fatalf("client: %v\n%s\nserver:\n%s", err, out, srv.out.String())
				}
				if !strings.Contains(out, " Test with events. Using udp0_comp0\n Dual-port") {
					t.Errorf("client header lacks perftest's events line:\n%s", out)
				}
				rows := parseReport(t, out, latency)
				if len(rows) != 1 {
					t.Fatalf("%d rows:\n%s", len(rows), out)
				}
				checkRow(t, rows[0], latency, c.size, 500)
				if !latency && !strings.Contains(out, " CPU[s/GB]       : ") {
					t.Errorf("no CPU line:\n%s", out)
				}
				if err := waitExit(t, srv); err != nil {
					t.Fatalf("server: %v\n%s", err, srv.out.String())
				}
				if s := srv.out.String(); c.srvEvents != strings.Contains(s, "Test with events") {
					t.Errorf("server (-e %v) header:\n%s", c.srvEvents, s)
				}
			}
		})
	}

	_, stderr, code := runMain(t, "perf", "write_bw", "-d", "shm0", "-e", "-D", "2", "-p", strconv.Itoa(freePort(t)), "127.0.0.1")
	if code == 0 || !strings.Contains(stderr, "Duration mode doesn't work with events") || strings.Contains(stderr, "refused") {
		t.Errorf("-e -D 2: exit %d, stderr %q", code, stderr)
	}
	stdout, _, _ := runMain(t, "perf", "--help")
	if !strings.Contains(stdout, "-e, --events") || strings.Contains(stdout, "completion events are not supported") {
		t.Errorf("--help does not describe -e:\n%s", stdout)
	}
}
