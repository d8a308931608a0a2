package udp

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/ibex-rdma/ibex/rc"
	"github.com/ibex-rdma/ibex/verbs"
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

// Freeze ends device name's service in this process so that another
// process can take it over (ibexd's upgrade): the progress loop stops,
// no poller or poster runs the engines again, the socket is closed (the
// address is free to bind), and the protocol state of every QP with an
// engine is returned by QP number. Every QP must have no request queued
// (rc.Conn.Export); packets in flight are lost, and the peers' go-back-N
// recovers them. The device stays unusable in this process.
func Freeze(name string) (map[uint32]rc.State, error) {
	prov.mu.Lock()
	d := prov.live[name]
	prov.mu.Unlock()
	if d == nil {
		return nil, fmt.Errorf("udp: freeze %s: not open", name)
	}
	d.haltLoop()
	d.own.Lock() // kept: nobody runs a pass again
	d.commands()
	d.freezePSP()
	out := map[uint32]rc.State{}
	var errs []error
	for n, q := range d.qps {
		if q.eng == nil || q.dropAfter {
			continue
		}
		st, err := q.eng.Export()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[n] = st
	}
	_ = d.conn.Close()
	if len(errs) > 0 {
		return out, fmt.Errorf("udp: freeze %s: %w", name, errors.Join(errs...))
	}
	return out, nil
}

// RestoreQP continues qp's connection from st (Freeze's, in another
// process). qp is a QP of a udp device that has just been moved to RTS
// with the attributes it had there, with nothing posted on it since.
func RestoreQP(qp *verbs.QP, st rc.State) error {
	prov.mu.Lock()
	d := prov.live[qp.Context().Name()]
	prov.mu.Unlock()
	if d == nil {
		return fmt.Errorf("udp: restore qp %#x: device %s not open", qp.Num(), qp.Context().Name())
	}
	d.own.Lock()
	defer d.unlock()
	d.commands()
	q := d.qps[qp.Num()]
	if q == nil || q.eng == nil {
		return fmt.Errorf("udp: restore qp %#x: no engine (is it in RTS?)", qp.Num())
	}
	if err := q.eng.Import(st); err != nil {
		return err
	}
	if st.RecvTaken {
		// The receive being filled is the head of the queue, re-posted
		// in order.
		q.rsn, _ = q.qp.RecvBegin()
	}
	d.markReady(q)
	return nil
}
