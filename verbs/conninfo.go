package verbs

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// GID is a 128-bit global identifier; for RoCE it is an IPv6 address or an
// IPv4-mapped one.
type GID [16]byte

// String formats the GID as libibverbs tools do: eight groups of four hex digits.
func (g GID) String() string {
	var b strings.Builder
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02x%02x", g[i], g[i+1])
	}
	return b.String()
}

// ParseGID accepts the eight-group form of String or any IPv6/IPv4 address.
func ParseGID(s string) (GID, error) {
	var g GID
	if parts := strings.Split(s, ":"); len(parts) == 8 && len(s) == 39 {
		raw, err := hex.DecodeString(strings.ReplaceAll(s, ":", ""))
		if err == nil {
			copy(g[:], raw)
			return g, nil
		}
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return g, fmt.Errorf("%w: gid %q: not a GID or IP address", ErrInvalidArgument, s)
	}
	return GID(a.As16()), nil
}

// ConnInfo is what a peer needs to connect an RC QP to this one, exchanged
// out of band (TCP, a file, a launcher's key-value store). RKey, Addr and Len
// describe a memory region when the application wants to share one.
type ConnInfo struct {
	QPN  uint32
	PSN  uint32
	GID  GID
	LID  uint16
	MTU  MTU
	RKey uint32
	Addr uint64
	Len  uint64
	// SPI is the security parameter index under which this QP receives
	// sealed packets (package psp); 0: it does not encrypt.
	SPI uint32
}

// Binary versions: 1 is the 48-byte layout; 2 appends the SPI (52 bytes).
// MarshalBinary writes version 1 when SPI is 0, so that a reader that
// knows only version 1 still reads every info that does not encrypt.
const (
	connInfoVersion   = 1
	connInfoVersionSP = 2
)

// connInfoSize is the binary encoding's length (version 1).
const connInfoSize = 1 + 4 + 4 + 16 + 2 + 1 + 4 + 8 + 8

// MarshalBinary encodes the info in a fixed big-endian layout starting
// with a version byte: 48 bytes (version 1), or 52 with a non-zero SPI
// appended (version 2).
func (ci ConnInfo) MarshalBinary() ([]byte, error) {
	b := make([]byte, connInfoSize, connInfoSize+4)
	b[0] = connInfoVersion
	if ci.SPI != 0 {
		b = binary.BigEndian.AppendUint32(b, ci.SPI)
		b[0] = connInfoVersionSP
	}
	binary.BigEndian.PutUint32(b[1:], ci.QPN)
	binary.BigEndian.PutUint32(b[5:], ci.PSN)
	copy(b[9:25], ci.GID[:])
	binary.BigEndian.PutUint16(b[25:], ci.LID)
	b[27] = byte(ci.MTU)
	binary.BigEndian.PutUint32(b[28:], ci.RKey)
	binary.BigEndian.PutUint64(b[32:], ci.Addr)
	binary.BigEndian.PutUint64(b[40:], ci.Len)
	return b, nil
}

// UnmarshalBinary decodes MarshalBinary's layout and validates the fields.
func (ci *ConnInfo) UnmarshalBinary(b []byte) error {
	if len(b) == 0 || b[0] != connInfoVersion && b[0] != connInfoVersionSP {
		v := -1
		if len(b) > 0 {
			v = int(b[0])
		}
		return fmt.Errorf("%w: conn info: version %d, want %d or %d", ErrInvalidArgument, v, connInfoVersion, connInfoVersionSP)
	}
	want := connInfoSize
	if b[0] == connInfoVersionSP {
		want += 4
	}
	if len(b) != want {
		return fmt.Errorf("%w: conn info: %d bytes, want %d for version %d", ErrInvalidArgument, len(b), want, b[0])
	}
	var c ConnInfo
	if b[0] == connInfoVersionSP {
		if c.SPI = binary.BigEndian.Uint32(b[connInfoSize:]); c.SPI == 0 {
			return fmt.Errorf("%w: conn info: version 2 with spi 0", ErrInvalidArgument)
		}
	}
	c.QPN = binary.BigEndian.Uint32(b[1:])
	c.PSN = binary.BigEndian.Uint32(b[5:])
	copy(c.GID[:], b[9:25])
	c.LID = binary.BigEndian.Uint16(b[25:])
	c.MTU = MTU(b[27])
	c.RKey = binary.BigEndian.Uint32(b[28:])
	c.Addr = binary.BigEndian.Uint64(b[32:])
	c.Len = binary.BigEndian.Uint64(b[40:])
	if err := c.validate(); err != nil {
		return err
	}
	*ci = c
	return nil
}

func (ci ConnInfo) validate() error {
	switch {
	case ci.QPN > 1<<24-1:
		return fmt.Errorf("%w: conn info: qpn %#x exceeds 24 bits", ErrInvalidArgument, ci.QPN)
	case ci.PSN > 1<<24-1:
		return fmt.Errorf("%w: conn info: psn %#x exceeds 24 bits", ErrInvalidArgument, ci.PSN)
	case !ci.MTU.Valid():
		return fmt.Errorf("%w: conn info: mtu code %d: must be 1..5", ErrInvalidArgument, uint8(ci.MTU))
	}
	return nil
}

// MarshalText gives a one-line form in the spirit of perftest's address
// line: "qpn=0x11 psn=0x4d2a41 gid=... lid=0 mtu=4096 rkey=0x... addr=0x... len=...",
// followed by " spi=0x..." when the SPI is not 0.
func (ci ConnInfo) MarshalText() ([]byte, error) {
	b := fmt.Appendf(nil, "qpn=%#x psn=%#x gid=%v lid=%d mtu=%d rkey=%#x addr=%#x len=%d",
		ci.QPN, ci.PSN, ci.GID, ci.LID, ci.MTU.Bytes(), ci.RKey, ci.Addr, ci.Len)
	if ci.SPI != 0 {
		b = fmt.Appendf(b, " spi=%#x", ci.SPI)
	}
	return b, nil
}

func (ci ConnInfo) String() string {
	b, _ := ci.MarshalText()
	return string(b)
}

// UnmarshalText parses MarshalText's form; every field but spi is
// required.
func (ci *ConnInfo) UnmarshalText(text []byte) error {
	var c ConnInfo
	seen := map[string]bool{}
	for _, f := range strings.Fields(string(text)) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return fmt.Errorf("%w: conn info: field %q is not key=value", ErrInvalidArgument, f)
		}
		if seen[k] {
			return fmt.Errorf("%w: conn info: field %q given twice", ErrInvalidArgument, k)
		}
		seen[k] = true
		var err error
		var n uint64
		switch k {
		case "gid":
			c.GID, err = ParseGID(v)
		case "mtu":
			n, err = strconv.ParseUint(v, 0, 16)
			if err == nil {
				c.MTU, err = MTUFromBytes(int(n))
			}
		case "qpn", "psn", "lid", "rkey", "addr", "len", "spi":
			bitsFor := map[string]int{"qpn": 32, "psn": 32, "lid": 16, "rkey": 32, "addr": 64, "len": 64, "spi": 32}[k]
			n, err = strconv.ParseUint(v, 0, bitsFor)
			switch k {
			case "qpn":
				c.QPN = uint32(n)
			case "psn":
				c.PSN = uint32(n)
			case "lid":
				c.LID = uint16(n)
			case "rkey":
				c.RKey = uint32(n)
			case "addr":
				c.Addr = n
			case "len":
				c.Len = n
			case "spi":
				c.SPI = uint32(n)
			}
		default:
			return fmt.Errorf("%w: conn info: unknown field %q", ErrInvalidArgument, k)
		}
		if err != nil {
			return fmt.Errorf("%w: conn info: field %s=%q: %v", ErrInvalidArgument, k, v, err)
		}
	}
	for _, k := range []string{"qpn", "psn", "gid", "lid", "mtu", "rkey", "addr", "len"} {
		if !seen[k] {
			return fmt.Errorf("%w: conn info: field %q missing", ErrInvalidArgument, k)
		}
	}
	if err := c.validate(); err != nil {
		return err
	}
	*ci = c
	return nil
}
