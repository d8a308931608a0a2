package xsk

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A veth pair between two fresh network namespaces, each end with an
// address; each end's socket is opened from a thread inside its namespace.

type pair struct {
	ns   [2]string
	dev  [2]string
	ip   [2]netip.Addr
	mac  [2][6]byte
	idx  [2]int
	mtu  int
	port uint16
}

func sh(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func newPair(t *testing.T, mtu int) *pair {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("cannot create network namespaces: the ip command (iproute2) is not installed")
	}
	id := os.Getpid() % 100000
	p := &pair{mtu: mtu, port: 4791}
	sub := 100 + os.Getpid()%100
	for i, s := range []string{"a", "b"} {
		p.ns[i] = fmt.Sprintf("xskt%d%s", id, s)
		p.dev[i] = fmt.Sprintf("xsk%d%s", id, s)
		p.ip[i] = netip.MustParseAddr(fmt.Sprintf("10.%d.91.%d", sub, i+1))
		if out, err := exec.Command("ip", "netns", "add", p.ns[i]).CombinedOutput(); err != nil {
			t.Skipf("cannot create network namespaces here: ip netns add: %v: %s", err, out)
		}
		ns := p.ns[i]
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	}
	sh(t, "ip", "link", "add", p.dev[0], "netns", p.ns[0], "mtu", fmt.Sprint(mtu), "type", "veth", "peer", "name", p.dev[1], "netns", p.ns[1], "mtu", fmt.Sprint(mtu))
	for i := range 2 {
		sh(t, "ip", "-n", p.ns[i], "addr", "add", p.ip[i].String()+"/24", "dev", p.dev[i])
		sh(t, "ip", "-n", p.ns[i], "link", "set", p.dev[i], "up")
		sh(t, "ip", "-n", p.ns[i], "link", "set", "lo", "up")
		inNS(t, p.ns[i], func() {
			ifc, err := net.InterfaceByName(p.dev[i])
			if err != nil {
				t.Fatal(err)
			}
			p.idx[i] = ifc.Index
			p.mac[i] = [6]byte(ifc.HardwareAddr)
		})
	}
	return p
}

// inNS runs f in a goroutine whose thread entered network namespace ns;
// the thread is discarded afterwards (the goroutine exits locked).
func inNS(t testing.TB, ns string, f func()) {
	t.Helper()
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open("/var/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = unix.Setns(fd, unix.CLONE_NEWNET)
			_ = unix.Close(fd)
		}
		if err != nil {
			done <- fmt.Errorf("enter netns %s: %w", ns, err)
			return
		}
		defer close(done)
		f()
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// openOrSkip opens a socket, skipping if the kernel refuses the program.
func openOrSkip(t *testing.T, p *pair, i int, generic bool) *Socket {
	t.Helper()
	var s *Socket
	var err error
	inNS(t, p.ns[i], func() {
		s, err = Open(Config{Ifindex: p.idx[i], Addr: p.ip[i], Port: p.port, Frames: 256, Generic: generic})
	})
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EOPNOTSUPP) {
		t.Skipf("no permission to use AF_XDP or load an XDP program: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// send writes one datagram of payload as a frame from end i to end j.
func (p *pair) send(t *testing.T, s *Socket, i, j int, payload []byte) (chunks int) {
	t.Helper()
	f, err := NewFlow(p.mac[i], p.mac[j], netip.AddrPortFrom(p.ip[i], 4791), netip.AddrPortFrom(p.ip[j], p.port))
	if err != nil {
		t.Fatal(err)
	}
	frame := make([]byte, f.Len()+len(payload))
	f.Put(frame, len(payload), 0xc123)
	copy(frame[f.Len():], payload)
	for len(frame) > 0 {
		a, b, ok := s.TxChunk()
		if !ok {
			t.Fatal("no TX chunk")
		}
		n := copy(b, frame)
		frame = frame[n:]
		s.TxPut(a, n, len(frame) > 0)
		chunks++
	}
	if _, err := s.TxFlush(); err != nil {
		t.Fatal(err)
	}
	return chunks
}

// recv waits for one frame and returns its UDP payload.
func recv(t *testing.T, s *Socket, port uint16) ([]byte, Datagram, int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s.RxPeek() == 0 {
		if time.Now().After(deadline) {
			st, _ := s.XDPStatistics()
			t.Fatalf("nothing received in 5 s (kernel stats %+v)", st)
		}
		if _, err := s.Wait(100 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	var frame []byte
	k := 0
	for more := true; more; k++ {
		if k >= s.RxPeek() {
			t.Fatal("frame's descriptors not all in the ring")
		}
		var b []byte
		b, more = s.RxFrame(k)
		frame = append(frame, b...)
	}
	s.RxRelease(k)
	var d Datagram
	if err := Parse(frame, len(frame), port, &d); err != nil {
		t.Fatalf("received frame of %d bytes: %v", len(frame), err)
	}
	return frame[d.Off : d.Off+d.Len], d, k
}

// TestRoundTrip sends datagrams of several sizes both ways, in driver and
// in generic mode, one of them over two chunks (MTU 4200), and checks
// that the kernel still gets what the program passes.
func TestRoundTrip(t *testing.T) {
	for _, generic := range []bool{false, true} {
		t.Run(fmt.Sprintf("generic=%v", generic), func(t *testing.T) {
			p := newPair(t, 4200)
			a, b := openOrSkip(t, p, 0, generic), openOrSkip(t, p, 1, generic)
			want := "driver"
			if generic {
				want = "generic"
			}
			if a.Mode() != want {
				t.Errorf("mode %s, want %s", a.Mode(), want)
			}
			t.Logf("mode %s, multi-buffer %v, max frame %d", a.Mode(), a.MultiBuffer(), a.MaxFrame())
			sizes := []int{1, 64, 1500, 3700, 4100}
			for _, n := range sizes {
				if ethLen+ipv4Len+udpLen+n > min(a.MaxFrame(), ethLen+p.mtu) {
					continue
				}
				payload := make([]byte, n)
				for i := range payload {
					payload[i] = byte(i*7 + n)
				}
				sent := p.send(t, a, 0, 1, payload)
				got, d, rcvd := recv(t, b, p.port)
				if !bytes.Equal(got, payload) {
					t.Fatalf("%d bytes: received %d bytes, not what was sent", n, len(got))
				}
				if d.Src != netip.AddrPortFrom(p.ip[0], 0xc123) || d.ID != 0 || d.CE {
					t.Errorf("%d bytes: datagram %+v", n, d)
				}
				if n == 4100 && (sent != 2 || rcvd != 2) {
					t.Errorf("%d bytes went in %d chunks and came in %d, want 2 and 2", n, sent, rcvd)
				}
				p.send(t, b, 1, 0, payload)
				if got, _, _ := recv(t, a, p.port); !bytes.Equal(got, payload) {
					t.Fatalf("%d bytes back: not what was sent", n)
				}
			}
			// The kernel still has its UDP (another port) with the
			// program attached: ARP and the datagram pass.
			var lc *net.UDPConn
			var err error
			inNS(t, p.ns[1], func() { lc, err = net.ListenUDP("udp", &net.UDPAddr{IP: p.ip[1].AsSlice(), Port: 9999}) })
			if err != nil {
				t.Fatal(err)
			}
			defer lc.Close()
			inNS(t, p.ns[0], func() {
				c, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: p.ip[1].AsSlice(), Port: 9999})
				if err != nil {
					t.Error(err)
					return
				}
				defer c.Close()
				_, _ = c.Write([]byte("kernel"))
			})
			_ = lc.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 64)
			if n, err := lc.Read(buf); err != nil || string(buf[:n]) != "kernel" {
				t.Errorf("the kernel's UDP on port 9999 with the program attached: %q %v", buf[:n], err)
			}
			// Another address of the interface, on the program's port, is
			// the kernel's.
			other := p.ip[1].Next()
			sh(t, "ip", "-n", p.ns[1], "addr", "add", other.String()+"/24", "dev", p.dev[1])
			var oc *net.UDPConn
			inNS(t, p.ns[1], func() { oc, err = net.ListenUDP("udp", &net.UDPAddr{IP: other.AsSlice(), Port: int(p.port)}) })
			if err != nil {
				t.Fatal(err)
			}
			defer oc.Close()
			inNS(t, p.ns[0], func() {
				c, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: other.AsSlice(), Port: int(p.port)})
				if err != nil {
					t.Error(err)
					return
				}
				defer c.Close()
				_, _ = c.Write([]byte("other"))
			})
			_ = oc.SetReadDeadline(time.Now().Add(5 * time.Second))
			if n, err := oc.Read(buf); err != nil || string(buf[:n]) != "other" {
				t.Errorf("the kernel's UDP on %v:%d, another address of the interface: %q %v", other, p.port, buf[:n], err)
			}
			if n := b.RxPeek(); n != 0 {
				t.Errorf("the socket on %v received %d frames for %v", p.ip[1], n, other)
			}
			// Close detaches the program.
			xdpOn := func() bool {
				out, err := exec.Command("ip", "-n", p.ns[0], "link", "show", "dev", p.dev[0]).CombinedOutput()
				if err != nil {
					t.Fatalf("ip link show: %v: %s", err, out)
				}
				return strings.Contains(string(out), " xdp")
			}
			if !xdpOn() {
				t.Error("ip link show names no XDP program while the socket is open")
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			if xdpOn() {
				t.Error("the XDP program is still attached after Close")
			}
			var nl *Netlink
			inNS(t, p.ns[0], func() { nl, err = OpenNetlink() })
			if err != nil {
				t.Fatal(err)
			}
			defer nl.Close()
			idx, gw, err := nl.Route(p.ip[1])
			if err != nil || idx != p.idx[0] || gw.IsValid() {
				t.Errorf("route to %v: ifindex %d (want %d), gateway %v, %v", p.ip[1], idx, p.idx[0], gw, err)
			}
			mac, ok, err := nl.Neighbour(p.idx[0], p.ip[1])
			if err != nil || !ok || mac != p.mac[1] {
				t.Errorf("neighbour %v: %x %v %v, want %x", p.ip[1], mac, ok, err, p.mac[1])
			}
		})
	}
}

func TestMain(m *testing.M) {
	if dev := os.Getenv("IBEX_XSK_CHILD_DEV"); dev != "" {
		// The child of TestLinkDiesWithProcess: attach and exit without
		// closing anything.
		ifc, err := net.InterfaceByName(dev)
		if err == nil {
			_, err = Open(Config{Ifindex: ifc.Index, Addr: netip.MustParseAddr("10.9.9.9"), Port: 4791, Frames: 64})
		}
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("attached")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestLinkDiesWithProcess: a process that exits with its socket open
// leaves no XDP program behind (the bpf_link goes with its last fd).
func TestLinkDiesWithProcess(t *testing.T) {
	p := newPair(t, 1500)
	cmd := exec.Command("ip", "netns", "exec", p.ns[0], os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "IBEX_XSK_CHILD_DEV="+p.dev[0])
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "attached") {
		if strings.Contains(string(out), "operation not permitted") {
			t.Skipf("no permission to load an XDP program: %s", out)
		}
		t.Fatalf("child: %v: %s", err, out)
	}
	show, err := exec.Command("ip", "-n", p.ns[0], "link", "show", "dev", p.dev[0]).CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(show), " xdp") {
		t.Errorf("an XDP program stayed attached after its process exited: %s", show)
	}
}
