package psp

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
)

// MasterKeyLen is the length of a master key.
const MasterKeyLen = 32

// keyLen is the length of a derived SA key: AES-128.
const keyLen = 16

// Keys are a device's master keys: up to two generations (the SPI's top
// bit picks one) and the active generation, which new SPIs carry.
type Keys struct {
	master [2][]byte
	active uint32
}

// NewKeys returns keys of generation 0 and, if gen1 is not nil, 1; the
// active generation is the highest given.
func NewKeys(gen0, gen1 []byte) (*Keys, error) {
	k := &Keys{}
	for g, m := range [][]byte{gen0, gen1} {
		if m == nil {
			continue
		}
		if len(m) != MasterKeyLen {
			return nil, fmt.Errorf("psp: master key of generation %d: %d bytes, want %d", g, len(m), MasterKeyLen)
		}
		k.master[g] = append([]byte(nil), m...)
		k.active = uint32(g)
	}
	if k.master[0] == nil && k.master[1] == nil {
		return nil, errors.New("psp: no master key")
	}
	return k, nil
}

// ParseKeys reads a key file: one or two lines "G:HEX", G the generation
// (0 or 1) and HEX the 32-byte key in 64 hex digits; a line without "G:"
// is generation 0. The last line's generation is the active one. Blank
// lines and lines starting with # are ignored.
func ParseKeys(text []byte) (*Keys, error) {
	k := &Keys{}
	n := 0
	for i, line := range strings.Split(string(text), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		g := 0
		if gs, h, ok := strings.Cut(line, ":"); ok {
			switch gs {
			case "0":
			case "1":
				g = 1
			default:
				return nil, fmt.Errorf("psp: key file line %d: generation %q, want 0 or 1", i+1, gs)
			}
			line = h
		}
		m, err := hex.DecodeString(line)
		if err != nil || len(m) != MasterKeyLen {
			return nil, fmt.Errorf("psp: key file line %d: want %d hex digits", i+1, 2*MasterKeyLen)
		}
		if k.master[g] != nil {
			return nil, fmt.Errorf("psp: key file line %d: generation %d given twice", i+1, g)
		}
		k.master[g], k.active = m, uint32(g)
		n++
	}
	if n == 0 {
		return nil, errors.New("psp: key file holds no key")
	}
	return k, nil
}

// LoadKeys reads a key file (ParseKeys).
func LoadKeys(path string) (*Keys, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("psp: %w", err)
	}
	k, err := ParseKeys(b)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return k, nil
}

// Active is the generation new SPIs carry.
func (k *Keys) Active() uint32 { return k.active }

// NewSPI returns a random SPI of the active generation (never 0, which
// means "does not encrypt" in the connection exchange).
func (k *Keys) NewSPI() uint32 {
	var b [4]byte
	for {
		_, _ = rand.Read(b[:])
		if low := binary.BigEndian.Uint32(b[:]) &^ (1 << 31); low != 0 {
			return k.active<<31 | low
		}
	}
}

// Successor is the SPI a sender rotates to after spi: the next 31-bit
// value (0 skipped) under the active generation.
func (k *Keys) Successor(spi uint32) uint32 {
	low := (spi + 1) &^ (1 << 31)
	if low == 0 {
		low = 1
	}
	return k.active<<31 | low
}

// Flow names one direction of a connection: the sender's GID and QPN and
// the receiver's.
type Flow struct {
	SrcGID, DstGID [16]byte
	SrcQPN, DstQPN uint32
}

// ErrNoKey means an SPI names a generation whose master key is not here.
var ErrNoKey = errors.New("psp: no master key for the SPI's generation")

// SA is a security association: an SPI and its AEAD.
type SA struct {
	SPI  uint32
	aead cipher.AEAD
}

// Derive returns the SA of spi for flow f.
func (k *Keys) Derive(spi uint32, f Flow) (*SA, error) {
	m := k.master[spi>>31]
	if m == nil {
		return nil, fmt.Errorf("%w: spi %#x, generation %d", ErrNoKey, spi, spi>>31)
	}
	key, err := hkdf.Key(sha256.New, m, nil, string(info(spi, f)), keyLen)
	if err != nil {
		return nil, fmt.Errorf("psp: derive spi %#x: %w", spi, err)
	}
	a, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	return &SA{SPI: spi, aead: a}, nil
}

// info is HKDF's info: the label, the SPI and the flow.
func info(spi uint32, f Flow) []byte {
	b := make([]byte, 0, 11+4+32+8)
	b = append(b, "ibex-psp-v1"...)
	b = binary.BigEndian.AppendUint32(b, spi)
	b = append(b, f.SrcGID[:]...)
	b = append(b, f.DstGID[:]...)
	b = binary.BigEndian.AppendUint32(b, f.SrcQPN)
	return binary.BigEndian.AppendUint32(b, f.DstQPN)
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	c, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("psp: %w", err)
	}
	return cipher.NewGCM(c)
}
