// Package udp is ibex's RoCEv2 provider: RC queue pairs between hosts over
// real UDP sockets, with the packet format of package wire (byte-compatible
// with Linux Soft-RoCE) and the reliability of package rc.
//
// A device is one UDP socket bound to an IP address and the RoCEv2 port
// (4791 unless configured), with one progress goroutine that owns every
// protocol engine of the device: it receives datagrams in batches
// (recvmmsg), verifies and decodes them, feeds the QP engines, runs their
// timers, and sends what they produce in batches (sendmmsg). Application
// goroutines never touch an engine: PostSend and state changes reach the
// loop through a command queue, and wake it if it sleeps.
//
// Devices are named in AddDevice; the default device "udp0" binds
// 127.0.0.1:4791, or the address in the IBEX_UDP_ADDR environment variable.
// A QP's peer is the IP address in its address vector's DGID (an
// IPv4-mapped GID for IPv4) at the device's port.
package udp

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"sync"

	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/verbs/driver"
	"github.com/ibex-rdma/ibex/wire"
)

// DefaultDevice is the device registered at start-up.
const DefaultDevice = "udp0"

type provider struct {
	mu     sync.Mutex
	conf   map[string]netip.AddrPort
	listen map[string]listenFunc // a device's network, if not a UDP socket (tests)
	live   map[string]*device
	pkeys  map[string][]uint16 // a device's P_Key table, from SetPartitions
}

var prov = &provider{conf: map[string]netip.AddrPort{}, listen: map[string]listenFunc{}, live: map[string]*device{}, pkeys: map[string][]uint16{}}

func init() {
	addr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), wire.UDPPort)
	if s := os.Getenv("IBEX_UDP_ADDR"); s != "" {
		if a, err := parseAddr(s); err == nil {
			addr = a
		} else {
			fmt.Fprintf(os.Stderr, "ibex: IBEX_UDP_ADDR=%q ignored: %v\n", s, err)
		}
	}
	prov.conf[DefaultDevice] = addr
	driver.Register(prov)
}

func parseAddr(s string) (netip.AddrPort, error) {
	if a, err := netip.ParseAddrPort(s); err == nil {
		return a, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q is not an IP address or address:port", s)
	}
	return netip.AddrPortFrom(a, wire.UDPPort), nil
}

// AddDevice registers a device bound to addr (port 0 means 4791). Every
// device of a fabric must use the same port: a GID names only the address.
func AddDevice(name string, addr netip.AddrPort) error { return addDevice(name, addr, nil) }

// addDevice is AddDevice with the device's network opened by listen (nil:
// a UDP socket, listenUDP).
func addDevice(name string, addr netip.AddrPort, listen listenFunc) error {
	if name == "" {
		return errors.New("udp: add device: empty name")
	}
	if !addr.Addr().IsValid() {
		return fmt.Errorf("udp: add device %s: invalid address", name)
	}
	if addr.Port() == 0 {
		addr = netip.AddrPortFrom(addr.Addr(), wire.UDPPort)
	}
	prov.mu.Lock()
	defer prov.mu.Unlock()
	if _, dup := prov.conf[name]; dup {
		return fmt.Errorf("udp: add device %s: name in use", name)
	}
	prov.conf[name] = addr
	if listen != nil {
		prov.listen[name] = listen
	}
	return nil
}

func (p *provider) Name() string { return "udp" }

func (p *provider) Devices() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.conf))
	for n := range p.conf {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Open starts the device's socket and progress loop on first use; later
// opens share them, and the last Close stops them.
func (p *provider) Open(name string, c driver.Context) (driver.Device, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	addr, ok := p.conf[name]
	if !ok {
		return nil, fmt.Errorf("udp: device %q: %w", name, verbs.ErrNoDevice)
	}
	d := p.live[name]
	if d == nil {
		listen := p.listen[name]
		if listen == nil {
			listen = defaultListen(name) // AF_XDP or the UDP socket (xdp_linux.go)
		}
		pkeys, err := p.pkeyTable(name, addr)
		if err != nil {
			return nil, err
		}
		if d, err = startDevice(name, addr, pkeys, listen); err != nil {
			return nil, err
		}
		p.live[name] = d
	}
	drv := &opened{dev: d, ctx: c}
	d.addContext(drv)
	return drv, nil
}

func (p *provider) release(d *device) {
	p.mu.Lock()
	last := d.dropContext()
	if last {
		delete(p.live, d.name)
	}
	p.mu.Unlock()
	if last {
		d.stopLoop()
	}
}
