package perf

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/provider/udp"
	"github.com/ibex-rdma/ibex/verbs"
)

// pspDevice registers udp device name on addr with encryption policy pol.
func pspDevice(t *testing.T, name, addr, pol string) {
	t.Helper()
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte(strings.Repeat("3c", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := udp.AddDevice(name, netip.MustParseAddrPort(addr)); err != nil {
		t.Fatal(err)
	}
	if err := udp.SetPSP(name, pol, key); err != nil {
		t.Fatal(err)
	}
}

// TestPerfEncrypted: write_bw and read_bw between two ibex ends on a udp
// device that requires encryption (a peer that does not encrypt is
// refused: provider/udp's TestPSPPolicies): the SPIs cross in the dests' srqn
// field (without them the device would refuse to connect), every request
// completes, and no packet is dropped by an SA check.
func TestPerfEncrypted(t *testing.T) {
	dev := fmt.Sprintf("perfpsp%d", os.Getpid())
	pspDevice(t, dev, "127.0.0.96:4791", "required")
	// Held open, so that the device and its counters outlive the runs.
	vc, err := verbs.Open("udp/" + dev)
	if err != nil {
		t.Fatal(err)
	}
	defer vc.Close()
	for _, test := range []Test{WriteBW, ReadBW} {
		cfg := Config{Test: test, Device: dev, Size: 64 << 10, Iters: 300, Port: freeTCPPort(t), Timeout: 20 * time.Second}
		client, _, cliOut, _ := runPair(t, cfg)
		if len(client) != 1 || client[0].Iters != 300 || client[0].BWAvg <= 0 {
			t.Fatalf("%v: %+v\n%s", test, client, cliOut)
		}
	}
	c, _ := udp.Counters(dev)
	if c.PortRcvPkts == 0 || c.PSPAuthErrors+c.PSPReplayDrops+c.PSPUnknownSPI+c.PSPPlaintextDrops != 0 {
		t.Fatalf("counters %+v", c)
	}
}
