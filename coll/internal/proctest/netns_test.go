package proctest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/coll"
	"github.com/ibex-rdma/ibex/coll/reduce"
	"github.com/ibex-rdma/ibex/internal/netimpair"
)

// TestNetnsUDP runs 2 ranks in two network namespaces joined by a veth
// pair: different hosts to coll, so the ranks reach each other over udp0
// (RoCEv2 on the veth addresses) after a rendezvous over TCP on the same
// link. Each rank checks the transport and runs all_reduce (float32 sum),
// all_gather and broadcast (both roots) of 1, 1000 and 2^20 elements,
// element by element.
//
// It is skipped only when `ip netns add` fails (no iproute2, or no
// CAP_SYS_ADMIN: not root, or a container without it).
func TestNetnsUDP(t *testing.T) {
	runNetnsPair(t, "udp", false, 60*time.Second)
}

// TestNetnsUDPLoss is TestNetnsUDP's all-reduce and broadcast on a veth
// that drops 1% of packets both ways (netimpair: tc netem, or nftables
// where the kernel has no netem): the LL and flagged paths rely on udp0
// placing a piece's packets in order (go-back-N resends from a lost one),
// so every result must still be exact.
func TestNetnsUDPLoss(t *testing.T) {
	runNetnsPair(t, "udploss", true, 120*time.Second)
}

// runNetnsPair runs rank case name as 2 processes, one in each namespace
// of a fresh pair (lossy when asked), within limit.
func runNetnsPair(t *testing.T, name string, lossy bool, limit time.Duration) {
	ns, addr := netnsPair(t, lossy)
	began := time.Now()
	j := start(t, spec{
		Case: name, Size: 2, Seed: seed(t), Limit: limit,
		// A fixed port: nothing else listens in a fresh namespace.
		ID:   newID(t, addr[0]+":29500"),
		Env:  func(r int) []string { return []string{"IBEX_UDP_ADDR=" + addr[r]} },
		Wrap: func(r int) []string { return []string{"ip", "netns", "exec", ns[r]} },
	})
	j.wait(limit + 10*time.Second)
	t.Logf("2 ranks in 2 namespaces (lossy %v) in %v", lossy, time.Since(began).Round(time.Millisecond))
}

// netnsPair makes two network namespaces joined by a veth pair, lossy
// both ways when asked (netimpair), and returns their names and
// addresses. It skips the test when namespaces (or an impairment) cannot
// be made here.
func netnsPair(t *testing.T, lossy bool) (ns, addr [2]string) {
	pid := os.Getpid()
	nsA, nsB := fmt.Sprintf("ibexcoll-a-%d", pid), fmt.Sprintf("ibexcoll-b-%d", pid)
	if out, err := exec.Command("ip", "netns", "add", nsA).CombinedOutput(); err != nil {
		t.Skipf("cannot create network namespaces here: ip netns add %s: %v: %s", nsA, err, out)
	}
	t.Cleanup(func() { delNetns(t, nsA) })
	ip(t, "netns", "add", nsB)
	t.Cleanup(func() { delNetns(t, nsB) })
	// Veth names have at most 15 bytes. Deleting a namespace deletes the
	// end inside it, and with it the pair; the root-namespace delete is for
	// a pair that never got moved.
	va, vb := fmt.Sprintf("icolla%d", pid%100000), fmt.Sprintf("icollb%d", pid%100000)
	ip(t, "link", "add", va, "type", "veth", "peer", "name", vb)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", va).Run() })
	sub := pid % 250
	addr = [2]string{fmt.Sprintf("10.78.%d.1", sub), fmt.Sprintf("10.78.%d.2", sub)}
	for k, end := range []struct{ ns, dev string }{{nsA, va}, {nsB, vb}} {
		ip(t, "link", "set", end.dev, "netns", end.ns)
		ip(t, "-n", end.ns, "addr", "add", addr[k]+"/24", "dev", end.dev)
		ip(t, "-n", end.ns, "link", "set", end.dev, "up")
		ip(t, "-n", end.ns, "link", "set", "lo", "up")
	}
	if lossy {
		netimpair.Impair(t, netimpair.End{NS: nsA, Dev: va}, netimpair.End{NS: nsB, Dev: vb})
	}
	return [2]string{nsA, nsB}, addr
}

// ip runs the ip command and fails the test on error.
func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func delNetns(t *testing.T, ns string) {
	if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
		t.Errorf("ip netns del %s: %v: %s", ns, err, out)
	}
}

// udpLossCase is one rank of TestNetnsUDPLoss: all-reduce (LL, then
// flagged pieces) and broadcast from each root, in and out of place.
func udpLossCase(ctx context.Context, c *coll.Comm, seed uint64) error {
	x := newCaller(ctx, c, seed)
	x.dt = reduce.Float32
	for _, count := range []int{1000, 1 << 18} {
		for _, inPlace := range []bool{false, true} {
			x.count, x.inPlace = count, inPlace
			if err := x.allReduce(reduce.Sum); err != nil {
				return err
			}
			for root := range 2 {
				if err := x.broadcast(root); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// udpCase is one rank of TestNetnsUDP.
func udpCase(ctx context.Context, c *coll.Comm, seed uint64) error {
	r := c.Rank()
	if got := c.Transport(1 - r); got != "udp0" {
		return fmt.Errorf("rank %d reaches rank %d over %q, want udp0 (another network namespace)", r, 1-r, got)
	}
	x := newCaller(ctx, c, seed)
	x.dt = reduce.Float32
	for _, count := range []int{1, 1000, 1 << 20} {
		for _, inPlace := range []bool{false, true} {
			x.count, x.inPlace = count, inPlace
			if err := x.allReduce(reduce.Sum); err != nil {
				return err
			}
			if err := x.allGather(); err != nil {
				return err
			}
			for root := range 2 {
				if err := x.broadcast(root); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
