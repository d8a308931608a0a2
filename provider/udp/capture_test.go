package udp_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/internal/pcap"
	"github.com/ibex-rdma/ibex/provider/udp"
	"github.com/ibex-rdma/ibex/verbs"
	"github.com/ibex-rdma/ibex/wire"
)

// TestCaptureWriteSend captures device a while its QP sends a WRITE and
// a SEND to device b's: the pcap holds the two requests (a to b, to b's
// QPN) and their two ACKs (b to a, to a's QPN), each a frame whose
// synthesized headers are the real ones in every field the ICRC covers
// (the ICRC the peer computed checks against them), and tshark decodes
// them as RC RDMA WRITE Only, SEND Only and Acknowledge.
func TestCaptureWriteSend(t *testing.T) {
	a, b := newDevices(t)
	ea, eb := newEnd(t, open(t, a)), newEnd(t, open(t, b))
	defer ea.close(t)
	defer eb.close(t)
	for _, c := range [][2]*farewellEnd{{ea, eb}, {eb, ea}} {
		if err := c[0].qp.Connect(c[1].qp.Info(), verbs.ConnectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	capt, err := udp.StartCapture(a, udp.CaptureConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := udp.StartCapture(a, udp.CaptureConfig{}); !errors.Is(err, verbs.ErrBusy) {
		t.Errorf("a second capture of %s: %v, want ErrBusy", a, err)
	}
	if err := eb.qp.PostRecv([]verbs.RecvWR{{ID: 9, SGL: []verbs.SGE{{Addr: eb.mr.Addr() + 2048, Length: 64, LKey: eb.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	sge := []verbs.SGE{{Addr: ea.mr.Addr(), Length: 32, LKey: ea.mr.LKey()}}
	for _, w := range []verbs.SendWR{
		{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: sge, RemoteAddr: eb.mr.Addr(), RKey: eb.mr.RKey()},
		{ID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: sge},
	} {
		if err := ea.qp.PostSend([]verbs.SendWR{w}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		wc := make([]verbs.WC, 1)
		n, err := ea.cq.PollWait(ctx, wc)
		cancel()
		if err != nil || n != 1 || wc[0].Status != verbs.WCSuccess {
			t.Fatalf("WR %d: %d completions, %v, %v", w.ID, n, wc[0].Status, err)
		}
	}
	st := capt.Stop()
	name := filepath.Join(t.TempDir(), "a.pcap")
	writeCapture(t, capt, name)
	f, err := pcap.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if f.LinkType != pcap.LinkEthernet || !f.Nano || int(f.Snaplen) != udp.DefaultCaptureSnaplen {
		t.Errorf("header: link %d nano %v snaplen %d; want Ethernet, ns, %d", f.LinkType, f.Nano, f.Snaplen, udp.DefaultCaptureSnaplen)
	}
	addrA, _ := udp.DeviceAddr(a)
	addrB, _ := udp.DeviceAddr(b)
	qpa, qpb := ea.qp.Num(), eb.qp.Num()
	type pkt struct {
		src, dst netip.Addr
		op       ib.Opcode
		qpn      uint32
	}
	want := []pkt{
		{addrA.Addr(), addrB.Addr(), ib.RCWriteOnly, qpb}, {addrB.Addr(), addrA.Addr(), ib.RCAck, qpa},
		{addrA.Addr(), addrB.Addr(), ib.RCSendOnly, qpb}, {addrB.Addr(), addrA.Addr(), ib.RCAck, qpa},
	}
	// A retransmission (a loaded machine past the RTO) adds packets: then
	// only their kinds are checked.
	exact := ea.qp.Stats().Retransmits == 0 && eb.qp.Stats().Retransmits == 0
	if exact && (len(f.Records) != len(want) || st.Seen != uint64(len(want)) || st.Overwritten != 0) {
		t.Fatalf("%d packets captured (stats %+v), want %d", len(f.Records), st, len(want))
	}
	var got []pkt
	for i, r := range f.Records {
		var fr wire.Frame
		if err := wire.DecodeFrame(r.Data, &fr); err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		if int(r.OrigLen) != len(r.Data) {
			t.Errorf("packet %d: %d of %d bytes kept (a small packet is kept whole)", i, len(r.Data), r.OrigLen)
		}
		ip := r.Data[14:]
		if c := ^fold(sum16(ip[:20])); c != 0 {
			t.Errorf("packet %d: IPv4 header checksum does not verify (%#04x)", i, c)
		}
		if icrc, err := wire.ICRC(ip); err != nil || icrc != fr.Packet.ICRC {
			t.Errorf("packet %d: ICRC for the synthesized headers %#08x (%v), the packet's %#08x", i, icrc, err, fr.Packet.ICRC)
		}
		if fr.Encap.Dst.Port() != wire.UDPPort {
			t.Errorf("packet %d: UDP port %d", i, fr.Encap.Dst.Port())
		}
		got = append(got, pkt{fr.Encap.Src.Addr(), fr.Encap.Dst.Addr(), fr.Packet.BTH.Opcode, fr.Packet.BTH.DestQP})
	}
	for i, p := range got {
		switch {
		case exact && p != want[i]:
			t.Errorf("packet %d: %+v, want %+v", i, p, want[i])
		case p.src == addrA.Addr() && (p.dst != addrB.Addr() || p.qpn != qpb || (p.op != ib.RCWriteOnly && p.op != ib.RCSendOnly)),
			p.src == addrB.Addr() && (p.dst != addrA.Addr() || p.qpn != qpa || p.op != ib.RCAck):
			t.Errorf("packet %d: %+v: not a request of a's QP nor an ACK of b's", i, p)
		}
	}
	if t.Failed() {
		return
	}
	// tshark: an independent dissector.
	lines := tsharkFields(t, name, "ip.src", "ip.dst", "udp.dstport", "infiniband.bth.opcode", "infiniband.bth.destqp", "ip.checksum.status", "_ws.malformed")
	if lines == nil {
		return
	}
	if len(lines) != len(got) {
		t.Fatalf("tshark decoded %d packets, want %d:\n%s", len(lines), len(got), strings.Join(lines, "\n"))
	}
	for i, l := range lines {
		// ip.checksum.status 1 is "Good" (0 "Bad", 2 "Unverified").
		w := fmt.Sprintf("%v\t%v\t4791\t%d\t0x%06x\t1\t", got[i].src, got[i].dst, got[i].op, got[i].qpn)
		if l != w {
			t.Errorf("tshark, packet %d: %q, want %q", i, l, w)
		}
	}
}

// tsharkFields runs tshark on the capture file name and returns one line
// per packet with the fields, tab-separated; nil (the test skipped) if
// there is no tshark.
func tsharkFields(t *testing.T, name string, fields ...string) []string {
	t.Helper()
	bin, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark binary not found in PATH (apt-get install tshark; .ci/run installs it): the capture's decoding by Wireshark is not checked")
		return nil
	}
	args := []string{"-r", name, "-o", "ip.check_checksum:TRUE", "-d", "udp.port==4791,infiniband", "-T", "fields", "-E", "separator=/t", "-E", "occurrence=f"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		t.Fatalf("tshark %s: %v", strings.Join(args, " "), err)
	}
	return strings.Split(strings.TrimRight(string(out), "\n"), "\n")
}

func writeCapture(t *testing.T, c *udp.Capture, name string) {
	t.Helper()
	fd, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteTo(fd); err != nil {
		t.Fatal(err)
	}
	if err := fd.Close(); err != nil {
		t.Fatal(err)
	}
}

func sum16(b []byte) uint32 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	return s
}

func fold(s uint32) uint16 {
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}
