package wire_test

import (
	"encoding/binary"
	"hash/crc32"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/ibex-rdma/ibex/internal/pcap"
	"github.com/ibex-rdma/ibex/wire"
)

// sharedDir returns the project's shared reference folder (../shared from
// the repository root; see findShared), or $IBEX_SHARED. Without it the
// golden tests fail on CI (CI=true), where the folder is guaranteed, and
// skip elsewhere.
func sharedDir(t testing.TB) string {
	t.Helper()
	if d := findShared(); d != "" {
		return d
	}
	wd, _ := os.Getwd()
	msg := "shared/testdata/rxe-pcaps not found in any parent of " + wd + "; set IBEX_SHARED to the shared folder"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// capture is one pcap file of rxe traffic.
type capture struct {
	name   string // file name without .pcap
	frames [][]byte
}

// loadCaptures reads every pcap in shared/testdata/rxe-pcaps, sorted by name.
func loadCaptures(t testing.TB) []capture {
	t.Helper()
	dir := filepath.Join(sharedDir(t), "testdata", "rxe-pcaps")
	names, err := filepath.Glob(filepath.Join(dir, "*.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatalf("no .pcap files in %s", dir)
	}
	sort.Strings(names)
	var cs []capture
	for _, n := range names {
		f, err := pcap.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		if f.LinkType != pcap.LinkEthernet {
			t.Fatalf("%s: link type %d, want Ethernet (1)", n, f.LinkType)
		}
		c := capture{name: filepath.Base(n[:len(n)-len(".pcap")])}
		for i, r := range f.Records {
			if int(r.OrigLen) != len(r.Data) {
				t.Fatalf("%s: frame %d: captured %d of %d bytes", n, i+1, len(r.Data), r.OrigLen)
			}
			c.frames = append(c.frames, r.Data)
		}
		cs = append(cs, c)
	}
	return cs
}

// The reference ICRC: a deliberately plain transcription of IBA A17.3.3 and
// rxe_icrc.c, independent of the package's table-driven code. It copies the
// whole packet, masks the variant fields, prepends 8×0xff and runs
// crc32.ChecksumIEEE.

// refICRCFrame returns the ICRC of an Ethernet frame (untagged or one
// 802.1Q tag) and the ICRC stored in it. ok is false if the frame is too
// short to hold one.
func refICRCFrame(frame []byte) (computed, stored uint32, ok bool) {
	if len(frame) < 14 {
		return 0, 0, false
	}
	off := 14
	if binary.BigEndian.Uint16(frame[12:]) == 0x8100 {
		off = 18
	}
	if len(frame) < off {
		return 0, 0, false
	}
	return refICRCIP(frame[off:])
}

// refICRCIP is refICRCFrame for a bare IP packet.
func refICRCIP(ip []byte) (computed, stored uint32, ok bool) {
	if len(ip) < 1 {
		return 0, 0, false
	}
	var hl, total int
	switch ip[0] >> 4 {
	case 4:
		if len(ip) < 20 {
			return 0, 0, false
		}
		hl, total = int(ip[0]&0xf)*4, int(binary.BigEndian.Uint16(ip[2:]))
	case 6:
		if len(ip) < 40 {
			return 0, 0, false
		}
		hl, total = 40, 40+int(binary.BigEndian.Uint16(ip[4:]))
	default:
		return 0, 0, false
	}
	if hl < 20 || total > len(ip) || total < hl+8+12+4 {
		return 0, 0, false
	}
	b := append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, ip[:total-4]...)
	h := b[8:]
	if hl == 40 {
		h[0] |= 0x0f
		h[1], h[2], h[3], h[7] = 0xff, 0xff, 0xff, 0xff
	} else {
		h[1], h[8], h[10], h[11] = 0xff, 0xff, 0xff, 0xff
	}
	h[hl+6], h[hl+7] = 0xff, 0xff // UDP checksum
	h[hl+8+4] = 0xff              // BTH byte 4
	return crc32.ChecksumIEEE(b), binary.LittleEndian.Uint32(ip[total-4:]), true
}

// refIPPacket builds a plain IPv4 (no options) or IPv6 packet around an IB
// packet, with UDP checksum 0 and the given header fields, for refICRCIP.
func refIPPacket(src, dst netip.AddrPort, id uint16, df bool, tos, ttl uint8, ibb []byte) []byte {
	var ip []byte
	udpLen := 8 + len(ibb)
	if src.Addr().Unmap().Is4() {
		ip = make([]byte, 20)
		ip[0], ip[1] = 0x45, tos
		binary.BigEndian.PutUint16(ip[2:], uint16(20+udpLen))
		binary.BigEndian.PutUint16(ip[4:], id)
		if df {
			ip[6] = 0x40
		}
		ip[8], ip[9] = ttl, 17
		s, d := src.Addr().Unmap().As4(), dst.Addr().Unmap().As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
	} else {
		ip = make([]byte, 40)
		binary.BigEndian.PutUint32(ip, 6<<28|uint32(tos)<<20|0x12345)
		binary.BigEndian.PutUint16(ip[4:], uint16(udpLen))
		ip[6], ip[7] = 17, ttl
		s, d := src.Addr().As16(), dst.Addr().As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
	}
	u := make([]byte, 8)
	binary.BigEndian.PutUint16(u, src.Port())
	binary.BigEndian.PutUint16(u[2:], dst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	ip = append(ip, u...)
	return append(ip, ibb...)
}

// ibOf returns the UDP payload of a decoded frame's bytes.
func ibOf(t testing.TB, frame []byte) []byte {
	t.Helper()
	off := 14
	if binary.BigEndian.Uint16(frame[12:]) == 0x8100 {
		off = 18
	}
	ip := frame[off:]
	if ip[0]>>4 == 6 {
		return ip[48 : 40+int(binary.BigEndian.Uint16(ip[4:]))]
	}
	return ip[28:binary.BigEndian.Uint16(ip[2:])]
}

// decodeAll decodes every frame of c, failing the test on any error.
func decodeAll(t testing.TB, c capture) []wire.Frame {
	t.Helper()
	fs := make([]wire.Frame, len(c.frames))
	for i, b := range c.frames {
		if err := wire.DecodeFrame(b, &fs[i]); err != nil {
			t.Fatalf("%s frame %d: %v", c.name, i+1, err)
		}
	}
	return fs
}

// udpPseudoSum returns the folded (not complemented) Internet sum of the
// UDP pseudo-header of an IPv4 frame: what a checksum-offloading sender
// leaves in the checksum field.
func udpPseudoSum(f wire.Frame) uint16 {
	n := 8 + len(f.Packet.Payload) + int(f.Packet.BTH.PadCnt) + f.Packet.BTH.Opcode.HeaderLen() + 4
	s, d := f.Encap.Src.Addr().As4(), f.Encap.Dst.Addr().As4()
	return ^internetChecksum(append(append(s[:], d[:]...), 0, 17, byte(n>>8), byte(n)))
}

// udpChecksum returns the real UDP checksum of frame f (IPv4 or IPv6).
func udpChecksum(f wire.Frame) uint16 {
	g := f
	g.Encap.UDPChecksum = 0
	raw, err := wire.AppendFrame(nil, &g)
	if err != nil {
		panic(err)
	}
	return udpChecksumOf(raw)
}

// udpChecksumOf computes the UDP checksum of an untagged Ethernet frame.
func udpChecksumOf(frame []byte) uint16 {
	ip := frame[14:]
	var pseudo, udp []byte
	if ip[0]>>4 == 6 {
		udp = ip[40 : 40+int(binary.BigEndian.Uint16(ip[4:]))]
		pseudo = append(append([]byte{}, ip[8:40]...), 0, 0, byte(len(udp)>>8), byte(len(udp)), 0, 0, 0, 17)
	} else {
		udp = ip[20:binary.BigEndian.Uint16(ip[2:])]
		pseudo = append(append([]byte{}, ip[12:20]...), 0, 17, byte(len(udp)>>8), byte(len(udp)))
	}
	u := append([]byte{}, udp...)
	u[6], u[7] = 0, 0
	c := internetChecksum(append(pseudo, u...))
	if c == 0 {
		c = 0xffff
	}
	return c
}

// internetChecksum is RFC 1071, written plainly.
func internetChecksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
