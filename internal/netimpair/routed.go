package netimpair

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"
)

// A routed path for traffic that Impair cannot reach: an AF_XDP socket's
// transmit (dev_direct_xmit) skips the sender's qdisc and netfilter, and
// its receiver's XDP program runs before netfilter, so drops at either end
// miss it. Between the ends here is a router, a namespace of its own that
// forwards in the kernel with no XDP program attached, and its forward
// hook drops at random whatever the ends send, whichever way they send it:
//
//	A: devA ipA ── veth ── R: (ip_forward=1, nftables forward hook) ── veth ── B: devB ipB
//
// The ends' devices leave GSO to the kernel's software segmentation
// (gso_max_segs 1): a UDP super-datagram crosses veth and the router's
// forwarding whole, so the hook would otherwise see, and drop, up to 64
// datagrams as one packet. Every datagram is a packet to the hook, and its
// counters count what the wire would carry.

// Path is a routed path between two namespaces of its own, made by Routed
// and removed when the test ends.
type Path struct {
	A, B     End        // the ends: each one's namespace and its device toward R
	IPA, IPB netip.Addr // their addresses (different /24s, routed through R)
	R        string     // the router's namespace
	rA, rB   string     // R's devices toward A and toward B
	table    string     // R's nftables table
	loss     int        // the drop percentage in force
}

// Count is what R's forward hook saw of one direction's RoCEv2 datagrams
// (UDP destination port 4791): all of them, and those it dropped.
type Count struct {
	Packets uint64 `json:"packets"`
	Dropped uint64 `json:"dropped"`
}

var routedSeq atomic.Uint32

// Routed makes the three namespaces, the two veth pairs with MTU mtu (0:
// the kernel's), the addresses and the routes, and R's counters, lossless
// until SetLoss. It skips the test when this machine cannot make network
// namespaces or has no nft command.
func Routed(t testing.TB, mtu int) *Path {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("cannot create network namespaces: the ip command (iproute2) is not installed")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("cannot drop packets in the router: the nft command (nftables) is not installed")
	}
	id := fmt.Sprintf("%d.%d", os.Getpid()%100000, routedSeq.Add(1)%100)
	p := &Path{
		A:     End{NS: "ibrt" + id + "a", Dev: "ibr" + id + "a"},
		B:     End{NS: "ibrt" + id + "b", Dev: "ibr" + id + "b"},
		R:     "ibrt" + id + "r",
		rA:    "ibr" + id + "ra",
		rB:    "ibr" + id + "rb",
		IPA:   netip.MustParseAddr("10.91.1.1"),
		IPB:   netip.MustParseAddr("10.91.2.1"),
		table: "ibex_routed",
	}
	const gwA, gwB = "10.91.1.2", "10.91.2.2"
	for _, ns := range []string{p.A.NS, p.R, p.B.NS} {
		if out, err := run([]string{"ip", "netns", "add", ns}); err != nil {
			t.Skipf("cannot create network namespaces here: ip netns add: %v: %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	}
	link := []string{}
	if mtu > 0 {
		link = []string{"mtu", strconv.Itoa(mtu)}
	}
	for _, l := range []struct {
		end   End
		rdev  string
		ip    netip.Addr
		gw    string
		other string // the far end's /24
	}{{p.A, p.rA, p.IPA, gwA, "10.91.2.0/24"}, {p.B, p.rB, p.IPB, gwB, "10.91.1.0/24"}} {
		args := []string{"ip", "link", "add", l.end.Dev, "netns", l.end.NS}
		args = append(args, link...)
		args = append(args, "type", "veth", "peer", "name", l.rdev, "netns", p.R)
		must(t, append(args, link...)...)
		must(t, "ip", "-n", l.end.NS, "link", "set", l.end.Dev, "gso_max_segs", "1")
		must(t, "ip", "-n", l.end.NS, "addr", "add", l.ip.String()+"/24", "dev", l.end.Dev)
		must(t, "ip", "-n", p.R, "addr", "add", l.gw+"/24", "dev", l.rdev)
		for _, c := range [][]string{{l.end.NS, l.end.Dev}, {l.end.NS, "lo"}, {p.R, l.rdev}} {
			must(t, "ip", "-n", c[0], "link", "set", c[1], "up")
		}
		must(t, "ip", "-n", l.end.NS, "route", "add", l.other, "via", l.gw)
	}
	must(t, "ip", "netns", "exec", p.R, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
	r := End{NS: p.R}
	must(t, r.cmd("nft", "add", "table", "inet", p.table)...)
	for _, c := range []string{"ab", "ab_drop", "ba", "ba_drop"} {
		must(t, r.cmd("nft", "add", "counter", "inet", p.table, c)...)
	}
	must(t, r.cmd("nft", "add", "chain", "inet", p.table, "relay", "{ type filter hook forward priority 0 ; }")...)
	p.SetLoss(t, 0)
	return p
}

// RouterDev is R's device toward B (toB) or toward A: where a test puts a
// qdisc of its own on the path (its egress is what that direction queues).
func (p *Path) RouterDev(toB bool) string {
	if toB {
		return p.rB
	}
	return p.rA
}

// SetLoss makes R drop percent % (0 to 100) of the RoCEv2 datagrams it
// forwards each way, each one at random (nftables numgen); 0 drops none.
// The counters keep counting across changes.
func (p *Path) SetLoss(t testing.TB, percent int) {
	t.Helper()
	if percent < 0 || percent > 100 {
		t.Fatalf("netimpair: loss %d%% is not between 0 and 100", percent)
	}
	r := End{NS: p.R}
	must(t, r.cmd("nft", "flush", "chain", "inet", p.table, "relay")...)
	for _, d := range []struct{ in, name string }{{p.rA, "ab"}, {p.rB, "ba"}} {
		rule := []string{"nft", "add", "rule", "inet", p.table, "relay", "iifname", d.in, "udp", "dport", "4791", "counter", "name", d.name}
		if percent > 0 {
			rule = append(rule, "numgen", "random", "mod", "100", "<", strconv.Itoa(percent), "counter", "name", d.name+"_drop", "drop")
		}
		must(t, r.cmd(rule...)...)
	}
	p.loss = percent
}

// MarkCE makes R mark percent % (1 to 100) of the ECN-capable (ECT(0))
// IPv4 RoCEv2 datagrams it forwards from A to B Congestion Experienced, at
// random, as a router's AQM marks instead of dropping (this kernel has no
// marking qdisc: no fq_codel, red or codel). A datagram that is not
// ECN-capable is never marked. Call it after SetLoss, which clears it.
func (p *Path) MarkCE(t testing.TB, percent int) {
	t.Helper()
	if percent < 1 || percent > 100 {
		t.Fatalf("netimpair: CE marking %d%% is not between 1 and 100", percent)
	}
	r := End{NS: p.R}
	must(t, r.cmd("nft", "add", "rule", "inet", p.table, "relay", "iifname", p.rA, "udp", "dport", "4791",
		"ip", "ecn", "ect0", "numgen", "random", "mod", "100", "<", strconv.Itoa(percent), "ip", "ecn", "set", "ce")...)
}

// Loss is the drop percentage in force.
func (p *Path) Loss() int { return p.loss }

// Counts returns what R's forward hook has seen since Routed, A to B and
// B to A.
func (p *Path) Counts(t testing.TB) (ab, ba Count) {
	t.Helper()
	args := End{NS: p.R}.cmd("nft", "-j", "list", "counters", "table", "inet", p.table)
	out, err := exec.Command(args[0], args[1:]...).Output()
	if err != nil {
		t.Fatalf("nft list counters in %s: %v", p.R, err)
	}
	var doc struct {
		Nftables []struct {
			Counter *struct {
				Name    string `json:"name"`
				Packets uint64 `json:"packets"`
			} `json:"counter"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("nft list counters in %s: %v: %s", p.R, err, out)
	}
	seen := 0
	for _, o := range doc.Nftables {
		if o.Counter == nil {
			continue
		}
		seen++
		switch c := o.Counter; c.Name {
		case "ab":
			ab.Packets = c.Packets
		case "ab_drop":
			ab.Dropped = c.Packets
		case "ba":
			ba.Packets = c.Packets
		case "ba_drop":
			ba.Dropped = c.Packets
		default:
			seen--
		}
	}
	if seen != 4 {
		t.Fatalf("nft list counters in %s: %d of the 4 counters: %s", p.R, seen, out)
	}
	return ab, ba
}
