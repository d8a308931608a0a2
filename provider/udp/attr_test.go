package udp

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ibex-rdma/ibex/verbs"
)

// ibMTU is the IB MTU a link of the given MTU carries (pathMTU's rule:
// the largest whose RoCEv2 datagram, 92 bytes of headers at most, fits).
func ibMTU(link int) verbs.MTU {
	for _, m := range []verbs.MTU{verbs.MTU4096, verbs.MTU2048, verbs.MTU1024, verbs.MTU512} {
		if m.Bytes()+92 <= link {
			return m
		}
	}
	return verbs.MTU256
}

// TestPathMTULoopback: every address of 127.0.0.0/8 is lo's, not only
// 127.0.0.1 (it was 1024 for 127.0.0.2: the lookup wanted an exact
// interface address).
func TestPathMTULoopback(t *testing.T) {
	lo, err := loopbackInterface()
	if err != nil {
		t.Skipf("no loopback interface: %v", err)
	}
	want := ibMTU(lo.MTU)
	for _, a := range []string{"127.0.0.1", "127.0.0.2", "127.0.77.1", "127.255.3.9", "::ffff:127.0.0.2", "::1"} {
		if got := pathMTU(netip.MustParseAddr(a)); got != want {
			t.Errorf("pathMTU(%s) = %v, want %v (lo's MTU is %d)", a, got, want, lo.MTU)
		}
	}
	if got := pathMTU(netip.IPv4Unspecified()); got != verbs.MTU1024 {
		t.Errorf("pathMTU(0.0.0.0) = %v, want 1024 (any interface: assume 1500)", got)
	}
}

func loopbackInterface() (*net.Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	for i := range ifs {
		if ifs[i].Flags&net.FlagLoopback != 0 {
			return &ifs[i], nil
		}
	}
	return nil, fmt.Errorf("none has the loopback flag")
}

// TestPathMTURoutes runs pathMTU inside a network namespace of its own
// (one locked thread joins it) with a 3000-byte veth pair: its own
// address, an address of its prefix, an address of a local route to it
// (AnyIP: `ip route add local ... dev`) and lo's addresses each get their
// interface's MTU; an address with no route, 1500's.
func TestPathMTURoutes(t *testing.T) {
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("cannot create network namespaces: the ip command (iproute2) is not installed")
	}
	ns := fmt.Sprintf("ibexmtu%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("cannot create network namespaces here: ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	dev, peer := fmt.Sprintf("imtu%d", os.Getpid()%100000), fmt.Sprintf("imtv%d", os.Getpid()%100000)
	for _, c := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", dev, "mtu", "3000", "type", "veth", "peer", "name", peer, "mtu", "3000"},
		{"link", "set", dev, "up"},
		{"link", "set", peer, "up"},
		{"addr", "add", "10.77.0.1/24", "dev", dev},
		{"route", "add", "local", "10.78.0.0/16", "dev", dev},
	} {
		if out, err := exec.Command("ip", append([]string{"-n", ns}, c...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip -n %s %s: %v: %s", ns, strings.Join(c, " "), err, out)
		}
	}
	cases := []struct {
		addr string
		want verbs.MTU
	}{
		{"10.77.0.1", verbs.MTU2048},        // the veth's address
		{"10.77.0.9", verbs.MTU2048},        // in its prefix
		{"10.78.200.3", verbs.MTU2048},      // a local route to it
		{"127.0.0.2", verbs.MTU4096},        // lo (MTU 65536)
		{"192.0.2.1", verbs.MTU1024},        // no route: 1500
		{"2001:db8::1", verbs.MTU1024},      // no route
		{"::ffff:10.78.0.1", verbs.MTU2048}, // v4-mapped
	}
	got := make([]verbs.MTU, len(cases))
	errc := make(chan error, 1)
	go func() {
		// This thread joins the namespace and is never unlocked: it ends
		// with the goroutine, and no other goroutine runs on it.
		runtime.LockOSThread()
		f, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns: %w", err)
			return
		}
		for i, c := range cases {
			got[i] = pathMTU(netip.MustParseAddr(c.addr))
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		t.Skipf("cannot enter the network namespace: %v", err)
	}
	for i, c := range cases {
		if got[i] != c.want {
			t.Errorf("pathMTU(%s) in a namespace with a 3000-byte veth %s: %v, want %v", c.addr, dev, got[i], c.want)
		}
	}
}

// TestParseRouteOIFHostile: a short, overlong or empty answer is an
// error, never a panic.
func TestParseRouteOIFHostile(t *testing.T) {
	ne := func(b []byte, off int, v uint32) { binary.NativeEndian.PutUint32(b[off:], v) }
	good := make([]byte, unix.SizeofNlMsghdr+unix.SizeofRtMsg+8)
	ne(good, 0, uint32(len(good)))
	binary.NativeEndian.PutUint16(good[4:], unix.RTM_NEWROUTE)
	at := good[unix.SizeofNlMsghdr+unix.SizeofRtMsg:]
	binary.NativeEndian.PutUint16(at[0:], 8)
	binary.NativeEndian.PutUint16(at[2:], unix.RTA_OIF)
	ne(at, 4, 7)
	if idx, err := parseRouteOIF(good); err != nil || idx != 7 {
		t.Fatalf("good answer: %d, %v", idx, err)
	}
	for n := range len(good) {
		_, _ = parseRouteOIF(good[:n]) // must not panic
	}
	bad := append([]byte(nil), good...)
	ne(bad, 0, 1<<30)
	if _, err := parseRouteOIF(bad); err == nil {
		t.Error("message length beyond the buffer: no error")
	}
	bad = append([]byte(nil), good...)
	at = bad[unix.SizeofNlMsghdr+unix.SizeofRtMsg:]
	binary.NativeEndian.PutUint16(at[0:], 200)
	if _, err := parseRouteOIF(bad); err == nil {
		t.Error("attribute length beyond the message: no error")
	}
	errMsg := make([]byte, unix.SizeofNlMsghdr+4)
	ne(errMsg, 0, uint32(len(errMsg)))
	binary.NativeEndian.PutUint16(errMsg[4:], unix.NLMSG_ERROR)
	errno := -int32(unix.ENETUNREACH)
	ne(errMsg, unix.SizeofNlMsghdr, uint32(errno))
	if _, err := parseRouteOIF(errMsg); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("NLMSG_ERROR ENETUNREACH: %v", err)
	}
	if _, err := parseRouteOIF(nil); err == nil {
		t.Error("empty answer: no error")
	}
}
