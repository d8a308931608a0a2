package daemon_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ibex-rdma/ibex/verbs/verbstest"
)

// TestConformanceTwoNamespaces runs the conformance suite between two
// hosts, each with its daemon: two network namespaces joined by a veth
// pair, a daemon in each on its end's address; end a (this process)
// attached to the first daemon, end b (a child) to the second. The
// processes are in no namespace of their own: they reach their daemon
// through its socket, and only the daemons touch the network.
func TestConformanceTwoNamespaces(t *testing.T) {
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("cannot create network namespaces: the ip command (iproute2) is not installed")
	}
	id := os.Getpid() % 100000
	nsA, nsB := fmt.Sprintf("ibxda%d", id), fmt.Sprintf("ibxdb%d", id)
	if out, err := exec.Command("ip", "netns", "add", nsA).CombinedOutput(); err != nil {
		t.Skipf("cannot create network namespaces here: ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", nsA).Run() })
	nsRun(t, "ip", "netns", "add", nsB)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", nsB).Run() })
	va, vb := fmt.Sprintf("ixa%d", id), fmt.Sprintf("ixb%d", id)
	sub := 100 + id%50
	ipA, ipB := fmt.Sprintf("10.%d.78.1", sub), fmt.Sprintf("10.%d.78.2", sub)
	nsRun(t, "ip", "link", "add", va, "type", "veth", "peer", "name", vb)
	nsRun(t, "ip", "link", "set", va, "netns", nsA)
	nsRun(t, "ip", "link", "set", vb, "netns", nsB)
	for _, e := range []struct{ ns, dev, ip string }{{nsA, va, ipA}, {nsB, vb, ipB}} {
		nsRun(t, "ip", "netns", "exec", e.ns, "ip", "addr", "add", e.ip+"/24", "dev", e.dev)
		nsRun(t, "ip", "netns", "exec", e.ns, "ip", "link", "set", e.dev, "up")
		nsRun(t, "ip", "netns", "exec", e.ns, "ip", "link", "set", "lo", "up")
	}
	dA := startDaemonIn(t, nsA, ipA)
	startDaemonIn(t, nsB, ipB) // the suite's child attaches to this one
	dial := verbstest.StartChildBinary(t, suiteEnv, childBin)
	t.Setenv("IBEX_DAEMON_SOCKET", dA.sock)
	runSuite(t, dial)
}

func nsRun(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}
