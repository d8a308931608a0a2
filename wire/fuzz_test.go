package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/internal/pcap"
	"github.com/ibex-rdma/ibex/internal/shared"
	"github.com/ibex-rdma/ibex/wire"
)

// FuzzDecode feeds mutated frames to DecodeFrame, and the same bytes to
// DecodeIB and DecodeIP. It requires that nothing panics, that every error is
// a *wire.Error, and that DecodeFrame accepts a frame exactly when its
// ICRC is right by the reference implementation (unless another check
// rejects it first). With fix set, the fuzz body first repairs the IPv4
// header checksum and the ICRC of the mutated frame, so mutations also reach
// the field decoders; an accepted frame must then re-encode to the same
// bytes, apart from the bits the decoder ignores, and pass the UDP-socket
// ICRC checks. The corpus is seeded with the rxe captures (when the shared
// folder is present) and one frame of every opcode.
//
//	go test -run XXX -fuzz FuzzDecode -fuzztime 60s ./wire
func FuzzDecode(f *testing.F) {
	if dir := findShared(); dir != "" {
		names, _ := filepath.Glob(filepath.Join(dir, "testdata", "rxe-pcaps", "*.pcap"))
		for _, n := range names {
			c, err := pcap.ReadFile(n)
			if err != nil {
				f.Fatal(err)
			}
			for _, r := range c.Records {
				f.Add(r.Data, false)
			}
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for op := range 256 {
		if !ib.Opcode(op).Valid() {
			continue
		}
		fr := wire.Frame{Encap: randomEncap(rng, op%2 == 1), Packet: randomPacket(rng, ib.Opcode(op), 64), Tagged: op%3 == 0}
		b, err := wire.AppendFrame(nil, &fr)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, true)
	}
	f.Fuzz(func(t *testing.T, b []byte, fix bool) {
		if fix {
			fixFrame(b)
		}
		var fr wire.Frame
		err := wire.DecodeFrame(b, &fr)
		checkErr(t, err)
		ref, stored, ok := refICRCFrame(b)
		switch {
		case err == nil && (!ok || ref != stored || stored != fr.Packet.ICRC):
			t.Fatalf("accepted a frame with ICRC %#08x, reference %#08x (ok %v)", stored, ref, ok)
		case errors.Is(err, wire.ErrBadICRC) && ok && ref == stored:
			t.Fatalf("rejected a frame whose ICRC %#08x is right: %v", stored, err)
		case err == nil:
			checkAccepted(t, b, &fr)
		}

		var p wire.Packet
		err = wire.DecodeIB(b, &p)
		checkErr(t, err)
		if err == nil {
			pre, _ := wire.NewICRCPrefix(&v4Encap)
			q := p
			out, err := wire.AppendIB(nil, &q, &pre)
			var back wire.Packet
			if err != nil || wire.DecodeIB(out, &back) != nil {
				t.Fatalf("re-encoding %v: %v", &p, err)
			}
			back.ICRC, p.ICRC = 0, 0
			if !reflect.DeepEqual(normal(back), normal(p)) {
				t.Fatalf("IB round trip:\n got %v\nwant %v", &back, &p)
			}
			if _, err := pre.CheckAnyID(b); err != nil {
				checkErr(t, err)
			}
		}
		checkErr(t, wire.DecodeIP(b, &fr))
	})
}

// checkErr fails unless err is nil or a *wire.Error wrapping a sentinel.
func checkErr(t *testing.T, err error) {
	t.Helper()
	var we *wire.Error
	if err != nil && (!errors.As(err, &we) || we.Err == nil || we.Header == "" || we.Error() == "") {
		t.Fatalf("error %#v is not a *wire.Error with a header and a sentinel", err)
	}
}

// checkAccepted checks a frame DecodeFrame accepted: re-encoding gives the
// same bytes apart from what the decoder ignores (BTH and DETH reserved bits,
// pad bytes, bytes after the IP packet), and the ICRC checks a UDP-socket
// receiver can do pass.
func checkAccepted(t *testing.T, b []byte, fr *wire.Frame) {
	t.Helper()
	g := *fr
	out, err := wire.AppendFrame(nil, &g)
	if err != nil {
		t.Fatalf("re-encoding an accepted frame: %v", err)
	}
	if len(out) > len(b) {
		t.Fatalf("re-encoded frame longer (%d) than the input (%d)", len(out), len(b))
	}
	norm := append([]byte{}, b[:len(out)]...)
	ibb := ibOf(t, norm)
	ibb[4] &= 0xc0 // BTH FECN, BECN kept; resv6a ignored
	ibb[8] &= 0x80 // AckReq kept; resv7 ignored
	if fr.Packet.BTH.Opcode.Has(ib.MaskDETH) {
		ibb[12+4] = 0
	}
	clear(ibb[len(ibb)-4-int(fr.Packet.BTH.PadCnt) : len(ibb)-4])
	fixFrame(norm)
	if !bytes.Equal(out, norm) {
		t.Fatalf("re-encoded frame differs:\n got %x\nwant %x", out, norm)
	}
	var back wire.Frame
	if err := wire.DecodeFrame(out, &back); err != nil {
		t.Fatalf("decoding the re-encoded frame: %v", err)
	}
	pre, err := wire.NewICRCPrefix(&fr.Encap)
	if err != nil {
		t.Fatal(err)
	}
	ibIn := ibOf(t, b)
	if err := pre.Check(ibIn); err != nil {
		t.Fatalf("Check: %v", err)
	}
	sock := wire.Encap{Src: fr.Encap.Src, Dst: fr.Encap.Dst, DF: fr.Encap.DF}
	sp, err := wire.NewICRCPrefix(&sock)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := sp.CheckAnyID(ibIn); err != nil || (fr.Encap.Src.Addr().Is4() && id != fr.Encap.ID) {
		t.Fatalf("CheckAnyID = %#04x, %v; want %#04x", id, err, fr.Encap.ID)
	}
}

// fixFrame repairs the IPv4 header checksum and the ICRC of an Ethernet
// frame in place, using the reference implementation, when the frame is
// long enough to have them.
func fixFrame(b []byte) {
	if len(b) < 14 {
		return
	}
	off := 14
	if binary.BigEndian.Uint16(b[12:]) == 0x8100 {
		off = 18
	}
	if len(b) < off+20 {
		return
	}
	ip := b[off:]
	if ip[0] == 0x45 {
		ip[10], ip[11] = 0, 0
		binary.BigEndian.PutUint16(ip[10:], internetChecksum(ip[:20]))
	}
	c, _, ok := refICRCIP(ip)
	if !ok {
		return
	}
	end := int(binary.BigEndian.Uint16(ip[2:]))
	if ip[0]>>4 == 6 {
		end = 40 + int(binary.BigEndian.Uint16(ip[4:]))
	}
	binary.LittleEndian.PutUint32(ip[end-4:], c)
}

// findShared is sharedDir without failing or skipping (internal/shared
// looks above the working directory and above the repository a temporary
// clone came from).
func findShared() string { return shared.Dir() }
