package xsk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Netlink is a route socket for the two questions a frame's destination
// MAC needs answered: which next hop (RTM_GETROUTE) and which MAC the
// kernel's neighbour table has for it (RTM_GETNEIGH). The socket belongs
// to the network namespace it was opened in, whichever thread asks later.
// Its calls are serialised; each waits at most a second for the kernel.
type Netlink struct {
	mu  sync.Mutex
	fd  int
	seq uint32
	buf []byte
}

// OpenNetlink opens the socket in the calling thread's network namespace.
func OpenNetlink() (*Netlink, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	tv := unix.Timeval{Sec: 1}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("netlink SO_RCVTIMEO: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("netlink bind: %w", err)
	}
	return &Netlink{fd: fd, buf: make([]byte, 1<<16)}, nil
}

// Close closes the socket.
func (n *Netlink) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fd < 0 {
		return nil
	}
	err := unix.Close(n.fd)
	n.fd = -1
	return err
}

// request sends one message and returns the messages of the answer (up to
// NLMSG_DONE for a dump), or the kernel's error.
func (n *Netlink) request(typ uint16, flags uint16, body []byte) ([]syscall.NetlinkMessage, error) {
	if n.fd < 0 {
		return nil, errors.New("netlink: closed")
	}
	n.seq++
	msg := make([]byte, unix.NLMSG_HDRLEN+len(body))
	h := (*unix.NlMsghdr)(unsafe.Pointer(&msg[0]))
	*h = unix.NlMsghdr{Len: uint32(len(msg)), Type: typ, Flags: unix.NLM_F_REQUEST | flags, Seq: n.seq}
	copy(msg[unix.NLMSG_HDRLEN:], body)
	if err := unix.Sendto(n.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("netlink send: %w", err)
	}
	var out []syscall.NetlinkMessage
	for {
		k, _, err := unix.Recvfrom(n.fd, n.buf, 0)
		if err != nil {
			return nil, fmt.Errorf("netlink receive: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(n.buf[:k])
		if err != nil {
			return nil, fmt.Errorf("netlink: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != n.seq {
				continue // the answer to an earlier request that timed out
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if e := int32(binary.NativeEndian.Uint32(m.Data)); e != 0 {
						return nil, unix.Errno(-e)
					}
				}
				return out, nil
			}
			// Copy: the next read reuses buf.
			m.Data = append([]byte(nil), m.Data...)
			out = append(out, m)
			if flags&unix.NLM_F_DUMP == 0 {
				return out, nil
			}
		}
	}
}

func family(a netip.Addr) (uint8, []byte) {
	if a.Is4() {
		b := a.As4()
		return unix.AF_INET, b[:]
	}
	b := a.As16()
	return unix.AF_INET6, b[:]
}

func attr(typ uint16, val []byte) []byte {
	b := make([]byte, unix.SizeofRtAttr, unix.SizeofRtAttr+len(val)+3)
	binary.NativeEndian.PutUint16(b, uint16(unix.SizeofRtAttr+len(val)))
	binary.NativeEndian.PutUint16(b[2:], typ)
	b = append(b, val...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// Route is the kernel's route to dst: the interface it leaves by and the
// gateway (invalid for a destination on the link).
func (n *Netlink) Route(dst netip.Addr) (ifindex int, gw netip.Addr, err error) {
	dst = dst.Unmap()
	fam, raw := family(dst)
	body := make([]byte, unix.SizeofRtMsg)
	rt := (*unix.RtMsg)(unsafe.Pointer(&body[0]))
	*rt = unix.RtMsg{Family: fam, Dst_len: uint8(len(raw) * 8)}
	body = append(body, attr(unix.RTA_DST, raw)...)
	n.mu.Lock()
	msgs, err := n.request(unix.RTM_GETROUTE, 0, body)
	n.mu.Unlock()
	if err != nil {
		return 0, gw, fmt.Errorf("route to %v: %w", dst, err)
	}
	for _, m := range msgs {
		if m.Header.Type != unix.RTM_NEWROUTE || len(m.Data) < unix.SizeofRtMsg {
			continue
		}
		attrs, err := syscall.ParseNetlinkRouteAttr(&m)
		if err != nil {
			return 0, gw, fmt.Errorf("route to %v: %w", dst, err)
		}
		for _, a := range attrs {
			switch a.Attr.Type {
			case unix.RTA_OIF:
				if len(a.Value) >= 4 {
					ifindex = int(binary.NativeEndian.Uint32(a.Value))
				}
			case unix.RTA_GATEWAY:
				if g, ok := netip.AddrFromSlice(a.Value); ok {
					gw = g
				}
			}
		}
		if ifindex != 0 {
			return ifindex, gw, nil
		}
	}
	return 0, gw, fmt.Errorf("route to %v: none", dst)
}

// Neighbour returns the MAC address the kernel's neighbour table holds for
// ip on interface ifindex, and false if it holds none that is usable (no
// entry, still resolving, or failed).
func (n *Netlink) Neighbour(ifindex int, ip netip.Addr) (mac [6]byte, ok bool, err error) {
	ip = ip.Unmap()
	fam, _ := family(ip)
	body := make([]byte, unix.SizeofNdMsg)
	nd := (*unix.NdMsg)(unsafe.Pointer(&body[0]))
	*nd = unix.NdMsg{Family: fam, Ifindex: int32(ifindex)}
	n.mu.Lock()
	msgs, err := n.request(unix.RTM_GETNEIGH, unix.NLM_F_DUMP, body)
	n.mu.Unlock()
	if err != nil {
		return mac, false, fmt.Errorf("neighbour %v: %w", ip, err)
	}
	const usable = unix.NUD_REACHABLE | unix.NUD_STALE | unix.NUD_DELAY | unix.NUD_PROBE | unix.NUD_PERMANENT | unix.NUD_NOARP
	for _, m := range msgs {
		if m.Header.Type != unix.RTM_NEWNEIGH || len(m.Data) < unix.SizeofNdMsg {
			continue
		}
		e := (*unix.NdMsg)(unsafe.Pointer(&m.Data[0]))
		if int(e.Ifindex) != ifindex || e.State&usable == 0 {
			continue
		}
		var dst []byte
		var ll []byte
		for b := m.Data[nlmAlign(unix.SizeofNdMsg):]; len(b) >= unix.SizeofRtAttr; {
			l := int(binary.NativeEndian.Uint16(b))
			t := binary.NativeEndian.Uint16(b[2:])
			if l < unix.SizeofRtAttr || l > len(b) {
				break
			}
			switch t {
			case unix.NDA_DST:
				dst = b[unix.SizeofRtAttr:l]
			case unix.NDA_LLADDR:
				ll = b[unix.SizeofRtAttr:l]
			}
			b = b[min(len(b), nlmAlign(l)):]
		}
		if a, ok := netip.AddrFromSlice(dst); ok && a.Unmap() == ip && len(ll) == 6 {
			return [6]byte(ll), true, nil
		}
	}
	return mac, false, nil
}

func nlmAlign(n int) int { return (n + 3) &^ 3 }

// RxQueues is the number of RX queues interface name has in use (RX-only
// plus combined channels, ETHTOOL_GCHANNELS), asked from the calling
// thread's network namespace; 1 for a driver that does not say.
func RxQueues(name string) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	var ch struct {
		cmd, maxRx, maxTx, maxOther, maxCombined, rx, tx, other, combined uint32
	}
	ch.cmd = unix.ETHTOOL_GCHANNELS
	var ifr struct {
		name [unix.IFNAMSIZ]byte
		data uintptr
		_    [16]byte
	}
	copy(ifr.name[:unix.IFNAMSIZ-1], name)
	ifr.data = uintptr(unsafe.Pointer(&ch))
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	runtime.KeepAlive(&ch)
	switch e {
	case 0:
		return max(int(ch.rx+ch.combined), 1), nil
	case unix.EOPNOTSUPP:
		return 1, nil
	}
	return 0, fmt.Errorf("ETHTOOL_GCHANNELS %s: %w", name, e)
}
