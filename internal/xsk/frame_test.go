package xsk

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

var (
	macA = [6]byte{2, 0, 0, 0, 0, 1}
	macB = [6]byte{2, 0, 0, 0, 0, 2}
)

func TestFlowParse(t *testing.T) {
	for _, c := range []struct{ src, dst string }{
		{"10.1.2.3:4791", "10.1.2.4:4791"},
		{"[::ffff:10.1.2.3]:4791", "[::ffff:10.1.2.4]:4791"},
		{"[fd00::1]:4791", "[fd00::2]:4791"},
	} {
		src, dst := netip.MustParseAddrPort(c.src), netip.MustParseAddrPort(c.dst)
		f, err := NewFlow(macA, macB, src, dst)
		if err != nil {
			t.Fatal(err)
		}
		frame := make([]byte, f.Len()+100)
		f.Put(frame, 100, 0xc0de)
		var d Datagram
		if err := Parse(frame, len(frame), 4791, &d); err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		want := netip.AddrPortFrom(src.Addr().Unmap(), 0xc0de)
		if d.Src != want || d.Off != f.Len() || d.Len != 100 || d.CE {
			t.Errorf("%s: %+v, want source %v", c.src, d, want)
		}
		if src.Addr().Unmap().Is4() {
			if d.ID != 0 || frame[ethLen+6] != 0x40 || frame[ethLen+8] != 64 {
				t.Errorf("%s: ID %d, flags %#x, TTL %d; want 0, DF, 64", c.src, d.ID, frame[ethLen+6], frame[ethLen+8])
			}
			frame[ethLen+1] = 3 // CE; the checksum no longer holds
			if err := Parse(frame, len(frame), 4791, &d); err != ErrChecksum {
				t.Errorf("a changed TOS: %v, want ErrChecksum", err)
			}
		} else if d.ID != -1 {
			t.Errorf("%s: ID %d, want -1", c.src, d.ID)
		}
		if err := Parse(frame, len(frame), 4792, &d); err != ErrPort && err != ErrChecksum {
			t.Errorf("port 4792: %v", err)
		}
		if err := Parse(frame[:len(frame)-1], len(frame)-1, 4791, &d); err == nil {
			t.Error("a frame one byte short parsed")
		}
	}
	if _, err := NewFlow(macA, macB, netip.MustParseAddrPort("10.0.0.1:1"), netip.MustParseAddrPort("[fd00::1]:1")); err != ErrFamily {
		t.Errorf("mixed families: %v", err)
	}
}

// TestParsePadding: bytes after the IP packet (Ethernet padding) are not
// payload.
func TestParsePadding(t *testing.T) {
	f, _ := NewFlow(macA, macB, netip.MustParseAddrPort("10.0.0.1:4791"), netip.MustParseAddrPort("10.0.0.2:4791"))
	frame := make([]byte, 60)
	f.Put(frame, 4, 0)
	var d Datagram
	if err := Parse(frame, len(frame), 4791, &d); err != nil || d.Len != 4 {
		t.Fatalf("%+v %v", d, err)
	}
}

func TestPutAllocs(t *testing.T) {
	f, _ := NewFlow(macA, macB, netip.MustParseAddrPort("10.0.0.1:4791"), netip.MustParseAddrPort("10.0.0.2:4791"))
	frame := make([]byte, 200)
	var d Datagram
	if n := testing.AllocsPerRun(100, func() {
		f.Put(frame, 100, 0)
		_ = Parse(frame, len(frame), 4791, &d)
		_ = Parse(frame[:20], 20, 4791, &d)
	}); n != 0 {
		t.Errorf("%v allocations", n)
	}
}

// FuzzParse: network input never panics, and what parses lies inside the
// frame.
func FuzzParse(f *testing.F) {
	fl, _ := NewFlow(macA, macB, netip.MustParseAddrPort("10.0.0.1:4791"), netip.MustParseAddrPort("10.0.0.2:4791"))
	b := make([]byte, fl.Len()+16)
	fl.Put(b, 16, 0)
	f.Add(b)
	f6, _ := NewFlow(macA, macB, netip.MustParseAddrPort("[fd00::1]:4791"), netip.MustParseAddrPort("[fd00::2]:4791"))
	b6 := make([]byte, f6.Len()+16)
	f6.Put(b6, 16, 0)
	f.Add(b6)
	v := append(append(append([]byte{}, b[:12]...), 0x81, 0, 0, 5), b[12:]...)
	f.Add(v)
	f.Fuzz(func(t *testing.T, b []byte) {
		var d Datagram
		for _, total := range []int{len(b), len(b) + 100} {
			if err := Parse(b, total, 4791, &d); err == nil {
				if d.Off < 0 || d.Len < 0 || d.Off+d.Len > total {
					t.Fatalf("payload [%d:+%d] outside a frame of %d", d.Off, d.Len, total)
				}
				if len(b) >= 14 && binary.BigEndian.Uint16(b[12:]) != etherIPv4 && binary.BigEndian.Uint16(b[12:]) != etherIPv6 && binary.BigEndian.Uint16(b[12:]) != etherVLAN {
					t.Fatal("parsed a frame of another ethertype")
				}
			}
		}
	})
}

// TestSetTOS: the TOS / traffic class a flow is given is in its frames,
// Parse reads CE from it, and the IPv4 header checksum stays right.
func TestSetTOS(t *testing.T) {
	for _, pair := range [][2]string{{"10.0.0.1:4791", "10.0.0.2:4791"}, {"[fd00::1]:4791", "[fd00::2]:4791"}} {
		for _, tos := range []byte{0, 2, 3, 0xb8 | 2} {
			f, err := NewFlow(macA, macB, netip.MustParseAddrPort(pair[0]), netip.MustParseAddrPort(pair[1]))
			if err != nil {
				t.Fatal(err)
			}
			f.SetTOS(tos)
			frame := make([]byte, f.Len()+8)
			f.Put(frame, 8, 0)
			var d Datagram
			if err := Parse(frame, len(frame), 4791, &d); err != nil {
				t.Fatalf("%s tos %#x: %v", pair[0], tos, err)
			}
			if d.CE != (tos&3 == 3) {
				t.Errorf("%s tos %#x: CE %v", pair[0], tos, d.CE)
			}
			ip := frame[14:]
			if ip[0]>>4 == 4 {
				if ip[1] != tos {
					t.Errorf("IPv4 TOS %#x, want %#x", ip[1], tos)
				}
				var s uint32
				for i := 0; i < 20; i += 2 {
					s += uint32(ip[i])<<8 | uint32(ip[i+1])
				}
				for s > 0xffff {
					s = s&0xffff + s>>16
				}
				if s != 0xffff {
					t.Errorf("tos %#x: IPv4 header checksum wrong (sum %#x)", tos, s)
				}
			} else if tc := ip[0]<<4 | ip[1]>>4; tc != tos {
				t.Errorf("IPv6 traffic class %#x, want %#x", tc, tos)
			}
		}
	}
}
