package main

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/internal/perftestrun"
)

// Issue 18: ibex perf against Debian's real perftest 4.5 programs, both
// roles, with data. perftest runs on libibexverbs (internal/perftestrun), a
// libibverbs whose verbs are ibex's on a real udp0: its WRITEs, READs,
// SENDs and atomics cross ibex's RoCEv2 between the two processes and land
// at the addresses perftest names, with the MR checks rxe makes (rkey,
// bounds, access), so a request outside the region the other end
// registered fails with a remote access error, as it did against rxe. The
// cases are the ones that failed against perftest on rxe: 64 B (addresses
// walking the cycle buffer), 4 KiB and 64 KiB (the advertised address),
// -q 2 (one region per QP), -a (every size), atomics, and write_lat (who
// sends first, which byte is polled).
func TestPerf18RealPerftest(t *testing.T) {
	lib := perftestrun.Build(t)
	type tc struct {
		test string
		args []string
	}
	var cases []tc
	for _, test := range []string{"write_bw", "read_bw", "send_bw"} {
		for _, s := range []string{"64", "4096", "65536"} {
			cases = append(cases, tc{test, []string{"-s", s, "-n", "200"}})
		}
		cases = append(cases, tc{test, []string{"-s", "64", "-q", "2", "-n", "200"}})
		cases = append(cases, tc{test, []string{"-a", "-n", "8"}})
	}
	cases = append(cases, tc{"atomic_bw", []string{"-n", "500"}}, tc{"atomic_bw", []string{"-q", "2", "-n", "500"}})
	for _, s := range []string{"64", "4096", "65536"} {
		cases = append(cases, tc{"write_lat", []string{"-s", s, "-n", "300"}})
	}
	cases = append(cases, tc{"write_lat", []string{"-a", "-n", "5"}})
	cases = append(cases, tc{"write_bw", []string{"-s", "64", "-b", "-n", "200"}}, tc{"send_bw", []string{"-s", "4096", "-b", "-n", "200"}},
		tc{"read_bw", []string{"-b", "-n", "200"}}, tc{"atomic_bw", []string{"-b", "-n", "500"}},
		tc{"write_bw", []string{"-a", "-b", "-q", "2", "-n", "5"}})
	// Two cases at a time (-parallel, GOMAXPROCS): most of a case is
	// perftest's own waiting (about 0.4 s per size outside the data
	// phase). Each case has its own pair of udp0 addresses.
	for i, c := range cases {
		for j, ibexServer := range []bool{true, false} {
			role := "perftest-server"
			if ibexServer {
				role = "ibex-server"
			}
			addrs := [2]string{fmt.Sprintf("127.1.%d.%d", i, 2*j+1), fmt.Sprintf("127.1.%d.%d", i, 2*j+2)}
			t.Run(fmt.Sprintf("%s%s/%s", c.test, strings.Join(c.args, ""), role), func(t *testing.T) {
				t.Parallel()
				realPerftestCase(t, lib, c.test, c.args, ibexServer, addrs)
			})
		}
	}
}

// resultLine is a report line of perftest's or ibex's: the size, the
// iterations, then figures.
var resultLine = regexp.MustCompile(`(?m)^\s*(\d+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)`)

func realPerftestCase(t *testing.T, lib, test string, args []string, ibexServer bool, addrs [2]string) {
	port := strconv.Itoa(perftestrun.FreePort(t))
	common := append([]string{"-d", "udp0", "-p", port}, args...)
	ibexEnv := []string{"IBEX_UDP_ADDR=" + addrs[0]}
	ptEnv := []string{"IBEX_UDP_ADDR=" + addrs[1]}
	ptArgs := append([]string{"-F"}, common...)
	ibexArgs := append([]string{"perf", test}, common...)
	const limit = 60 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var ibexOut, ibexErr syncBuffer
	var pt *perftestrun.Run
	var ibexCode int
	if ibexServer {
		cmd := ibexCmd(ctx, ibexEnv, ibexArgs...)
		cmd.Stdout, cmd.Stderr = &ibexOut, &ibexErr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		// The server prints its banner once it listens.
		for !strings.Contains(ibexOut.String(), "Waiting for client") {
			select {
			case err := <-done:
				t.Fatalf("ibex server exited before listening: %v\n%s%s", err, ibexOut.String(), ibexErr.String())
			case <-time.After(10 * time.Millisecond):
			}
		}
		pt = perftestrun.Start(t, lib, ptEnv, "ib_"+test, append(ptArgs, "127.0.0.1")...)
		if err := pt.Wait(limit); err != nil {
			t.Errorf("perftest client: %v", err)
		}
		select {
		case err := <-done:
			if err != nil {
				ibexCode = cmd.ProcessState.ExitCode()
			}
		case <-ctx.Done():
			t.Fatalf("ibex server still running after %v:\n%s%s", limit, ibexOut.String(), ibexErr.String())
		}
	} else {
		pt = perftestrun.Start(t, lib, ptEnv, "ib_"+test, ptArgs...)
		// perftest listens after opening its device: give it a moment,
		// ibex perf also retries a refused connection for 3 s.
		time.Sleep(100 * time.Millisecond)
		out, errOut, code := runMainWithin(t, limit, ibexEnv, append(ibexArgs, "127.0.0.1")...)
		ibexOut.Write([]byte(out))
		ibexErr.Write([]byte(errOut))
		ibexCode = code
		if err := pt.Wait(limit); err != nil {
			t.Errorf("perftest server: %v", err)
		}
	}
	if ibexCode != 0 {
		t.Errorf("ibex perf %s: exit %d: %s", strings.Join(ibexArgs[1:], " "), ibexCode, ibexErr.String())
	}
	if t.Failed() {
		t.Logf("ibex perf output:\n%s%s", ibexOut.String(), ibexErr.String())
		return
	}
	// The side that measures prints nonzero figures for every size. A
	// bandwidth test's passive server prints the client's report; both
	// latency ends measure.
	all := slices.Contains(args, "-a")
	passive := test != "send_bw" && !slices.Contains(args, "-b") && !strings.HasSuffix(test, "_lat")
	sides := []struct {
		name, out string
		server    bool
	}{{"ibex", ibexOut.String(), ibexServer}, {"perftest", pt.Output(), !ibexServer}}
	if passive {
		// The passive server prints the report the client sent
		// (xchg_bw_reports): the client's last line, figure for figure.
		srv, cli := sides[0], sides[1]
		if !srv.server {
			srv, cli = cli, srv
		}
		s, c := resultLine.FindAllStringSubmatch(srv.out, -1), resultLine.FindAllStringSubmatch(cli.out, -1)
		if len(s) > 0 && len(c) > 0 && (s[0][1] != c[len(c)-1][1] || s[0][4] != c[len(c)-1][4]) {
			t.Errorf("%s's server printed %q, its %s client reported %q", srv.name, s[0][0], cli.name, c[len(c)-1][0])
		}
	}
	for _, side := range sides {
		wantSizes := 1
		if all && !(passive && side.server) { // a passive server prints the client's last report
			wantSizes = 23 // 2 B to 8 MiB
		}
		lines := resultLine.FindAllStringSubmatch(side.out, -1)
		if passive && side.server && len(lines) != 1 {
			// perftest's passive server prints the client's report once,
			// after the last size (write_bw.c: xchg_bw_reports, then
			// print_full_bw_report).
			t.Errorf("%s's passive server printed %d result lines, want 1 as perftest's:\n%s", side.name, len(lines), side.out)
			continue
		}
		if len(lines) < wantSizes && perftestrun.ClockFailed(side.out) {
			// Its latencies are then inf, which resultLine skips.
			t.Logf("%s printed %d result lines: perftest's clock calibration failed on this loaded machine", side.name, len(lines))
			continue
		}
		if len(lines) < wantSizes {
			t.Errorf("%s printed %d result lines, want %d:\n%s", side.name, len(lines), wantSizes, side.out)
			continue
		}
		for _, l := range lines {
			// A few iterations of a few bytes round to 0.00 MB/s.
			if n, _ := strconv.Atoi(l[1]); n < 4096 && !strings.HasSuffix(test, "_lat") {
				continue
			}
			if v, _ := strconv.ParseFloat(l[4], 64); v <= 0 {
				if perftestrun.ClockFailed(side.out) || (passive && side.server && perftestrun.ClockFailed(pt.Output())) {
					// perftest's clock calibration failed: its
					// figures (also those it reports to a passive
					// ibex server) are 0.00 whatever the run did.
					t.Logf("%s: %q: perftest's clock calibration failed on this loaded machine", side.name, l[0])
					continue
				}
				t.Errorf("%s: result line %q has no figure", side.name, l[0])
			}
		}
	}
}
