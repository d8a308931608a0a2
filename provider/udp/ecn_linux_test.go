package udp

import (
	"net"
	"net/netip"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestSocketECN: a device's socket reports CE on a datagram that arrives
// with ECN 3 in its TOS, and not on one with ECT(0) (what it sends itself:
// a second socket's datagrams, read back, carry ECT(0)). IPv4 and IPv6.
func TestSocketECN(t *testing.T) {
	for _, tc := range []struct {
		name, addr string
		level, opt int
	}{{"ipv4", "127.0.0.1:0", unix.IPPROTO_IP, unix.IP_TOS}, {"ipv6", "[::1]:0", unix.IPPROTO_IPV6, unix.IPV6_TCLASS}} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(tc.addr)))
			if err != nil {
				t.Skipf("no %s loopback: %v", tc.name, err)
			}
			s, err := newSockIO(c, &counters{})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = s.Close() }()
			if !s.ecn {
				t.Fatal("the kernel refused IP_TOS/IP_RECVTOS")
			}
			// A peer that is a device socket too: what it sends is ECT(0).
			pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(tc.addr)))
			if err != nil {
				t.Fatal(err)
			}
			peer, err := newSockIO(pc, &counters{})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = peer.Close() }()
			// A plain socket that marks its datagrams CE, as a congested
			// queue would have.
			mc, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(s.LocalAddr()))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = mc.Close() }()
			raw, _ := mc.SyscallConn()
			var serr error
			_ = raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), tc.level, tc.opt, ecnCE) })
			if serr != nil {
				t.Fatal(serr)
			}
			data := make([]byte, 64)
			peer.Send([]message{{Buffers: [][]byte{data}, Addr: s.LocalAddr()}})
			if _, err := mc.Write(data); err != nil {
				t.Fatal(err)
			}
			msgs := newRecvBatch(4, s.gro)
			got := 0
			for got < 2 {
				n, err := s.Recv(msgs[got:], true)
				if err != nil {
					t.Fatal(err)
				}
				if got == 0 && n > 0 {
					// The first is the device socket's: its TOS is ECT(0).
					h := &s.rhdrs[0].Hdr
					if _, tos, ok := parseControl(s.rctl[:min(int(h.Controllen), rcvCtlSpace)]); !ok || tos&ecnMask != ecnECT0 {
						t.Errorf("a device socket's datagram arrived with TOS %#x (reported %v), want ECT(0)", tos, ok)
					}
				}
				got += n
			}
			if msgs[0].N != 64 || msgs[0].CE || msgs[1].N != 64 || !msgs[1].CE {
				t.Fatalf("ECT(0) datagram: %d bytes, CE %v; CE datagram: %d bytes, CE %v", msgs[0].N, msgs[0].CE, msgs[1].N, msgs[1].CE)
			}
		})
	}
}

// TestParseControl: the segment size and the TOS come out of a control
// buffer holding both, in either order, and truncated buffers do not
// panic.
func TestParseControl(t *testing.T) {
	put := func(b []byte, level, typ int32, data []byte) []byte {
		h := make([]byte, unix.CmsgSpace(len(data)))
		ch := (*unix.Cmsghdr)(unsafe.Pointer(&h[0]))
		ch.Level, ch.Type = level, typ
		ch.SetLen(unix.CmsgLen(len(data)))
		copy(h[unix.CmsgLen(0):], data)
		return append(b, h...)
	}
	gro := []byte{0x10, 0x10, 0, 0} // 4112, little-endian (amd64, arm64)
	b := put(put(nil, unix.SOL_UDP, unix.UDP_GRO, gro), unix.IPPROTO_IP, unix.IP_TOS, []byte{ecnCE})
	if seg, tos, ok := parseControl(b); seg != 4112 || tos != ecnCE || !ok {
		t.Fatalf("gro then tos: %d %#x %v", seg, tos, ok)
	}
	b = put(put(nil, unix.IPPROTO_IPV6, unix.IPV6_TCLASS, []byte{ecnECT0, 0, 0, 0}), unix.SOL_UDP, unix.UDP_GRO, gro)
	if seg, tos, ok := parseControl(b); seg != 4112 || tos != ecnECT0 || !ok {
		t.Fatalf("tclass then gro: %d %#x %v", seg, tos, ok)
	}
	if len(b) > rcvCtlSpace {
		t.Fatalf("both control messages take %d bytes, the buffer %d", len(b), rcvCtlSpace)
	}
	for i := range b {
		parseControl(b[:i]) // must not panic
	}
}
