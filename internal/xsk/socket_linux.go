package xsk

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"syscall"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// ChunkSize is the UMEM's frame size: the largest the kernel takes
// (it takes 2048 and 4096 in aligned mode, the one used here).
const ChunkSize = 4096

// RxHeadroom is where the kernel puts a received frame in its chunk in
// copy mode (XDP_PACKET_HEADROOM): a chunk holds ChunkSize-RxHeadroom
// bytes of a received frame.
const RxHeadroom = unix.XDP_PACKET_HEADROOM

// Config says which queue to open and how. The zero value of each field
// but Ifindex and Port is the documented default.
type Config struct {
	Ifindex int        // the interface
	Queue   int        // its RX queue (0)
	Addr    netip.Addr // the destination address redirected to the socket (IPv4 or IPv6)
	Port    uint16     // and the UDP destination port
	// Frames is the number of UMEM chunks, half for receiving and half
	// for sending (default 4096: 16 MiB). A power of two.
	Frames int
	// Generic forces generic (SKB) mode; by default the program is
	// attached in driver mode, and in generic mode if the driver refuses.
	Generic bool
}

// Socket is one AF_XDP socket with its own UMEM, and the XDP program that
// feeds it. RX and TX each belong to one goroutine at a time (the caller
// serialises them); Wake may be called from any goroutine.
type Socket struct {
	fd     int
	efd    int // an eventfd in Wait's poll set: Wake writes it
	umem   []byte
	fill   *ring
	comp   *ring
	rx     *ring
	tx     *ring
	txFree []uint64 // chunks not in the TX or completion ring

	prog *ebpf.Program
	xsks *ebpf.Map
	lnk  link.Link

	mode     string // "driver" or "generic"
	sg       bool   // multi-buffer: frames over one chunk (XDP_USE_SG, BPF_F_XDP_HAS_FRAGS)
	wakeupTx bool   // XDP_USE_NEED_WAKEUP took: kick TX only when asked
	rxFrames int

	pfd  [2]unix.PollFd
	ts   unix.Timespec
	ebuf [8]byte
}

// Open opens the socket on cfg's interface and queue, loads the XDP
// program and attaches it with a bpf_link (the kernel detaches it when
// the process dies). Errors name the step that failed.
func Open(cfg Config) (*Socket, error) {
	if cfg.Frames == 0 {
		cfg.Frames = 4096
	}
	if cfg.Frames < 64 || cfg.Frames&(cfg.Frames-1) != 0 {
		return nil, fmt.Errorf("xsk: Frames %d: want a power of two ≥ 64", cfg.Frames)
	}
	if cfg.Port == 0 || !cfg.Addr.IsValid() {
		return nil, errors.New("xsk: Config without Addr or Port")
	}
	s := &Socket{fd: -1, efd: -1}
	done := false
	defer func() {
		if !done {
			_ = s.Close()
		}
	}()
	var err error
	if s.fd, err = unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0); err != nil {
		return nil, fmt.Errorf("AF_XDP socket: %w", err)
	}
	if s.efd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	size := cfg.Frames * ChunkSize
	if s.umem, err = unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE); err != nil {
		return nil, fmt.Errorf("UMEM mmap %d bytes: %w", size, err)
	}
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(s.umem)))), Len: uint64(size), Size: ChunkSize}
	if err = setsockopt(s.fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return nil, fmt.Errorf("XDP_UMEM_REG: %w", err)
	}
	half := uint32(cfg.Frames / 2)
	s.rxFrames = int(half)
	for _, o := range []struct {
		opt  int
		name string
	}{{unix.XDP_UMEM_FILL_RING, "fill"}, {unix.XDP_UMEM_COMPLETION_RING, "completion"}, {unix.XDP_RX_RING, "RX"}, {unix.XDP_TX_RING, "TX"}} {
		if err = unix.SetsockoptInt(s.fd, unix.SOL_XDP, o.opt, int(half)); err != nil {
			return nil, fmt.Errorf("%s ring of %d: %w", o.name, half, err)
		}
	}
	var off unix.XDPMmapOffsets
	ol := uint32(unsafe.Sizeof(off))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS, uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&ol)), 0); e != 0 {
		return nil, fmt.Errorf("XDP_MMAP_OFFSETS: %w", e)
	}
	if s.fill, err = mapRing(s.fd, off.Fr, half, 8, unix.XDP_UMEM_PGOFF_FILL_RING); err != nil {
		return nil, fmt.Errorf("mmap fill ring: %w", err)
	}
	if s.comp, err = mapRing(s.fd, off.Cr, half, 8, unix.XDP_UMEM_PGOFF_COMPLETION_RING); err != nil {
		return nil, fmt.Errorf("mmap completion ring: %w", err)
	}
	if s.rx, err = mapRing(s.fd, off.Rx, half, unsafe.Sizeof(unix.XDPDesc{}), unix.XDP_PGOFF_RX_RING); err != nil {
		return nil, fmt.Errorf("mmap RX ring: %w", err)
	}
	if s.tx, err = mapRing(s.fd, off.Tx, half, unsafe.Sizeof(unix.XDPDesc{}), unix.XDP_PGOFF_TX_RING); err != nil {
		return nil, fmt.Errorf("mmap TX ring: %w", err)
	}
	// The first half of the chunks receive: all of them on the fill ring.
	for i := range half {
		*s.fill.addr(s.fill.local) = uint64(i) * ChunkSize
		s.fill.local++
	}
	s.fill.submit()
	s.txFree = make([]uint64, 0, half)
	for i := range half {
		s.txFree = append(s.txFree, uint64(half+i)*ChunkSize)
	}

	// Copy mode: veth and most drivers refuse zero-copy, and copy mode
	// works everywhere. Multi-buffer if the kernel has it (6.6).
	sa := &unix.SockaddrXDP{Flags: unix.XDP_COPY | unix.XDP_USE_NEED_WAKEUP | unix.XDP_USE_SG, Ifindex: uint32(cfg.Ifindex), QueueID: uint32(cfg.Queue)}
	s.sg, s.wakeupTx = true, true
	if err = unix.Bind(s.fd, sa); err != nil {
		sa.Flags &^= unix.XDP_USE_SG
		s.sg = false
		if err2 := unix.Bind(s.fd, sa); err2 != nil {
			sa.Flags &^= unix.XDP_USE_NEED_WAKEUP
			s.wakeupTx = false
			if err3 := unix.Bind(s.fd, sa); err3 != nil {
				return nil, fmt.Errorf("bind AF_XDP socket to ifindex %d queue %d: %w", cfg.Ifindex, cfg.Queue, err)
			}
		}
	}
	if s.xsks, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: uint32(cfg.Queue + 1)}); err != nil {
		return nil, fmt.Errorf("create XSKMAP: %w", err)
	}
	if err = s.xsks.Put(uint32(cfg.Queue), uint32(s.fd)); err != nil {
		return nil, fmt.Errorf("XSKMAP entry for queue %d: %w", cfg.Queue, err)
	}
	if s.prog, err = loadProgram(cfg.Addr, cfg.Port, s.xsks, s.sg); err != nil && s.sg {
		// A kernel without multi-buffer XDP: one chunk per frame.
		s.sg = false
		s.prog, err = loadProgram(cfg.Addr, cfg.Port, s.xsks, false)
	}
	if err != nil {
		return nil, fmt.Errorf("load XDP program: %w", err)
	}
	var derr error
	if !cfg.Generic {
		s.lnk, derr = link.AttachXDP(link.XDPOptions{Program: s.prog, Interface: cfg.Ifindex, Flags: link.XDPDriverMode})
		s.mode = "driver"
	}
	if s.lnk == nil {
		var gerr error
		if s.lnk, gerr = link.AttachXDP(link.XDPOptions{Program: s.prog, Interface: cfg.Ifindex, Flags: link.XDPGenericMode}); gerr != nil {
			if derr != nil {
				return nil, fmt.Errorf("attach XDP to ifindex %d: driver mode: %v; generic mode: %w", cfg.Ifindex, derr, gerr)
			}
			return nil, fmt.Errorf("attach XDP to ifindex %d: %w", cfg.Ifindex, gerr)
		}
		s.mode = "generic"
	}
	s.pfd[0] = unix.PollFd{Fd: int32(s.fd), Events: unix.POLLIN}
	s.pfd[1] = unix.PollFd{Fd: int32(s.efd), Events: unix.POLLIN}
	done = true
	return s, nil
}

func setsockopt(fd, opt int, p unsafe.Pointer, n uintptr) error {
	if _, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), n, 0); e != 0 {
		return e
	}
	return nil
}

// Mode is "driver" or "generic": how the XDP program is attached.
func (s *Socket) Mode() string { return s.mode }

// MultiBuffer reports whether frames may span two chunks.
func (s *Socket) MultiBuffer() bool { return s.sg }

// MaxFrame is the largest frame the socket receives and sends.
func (s *Socket) MaxFrame() int {
	if s.sg {
		return 2 * (ChunkSize - RxHeadroom) // every received chunk keeps its headroom
	}
	return ChunkSize - RxHeadroom
}

// RxFrames is the number of chunks that receive: how many frames the
// kernel can hold for us before it drops.
func (s *Socket) RxFrames() int { return s.rxFrames }

// Close detaches the program (the link), closes the socket and unmaps the
// UMEM and the rings. The socket must not be in use. A second Close does
// nothing.
func (s *Socket) Close() error {
	var first error
	if s.lnk != nil {
		first = s.lnk.Close()
		s.lnk = nil
	}
	if s.prog != nil {
		_ = s.prog.Close()
		s.prog = nil
	}
	if s.xsks != nil {
		_ = s.xsks.Close()
		s.xsks = nil
	}
	for _, r := range []*ring{s.fill, s.comp, s.rx, s.tx} {
		r.unmap()
	}
	if s.fd >= 0 {
		if err := unix.Close(s.fd); err != nil && first == nil {
			first = err
		}
		s.fd = -1
	}
	if s.efd >= 0 {
		_ = unix.Close(s.efd)
		s.efd = -1
	}
	if s.umem != nil {
		_ = unix.Munmap(s.umem)
		s.umem = nil
	}
	return first
}

// Receiving. RxPeek, RxFrame and RxRelease make no system call.

// RxPeek is how many descriptors the RX ring holds for us. Descriptor i
// of them is RxFrame(i); a frame over several chunks is several
// descriptors, all but the last with more set.
func (s *Socket) RxPeek() int { return int(s.rx.available()) }

// RxFrame returns descriptor i (0 ≤ i < RxPeek) as a slice of the UMEM,
// valid until RxRelease, and whether the frame goes on in the next one.
func (s *Socket) RxFrame(i int) (b []byte, more bool) {
	d := s.rx.desc(s.rx.local + uint32(i))
	a, n := d.Addr, uint64(d.Len)
	if a+n > uint64(len(s.umem)) {
		return nil, d.Options&unix.XDP_PKT_CONTD != 0 // the kernel never does this
	}
	return s.umem[a : a+n : a+n], d.Options&unix.XDP_PKT_CONTD != 0
}

// RxRelease gives the first n descriptors' chunks back to the kernel on
// the fill ring (which always has room: it is as large as the chunks that
// receive) and frees their RX ring entries.
func (s *Socket) RxRelease(n int) {
	for i := range uint32(n) {
		*s.fill.addr(s.fill.local) = s.rx.desc(s.rx.local+i).Addr &^ (ChunkSize - 1)
		s.fill.local++
	}
	s.fill.submit()
	s.rx.release(uint32(n))
}

// Sending.

// TxChunk returns a free chunk to fill with (part of) a frame: its UMEM
// address and its ChunkSize bytes. It takes back the chunks the kernel
// has sent first; false if every chunk is still queued.
func (s *Socket) TxChunk() (addr uint64, b []byte, ok bool) {
	if len(s.txFree) == 0 {
		s.reclaim()
		if len(s.txFree) == 0 {
			return 0, nil, false
		}
	}
	a := s.txFree[len(s.txFree)-1]
	s.txFree = s.txFree[:len(s.txFree)-1]
	return a, s.umem[a : a+ChunkSize : a+ChunkSize], true
}

// TxUnget returns a chunk TxChunk gave and that will not be sent.
func (s *Socket) TxUnget(addr uint64) { s.txFree = append(s.txFree, addr) }

// reclaim takes the sent chunks off the completion ring.
func (s *Socket) reclaim() {
	n := s.comp.available()
	for i := range n {
		s.txFree = append(s.txFree, *s.comp.addr(s.comp.local + i))
	}
	if n > 0 {
		s.comp.release(n)
	}
}

// TxPut queues n bytes of chunk addr on the TX ring (which always has
// room: it is as large as the chunks that send), more if the frame goes
// on in the next descriptor. Nothing leaves before TxFlush.
func (s *Socket) TxPut(addr uint64, n int, more bool) {
	d := s.tx.desc(s.tx.local)
	d.Addr, d.Len, d.Options = addr, uint32(n), 0
	if more {
		d.Options = unix.XDP_PKT_CONTD
	}
	s.tx.local++
}

// TxFlush publishes the queued descriptors and, in copy mode, makes the
// kernel send them: it sends only inside sendto, at most a budget of
// descriptors per call (32 in Linux 6.x), so it kicks until the ring is
// consumed. It returns the number of sendto calls and the error that
// stopped it early (the descriptors left stay queued for the next flush).
func (s *Socket) TxFlush() (calls int, err error) {
	s.tx.submit()
	for tries := 0; !s.tx.consumed(); tries++ {
		if s.wakeupTx && !s.tx.needWakeup() && tries == 0 {
			// Zero-copy: the driver is already sending.
			return calls, nil
		}
		_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
		calls++
		switch e {
		case 0, unix.EAGAIN, unix.EBUSY, unix.ENOBUFS, unix.EINTR:
			// Budget spent, TX busy on another CPU or completion ring
			// full: take back what was sent and kick again.
			s.reclaim()
		default:
			return calls, e
		}
		if tries > 1024 {
			return calls, unix.EAGAIN
		}
	}
	s.reclaim()
	return calls, nil
}

// Waiting.

// Wait blocks in ppoll(2) until the RX ring has something, Wake is
// called, or timeout passes (negative: no timeout). It blocks the calling
// goroutine's thread, as any system call does: the Go runtime hands the
// thread's P to another goroutine while it sleeps. It returns whether it
// was woken by Wake.
func (s *Socket) Wait(timeout time.Duration) (woken bool, err error) {
	var ts *unix.Timespec
	if timeout >= 0 {
		s.ts = unix.NsecToTimespec(int64(timeout))
		ts = &s.ts
	}
	s.pfd[0].Revents, s.pfd[1].Revents = 0, 0
	_, _, e := unix.Syscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&s.pfd[0])), 2, uintptr(unsafe.Pointer(ts)), 0, 0, 0)
	if e != 0 && e != unix.EINTR {
		return false, os.NewSyscallError("ppoll", e)
	}
	if s.pfd[1].Revents&unix.POLLIN != 0 {
		_, _, _ = unix.Syscall(unix.SYS_READ, uintptr(s.efd), uintptr(unsafe.Pointer(&s.ebuf[0])), 8)
		return true, nil
	}
	return false, nil
}

// Wake makes a Wait in progress, or the next one, return. Any goroutine
// may call it.
func (s *Socket) Wake() {
	one := [8]byte{1}
	_, _, _ = unix.Syscall(unix.SYS_WRITE, uintptr(s.efd), uintptr(unsafe.Pointer(&one[0])), 8)
}

// XDPStatistics reads the kernel's counters of the socket (drops for a
// full RX ring or an empty fill ring, invalid descriptors).
func (s *Socket) XDPStatistics() (unix.XDPStatistics, error) {
	var st unix.XDPStatistics
	l := uint32(unsafe.Sizeof(st))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), unix.SOL_XDP, unix.XDP_STATISTICS, uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&l)), 0); e != 0 {
		return st, syscall.Errno(e)
	}
	return st, nil
}
