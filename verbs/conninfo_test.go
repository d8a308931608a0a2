package verbs

import (
	"bytes"
	"errors"
	"testing"
)

// TestConnInfoSPI: an info with an SPI round-trips in both forms (binary
// version 2, text with spi=); one without stays version 1, byte for byte
// what earlier versions wrote, and old text without spi= still parses.
func TestConnInfoSPI(t *testing.T) {
	g, _ := ParseGID("::ffff:127.0.0.90")
	plain := ConnInfo{QPN: 0x11, PSN: 0x22, GID: g, MTU: MTU4096, RKey: 3, Addr: 4, Len: 5}
	sealed := plain
	sealed.SPI = 0x8000_1234
	b1, _ := plain.MarshalBinary()
	b2, _ := sealed.MarshalBinary()
	if len(b1) != 48 || b1[0] != 1 || len(b2) != 52 || b2[0] != 2 || !bytes.Equal(b1[1:], b2[1:48]) {
		t.Fatalf("binary forms: v%d %d bytes, v%d %d bytes", b1[0], len(b1), b2[0], len(b2))
	}
	for _, c := range []ConnInfo{plain, sealed} {
		var d, e ConnInfo
		bin, _ := c.MarshalBinary()
		txt, _ := c.MarshalText()
		if err := d.UnmarshalBinary(bin); err != nil || d != c {
			t.Fatalf("binary %v: %v %v", c, d, err)
		}
		if err := e.UnmarshalText(txt); err != nil || e != c {
			t.Fatalf("text %q: %v %v", txt, e, err)
		}
	}
	if txt, _ := plain.MarshalText(); bytes.Contains(txt, []byte("spi")) {
		t.Fatalf("plain text form names an spi: %q", txt)
	}
	bad := append([]byte(nil), b2...)
	bad[0] = 1 // version 1 with 52 bytes
	var c ConnInfo
	if err := c.UnmarshalBinary(bad); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("v1 of 52 bytes: %v", err)
	}
	bad = append(b1[:48:48], 0, 0, 0, 0)
	bad[0] = 2 // version 2 with spi 0
	if err := c.UnmarshalBinary(bad); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("v2 with spi 0: %v", err)
	}
	if err := c.UnmarshalBinary(nil); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("empty: %v", err)
	}
}
