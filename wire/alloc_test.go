package wire_test

import (
	"hash/crc32"
	"strconv"
	"testing"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/wire"
)

// sample returns an encoded frame and its IB part for a SEND Only of n
// payload bytes (an ACK when n < 0), over IPv4 or IPv6, optionally tagged.
func sample(tb testing.TB, n int, v6, tagged bool) (frame, ibb []byte, f wire.Frame, pre wire.ICRCPrefix) {
	tb.Helper()
	e := v4Encap
	if v6 {
		e = v6Encap
	}
	p := wire.Packet{BTH: wire.BTH{Opcode: ib.RCSendOnly, PKey: 0xffff, DestQP: 0x12, PSN: 0x123456, AckReq: true}}
	if n < 0 {
		p = wire.Packet{BTH: wire.BTH{Opcode: ib.RCAck, PKey: 0xffff, DestQP: 0x12, PSN: 0x123456}, AETH: wire.AETH{Syndrome: ib.SynACK, MSN: 1}}
	} else {
		p.Payload = make([]byte, n)
	}
	f = wire.Frame{Encap: e, Packet: p, Tagged: tagged}
	frame, err := wire.AppendFrame(nil, &f)
	if err != nil {
		tb.Fatal(err)
	}
	if pre, err = wire.NewICRCPrefix(&e); err != nil {
		tb.Fatal(err)
	}
	ibb, err = wire.AppendIB(nil, &p, &pre)
	if err != nil {
		tb.Fatal(err)
	}
	return frame, ibb, f, pre
}

// TestZeroAllocs checks that the data path allocates nothing.
func TestZeroAllocs(t *testing.T) {
	frame4, ibb, f4, pre := sample(t, 1024, false, false)
	frame6, _, f6, _ := sample(t, 1027, true, true)
	guess := v4Encap
	guess.ID = 0
	gp, err := wire.NewICRCPrefix(&guess)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, 2048)
	var p wire.Packet
	var fr wire.Frame
	for name, fn := range map[string]func(){
		"DecodeIB":         func() { must(t, wire.DecodeIB(ibb, &p)) },
		"DecodeFrame IPv4": func() { must(t, wire.DecodeFrame(frame4, &fr)) },
		"DecodeFrame IPv6": func() { must(t, wire.DecodeFrame(frame6, &fr)) },
		"DecodeIP":         func() { must(t, wire.DecodeIP(frame4[14:], &fr)) },
		"AppendIB": func() {
			q := f4.Packet
			_, err := wire.AppendIB(buf[:0], &q, &pre)
			must(t, err)
		},
		"AppendFrame IPv4": func() { _, err := wire.AppendFrame(buf[:0], &f4); must(t, err) },
		"AppendFrame IPv6": func() { _, err := wire.AppendFrame(buf[:0], &f6); must(t, err) },
		"NewICRCPrefix":    func() { _, err := wire.NewICRCPrefix(&v6Encap); must(t, err) },
		"ICRC":             func() { _, err := wire.ICRC(frame4[14:]); must(t, err) },
		"Check":            func() { must(t, pre.Check(ibb)) },
		"CheckAnyID":       func() { _, err := gp.CheckAnyID(ibb); must(t, err) },
	} {
		if n := testing.AllocsPerRun(100, fn); n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", name, n)
		}
	}
}

func must(t *testing.T, err error) {
	if err != nil {
		t.Fatal(err)
	}
}

var sizes = []int{-1, 64, 1024, 4096} // -1: a 16-byte ACK

func sizeName(n int) string {
	if n < 0 {
		return "ack"
	}
	return strconv.Itoa(n) + "B"
}

func BenchmarkDecodeIB(b *testing.B) {
	for _, n := range sizes {
		_, ibb, _, _ := sample(b, n, false, false)
		b.Run(sizeName(n), func(b *testing.B) {
			b.SetBytes(int64(len(ibb)))
			var p wire.Packet
			for b.Loop() {
				if err := wire.DecodeIB(ibb, &p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeFrame includes the ICRC check against the real headers.
func BenchmarkDecodeFrame(b *testing.B) {
	for _, v6 := range []bool{false, true} {
		for _, n := range sizes {
			frame, _, _, _ := sample(b, n, v6, false)
			b.Run(map[bool]string{false: "v4/", true: "v6/"}[v6]+sizeName(n), func(b *testing.B) {
				b.SetBytes(int64(len(frame)))
				var f wire.Frame
				for b.Loop() {
					if err := wire.DecodeFrame(frame, &f); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkAppendIB includes the ICRC.
func BenchmarkAppendIB(b *testing.B) {
	for _, n := range sizes {
		_, ibb, f, pre := sample(b, n, false, false)
		b.Run(sizeName(n), func(b *testing.B) {
			b.SetBytes(int64(len(ibb)))
			buf := make([]byte, 0, len(ibb))
			p := f.Packet
			for b.Loop() {
				if _, err := wire.AppendIB(buf, &p, &pre); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkAppendFrame(b *testing.B) {
	for _, n := range sizes {
		frame, _, f, _ := sample(b, n, false, false)
		b.Run(sizeName(n), func(b *testing.B) {
			b.SetBytes(int64(len(frame)))
			buf := make([]byte, 0, len(frame))
			for b.Loop() {
				if _, err := wire.AppendFrame(buf, &f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkICRC compares the ways to compute or check an ICRC with a bare
// crc32.ChecksumIEEE over the same IB bytes (the floor).
func BenchmarkICRC(b *testing.B) {
	for _, n := range sizes {
		frame, ibb, _, pre := sample(b, n, false, false)
		guess := v4Encap
		guess.ID++ // force CheckAnyID to solve for the ID
		gp, _ := wire.NewICRCPrefix(&guess)
		for _, bm := range []struct {
			name string
			fn   func() error
		}{
			{"crc32-floor", func() error { crc32.ChecksumIEEE(ibb[:len(ibb)-4]); return nil }},
			{"Check", func() error { return pre.Check(ibb) }},
			{"CheckAnyID-solve", func() error { _, err := gp.CheckAnyID(ibb); return err }},
			{"ICRC-ip", func() error { _, err := wire.ICRC(frame[14:]); return err }},
		} {
			b.Run(bm.name+"/"+sizeName(n), func(b *testing.B) {
				b.SetBytes(int64(len(ibb)))
				for b.Loop() {
					if err := bm.fn(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
