package udp

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/ibex-rdma/ibex/wire"
)

// SetDevice (re)configures device name, before it is first opened, to
// bind addr (port 0 means 4791) and to take AF_XDP as xdp says ("auto",
// "on" or "off"; "" follows IBEX_UDP_XDP). ibexd configures the devices
// it owns with it, from its configuration file.
func SetDevice(name string, addr netip.AddrPort, xdp string) error {
	if name == "" || !addr.Addr().IsValid() {
		return fmt.Errorf("udp: set device %q: empty name or invalid address", name)
	}
	switch strings.ToLower(xdp) {
	case "", "auto", "on", "off":
	default:
		return fmt.Errorf("udp: set device %s: xdp %q is not auto, on or off", name, xdp)
	}
	if addr.Port() == 0 {
		addr = netip.AddrPortFrom(addr.Addr(), wire.UDPPort)
	}
	prov.mu.Lock()
	defer prov.mu.Unlock()
	if prov.live[name] != nil {
		return fmt.Errorf("udp: set device %s: already open", name)
	}
	prov.conf[name] = addr
	if xdp != "" {
		prov.listen[name] = xdpListen(name, strings.ToLower(xdp))
	} else {
		delete(prov.listen, name)
	}
	return nil
}

// DeviceMode says how an open device reaches the network: "af_xdp" (kernel
// bypass), "socket" (a UDP socket), or "" when it is not open.
func DeviceMode(name string) string {
	prov.mu.Lock()
	defer prov.mu.Unlock()
	d := prov.live[name]
	if d == nil {
		return ""
	}
	return connMode(d.conn)
}

// DeviceAddr is the address device name binds, and whether it exists.
func DeviceAddr(name string) (netip.AddrPort, bool) {
	prov.mu.Lock()
	defer prov.mu.Unlock()
	a, ok := prov.conf[name]
	return a, ok
}
