package attack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/wire"
)

// Seen is one RoCEv2 packet the sniffer read off the interface.
type Seen struct {
	// IP is the whole IP packet (header, UDP, IB packet with ICRC) as it
	// travelled: what a replay sends again, byte for byte.
	IP []byte
	// Src and Dst are the IP addresses and UDP ports.
	Src, Dst netip.AddrPort
	// BTH is read from the packet even when it is secured (TVer 1), whose
	// BTH travels in the clear while the rest does not decode.
	BTH wire.BTH
	// Decoded tells that Packet holds the whole packet (its RETH, AETH,
	// payload): a plain RoCEv2 packet whose ICRC checked.
	Decoded bool
	Packet  wire.Packet
	At      time.Time
}

// Sniffer reads RoCEv2 packets off one interface with an AF_PACKET socket,
// as an on-path attacker does: it learns live QPNs, PSNs, rkeys and
// addresses from the traffic, never from the victims. It keeps the packets
// between the addresses it is told to watch (the suite's 127.0.0.110-119).
type Sniffer struct {
	fd     int
	keep   func(netip.Addr) bool
	mu     sync.Mutex
	seen   []Seen // packets from index base on
	base   int
	wake   chan struct{}
	done   chan struct{}
	closed chan struct{}
}

// Sniff starts a sniffer on the interface ifname ("lo") keeping packets
// whose source and destination addresses keep accepts. It needs
// CAP_NET_RAW.
func Sniff(ifname string, keep func(netip.Addr) bool) (*Sniffer, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("sniff: %w", err)
	}
	proto := htons(unix.ETH_P_IP)
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return nil, fmt.Errorf("sniff: AF_PACKET socket (needs CAP_NET_RAW): %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sniff: bind to %s: %w", ifname, err)
	}
	tv := unix.NsecToTimeval((50 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sniff: %w", err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	s := &Sniffer{fd: fd, keep: keep, wake: make(chan struct{}, 1), done: make(chan struct{}), closed: make(chan struct{})}
	go s.run()
	return s, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// run owns the socket until Close.
func (s *Sniffer) run() {
	defer close(s.closed)
	buf := make([]byte, 1<<16)
	for {
		select {
		case <-s.done:
			return
		default:
		}
		n, from, err := unix.Recvfrom(s.fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		// On lo every packet passes twice: keep the copy going in.
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		if n < 14 {
			continue
		}
		if v, ok := s.parse(buf[14:n]); ok {
			s.mu.Lock()
			s.seen = append(s.seen, v)
			s.mu.Unlock()
			select {
			case s.wake <- struct{}{}:
			default:
			}
		}
	}
}

// parse keeps an IPv4 UDP datagram to port 4791 between kept addresses.
func (s *Sniffer) parse(ip []byte) (Seen, bool) {
	if len(ip) < 20 || ip[0]>>4 != 4 || ip[9] != unix.IPPROTO_UDP {
		return Seen{}, false
	}
	ihl := int(ip[0]&0xf) * 4
	total := int(binary.BigEndian.Uint16(ip[2:]))
	if total > len(ip) || ihl < 20 || total < ihl+8+ib.BTHLen+ib.ICRCLen {
		return Seen{}, false
	}
	ip = ip[:total]
	src := netip.AddrFrom4([4]byte(ip[12:16]))
	dst := netip.AddrFrom4([4]byte(ip[16:20]))
	if !s.keep(src) || !s.keep(dst) {
		return Seen{}, false
	}
	udp := ip[ihl:]
	if binary.BigEndian.Uint16(udp[2:]) != wire.UDPPort {
		return Seen{}, false
	}
	v := Seen{IP: append([]byte(nil), ip...), At: time.Now(),
		Src: netip.AddrPortFrom(src, binary.BigEndian.Uint16(udp[0:])),
		Dst: netip.AddrPortFrom(dst, wire.UDPPort)}
	var f wire.Frame
	if err := wire.DecodeIP(v.IP, &f); err == nil {
		v.Decoded, v.Packet, v.BTH = true, f.Packet, f.Packet.BTH
		return v, true
	}
	// A secured or otherwise undecodable packet: its BTH is still in the
	// clear.
	b := v.IP[ihl+8:]
	v.BTH = wire.BTH{Opcode: ib.Opcode(b[0]), PKey: binary.BigEndian.Uint16(b[2:]),
		DestQP: uint32(b[5])<<16 | uint32(b[6])<<8 | uint32(b[7]), AckReq: b[8]&0x80 != 0,
		PSN: uint32(b[9])<<16 | uint32(b[10])<<8 | uint32(b[11])}
	return v, true
}

// Since returns the packets seen from index i on (those not forgotten),
// and the next index.
func (s *Sniffer) Since(i int) ([]Seen, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	end := s.base + len(s.seen)
	i = min(max(i, s.base), end)
	return append([]Seen(nil), s.seen[i-s.base:]...), end
}

// Mark is the index of the next packet to be seen.
func (s *Sniffer) Mark() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.base + len(s.seen)
}

// Forget drops the packets seen so far (indices go on counting): the
// suite forgets between cases.
func (s *Sniffer) Forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.base += len(s.seen)
	s.seen = nil
}

// Wait returns the first packet from index i on that match accepts, or
// false after the timeout. next is the index after it.
func (s *Sniffer) Wait(i int, timeout time.Duration, match func(*Seen) bool) (v Seen, next int, ok bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		got, n := s.Since(i)
		for k := range got {
			if match(&got[k]) {
				return got[k], i + k + 1, true
			}
		}
		i = n
		select {
		case <-s.wake:
		case <-deadline.C:
			return Seen{}, i, false
		}
	}
}

// Close stops the sniffer.
func (s *Sniffer) Close() error {
	close(s.done)
	<-s.closed
	return unix.Close(s.fd)
}
