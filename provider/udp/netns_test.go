package udp_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/internal/netimpair"
	"github.com/ibex-rdma/ibex/provider/udp"
	"github.com/ibex-rdma/ibex/verbs"
)

// The real kernel path: this process and a child in another network
// namespace, joined by a veth pair whose both ends run tc netem with loss,
// delay and reordering. 256 MiB (netnsSize; 64 MiB under the race
// detector) go out as RDMA WRITEs and come back as RDMA READs, and must
// arrive intact.

// slowMachine gives the lossy transfer a QP timeout of 1 s (timeout 18)
// instead of 67 ms: under -race on a busy 2-core CI machine a peer can be
// descheduled for longer than retry_cnt × 67 ms, which is not what this
// test is about.
var slowMachine = verbs.ConnectOptions{Set: verbs.AttrTimeout, Attr: verbs.QPAttr{Timeout: 18}}

func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func TestNetnsLossyWriteRead(t *testing.T) {
	if testing.Short() {
		t.Skipf("-short: the %d MiB network-namespace transfer takes tens of seconds", netnsSize>>20)
	}
	// The impairment (qdisc, nftables output hook) acts on the socket
	// path only: AF_XDP's transmit bypasses both. TestNetnsRoutedLoss
	// impairs both paths through a router namespace. The child inherits it.
	t.Setenv("IBEX_UDP_XDP", "off")
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("cannot create network namespaces: the ip command (iproute2) is not installed")
	}
	ns := fmt.Sprintf("ibext%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("cannot create network namespaces here: ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	va, vb := fmt.Sprintf("ibxa%d", os.Getpid()%100000), fmt.Sprintf("ibxb%d", os.Getpid()%100000)
	sub := 200 + os.Getpid()%50
	ipA, ipB := fmt.Sprintf("10.%d.77.1", sub), fmt.Sprintf("10.%d.77.2", sub)
	run(t, "ip", "link", "add", va, "type", "veth", "peer", "name", vb)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", va).Run() })
	run(t, "ip", "link", "set", vb, "netns", ns)
	run(t, "ip", "addr", "add", ipA+"/24", "dev", va)
	run(t, "ip", "link", "set", va, "up")
	run(t, "ip", "netns", "exec", ns, "ip", "addr", "add", ipB+"/24", "dev", vb)
	run(t, "ip", "netns", "exec", ns, "ip", "link", "set", vb, "up")
	run(t, "ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
	impair(t, ns, va, vb)

	// The peer: this test binary again, inside the namespace.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	peer := exec.CommandContext(ctx, "ip", "netns", "exec", ns, os.Args[0])
	peer.Env = append(os.Environ(), "IBEX_NETNS_PEER=1", "IBEX_UDP_ADDR="+ipB)
	stdin, _ := peer.StdinPipe()
	stdout, _ := peer.StdoutPipe()
	var stderr bytes.Buffer
	peer.Stderr = &stderr
	if err := peer.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = stdin.Close()
		_ = peer.Wait()
	}()
	lines := bufio.NewScanner(stdout)
	var remote verbs.ConnInfo
	for lines.Scan() {
		if s, ok := strings.CutPrefix(lines.Text(), "CONNINFO "); ok {
			if err := remote.UnmarshalText([]byte(s)); err != nil {
				t.Fatalf("peer conn info: %v", err)
			}
			break
		}
	}
	if remote.QPN == 0 {
		t.Fatalf("the peer did not start: %s", stderr.String())
	}

	name := "netns" + ns
	if err := udp.AddDevice(name, netip.AddrPortFrom(netip.MustParseAddr(ipA), 0)); err != nil {
		t.Fatal(err)
	}
	e := newBigEnd(t, name, 2*netnsSize)
	info := e.qp.Info()
	txt, _ := info.MarshalText()
	if _, err := fmt.Fprintf(stdin, "%s\n", txt); err != nil {
		t.Fatal(err)
	}
	if err := e.qp.Connect(remote, slowMachine); err != nil {
		t.Fatal(err)
	}
	if p, _ := e.ctx.QueryPort(1); p.ActiveMTU != verbs.MTU1024 {
		t.Errorf("active MTU on a 1500-byte veth: %v, want 1024", p.ActiveMTU)
	}

	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	src := e.mr.Bytes()[:netnsSize]
	for i := 0; i+8 <= len(src); i += 8 {
		v := rng.Uint64()
		for k := range 8 {
			src[i+k] = byte(v >> (8 * k))
		}
	}
	want := sha256.Sum256(src)
	start := time.Now()
	e.stream(t, verbs.WRRDMAWrite, 0, remote)
	wt := time.Since(start)
	start = time.Now()
	e.stream(t, verbs.WRRDMARead, netnsSize, remote)
	rt := time.Since(start)
	if got := sha256.Sum256(e.mr.Bytes()[netnsSize:]); got != want {
		t.Fatalf("%d MiB written then read back through a lossy link differ (seed %d)", netnsSize>>20, seed)
	}
	pc, _ := udp.Counters(name)
	st := e.qp.Stats()
	t.Logf("WRITE %d MiB in %v (%.0f MB/s), READ back in %v (%.0f MB/s); retries %d; port %+v",
		netnsSize>>20, wt, netnsSize/wt.Seconds()/1e6, rt, netnsSize/rt.Seconds()/1e6, st.Retries, pc)
	if pc.PortXmitPkts == 0 || pc.PortRcvPkts == 0 {
		t.Errorf("port counters did not count the traffic: %+v", pc)
	}
}

// impair makes the veth lossy in both directions (netimpair: netem, or
// nftables drops where the kernel has no netem).
func impair(t *testing.T, ns, va, vb string) {
	t.Helper()
	netimpair.Impair(t, netimpair.End{Dev: va}, netimpair.End{NS: ns, Dev: vb})
}

type bigEnd struct {
	ctx *verbs.Context
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
	mr  *verbs.MR
}

func newBigEnd(t *testing.T, dev string, size int) *bigEnd {
	t.Helper()
	e := &bigEnd{ctx: open(t, dev)}
	var err error
	check := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	e.pd, err = e.ctx.AllocPD()
	check(err)
	e.cq, err = e.ctx.CreateCQ(256)
	check(err)
	e.mr, err = e.pd.RegMR(make([]byte, size), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	check(err)
	e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64}})
	check(err)
	t.Cleanup(func() {
		for _, err := range []error{e.qp.Destroy(), e.mr.Dereg(), e.cq.Destroy(), e.pd.Dealloc(), e.ctx.Close()} {
			if err != nil {
				t.Error(err)
			}
		}
	})
	return e
}

// stream moves netnsSize bytes in 1 MiB requests, 8 in flight: WRITE from
// local offset off to the remote region, or READ from it into off.
func (e *bigEnd) stream(t *testing.T, op verbs.Opcode, off int, r verbs.ConnInfo) {
	t.Helper()
	e.streamN(t, op, off, netnsSize, r)
}

// netnsPeer is the far end of TestNetnsLossyWriteRead: TestMain runs it
// instead of the tests when IBEX_NETNS_PEER=1, inside the namespace. It
// prints its conn info, reads the test's, connects, and serves until its
// stdin closes.
func netnsPeer() error {
	c, err := verbs.Open("udp/" + udp.DefaultDevice)
	if err != nil {
		return err
	}
	pd, err := c.AllocPD()
	if err != nil {
		return err
	}
	cq, err := c.CreateCQ(64)
	if err != nil {
		return err
	}
	mr, err := pd.RegMR(make([]byte, netnsSize), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	if err != nil {
		return err
	}
	qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq})
	if err != nil {
		return err
	}
	info := qp.Info()
	info.RKey, info.Addr, info.Len = mr.RKey(), mr.Addr(), uint64(mr.Len())
	txt, _ := info.MarshalText()
	fmt.Printf("CONNINFO %s\n", txt)
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		return fmt.Errorf("no conn info on stdin")
	}
	var remote verbs.ConnInfo
	if err := remote.UnmarshalText(in.Bytes()); err != nil {
		return err
	}
	if err := qp.Connect(remote, slowMachine); err != nil {
		return err
	}
	for in.Scan() { // serve until the test closes stdin
	}
	for _, err := range []error{qp.Destroy(), mr.Dereg(), cq.Destroy(), pd.Dealloc(), c.Close()} {
		if err != nil {
			return err
		}
	}
	return nil
}
