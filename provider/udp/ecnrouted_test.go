package udp_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/ibex-rdma/ibex/internal/netimpair"
	"github.com/ibex-rdma/ibex/verbs"
)

// TestNetnsRoutedECN runs the ECN chain on the real kernel, on the socket
// and on AF_XDP: the router marks 2% of the ECN-capable datagrams from A
// to B CE, as an AQM would instead of dropping (netimpair.MarkCE; it never
// marks one that is not ECT). A's datagrams must leave ECT(0), B's
// responder must see CE and answer with RoCEv2 CNPs, A's requester must
// receive them and cut its window, and the data must arrive intact.
func TestNetnsRoutedECN(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: three namespaces and a shaped transfer")
	}
	for _, mode := range routedModes() {
		t.Run("xdp="+mode, func(t *testing.T) { routedECN(t, mode) })
	}
}

func routedECN(t *testing.T, mode string) {
	const mtu, size = 4200, 32 << 20
	p := netimpair.Routed(t, mtu)
	p.MarkCE(t, 2)
	e, remote := routedEnds(t, p, "ecn", mode, mtu)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 29))
	src := e.mr.Bytes()[:size]
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	before := e.qp.Stats()
	e.streamN(t, verbs.WRRDMAWrite, 0, size, remote)
	e.streamN(t, verbs.WRRDMARead, routedSize, size, remote)
	after := e.qp.Stats()
	if !bytes.Equal(e.mr.Bytes()[routedSize:routedSize+size], src) {
		t.Fatalf("%d MiB written through the marking router differ when read back (seed %d)", size>>20, seed)
	}
	t.Logf("requester: %s", statsDelta(before, after))
	if after.CNPsRecv == before.CNPsRecv {
		t.Errorf("no CNP reached the requester through a router marking 2%% of ECT datagrams CE")
	}
	if after.WindowCuts == before.WindowCuts {
		t.Errorf("%d CNPs received but the send window was never cut", after.CNPsRecv-before.CNPsRecv)
	}
}
