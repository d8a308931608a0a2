package udp

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"testing"

	"github.com/ibex-rdma/ibex/verbs"
)

// TestRateLimitedWindow: eight QPs WRITE at once from one namespace to
// another through a veth whose sending end is rate-limited by a tbf qdisc
// (200 Mbit/s, a 128 KiB queue that drops when full), on the socket path
// (a qdisc does not see AF_XDP's transmit). Their send windows, up to 512
// packets each, far exceed the queue: the windows must react (cut on the
// losses, by the AIMD of package rc), every WRITE must complete with its
// data intact, and nothing may end in RETRY_EXC_ERR.
func TestRateLimitedWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: namespaces and a rate-limited transfer")
	}
	t.Setenv("IBEX_UDP_XDP", "off")
	p := newXDPPair(t, 4200, false)
	xdpRun(t, "ip", "netns", "exec", p.ns[0], "tc", "qdisc", "add", "dev", p.dev[0], "root", "tbf",
		"rate", "200mbit", "burst", "64kb", "limit", "128kb")
	var devs [2]string
	for i := range 2 {
		devs[i] = fmt.Sprintf("win%d.%d", os.Getpid(), xdpSeq.Add(1))
		if err := AddDevice(devs[i], netip.AddrPortFrom(p.ip[i], 0)); err != nil {
			t.Fatal(err)
		}
	}
	const qps, size, rounds = 8, 1 << 20, 3
	var as, bs [qps]*xdpEnd
	for i := range qps {
		as[i], bs[i] = newXDPEnd(t, p.ns[0], devs[0], size), newXDPEnd(t, p.ns[1], devs[1], size)
		if err := as[i].qp.Connect(bs[i].qp.Info(), verbs.ConnectOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := bs[i].qp.Connect(as[i].qp.Info(), verbs.ConnectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 23))
	for r := range rounds {
		for i := range qps {
			src := as[i].mr.Bytes()
			for k := range src {
				src[k] = byte(rng.Uint32())
			}
			w := verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGL:        []verbs.SGE{{Addr: as[i].mr.Addr(), Length: size, LKey: as[i].mr.LKey()}},
				RemoteAddr: bs[i].mr.Addr(), RKey: bs[i].mr.RKey()}
			if err := as[i].qp.PostSend([]verbs.SendWR{w}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range qps {
			as[i].wait(t, fmt.Sprintf("round %d: WRITE on QP %d", r, i))
			if !bytes.Equal(as[i].mr.Bytes(), bs[i].mr.Bytes()) {
				t.Fatalf("round %d: QP %d: the target differs (seed %d)", r, i, seed)
			}
		}
	}
	var tot verbs.QPStats
	for i := range qps {
		s := as[i].qp.Stats()
		tot.PktsSent += s.PktsSent
		tot.Retransmits += s.Retransmits
		tot.WindowCuts += s.WindowCuts
		tot.SeqNaksRecv += s.SeqNaksRecv
		tot.Retries += s.Retries
		tot.Paced += s.Paced
	}
	t.Logf("%d QPs, %d rounds of %d B each: %d packets sent, %d resent, %d sequence NAKs, %d timeouts retried, %d window cuts, %d retransmissions paced",
		qps, rounds, size, tot.PktsSent, tot.Retransmits, tot.SeqNaksRecv, tot.Retries, tot.WindowCuts, tot.Paced)
	if tot.Retransmits == 0 {
		t.Fatalf("nothing was resent: the tbf queue dropped nothing, so this test saw no congestion")
	}
	if tot.WindowCuts == 0 {
		t.Errorf("%d packets resent but no send window was cut", tot.Retransmits)
	}
}
