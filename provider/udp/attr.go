package udp

import (
	"fmt"
	"net"
	"net/netip"

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
	// PD.AllocMR's mmapped memory; the device loop is a goroutine of its own.
	Caps: verbs.CapSameHost | verbs.CapOtherHosts | verbs.CapOrderedPlacement | verbs.CapProgressThread,
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
// interface that holds addr (4096 on loopback, 1024 on a 1500-byte link).
func pathMTU(a netip.Addr) verbs.MTU {
	link := 1500
	if ifs, err := net.Interfaces(); err == nil {
	search:
		for _, ifc := range ifs {
			addrs, _ := ifc.Addrs()
			for _, x := range addrs {
				if n, ok := x.(*net.IPNet); ok {
					if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a.Unmap() {
						link = ifc.MTU
						break search
					}
				}
			}
		}
	}
	overhead := 40 + 8 + ib.BTHLen + 28 + 4 // IPv6 header, UDP, BTH, largest extension, ICRC
	m := verbs.MTU256
	for c := verbs.MTU256; c <= verbs.MTU4096; c++ {
		if c.Bytes()+overhead <= link {
			m = c
		}
	}
	return m
}
