package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/internal/perftestrun"
)

// TestPSPPerf: `ibex perf` between two ibex processes whose udp devices
// require encryption: the SPIs cross in the dests' srqn field (without
// them each end would refuse to connect), write_bw and read_bw complete
// with their reports.
func TestPSPPerf(t *testing.T) {
	key := filepath.Join(t.TempDir(), "psp.key")
	if err := os.WriteFile(key, []byte(strings.Repeat("5d", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(addr string) []string {
		return []string{"IBEX_UDP_ADDR=" + addr, "IBEX_PSP=required", "IBEX_PSP_KEY=" + key, "IBEX_DAEMON=off"}
	}
	for _, test := range []string{"write_bw", "read_bw"} {
		port := strconv.Itoa(freePort(t))
		startServer(t, env("127.0.0.96"), test, "-d", "udp0", "-p", port, "-s", "65536", "-n", "300")
		time.Sleep(100 * time.Millisecond)
		out, err := runClient(t, env("127.0.0.97"), test, "-d", "udp0", "-p", port, "-s", "65536", "-n", "300", "127.0.0.1")
		if err != nil {
			t.Fatalf("%s: %v\n%s", test, err, out)
		}
		if rows := parseReport(t, out, false); len(rows) != 1 || rows[0][1] != 300 || rows[0][3] <= 0 {
			t.Fatalf("%s: report %v\n%s", test, rows, out)
		}
	}
}

// TestPSPRealPerftest: Debian's real perftest cannot speak ibex's
// encryption (its exchange has no SPI). Against it, `ibex perf` with
// IBEX_PSP=on runs write_bw in plaintext, with the data of the normal case;
// with IBEX_PSP=required it refuses to connect, naming the policy.
func TestPSPRealPerftest(t *testing.T) {
	lib := perftestrun.Build(t)
	key := filepath.Join(t.TempDir(), "psp.key")
	if err := os.WriteFile(key, []byte(strings.Repeat("4b", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Run("on", func(t *testing.T) {
		// Both processes see it; perftest's QPs, on libibexverbs, announce
		// an SPI that its exchange cannot carry: plaintext both ways.
		t.Setenv("IBEX_PSP", "on")
		t.Setenv("IBEX_PSP_KEY", key)
		realPerftestCase(t, lib, "write_bw", []string{"-s", "4096", "-n", "200"}, true, [2]string{"127.0.0.92", "127.0.0.93"})
	})
	t.Run("required", func(t *testing.T) {
		port := strconv.Itoa(perftestrun.FreePort(t))
		pt := perftestrun.Start(t, lib, []string{"IBEX_UDP_ADDR=127.0.0.94", "IBEX_PSP=off"}, "ib_write_bw", "-F", "-d", "udp0", "-p", port, "-n", "50")
		time.Sleep(100 * time.Millisecond)
		_, errOut, code := runMainWithin(t, 60*time.Second,
			[]string{"IBEX_UDP_ADDR=127.0.0.95", "IBEX_PSP=required", "IBEX_PSP_KEY=" + key},
			"perf", "write_bw", "-d", "udp0", "-p", port, "-n", "50", "127.0.0.1")
		if code == 0 || !strings.Contains(errOut, "encryption required (policy required") {
			t.Fatalf("ibex perf exit %d: %s", code, errOut)
		}
		t.Logf("refused: %s", strings.TrimSpace(errOut))
		_ = pt.Wait(10 * time.Second) // perftest fails once its peer is gone
	})
}
