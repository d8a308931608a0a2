package udp_test

import (
	"fmt"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/ibex-rdma/ibex/provider/udp"
	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/verbs/verbstest"
)

func TestMain(m *testing.M) {
	if os.Getenv("IBEX_NETNS_PEER") == "1" {
		if err := netnsPeer(); err != nil {
			fmt.Fprintln(os.Stderr, "netns peer:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

var devSeq atomic.Uint32

// newDevices registers two devices on distinct loopback addresses (all of
// 127/8 is loopback), as two hosts would be.
func newDevices(t testing.TB) (string, string) {
	t.Helper()
	// The second octet comes from the process ID, so test processes that
	// run at once (go test -p, benchmarks) rarely pick the same addresses.
	n := devSeq.Add(1)
	p := 100 + os.Getpid()%150
	a, b := fmt.Sprintf("udptest%da", n), fmt.Sprintf("udptest%db", n)
	if err := udp.AddDevice(a, netip.MustParseAddrPort(fmt.Sprintf("127.%d.%d.1:4791", p, n))); err != nil {
		t.Fatal(err)
	}
	if err := udp.AddDevice(b, netip.MustParseAddrPort(fmt.Sprintf("127.%d.%d.2:4791", p, n))); err != nil {
		t.Fatal(err)
	}
	return a, b
}

func open(t testing.TB, name string) *verbs.Context {
	t.Helper()
	c, err := verbs.Open("udp/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestConformance runs the verbs suite with the two ends on two devices,
// every packet crossing the kernel's UDP stack.
func TestConformance(t *testing.T) {
	a, b := newDevices(t)
	verbstest.Run(t, verbstest.Config{
		Open: func(t testing.TB) (x, y *verbs.Context) { return open(t, a), open(t, b) },
	})
}
