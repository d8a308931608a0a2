package coll

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/coll/reduce"
	"github.com/ibex-rdma/ibex/provider/udp"
	"github.com/ibex-rdma/ibex/verbs"
)

const udpCaps = verbs.CapSameHost | verbs.CapOtherHosts | verbs.CapOrderedPlacement

var second struct {
	once sync.Once
	err  error
}

// secondUDP registers udp1, a udp device on 127.0.0.1 at a free port
// (once per test binary).
func secondUDP(t testing.TB) string {
	t.Helper()
	second.once.Do(func() {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			second.err = err
			return
		}
		port := pc.LocalAddr().(*net.UDPAddr).Port
		_ = pc.Close()
		second.err = udp.AddDevice("udp1", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port)))
	})
	if second.err != nil {
		t.Fatalf("add udp1: %v", second.err)
	}
	return "udp1"
}

// udpBehaviour is what a communicator decided from its links and what
// its calls did: the paths it may take, the LL limit, whether a waiting
// rank yields its thread, the landing buffer, the cost of a link, and the
// path an 8-byte and a 64 KiB all-reduce took (by which protocol's piece
// counts moved).
func udpBehaviour(c *Comm) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q := (c.rank + 1) % c.size
	if l := c.links[q]; l.caps != udpCaps {
		return "", fmt.Errorf("link to rank %d on %s: caps %v, want %v", q, l.dev.name, l.caps, udpCaps)
	}
	took := func(n int) (string, error) {
		ll, fl, nm := c.ll.peers[q].sent, c.fl.peers[q].sent, c.normal.peers[q].sent
		buf := make([]byte, 4*n)
		for i := range n {
			put(buf, reduce.Int32, i, float64(c.rank+i))
		}
		if err := c.AllReduce(ctx, buf, buf, n, reduce.Int32, reduce.Sum); err != nil {
			return "", err
		}
		for i := range n {
			if got, want := get(buf, reduce.Int32, i), float64(c.size*i+c.size*(c.size-1)/2); got != want {
				return "", fmt.Errorf("all_reduce of %d: element %d = %v, want %v", n, i, got, want)
			}
		}
		var paths []string
		if c.ll.peers[q].sent != ll {
			paths = append(paths, "LL")
		}
		if c.fl.peers[q].sent != fl {
			paths = append(paths, "flagged")
		}
		if c.normal.peers[q].sent != nm {
			paths = append(paths, "normal")
		}
		return strings.Join(paths, "+"), nil
	}
	small, err := took(2)
	if err != nil {
		return "", err
	}
	large, err := took(16 << 10)
	if err != nil {
		return "", err
	}
	cost := c.model.link(c)(c.rank, q)
	return fmt.Sprintf("ll %v flagged %v llMax %d yield %v landing %d cost %+v; 8 B: %s, 64 KiB: %s",
		c.ll.on, c.fl.on, c.ll.max, c.yieldThread, c.opt.Landing, cost, small, large), nil
}

// TestSecondUDPDevice: a communicator forced onto udp1, a second udp
// device (udp.AddDevice), decides by its capabilities exactly as one on
// udp0: the LL path for small calls and the flagged path (on amd64) for
// large ones, the udp LL limit, a wait that yields its thread only with
// more ranks than cores (udp has no progress thread to make room for: the
// ranks' polls drive it), and udp0's cost entry
// (udp1 has none of its own). When udp0's port is free here, a udp0
// communicator is run too and must behave the same.
func TestSecondUDPDevice(t *testing.T) {
	dev := secondUDP(t)
	run := func(tr string) string {
		got := make([]string, 2)
		runRanks(t, 2, Options{Transport: tr}, func(c *Comm) error {
			s, err := udpBehaviour(c)
			got[c.rank] = s
			return err
		})
		if got[0] != got[1] {
			t.Fatalf("%s: the ranks differ:\n%s\n%s", tr, got[0], got[1])
		}
		return got[0]
	}
	got := run(dev)
	t.Logf("%s: %s", dev, got)
	u := DefaultModel().Transports["udp0"]
	fl, landing, large := true, defaultCredits*defaultChunk, "flagged"
	if runtime.GOARCH != "amd64" {
		fl, landing, large = false, defaultLanding, "normal"
	}
	want := fmt.Sprintf("ll true flagged %v llMax %d yield %v landing %d cost %+v; 8 B: LL, 64 KiB: %s",
		fl, llMaxAcked, 2 > runtime.NumCPU(), landing, algo.LinkCost{Alpha: u.AlphaUs * 1e-6, Beta: u.BetaNs * 1e-9}, large)
	if got != want {
		t.Fatalf("%s:\n got %s\nwant %s", dev, got, want)
	}
	if u.Caps != udpCaps {
		t.Fatalf("DefaultModel's udp0 entry has caps %v, the udp provider advertises %v", u.Caps, udpCaps)
	}
	// udp0 itself, unless another process holds its port.
	if pc, err := net.ListenPacket("udp", "127.0.0.1:4791"); err != nil {
		t.Logf("udp0 not compared: its port is busy (%v)", err)
	} else {
		_ = pc.Close()
		if u0 := run("udp0"); u0 != got {
			t.Fatalf("udp0 and %s differ:\nudp0: %s\n%s: %s", dev, u0, dev, got)
		}
	}
}

// TestModelEntryByCaps: a device's own entry; else the entry of a device
// with the same capabilities, recorded or (in a file saved without them)
// DefaultModel's for that name; else the slowest.
func TestModelEntryByCaps(t *testing.T) {
	shmCaps := verbs.CapSameHost | verbs.CapOneSided | verbs.CapOrderedPlacement | verbs.CapCompleteAtPost
	old, err := parseModel([]byte(`{"transports":{"shm0":{"alpha_us":3,"beta_ns_per_byte":0.2},"udp0":{"alpha_us":300,"beta_ns_per_byte":1}},"gamma_ns_per_byte":0.03,"source":"saved before caps"}`), "test")
	if err != nil {
		t.Fatal(err)
	}
	recorded := Model{Transports: map[string]LinkModel{
		"udp9": {AlphaUs: 200, BetaNs: 2, Caps: udpCaps},
		"udp5": {AlphaUs: 100, BetaNs: 1, Caps: udpCaps},
		"x":    {AlphaUs: 1000, BetaNs: 0.5},
	}, GammaNs: 0.1}
	for _, tc := range []struct {
		m           Model
		dev         string
		caps        verbs.DeviceCap
		alpha, beta float64
	}{
		{DefaultModel(), "udp1", udpCaps, 268, 1.05},
		{DefaultModel(), "shm0", 0, 2.55, 0.217},
		{DefaultModel(), "shm7", shmCaps, 2.55, 0.217},
		{DefaultModel(), "roce0", verbs.CapOtherHosts, 268, 1.05}, // the slowest
		{old, "udp1", udpCaps, 300, 1},
		{old, "shm1", shmCaps, 3, 0.2},
		{old, "loop0", verbs.CapOneSided | verbs.CapCompleteAtPost, 300, 1},
		{recorded, "udp1", udpCaps, 100, 1}, // the first by name
		{recorded, "y", 0, 1000, 2},         // no caps match nothing
	} {
		l := tc.m.entries()(tc.dev, tc.caps)
		if l.AlphaUs != tc.alpha || l.BetaNs != tc.beta {
			t.Errorf("%s %v in %q: α %v β %v, want %v %v", tc.dev, tc.caps, tc.m.Source, l.AlphaUs, l.BetaNs, tc.alpha, tc.beta)
		}
	}
}

// TestModelCapsJSON: caps are saved by name and read back; a file
// without them loads; an unknown name is an error naming it.
func TestModelCapsJSON(t *testing.T) {
	path := t.TempDir() + "/m.json"
	if err := DefaultModel().Save(path); err != nil {
		t.Fatal(err)
	}
	back, err := LoadModel(path)
	if err != nil {
		t.Fatal(err)
	}
	for n, l := range DefaultModel().Transports {
		if back.Transports[n] != l {
			t.Errorf("%s: saved %+v, loaded %+v", n, l, back.Transports[n])
		}
	}
	b, _ := back.Transports["udp0"].MarshalJSON()
	if want := `"caps":"SAME_HOST|OTHER_HOSTS|ORDERED_PLACEMENT"`; !strings.Contains(string(b), want) {
		t.Errorf("udp0 entry %s: want %s", b, want)
	}
	if b, _ := (LinkModel{AlphaUs: 1}).MarshalJSON(); strings.Contains(string(b), "caps") {
		t.Errorf("an entry without caps is written %s", b)
	}
	if _, err := parseModel([]byte(`{"transports":{"shm0":{"alpha_us":1,"caps":"SAME_HOST|WARP_DRIVE"}}}`), "test"); err == nil || !strings.Contains(err.Error(), `"WARP_DRIVE"`) {
		t.Errorf("unknown capability: error %v", err)
	}
}
