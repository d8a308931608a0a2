package udp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ibex-rdma/ibex/internal/xsk"
)

// The AF_XDP batchConn: the device's datagrams as Ethernet frames through
// an AF_XDP socket (internal/xsk) on queue 0 of the interface that holds
// the device's address, with the headers written and read here. The wire
// format is the socket path's: IPv4 ID 0 and DF (what the loop computes
// the ICRC for), TTL 64, UDP checksum 0 as rxe sends it, and the QP's own
// UDP source port (SourcePorts). On receive the IP header is visible, so
// message.ID carries the real IPv4 ID and the loop checks all 32 ICRC
// bits; message.CE carries ECN.
//
// Choice (defaultListen): IBEX_UDP_XDP=off uses the UDP socket; on uses
// AF_XDP or fails naming why; unset or auto tries AF_XDP for an address on
// a non-loopback interface and, if anything refuses, says why in one line
// on stderr and uses the UDP socket. Loopback addresses always use the
// socket (said only with on). It needs CAP_NET_ADMIN and CAP_BPF (root).
//
// Blocking: Recv without wait only reads the rings (no system call on an
// empty ring: the run-to-completion poller spins on it). Recv with wait
// spins on the RX ring for xdpSpin, then sleeps in ppoll(2) on the socket
// and an eventfd that SetReadDeadline writes when it finds a sleeper. The
// ppoll blocks the calling goroutine's thread (the Go runtime moves the
// other goroutines off it), unlike the netpoller's park; only the goroutine
// that holds the device sleeps there, one at a time.
//
// Limits: one RX queue (an interface with more is refused: the frames on
// the other queues would reach only the kernel); one AF_XDP device per
// interface (a second XDP program is refused, and under auto that device
// takes the socket path: the program redirects only its own device's
// address and port, so the other device's datagrams reach the kernel and
// its socket); the destination MAC is the kernel's
// neighbour entry for the next hop, looked up off the data path and
// refreshed every xdpRefresh; datagrams to a peer not yet resolved are
// dropped (the protocol retransmits them).

const (
	// Recv(wait) polls the RX ring this long before it sleeps. None: a
	// program that wants the lowest latency polls, and runs the device
	// itself (run to completion); the progress goroutine that waits here
	// serves those that do not, and a spin would take a core the peer
	// needs on 2 (write_bw 1 MiB between namespaces: 686/597 MiB/s with
	// 20 µs, 695/670 without, alternated; write_lat median 5.5 vs 4.2 µs).
	xdpSpin    = 0 * time.Microsecond
	xdpResolve = 3 * time.Second  // a neighbour resolution gives up after this
	xdpRetry   = time.Second      // and is tried again no sooner
	xdpRefresh = 30 * time.Second // a resolved MAC is looked up again this often
	xdpTxWait  = time.Millisecond // Send waits this long for a free TX chunk before it drops
)

// xdpStderr is where the fallback line goes (tests replace it).
var xdpStderr io.Writer = os.Stderr

// defaultListen is the listenFunc of a device named name that a test has
// not given one: AF_XDP or the UDP socket, as IBEX_UDP_XDP says.
func defaultListen(name string) listenFunc { return xdpListen(name, "") }

// connMode names the path a device's conn takes (DeviceMode).
func connMode(c batchConn) string {
	if _, ok := c.(*xdpConn); ok {
		return "af_xdp"
	}
	return "socket"
}

// xdpListen opens AF_XDP or the UDP socket as mode says ("" follows
// IBEX_UDP_XDP).
func xdpListen(name, mode string) listenFunc {
	return func(addr netip.AddrPort, c *counters) (batchConn, error) {
		v := mode
		if v == "" {
			v = os.Getenv("IBEX_UDP_XDP")
		}
		on := false
		switch strings.ToLower(v) {
		case "off", "0", "false":
			return listenUDP(addr, c)
		case "on", "1", "true":
			on = true
		case "", "auto":
		default:
			fmt.Fprintf(xdpStderr, "ibex: IBEX_UDP_XDP=%q is not off, on or auto; taken as auto\n", v)
		}
		if a := addr.Addr().Unmap(); a.IsLoopback() || a.IsUnspecified() {
			if on {
				fmt.Fprintf(xdpStderr, "ibex: %s: AF_XDP not used for %v, which is not on a network interface; using the UDP socket\n", name, addr.Addr())
			}
			return listenUDP(addr, c)
		}
		conn, err := listenXDP(addr, c)
		if err == nil {
			return conn, nil
		}
		if on {
			return nil, fmt.Errorf("AF_XDP (IBEX_UDP_XDP=on): %w", err)
		}
		fmt.Fprintf(xdpStderr, "ibex: %s: AF_XDP unavailable (%v); using the UDP socket\n", name, err)
		return listenUDP(addr, c)
	}
}

// xdpConn is a device's AF_XDP socket as a batchConn. Send and Recv are
// called by whoever holds the device, one at a time; SetReadDeadline from
// any goroutine.
type xdpConn struct {
	ctrs    *counters
	sock    *xsk.Socket
	nl      *xsk.Netlink
	hold    *net.UDPConn
	local   netip.AddrPort
	ifname  string
	ifindex int
	mac     [6]byte
	maxLen  int  // the largest frame: the interface's MTU plus the Ethernet header
	ecn     bool // datagrams leave ECT(0) (IBEX_UDP_ECN=0: not), as the socket path's

	// Owned by the device's holder.
	peers    map[netip.AddrPort]*xdpPeer
	lastAddr netip.AddrPort
	lastPeer *xdpPeer
	txStuck  bool // the Send in progress found no chunk free within xdpTxWait: it waits no more

	base     time.Time    // deadlines are monotonic nanoseconds since base
	deadline atomic.Int64 // the read deadline, 1 + ns since base; 0: none
	sleeping atomic.Bool  // a Recv is about to sleep or sleeps in ppoll
	closed   atomic.Bool
	stop     chan struct{} // closed by Close: resolvers give up
	wg       sync.WaitGroup

	st xdpStats
}

// xdpStats counts what went through the AF_XDP socket (atomics, added
// once per batch): the proof in tests that the XDP path carried the
// traffic.
type xdpStats struct {
	rxFrames, rxMulti, rxBad  atomic.Uint64 // frames received; of them in two chunks; of them not a datagram for us
	txFrames, txMulti, txDrop atomic.Uint64 // frames sent; in two chunks; datagrams dropped (no MAC yet, no room, too big)
	kicks, waits              atomic.Uint64 // sendto and ppoll calls
	resolved, unresolved      atomic.Uint64 // neighbour look-ups that found a MAC, that failed
}

// xdpPeer is one destination: its next hop's MAC, resolved in the
// background, and the frame header built from it.
type xdpPeer struct {
	addr    netip.AddrPort
	mac     atomic.Uint64 // 1<<48 | the MAC, once resolved
	busy    atomic.Bool   // a resolver runs
	lastErr atomic.Pointer[error]

	// Owned by the device's holder.
	flow   xsk.Flow
	built  uint64 // the mac value flow was built from (0: none)
	retry  int64  // c.now(): resolve again no sooner (after a failure, or to refresh)
	waited bool   // Send waited for the first resolution
}

// listenXDP opens the AF_XDP conn of a device bound to addr, or says why
// it cannot.
func listenXDP(addr netip.AddrPort, ctrs *counters) (_ *xdpConn, err error) {
	ifc, err := interfaceOf(addr.Addr())
	if err != nil {
		return nil, err
	}
	if ifc.Flags&net.FlagLoopback != 0 {
		return nil, fmt.Errorf("%s is a loopback interface", ifc.Name)
	}
	if len(ifc.HardwareAddr) != 6 {
		return nil, fmt.Errorf("%s has no Ethernet address", ifc.Name)
	}
	c := &xdpConn{ctrs: ctrs, ecn: !envOff("IBEX_UDP_ECN"), local: addr, ifname: ifc.Name, ifindex: ifc.Index, mac: [6]byte(ifc.HardwareAddr),
		maxLen: ifc.MTU + 14, peers: map[netip.AddrPort]*xdpPeer{}, stop: make(chan struct{}), base: time.Now()}
	defer func() {
		if err != nil {
			_ = c.Close()
		}
	}()
	// The kernel's UDP socket on addr:port stays open, never read, with a
	// small buffer: it reserves the port (a second process, or this one's
	// socket path, cannot take the device), the kernel answers nothing
	// with ICMP port unreachable should the program pass it a datagram
	// (it passes none while the socket is in the map), and it sends the
	// datagram that makes the kernel resolve a new peer's MAC.
	if c.hold, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr)); err != nil {
		return nil, fmt.Errorf("bind %v: %w", addr, err)
	}
	_ = c.hold.SetReadBuffer(4096)
	if c.nl, err = xsk.OpenNetlink(); err != nil {
		return nil, err
	}
	if q, err := xsk.RxQueues(ifc.Name); err != nil {
		return nil, err
	} else if q != 1 {
		return nil, fmt.Errorf("%s has %d RX queues; the AF_XDP path serves one", ifc.Name, q)
	}
	if c.sock, err = xsk.Open(xsk.Config{Ifindex: ifc.Index, Addr: addr.Addr(), Port: addr.Port()}); err != nil {
		return nil, fmt.Errorf("%s: %w", ifc.Name, err)
	}
	if c.maxLen > c.sock.MaxFrame() {
		return nil, fmt.Errorf("%s: MTU %d needs frames of %d bytes, AF_XDP carries %d here (multi-buffer: %v)",
			ifc.Name, ifc.MTU, c.maxLen, c.sock.MaxFrame(), c.sock.MultiBuffer())
	}
	return c, nil
}

// interfaceOf is the interface that holds address a.
func interfaceOf(a netip.Addr) (*net.Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	for i := range ifs {
		addrs, _ := ifs[i].Addrs()
		for _, x := range addrs {
			if n, ok := x.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a.Unmap() {
					return &ifs[i], nil
				}
			}
		}
	}
	return nil, fmt.Errorf("no interface holds %v", a)
}

func (c *xdpConn) LocalAddr() netip.AddrPort { return c.local }
func (c *xdpConn) BatchSize() int            { return txCap }
func (c *xdpConn) Offload() (gso, gro bool)  { return false, false }
func (c *xdpConn) SourcePorts() bool         { return true }

// RecvBuffer is what the receive chunks hold in frames of the largest
// size (a frame over one chunk's room takes two).
func (c *xdpConn) RecvBuffer() int {
	room := xsk.ChunkSize - xsk.RxHeadroom
	per := (c.maxLen + room - 1) / room
	return c.sock.RxFrames() / per * (c.maxLen - 14)
}

// Close ends the resolvers and closes the socket (which detaches the
// program), the netlink socket and the kernel UDP socket.
func (c *xdpConn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	close(c.stop)
	c.wg.Wait()
	var err error
	if c.sock != nil {
		err = c.sock.Close()
	}
	if c.nl != nil {
		_ = c.nl.Close()
	}
	if c.hold != nil {
		_ = c.hold.Close()
	}
	return err
}

// SetReadDeadline implements batchConn: it wakes a sleeping Recv, which
// then reads the new deadline.
func (c *xdpConn) SetReadDeadline(t time.Time) error {
	var v int64
	if !t.IsZero() {
		v = 1 + max(int64(t.Sub(c.base)), 0)
	}
	c.deadline.Store(v)
	if c.sleeping.Load() {
		c.sock.Wake()
	}
	return nil
}

// Send implements batchConn.
func (c *xdpConn) Send(msgs []message) (pkts, bytes int) {
	now := c.now()
	c.txStuck = false
	var frames, multi, drop uint64
	for i := range msgs {
		m := &msgs[i]
		p := c.peer(m.Addr, now)
		if p == nil {
			drop += uint64(len(m.Buffers))
			continue
		}
		for _, b := range m.Buffers {
			k := c.put(p, b, m.SrcPort)
			if k == 0 {
				drop++
				continue
			}
			frames++
			if k > 1 {
				multi++
			}
			pkts++
			bytes += len(b)
		}
	}
	if frames > 0 {
		calls, _ := c.sock.TxFlush() // what it could not send waits for the next flush
		c.ctrs.syscalls.Add(uint64(calls))
		c.ctrs.xmitMsgs.Add(frames)
		c.st.kicks.Add(uint64(calls))
		c.st.txFrames.Add(frames)
		if multi > 0 {
			c.st.txMulti.Add(multi)
		}
	}
	if drop > 0 {
		c.st.txDrop.Add(drop)
	}
	return pkts, bytes
}

// put queues datagram b to p as a frame of one chunk or two and returns
// how many, or 0 if it dropped it (too big, or no chunk free in time).
func (c *xdpConn) put(p *xdpPeer, b []byte, sport uint16) int {
	hl := p.flow.Len()
	if hl+len(b) > c.maxLen || hl+len(b) > 2*xsk.ChunkSize {
		return 0
	}
	a1, c1, ok := c.chunk()
	if !ok {
		return 0
	}
	p.flow.Put(c1, len(b), sport)
	n := copy(c1[hl:], b)
	if n == len(b) {
		c.sock.TxPut(a1, hl+n, false)
		return 1
	}
	a2, c2, ok := c.chunk()
	if !ok {
		c.sock.TxUnget(a1)
		return 0
	}
	copy(c2, b[n:])
	c.sock.TxPut(a1, xsk.ChunkSize, true)
	c.sock.TxPut(a2, len(b)-n, false)
	return 2
}

// chunk is a free TX chunk; if none, it sends what is queued and waits
// for the kernel to finish with some, up to xdpTxWait.
func (c *xdpConn) chunk() (uint64, []byte, bool) {
	if a, b, ok := c.sock.TxChunk(); ok {
		return a, b, true
	}
	if c.txStuck {
		return 0, nil, false
	}
	c.ctrs.xmitWait.Add(1)
	start := time.Now()
	for time.Since(start) < xdpTxWait {
		calls, err := c.sock.TxFlush()
		c.ctrs.syscalls.Add(uint64(calls))
		if a, b, ok := c.sock.TxChunk(); ok {
			return a, b, true
		}
		if err != nil {
			break
		}
	}
	c.txStuck = true // the link is down, or the kernel stopped sending: drop the rest at once
	return 0, nil, false
}

// peer returns the destination a with its header ready, or nil if its MAC
// is not known yet (a resolver is then at work).
func (c *xdpConn) peer(a netip.AddrPort, now int64) *xdpPeer {
	p := c.lastPeer
	if p == nil || a != c.lastAddr {
		p = c.peers[a]
		if p == nil {
			if !a.IsValid() || a.Addr().Unmap().Is4() != c.local.Addr().Unmap().Is4() {
				return nil
			}
			p = &xdpPeer{addr: a}
			c.peers[a] = p
		}
		c.lastAddr, c.lastPeer = a, p
	}
	if now >= p.retry && !p.busy.Load() {
		// First contact, a failure to retry, or a refresh (the MAC in use
		// stays while it runs).
		c.resolve(p, now)
		if !p.waited {
			// First contact: wait a little for it rather than drop the
			// batch and leave it to the first retransmission timeout
			// (resolution on a link takes 0.1 to 1 ms).
			p.waited = true
			for i := 0; i < 50 && p.busy.Load() && p.mac.Load() == 0; i++ {
				time.Sleep(100 * time.Microsecond)
			}
		}
	}
	v := p.mac.Load()
	if v == 0 {
		return nil
	}
	if v != p.built {
		var mac [6]byte
		for i := range mac {
			mac[i] = byte(v >> (40 - 8*i))
		}
		f, err := xsk.NewFlow(c.mac, mac, c.local, a)
		if err != nil {
			return nil
		}
		if c.ecn {
			f.SetTOS(ecnECT0) // as the socket path sends them (io_linux.go)
		}
		p.flow, p.built = f, v
	}
	return p
}

// resolve starts a goroutine that finds p's next hop and its MAC.
func (c *xdpConn) resolve(p *xdpPeer, now int64) {
	if c.closed.Load() {
		return
	}
	p.busy.Store(true)
	if p.mac.Load() == 0 {
		p.retry = now + int64(xdpResolve+xdpRetry)
	} else {
		p.retry = now + int64(xdpRefresh)
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer p.busy.Store(false)
		mac, err := c.lookup(p.addr.Addr())
		if err != nil {
			p.lastErr.Store(&err)
			c.st.unresolved.Add(1)
			return
		}
		var v uint64
		for _, x := range mac {
			v = v<<8 | uint64(x)
		}
		p.mac.Store(v | 1<<48)
		c.st.resolved.Add(1)
	}()
}

var errXDPClosed = errors.New("closed")

// lookup finds the MAC of dst's next hop in the kernel's tables, making
// the kernel resolve it if need be (one datagram to dst's discard port
// from the held socket), for up to xdpResolve.
func (c *xdpConn) lookup(dst netip.Addr) ([6]byte, error) {
	ifindex, gw, err := c.nl.Route(dst)
	if err != nil {
		return [6]byte{}, err
	}
	if ifindex != c.ifindex {
		return [6]byte{}, fmt.Errorf("%v is routed through interface %d, not %s", dst, ifindex, c.ifname)
	}
	hop := dst
	if gw.IsValid() {
		hop = gw
	}
	wait := 500 * time.Microsecond
	start := time.Now()
	for i := 0; ; i++ {
		mac, ok, err := c.nl.Neighbour(c.ifindex, hop)
		if err != nil {
			return mac, err
		}
		if ok {
			return mac, nil
		}
		if i == 0 {
			_, _ = c.hold.WriteToUDPAddrPort(nil, netip.AddrPortFrom(dst, 9))
		}
		if time.Since(start) > xdpResolve {
			return mac, fmt.Errorf("no neighbour entry for %v on %s after %v", hop, c.ifname, xdpResolve)
		}
		t := time.NewTimer(wait)
		select {
		case <-c.stop:
			t.Stop()
			return mac, errXDPClosed
		case <-t.C:
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// Recv implements batchConn.
func (c *xdpConn) Recv(msgs []message, wait bool) (int, error) {
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	if !wait {
		return c.recv(msgs), nil
	}
	now := c.now()
	if dl := c.deadline.Load(); dl != 0 && now >= dl {
		return 0, os.ErrDeadlineExceeded
	}
	if n := c.recv(msgs); n > 0 {
		return n, nil
	}
	for spinEnd := now + int64(xdpSpin); ; {
		if n := c.recv(msgs); n > 0 {
			return n, nil
		}
		now = c.now()
		if dl := c.deadline.Load(); dl != 0 && now >= dl {
			return 0, os.ErrDeadlineExceeded
		}
		if now >= spinEnd {
			break
		}
	}
	for {
		// sleeping, then the deadline and the ring; SetReadDeadline
		// stores the deadline, then looks at sleeping: one of us sees
		// the other.
		c.sleeping.Store(true)
		dl := c.deadline.Load()
		now = c.now()
		if dl != 0 && now >= dl {
			c.sleeping.Store(false)
			return 0, os.ErrDeadlineExceeded
		}
		if n := c.recv(msgs); n > 0 {
			c.sleeping.Store(false)
			return n, nil
		}
		timeout := time.Duration(-1)
		if dl != 0 {
			timeout = time.Duration(dl - now)
		}
		c.ctrs.syscalls.Add(1)
		c.st.waits.Add(1)
		_, err := c.sock.Wait(timeout)
		c.sleeping.Store(false)
		if err != nil {
			return 0, err
		}
		if c.closed.Load() {
			return 0, net.ErrClosed
		}
		if n := c.recv(msgs); n > 0 {
			return n, nil
		}
	}
}

// now is the deadlines' clock: 1 + monotonic ns since base.
func (c *xdpConn) now() int64 { return 1 + int64(time.Since(c.base)) }

// recv takes up to len(msgs) frames off the RX ring, without a system
// call, and gives their chunks back.
func (c *xdpConn) recv(msgs []message) int {
	avail := c.sock.RxPeek()
	if avail == 0 {
		return 0
	}
	k, n := 0, 0
	var multi, bad uint64
	for n < len(msgs) && k < avail {
		first, more := c.sock.RxFrame(k)
		total, cnt := len(first), 1
		for more && k+cnt < avail {
			var b []byte
			b, more = c.sock.RxFrame(k + cnt)
			total += len(b)
			cnt++
		}
		if more {
			break // the rest of the frame is not in the ring yet
		}
		if !c.message(&msgs[n], first, total, k, cnt) {
			bad++
		}
		if cnt > 1 {
			multi++
		}
		n++
		k += cnt
	}
	c.sock.RxRelease(k)
	c.st.rxFrames.Add(uint64(n))
	if multi > 0 {
		c.st.rxMulti.Add(multi)
	}
	if bad > 0 {
		c.st.rxBad.Add(bad)
	}
	return n
}

// message fills m from the frame in descriptors k..k+cnt (first is
// descriptor k, total the frame's length): its UDP payload copied into
// m.Buffers[0], source, IPv4 ID and CE. A frame that is not a datagram
// for us, or too long for the buffer, gives N 0.
func (c *xdpConn) message(m *message, first []byte, total, k, cnt int) bool {
	m.N, m.Seg, m.Addr, m.ID, m.CE = 0, 0, netip.AddrPort{}, -1, false
	var d xsk.Datagram
	if xsk.Parse(first, total, c.local.Port(), &d) != nil {
		return false
	}
	buf := m.Buffers[0]
	if d.Len > len(buf) {
		return false
	}
	buf = buf[:d.Len]
	off, w := d.Off, 0
	for j := 0; j < cnt && w < len(buf); j++ {
		b := first
		if j > 0 {
			b, _ = c.sock.RxFrame(k + j)
		}
		if off >= len(b) {
			off -= len(b)
			continue
		}
		w += copy(buf[w:], b[off:])
		off = 0
	}
	m.N, m.Seg, m.Addr, m.ID, m.CE = d.Len, d.Len, d.Src, d.ID, d.CE
	return true
}
