package udp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/internal/pcap"
	"github.com/ibex-rdma/ibex/verbs"
)

// testTap is a tap of cfg for a device at local, as attach sets it up.
func testTap(t *testing.T, cfg CaptureConfig, local string) *tap {
	t.Helper()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	tp := newTap(cfg)
	tp.local = netip.MustParseAddrPort(local)
	return tp
}

// readTap writes tp's ring as pcap and reads it back.
func readTap(t *testing.T, tp *tap) *pcap.File {
	t.Helper()
	var buf bytes.Buffer
	n, err := tp.writeTo(&buf)
	if err != nil || n != int64(buf.Len()) {
		t.Fatalf("writeTo: %d bytes (%d written), %v", n, buf.Len(), err)
	}
	f, err := pcap.Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// seqDgram is a datagram of n bytes whose first four carry seq.
func seqDgram(seq, n int) []byte {
	b := make([]byte, n)
	binary.BigEndian.PutUint32(b, uint32(seq))
	return b
}

// TestCaptureRingOverflow: 20 datagrams into a ring of 8 keep the newest
// 8, oldest first, and count 12 overwritten; a frame longer than the
// snaplen is cut there and keeps its length on the wire; the datagrams of
// a super-datagram are frames of their own with IPv4 IDs 0, 1, 2, ...
func TestCaptureRingOverflow(t *testing.T) {
	tp := testTap(t, CaptureConfig{Packets: 8, Snaplen: 128}, "10.0.0.1:4791")
	peer := netip.MustParseAddrPort("10.0.0.2:4791")
	seq := 0
	for range 5 {
		// One Send: a super-datagram of 3 and a single datagram.
		var super [][]byte
		for range 3 {
			super = append(super, seqDgram(seq, 100))
			seq++
		}
		single := seqDgram(seq, 200)
		seq++
		tp.sent([]message{{Buffers: super, Addr: peer}, {Buffers: [][]byte{single}, Addr: peer}})
	}
	st := tp.stats()
	if st.Seen != 20 || st.Kept != 8 || st.Overwritten != 12 || st.Missed != 0 {
		t.Fatalf("stats %+v, want 20 seen, 8 kept, 12 overwritten", st)
	}
	f := readTap(t, tp)
	if len(f.Records) != 8 || f.Snaplen != 128 {
		t.Fatalf("%d records, snaplen %d; want 8, 128", len(f.Records), f.Snaplen)
	}
	for i, r := range f.Records {
		s := 12 + i
		size := 100
		if s%4 == 3 {
			size = 200
		}
		orig := 14 + 20 + 8 + size
		if int(r.OrigLen) != orig || len(r.Data) != min(orig, 128) {
			t.Errorf("record %d: %d of %d bytes, want %d of %d", i, len(r.Data), r.OrigLen, min(orig, 128), orig)
			continue
		}
		ip := r.Data[14:]
		if got := binary.BigEndian.Uint32(ip[28:]); got != uint32(s) {
			t.Errorf("record %d: datagram %d, want %d (the newest kept, oldest first)", i, got, s)
		}
		wantID := s % 4 // the single datagram (3) is alone in its message
		if wantID == 3 {
			wantID = 0
		}
		if id := binary.BigEndian.Uint16(ip[4:]); int(id) != wantID {
			t.Errorf("record %d (datagram %d): IPv4 ID %d, want its index in its super-datagram", i, s, id)
		}
		if tl := binary.BigEndian.Uint16(ip[2:]); int(tl) != 28+size {
			t.Errorf("record %d: IPv4 total length %d, want %d", i, tl, 28+size)
		}
		if ul := binary.BigEndian.Uint16(ip[24:]); int(ul) != 8+size {
			t.Errorf("record %d: UDP length %d, want %d", i, ul, 8+size)
		}
		if c := ^foldSum(ip[:20]); c != 0 {
			t.Errorf("record %d: IPv4 header checksum does not verify", i)
		}
	}
	if r := f.Records[0]; r.Sec == 0 || r.Frac >= 1e9 {
		t.Errorf("timestamp %d.%09d: want nanoseconds since 1970", r.Sec, r.Frac)
	}
}

// TestCaptureCount: Count packets are recorded, no more; Done is closed
// at the Count-th.
func TestCaptureCount(t *testing.T) {
	tp := testTap(t, CaptureConfig{Packets: 16, Count: 5}, "10.0.0.1:4791")
	peer := netip.MustParseAddrPort("10.0.0.2:4791")
	msg := []message{{Buffers: [][]byte{seqDgram(0, 64), seqDgram(1, 64), seqDgram(2, 64)}, Addr: peer}}
	tp.sent(msg)
	select {
	case <-tp.done:
		t.Fatal("Done closed after 3 of 5 packets")
	default:
	}
	tp.sent(msg)
	tp.sent(msg)
	select {
	case <-tp.done:
	default:
		t.Fatal("Done not closed after 5 packets")
	}
	if st := tp.stats(); st.Seen != 5 || st.Kept != 5 {
		t.Errorf("stats %+v, want 5 seen and kept", st)
	}
}

// TestCaptureReceived: received messages become frames from the peer to
// the device: a super-datagram split by its segment size, the IPv4 ID the
// conn saw, CE as the ECN field, empty (dropped) messages skipped; over
// IPv6 the UDP checksum is computed and verifies.
func TestCaptureReceived(t *testing.T) {
	tp := testTap(t, CaptureConfig{}, "[fd00::1]:4791")
	rx := newRecvBatch(3, true)
	peer := netip.MustParseAddrPort("[fd00::2]:50000")
	copy(rx[0].Buffers[0], append(seqDgram(0, 100), seqDgram(1, 60)...))
	rx[0].N, rx[0].Seg, rx[0].Addr, rx[0].ID, rx[0].CE = 160, 100, peer, -1, true
	rx[1].N = 0 // dropped by the conn
	copy(rx[2].Buffers[0], seqDgram(2, 80))
	rx[2].N, rx[2].Seg, rx[2].Addr, rx[2].ID = 80, 80, peer, 7
	tp.received(rx)
	f := readTap(t, tp)
	if len(f.Records) != 3 {
		t.Fatalf("%d records, want 3", len(f.Records))
	}
	for i, w := range []struct {
		size int
		ce   bool
	}{{100, true}, {60, true}, {80, false}} {
		r := f.Records[i].Data
		if et := binary.BigEndian.Uint16(r[12:]); et != 0x86dd {
			t.Fatalf("record %d: ethertype %#04x, want IPv6", i, et)
		}
		ip := r[14:]
		if got := ip[1] >> 4 & 3; (got == 3) != w.ce {
			t.Errorf("record %d: ECN %d, want CE %v", i, got, w.ce)
		}
		if src, dst := netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40])); src != peer.Addr() || dst != tp.local.Addr() {
			t.Errorf("record %d: %v -> %v, want %v -> %v", i, src, dst, peer.Addr(), tp.local.Addr())
		}
		u := ip[40:]
		if sp, dp, l := binary.BigEndian.Uint16(u), binary.BigEndian.Uint16(u[2:]), binary.BigEndian.Uint16(u[4:]); sp != 50000 || dp != 4791 || int(l) != 8+w.size {
			t.Errorf("record %d: UDP %d -> %d, length %d; want 50000 -> 4791, %d", i, sp, dp, l, 8+w.size)
		}
		if got := binary.BigEndian.Uint32(u[8:]); got != uint32(i) {
			t.Errorf("record %d: datagram %d", i, got)
		}
		// The pseudo-header, the UDP header and the datagram sum to 0xffff.
		var pl [8]byte
		binary.BigEndian.PutUint32(pl[:], uint32(8+w.size))
		pl[7] = 17
		if s := csum(csum(csum(0, ip[8:40]), pl[:]), u[:8+w.size]); fold(s) != 0xffff {
			t.Errorf("record %d: UDP checksum does not verify", i)
		}
	}
}

// TestCaptureMissed: a batch that finds the ring held (WriteTo) is counted,
// not waited for; a stopped tap records nothing.
func TestCaptureMissed(t *testing.T) {
	tp := testTap(t, CaptureConfig{Packets: 4}, "10.0.0.1:4791")
	peer := netip.MustParseAddrPort("10.0.0.2:4791")
	msg := []message{{Buffers: [][]byte{seqDgram(0, 64), seqDgram(1, 64)}, Addr: peer}}
	tp.mu.Lock()
	tp.sent(msg)
	tp.mu.Unlock()
	if st := tp.stats(); st.Missed != 2 || st.Seen != 0 {
		t.Errorf("stats %+v, want 2 missed, none seen", st)
	}
	tp.stopped = true
	tp.sent(msg)
	if st := tp.stats(); st.Seen != 0 {
		t.Errorf("a stopped tap recorded %d packets", st.Seen)
	}
}

// TestCaptureConfig: bad fields are refused, named; zero is the default.
func TestCaptureConfig(t *testing.T) {
	for _, c := range []struct {
		cfg  CaptureConfig
		want string
	}{
		{CaptureConfig{Packets: -1}, "packets -1"},
		{CaptureConfig{Snaplen: 20}, "snaplen 20"},
		{CaptureConfig{Count: -3}, "count -3"},
		{CaptureConfig{Packets: 1 << 24, Snaplen: 4096}, "more than"},
	} {
		if err := c.cfg.validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %q", c.cfg, err, c.want)
		}
	}
	var cfg CaptureConfig
	if err := cfg.validate(); err != nil || cfg.Packets != DefaultCapturePackets || cfg.Snaplen != DefaultCaptureSnaplen {
		t.Errorf("zero config: %+v, %v", cfg, err)
	}
	if _, err := StartCapture("nosuchdevice0", CaptureConfig{}); !errors.Is(err, verbs.ErrNoDevice) {
		t.Errorf("StartCapture of an unknown device: %v, want ErrNoDevice", err)
	}
}

// TestCaptureAllocs: 256 KiB WRITEs through two devices allocate nothing
// with the capture off, and nothing with both devices captured.
func TestCaptureAllocs(t *testing.T) {
	x, y := ioPair(t, 256<<10, 16, nil, nil)
	wr := []verbs.SendWR{x.write(y, 0, 256<<10)}
	wc := make([]verbs.WC, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	op := func() {
		if err := x.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		if n, err := x.cq.PollWait(ctx, wc); err != nil || n != 1 || wc[0].Status != verbs.WCSuccess {
			t.Fatalf("%v %v", wc[0], err)
		}
	}
	for range 10 {
		op()
	}
	if a := testing.AllocsPerRun(100, op); a != 0 {
		t.Errorf("capture off: %v allocations per 256 KiB WRITE", a)
	}
	var caps []*Capture
	for _, e := range []*ioEnd{x, y} {
		c, err := StartCapture(e.name, CaptureConfig{Packets: 4096})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Stop()
		caps = append(caps, c)
	}
	op()
	if a := testing.AllocsPerRun(100, op); a != 0 {
		t.Errorf("capture on: %v allocations per 256 KiB WRITE", a)
	}
	for i, c := range caps {
		if st := c.Stop(); st.Seen < 101*64 || st.Overwritten == 0 {
			t.Errorf("capture %d: %+v, want at least 64 packets a WRITE and the ring overwritten", i, st)
		}
	}
}

// TestCaptureEnv: IBEX_CAPTURE captures the devices a process starts: the
// first writes FILE, the second FILE-<device>; SIGUSR1 writes them while
// they run, and each writes its file again when it stops.
func TestCaptureEnv(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "env.pcap")
	captures.mu.Lock()
	captures.envN = 0 // the first env capture of this test names FILE
	captures.mu.Unlock()
	t.Setenv("IBEX_CAPTURE", file)
	t.Setenv("IBEX_CAPTURE_PACKETS", "64")
	t.Setenv("IBEX_CAPTURE_SNAPLEN", "100")
	// ioPair's ends, torn down here rather than at cleanup: the files are
	// written when the devices stop.
	n := ioSeq.Add(1)
	var ends [2]*ioEnd
	for i, side := range []string{"a", "b"} {
		name := fmt.Sprintf("io%dcap%s", n, side)
		if err := AddDevice(name, netip.MustParseAddrPort(fmt.Sprintf("127.%d.%d.%d:4791", 2+os.Getpid()%250, n, i+1))); err != nil {
			t.Fatal(err)
		}
		ends[i] = openEnd(t, name, 4096, 4, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	}
	x, y := ends[0], ends[1]
	for _, c := range [][2]*ioEnd{{x, y}, {y, x}} {
		if err := c[0].qp.Connect(c[1].qp.Info(), verbs.ConnectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	second := filepath.Join(dir, "env-"+y.name+".pcap")
	x.run(t, x.write(y, 0, 64))
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	// The handler writes both files; wait until the second is complete
	// and its ring free again (packets that come while it is written are
	// missed, by design).
	captures.mu.Lock()
	ty := captures.byDev[y.name].t
	captures.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		f, err := pcap.ReadFile(second)
		if err == nil && len(f.Records) >= 2 && ty.mu.TryLock() {
			ty.mu.Unlock()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no capture in %s 10 s after SIGUSR1: %v", second, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	x.run(t, x.write(y, 0, 64))
	for _, e := range []*ioEnd{x, y} {
		for _, err := range []error{e.qp.Destroy(), e.mr.Dereg(), e.cq.Destroy(), e.pd.Dealloc(), e.ctx.Close()} {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, name := range []string{file, second} {
		f, err := pcap.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		// Two WRITEs and their ACKs, at least, seen from each side.
		if len(f.Records) < 4 || f.Snaplen != 100 {
			t.Errorf("%s: %d packets of snaplen %d, want at least 4 of 100", name, len(f.Records), f.Snaplen)
		}
	}
	captures.mu.Lock()
	live := captures.live
	delete(captures.byDev, x.name)
	delete(captures.byDev, y.name)
	captures.mu.Unlock()
	if live != 0 {
		t.Errorf("%d IBEX_CAPTURE devices still counted as running", live)
	}
}

func foldSum(b []byte) uint16 { return fold(csum(0, b)) }
