package udp

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/verbs"
)

// The device's and the port's attributes.

var attr = verbs.DeviceAttr{
	FWVersion:       "1.0.0",
	NodeGUID:        0x6962_6578_0000_0002,
	SysImageGUID:    0x6962_6578_0000_0002,
	Transport:       "InfiniBand",
	PhysPortCnt:     1,
	MaxMRSize:       1 << 40,
	PageSizeCap:     0xfffff000,
	MaxQP:           1 << 16,
	MaxQPWR:         1 << 14,
	MaxSGE:          32,
	MaxCQ:           1 << 16,
	MaxCQE:          1 << 22,
	MaxMR:           1 << 20,
	MaxPD:           1 << 16,
	MaxQPRdAtom:     128,
	MaxQPInitRdAtom: 128,
	MaxInlineData:   512,
	MaxMsgSize:      1 << 31,
	AtomicCap:       verbs.AtomicGlob,
	// The responder places packets in PSN order, word by word, into
	// PD.AllocMR's mmapped memory. A program that polls drives the device
	// in its own goroutine (loop.go), so no CapProgressThread.
	Caps: verbs.CapSameHost | verbs.CapOtherHosts | verbs.CapOrderedPlacement,
}

func (drv *opened) DeviceAttr() verbs.DeviceAttr { return attr }

func (drv *opened) PortAttr(port uint8) (verbs.PortAttr, error) {
	if port != 1 {
		return verbs.PortAttr{}, fmt.Errorf("udp: port %d: %w", port, verbs.ErrInvalidArgument)
	}
	return verbs.PortAttr{
		State: verbs.PortActive, MaxMTU: verbs.MTU4096, ActiveMTU: drv.dev.mtu, GIDTblLen: 1, GID: drv.dev.gid,
		LinkLayer: "Ethernet", ActiveSpeed: "udp " + drv.dev.addr.String(), MaxMsgSize: attr.MaxMsgSize,
	}, nil
}

// pathMTU is the largest IB MTU whose RoCEv2 datagram fits the MTU of the
// link the device's address a is on (linkMTU): 4096 on loopback, 1024 on
// a 1500-byte link.
func pathMTU(a netip.Addr) verbs.MTU {
	link := linkMTU(a)
	overhead := 40 + 8 + ib.BTHLen + 28 + 4 // IPv6 header, UDP, BTH, largest extension, ICRC
	m := verbs.MTU256
	for c := verbs.MTU256; c <= verbs.MTU4096; c++ {
		if c.Bytes()+overhead <= link {
			m = c
		}
	}
	return m
}

// linkMTU is the MTU of the interface a is on: the one that has a as an
// address; else the one of the kernel's route to a, which covers a local
// route (127.0.0.2 is lo's by "local 127.0.0.0/8 dev lo"; every address of
// `ip route add local 10.9.0.0/16 dev eth1` is eth1's) and a connected
// prefix; else, where netlink does not answer, the interface
// whose prefix holds a (127.0.0.1/8 on lo). 1500 when none is found, and
// for the unspecified address, which may send on any interface.
func linkMTU(a netip.Addr) int {
	a = a.Unmap()
	if !a.IsValid() || a.IsUnspecified() {
		return 1500
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return 1500
	}
	best, bestBits := -1, -1
	for i, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		for _, x := range addrs {
			n, ok := x.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(n.IP)
			if !ok {
				continue
			}
			ip = ip.Unmap()
			if ip == a {
				return ifc.MTU
			}
			bits, _ := n.Mask.Size()
			if p, err := ip.Prefix(bits); err == nil && p.Contains(a) && bits > bestBits {
				best, bestBits = i, bits
			}
		}
	}
	idx, err := routeIfIndex(a, unix.RTM_F_FIB_MATCH)
	if err != nil { // a kernel before 4.13 has no fibmatch
		idx, err = routeIfIndex(a, 0)
	}
	if err == nil {
		for _, ifc := range ifs {
			if ifc.Index == idx {
				return ifc.MTU
			}
		}
	}
	if best >= 0 {
		return ifs[best].MTU
	}
	return 1500
}

// routeIfIndex asks the kernel (rtnetlink RTM_GETROUTE, as `ip route get`)
// for the interface its route to a leaves by. With RTM_F_FIB_MATCH (`ip
// route get fibmatch`) the answer is the route itself, so a local route's
// own interface rather than lo, which every local delivery is looked up as.
func routeIfIndex(a netip.Addr, flags uint32) (int, error) {
	fam := unix.AF_INET
	if a.Is6() {
		fam = unix.AF_INET6
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 1}); err != nil {
		return 0, err
	}
	dst := a.AsSlice()
	// nlmsghdr, rtmsg, one rtattr: RTA_DST.
	req := make([]byte, unix.SizeofNlMsghdr+unix.SizeofRtMsg+unix.SizeofRtAttr+len(dst))
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.RTM_GETROUTE)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(req[8:], 1) // sequence number
	rt := req[unix.SizeofNlMsghdr:]
	rt[0], rt[1] = byte(fam), byte(a.BitLen()) // family, dst_len
	ne.PutUint32(rt[8:], flags)                // rtm_flags
	at := rt[unix.SizeofRtMsg:]
	ne.PutUint16(at[0:], uint16(unix.SizeofRtAttr+len(dst)))
	ne.PutUint16(at[2:], unix.RTA_DST)
	copy(at[unix.SizeofRtAttr:], dst)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, err
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return 0, err
	}
	return parseRouteOIF(buf[:n])
}

// parseRouteOIF reads the output interface (RTA_OIF) from the kernel's
// answer to RTM_GETROUTE, checking every length against the buffer.
func parseRouteOIF(b []byte) (int, error) {
	ne := binary.NativeEndian
	for len(b) >= unix.SizeofNlMsghdr {
		l := int(ne.Uint32(b[0:]))
		if l < unix.SizeofNlMsghdr || l > len(b) {
			return 0, fmt.Errorf("netlink: message length %d of %d bytes", l, len(b))
		}
		msg, typ := b[unix.SizeofNlMsghdr:l], ne.Uint16(b[4:])
		b = b[min(len(b), (l+3)&^3):]
		switch typ {
		case unix.NLMSG_ERROR:
			if len(msg) >= 4 {
				if e := int32(ne.Uint32(msg)); e < 0 {
					return 0, fmt.Errorf("netlink: route lookup: %w", unix.Errno(-e))
				}
			}
			return 0, fmt.Errorf("netlink: route lookup: no route")
		case unix.RTM_NEWROUTE:
			if len(msg) < unix.SizeofRtMsg {
				return 0, fmt.Errorf("netlink: route message of %d bytes", len(msg))
			}
			attrs := msg[unix.SizeofRtMsg:]
			for len(attrs) >= unix.SizeofRtAttr {
				al, at := int(ne.Uint16(attrs[0:])), ne.Uint16(attrs[2:])
				if al < unix.SizeofRtAttr || al > len(attrs) {
					return 0, fmt.Errorf("netlink: attribute length %d of %d bytes", al, len(attrs))
				}
				if at == unix.RTA_OIF && al >= unix.SizeofRtAttr+4 {
					return int(ne.Uint32(attrs[unix.SizeofRtAttr:])), nil
				}
				attrs = attrs[min(len(attrs), (al+3)&^3):]
			}
			return 0, fmt.Errorf("netlink: the route names no interface")
		}
	}
	return 0, fmt.Errorf("netlink: no route in the answer")
}
