package daemon_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/provider/ibexd"
)

// TestCollThroughDaemon: `ibex coll` with two rank processes on udp0 runs
// through the daemon (both ranks attached to it), above the size where
// coll would register the caller's buffer (which a daemon device cannot
// map: it copies through its working buffer instead), and every result is
// right.
func TestCollThroughDaemon(t *testing.T) {
	d := startDaemon(t, "127.0.0.53")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ibexBin, "coll", "all_reduce", "-b", "8", "-e", "256K", "-f", "8", "--np", "2", "--transport", "udp0")
	cmd.Env = append(os.Environ(), "IBEX_DAEMON_SOCKET="+d.sock)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ibex coll through the daemon: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "Out of bounds values : 0 OK") || !strings.Contains(string(out), "262144") {
		t.Fatalf("ibex coll through the daemon:\n%s", out)
	}
	// The ranks' traffic crossed the daemon's device.
	st, err := ibexd.QueryStatus(d.sock, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var pkts uint64
	for _, c := range st.Devices[0].Counters {
		if c.Name == "PortXmitPkts" {
			pkts = c.Value
		}
	}
	if pkts < 100 {
		t.Errorf("the daemon's udp0 sent %d packets: the ranks did not go through it", pkts)
	}
}
