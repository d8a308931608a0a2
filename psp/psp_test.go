package psp

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

var seedFlag = flag.Uint64("psp.seed", 0, "seed of the randomised tests (0: from the clock)")

func seed(t testing.TB) *rand.Rand {
	s := *seedFlag
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -psp.seed=%d)", s, s)
	return rand.New(rand.NewPCG(s, s))
}

func testKeys(t testing.TB, gens int) *Keys {
	m0, m1 := bytes.Repeat([]byte{0x11}, 32), bytes.Repeat([]byte{0x22}, 32)
	if gens == 1 {
		m1 = nil
	}
	k, err := NewKeys(m0, m1)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

var flowAB = Flow{SrcGID: [16]byte{15: 1}, DstGID: [16]byte{15: 2}, SrcQPN: 0x11, DstQPN: 0x22}

// pair returns a sender and the receiver of one direction.
func pair(t testing.TB, k *Keys) (*Sender, *Receiver) {
	spi := k.NewSPI()
	r, err := NewReceiver(k, spi, flowAB)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSender(k, spi, flowAB)
	if err != nil {
		t.Fatal(err)
	}
	return s, r
}

// plain builds a plain packet's sealable form: a BTH, room for the
// security header, n bytes of plaintext, capacity for the tag.
func plain(rng *rand.Rand, n int) (pkt, bth, body []byte) {
	pkt = make([]byte, BTHLen+HeaderLen+n, BTHLen+HeaderLen+n+TagLen)
	for i := range pkt {
		pkt[i] = byte(rng.Uint32())
	}
	pkt[1] &^= 0x0f
	return pkt, append([]byte(nil), pkt[:BTHLen]...), append([]byte(nil), pkt[BTHLen+HeaderLen:]...)
}

func TestSealOpenRoundTrip(t *testing.T) {
	rng := seed(t)
	s, r := pair(t, testKeys(t, 2))
	for _, n := range []int{0, 4, 28, 64, 1024, 4096 + 16} {
		pkt, bth, body := plain(rng, n)
		sealed, err := s.Seal(pkt)
		if err != nil {
			t.Fatal(err)
		}
		if len(sealed) != BTHLen+HeaderLen+n+TagLen || !IsSealed(sealed) || SPIOf(sealed) != r.SPI() {
			t.Fatalf("n=%d: sealed %d bytes, sealed=%v spi %#x", n, len(sealed), IsSealed(sealed), SPIOf(sealed))
		}
		if n >= 16 && bytes.Equal(sealed[BTHLen+HeaderLen:][:16], body[:16]) {
			t.Fatalf("n=%d: payload in the clear", n)
		}
		pt, err := r.Open(sealed)
		if err != nil {
			t.Fatalf("n=%d: open: %v", n, err)
		}
		if !bytes.Equal(pt, body) || !bytes.Equal(sealed[0:1], bth[0:1]) || !bytes.Equal(sealed[2:BTHLen], bth[2:]) {
			t.Fatalf("n=%d: round trip differs", n)
		}
	}
}

// TestTamper flips every bit of a sealed packet in turn: each copy is
// refused, and the original still opens afterwards (a refused packet
// changes nothing).
func TestTamper(t *testing.T) {
	rng := seed(t)
	s, r := pair(t, testKeys(t, 2))
	pkt, _, body := plain(rng, 64)
	sealed, err := s.Seal(pkt)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(sealed))
	for bit := 0; bit < 8*len(sealed); bit++ {
		copy(buf, sealed)
		buf[bit/8] ^= 1 << (bit % 8)
		_, err := r.Open(buf)
		switch {
		case bit/8 >= BTHLen && bit/8 < BTHLen+4:
			// Another SPI: unknown, unless it is the successor the
			// receiver also accepts (low bit flipped of an even SPI, or
			// the generation bit with it), whose key then fails the tag.
			want := ErrUnknownSPI
			if x := SPIOf(buf); r.lookup(x) != nil {
				want = ErrAuth
			}
			if !errors.Is(err, want) {
				t.Fatalf("bit %d (spi %#x): %v, want %v", bit, SPIOf(buf), err, want)
			}
		case !errors.Is(err, ErrAuth):
			t.Fatalf("bit %d: %v, want ErrAuth", bit, err)
		}
	}
	if _, err := r.Open(buf[:MinLen-1]); !errors.Is(err, ErrShort) {
		t.Fatalf("short: %v", err)
	}
	pt, err := r.Open(sealed)
	if err != nil || !bytes.Equal(pt, body) {
		t.Fatalf("the original after tampered copies: %v", err)
	}
}

func TestReplay(t *testing.T) {
	rng := seed(t)
	s, r := pair(t, testKeys(t, 1))
	var saved [][]byte
	for range 3 {
		pkt, _, _ := plain(rng, 32)
		sealed, _ := s.Seal(pkt)
		saved = append(saved, append([]byte(nil), sealed...))
		if _, err := r.Open(sealed); err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range saved {
		if _, err := r.Open(p); !errors.Is(err, ErrReplay) {
			t.Fatalf("replay %d: %v, want ErrReplay", i, err)
		}
	}
}

func TestWrongKeyOrFlow(t *testing.T) {
	rng := seed(t)
	k := testKeys(t, 1)
	s, r := pair(t, k)
	other, _ := NewKeys(bytes.Repeat([]byte{0x33}, 32), nil)
	r2, _ := NewReceiver(other, r.SPI(), flowAB)
	f := flowAB
	f.SrcQPN++
	r3, _ := NewReceiver(k, r.SPI(), f)
	r4, _ := NewReceiver(k, k.Successor(k.Successor(r.SPI())), flowAB)
	pkt, _, _ := plain(rng, 64)
	sealed, _ := s.Seal(pkt)
	for name, x := range map[string]*Receiver{"master key": r2, "flow": r3} {
		if _, err := x.Open(append([]byte(nil), sealed...)); !errors.Is(err, ErrAuth) {
			t.Errorf("other %s: %v, want ErrAuth", name, err)
		}
	}
	if _, err := r4.Open(append([]byte(nil), sealed...)); !errors.Is(err, ErrUnknownSPI) {
		t.Errorf("other spi: %v, want ErrUnknownSPI", err)
	}
	if _, err := r.Open(sealed); err != nil {
		t.Fatal(err)
	}
	// A generation without a key.
	k1 := testKeys(t, 1)
	if _, err := NewSender(k1, 1<<31|5, flowAB); !errors.Is(err, ErrNoKey) {
		t.Fatalf("generation 1 without its key: %v", err)
	}
}

// TestRotationReordered rotates a sender twice while packets of the old
// SA are still in flight, delivered out of order: every packet opens
// once, the receiver follows, duplicates are refused.
func TestRotationReordered(t *testing.T) {
	rng := seed(t)
	k := testKeys(t, 2)
	s, r := pair(t, k)
	type sent struct{ pkt, body []byte }
	var flight []sent
	for i := range 300 {
		if i == 100 || i == 200 {
			if err := s.Rotate(); err != nil {
				t.Fatal(err)
			}
		}
		pkt, _, body := plain(rng, 16+rng.IntN(100)*4)
		sealed, err := s.Seal(pkt)
		if err != nil {
			t.Fatal(err)
		}
		flight = append(flight, sent{sealed, body})
		// Deliver with a reordering of up to 8 packets: the newest SA's
		// first packet may overtake the previous SA's last ones.
		for len(flight) > 8 || i == 299 && len(flight) > 0 {
			j := rng.IntN(len(flight))
			p := flight[j]
			flight = append(flight[:j], flight[j+1:]...)
			dup := append([]byte(nil), p.pkt...)
			pt, err := r.Open(p.pkt)
			if err != nil || !bytes.Equal(pt, p.body) {
				t.Fatalf("packet after %d sent: %v", i, err)
			}
			if _, err := r.Open(dup); !errors.Is(err, ErrReplay) {
				t.Fatalf("duplicate: %v, want ErrReplay", err)
			}
		}
	}
	if r.Rotations() != 2 || s.Rotations() != 2 || r.SPI() != s.SPI() {
		t.Fatalf("rotations: receiver %d sender %d, spi %#x vs %#x", r.Rotations(), s.Rotations(), r.SPI(), s.SPI())
	}
}

func TestRotateAfter(t *testing.T) {
	rng := seed(t)
	s, r := pair(t, testKeys(t, 2))
	s.RotateAfter = 10
	for range 35 {
		pkt, _, body := plain(rng, 8)
		sealed, _ := s.Seal(pkt)
		if pt, err := r.Open(sealed); err != nil || !bytes.Equal(pt, body) {
			t.Fatal(err)
		}
	}
	if s.Rotations() != 3 || r.Rotations() != 3 {
		t.Fatalf("rotations %d, %d; want 3", s.Rotations(), r.Rotations())
	}
}

// TestWindow checks the window against a model (a set of IVs seen and the
// highest), with random IVs near the edge.
func TestWindow(t *testing.T) {
	rng := seed(t)
	var w Window
	seen := map[uint64]bool{}
	top := uint64(0)
	for range 20000 {
		var iv uint64
		switch rng.IntN(4) {
		case 0:
			iv = top + 1 + uint64(rng.IntN(2000))
		default:
			iv = top - uint64(rng.IntN(1100))
			if iv > top { // wrapped
				iv = 1
			}
		}
		want := iv != 0 && !seen[iv] && (iv > top || top-iv < windowBits-64)
		err := w.Check(iv)
		if (err == nil) != want {
			t.Fatalf("iv %d top %d: check %v, want ok=%v", iv, top, err, want)
		}
		if err == nil {
			w.Accept(iv)
			seen[iv] = true
			top = max(top, iv)
		}
	}
}

func TestParseKeys(t *testing.T) {
	h0, h1 := fmt.Sprintf("%064x", 1), fmt.Sprintf("%064x", 2)
	k, err := ParseKeys([]byte("# cluster key\n0:" + h0 + "\n1:" + h1 + "\n"))
	if err != nil || k.Active() != 1 {
		t.Fatalf("%v, active %v", err, k)
	}
	if k, err := ParseKeys([]byte(h0)); err != nil || k.Active() != 0 || k.NewSPI()>>31 != 0 {
		t.Fatalf("one key: %v", err)
	}
	for _, bad := range []string{"", "abcd", "2:" + h0, "0:" + h0 + "\n0:" + h1} {
		if _, err := ParseKeys([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestAllocs(t *testing.T) {
	rng := seed(t)
	s, r := pair(t, testKeys(t, 2))
	pkt, _, _ := plain(rng, 1024)
	n := testing.AllocsPerRun(100, func() {
		sealed, err := s.Seal(pkt)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Open(sealed); err != nil {
			t.Fatal(err)
		}
		pkt = sealed[:len(sealed)-TagLen]
		pkt[1] &^= 0x0f
	})
	if n != 0 {
		t.Fatalf("seal+open: %v allocations", n)
	}
}

func benchSeal(b *testing.B, keyBytes, n int, open bool) {
	key := bytes.Repeat([]byte{7}, keyBytes)
	c, _ := aes.NewCipher(key)
	g, _ := cipher.NewGCM(c)
	s := &Sender{}
	s.use(&SA{SPI: 5, aead: g})
	r := &Receiver{cur: &rxSA{sa: &SA{SPI: 5, aead: g}}}
	pkt := make([]byte, BTHLen+HeaderLen+n, BTHLen+HeaderLen+n+TagLen)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		sealed, err := s.Seal(pkt)
		if err != nil {
			b.Fatal(err)
		}
		if open {
			if _, err := r.Open(sealed); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkSeal and BenchmarkOpen (seal+open; subtract Seal) at the sizes
// of an 8-byte write, a 1 KiB packet and a 4 KiB MTU packet, for AES-128
// (what Derive gives) and AES-256.
func BenchmarkSeal(b *testing.B) {
	for _, kb := range []int{16, 32} {
		for _, n := range []int{64, 1024, 4096} {
			b.Run(fmt.Sprintf("aes%d/%d", kb*8, n), func(b *testing.B) { benchSeal(b, kb, n, false) })
		}
	}
}

func BenchmarkSealOpen(b *testing.B) {
	for _, kb := range []int{16, 32} {
		for _, n := range []int{64, 1024, 4096} {
			b.Run(fmt.Sprintf("aes%d/%d", kb*8, n), func(b *testing.B) { benchSeal(b, kb, n, true) })
		}
	}
}

// TestResume: a sender and a receiver moved to another process (State,
// Resume*) go on: new packets open, none of before the move does again,
// and no IV is used twice.
func TestResume(t *testing.T) {
	rng := seed(t)
	k := testKeys(t, 2)
	s, r := pair(t, k)
	var old [][]byte
	for range 5 {
		pkt, _, _ := plain(rng, 32)
		sealed, _ := s.Seal(pkt)
		old = append(old, append([]byte(nil), sealed...))
		if _, err := r.Open(sealed); err != nil {
			t.Fatal(err)
		}
	}
	sspi, iv := s.State()
	rspi, top := r.State()
	s2, err := ResumeSender(k, sspi, flowAB, iv)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := ResumeReceiver(k, rspi, flowAB, top)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range old {
		if _, err := r2.Open(p); !errors.Is(err, ErrReplay) {
			t.Fatalf("packet %d of before the move: %v, want ErrReplay", i, err)
		}
	}
	pkt, _, body := plain(rng, 64)
	sealed, _ := s2.Seal(pkt)
	if got := binary.BigEndian.Uint64(sealed[BTHLen+4:]); got != iv+1 {
		t.Fatalf("resumed IV %d, want %d", got, iv+1)
	}
	if pt, err := r2.Open(sealed); err != nil || !bytes.Equal(pt, body) {
		t.Fatalf("after the move: %v", err)
	}
}
