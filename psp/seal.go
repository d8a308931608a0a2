package psp

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
)

const (
	// TVer is the BTH transport version of a sealed packet.
	TVer = 1
	// BTHLen is the length of the clear BTH that starts a packet.
	BTHLen = 12
	// HeaderLen is the security header after the BTH: SPI and IV.
	HeaderLen = 12
	// TagLen is the GCM tag that ends a sealed packet.
	TagLen = 16
	// Overhead is how much longer a sealed packet is than the plain one
	// (whose 4-byte ICRC the tag replaces).
	Overhead = HeaderLen + TagLen - 4
	// MinLen is the shortest sealed packet.
	MinLen = BTHLen + HeaderLen + TagLen
)

// The reasons a packet is refused, as sentinels (no allocation).
var (
	ErrShort      = errors.New("psp: packet too short")
	ErrUnknownSPI = errors.New("psp: unknown spi")
	ErrAuth       = errors.New("psp: authentication failed")
	ErrReplay     = errors.New("psp: replayed or too old")
)

// IsSealed reports whether the packet starting with this BTH is sealed.
func IsSealed(pkt []byte) bool { return len(pkt) >= BTHLen && pkt[1]&0x0f == TVer }

// SPIOf returns a sealed packet's SPI (0 if it is too short).
func SPIOf(pkt []byte) uint32 {
	if len(pkt) < BTHLen+HeaderLen {
		return 0
	}
	return binary.BigEndian.Uint32(pkt[BTHLen:])
}

// Sender seals one direction of a connection. It is not safe for
// concurrent use.
type Sender struct {
	// RotateAfter, if not 0, moves the sender to the successor SPI after
	// that many packets under one SA.
	RotateAfter uint64

	keys      *Keys
	flow      Flow
	sa        *SA
	iv        uint64
	n         uint64 // packets sealed under sa
	rotations uint64
	nonce     [12]byte
}

// NewSender returns a sender to the receiver that chose spi.
func NewSender(k *Keys, spi uint32, f Flow) (*Sender, error) {
	sa, err := k.Derive(spi, f)
	if err != nil {
		return nil, err
	}
	s := &Sender{keys: k, flow: f}
	s.use(sa)
	return s, nil
}

// use starts sealing under sa, from a random IV: a connection that reuses
// an SPI (a 2^-31 chance for the same QPNs and GIDs) then reuses no nonce
// unless the IVs meet as well.
func (s *Sender) use(sa *SA) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	s.sa, s.n = sa, 0
	s.iv = binary.BigEndian.Uint64(b[:]) >> 2 // room for 2^62 packets
	binary.BigEndian.PutUint32(s.nonce[:4], sa.SPI)
}

// SPI is the SPI packets are sealed under now.
func (s *Sender) SPI() uint32 { return s.sa.SPI }

// Rotations counts the moves to a successor SPI.
func (s *Sender) Rotations() uint64 { return s.rotations }

// Rotate moves to the successor SPI; the receiver follows when the first
// packet under it arrives.
func (s *Sender) Rotate() error {
	sa, err := s.keys.Derive(s.keys.Successor(s.sa.SPI), s.flow)
	if err != nil {
		return err
	}
	s.use(sa)
	s.rotations++
	return nil
}

// Seal seals pkt in place and returns it with the tag appended. pkt is the
// BTH, HeaderLen bytes of room, then the plaintext (extension headers,
// payload, pad); it needs TagLen bytes of capacity beyond its length.
// Seal allocates nothing (but when it rotates after RotateAfter packets).
func (s *Sender) Seal(pkt []byte) ([]byte, error) {
	if len(pkt) < BTHLen+HeaderLen || cap(pkt)-len(pkt) < TagLen {
		return pkt, ErrShort
	}
	if s.RotateAfter != 0 && s.n >= s.RotateAfter {
		if err := s.Rotate(); err != nil {
			return pkt, err
		}
	}
	s.iv++
	s.n++
	pkt[1] = pkt[1]&^0x0f | TVer
	binary.BigEndian.PutUint32(pkt[BTHLen:], s.sa.SPI)
	binary.BigEndian.PutUint64(pkt[BTHLen+4:], s.iv)
	binary.BigEndian.PutUint64(s.nonce[4:], s.iv)
	const h = BTHLen + HeaderLen
	out := s.sa.aead.Seal(pkt[h:h], s.nonce[:], pkt[h:], pkt[:h])
	return pkt[:h+len(out)], nil
}

// rxSA is a receive SA and its replay window.
type rxSA struct {
	sa *SA
	w  Window
}

// Receiver opens one direction of a connection: it accepts its current
// SA, the previous one and the successor (see the package doc). It is not
// safe for concurrent use.
type Receiver struct {
	keys      *Keys
	flow      Flow
	prev, cur *rxSA
	next      [2]*rxSA // the successor under each generation with a key
	rotations uint64
	nonce     [12]byte
}

// NewReceiver returns the receiver of the SA this host chose, spi.
func NewReceiver(k *Keys, spi uint32, f Flow) (*Receiver, error) {
	sa, err := k.Derive(spi, f)
	if err != nil {
		return nil, err
	}
	r := &Receiver{keys: k, flow: f, cur: &rxSA{sa: sa}}
	if err := r.deriveNext(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Receiver) deriveNext() error {
	for g := range r.next {
		r.next[g] = nil
		if r.keys.master[g] == nil {
			continue
		}
		low := (r.cur.sa.SPI + 1) &^ (1 << 31)
		if low == 0 {
			low = 1
		}
		sa, err := r.keys.Derive(uint32(g)<<31|low, r.flow)
		if err != nil {
			return err
		}
		r.next[g] = &rxSA{sa: sa}
	}
	return nil
}

// SPI is the current receive SPI.
func (r *Receiver) SPI() uint32 { return r.cur.sa.SPI }

// Rotations counts the moves to a successor SA.
func (r *Receiver) Rotations() uint64 { return r.rotations }

func (r *Receiver) lookup(spi uint32) *rxSA {
	switch {
	case spi == r.cur.sa.SPI:
		return r.cur
	case r.prev != nil && spi == r.prev.sa.SPI:
		return r.prev
	}
	for _, n := range r.next {
		if n != nil && spi == n.sa.SPI {
			return n
		}
	}
	return nil
}

// Open authenticates and decrypts a sealed packet in place and returns its
// plaintext (extension headers, payload, pad), which aliases pkt. A packet
// refused (ErrShort, ErrUnknownSPI, ErrAuth, ErrReplay) changes nothing.
// Open allocates nothing, but when a successor SA's first packet moves the
// receiver on.
func (r *Receiver) Open(pkt []byte) ([]byte, error) {
	if len(pkt) < MinLen {
		return nil, ErrShort
	}
	spi := binary.BigEndian.Uint32(pkt[BTHLen:])
	iv := binary.BigEndian.Uint64(pkt[BTHLen+4:])
	x := r.lookup(spi)
	if x == nil {
		return nil, ErrUnknownSPI
	}
	if err := x.w.Check(iv); err != nil {
		return nil, err
	}
	const h = BTHLen + HeaderLen
	binary.BigEndian.PutUint32(r.nonce[:4], spi)
	binary.BigEndian.PutUint64(r.nonce[4:], iv)
	pt, err := x.sa.aead.Open(pkt[h:h], r.nonce[:], pkt[h:], pkt[:h])
	if err != nil {
		return nil, ErrAuth
	}
	x.w.Accept(iv)
	if x != r.cur && x != r.prev {
		// The sender rotated: the successor is current, the old SA stays
		// for the packets still in flight under it.
		r.prev, r.cur = r.cur, x
		r.rotations++
		if err := r.deriveNext(); err != nil {
			// Not reached: the generations' keys do not change.
			r.next = [2]*rxSA{}
		}
	}
	return pt, nil
}

// State is what a sender needs to go on in another process (a daemon's
// takeover): its SPI and the last IV it used.
func (s *Sender) State() (spi uint32, iv uint64) { return s.sa.SPI, s.iv }

// ResumeSender returns a sender that goes on from State: under spi, with
// IVs after iv, so that no nonce is used twice and the receiver's window
// takes what follows.
func ResumeSender(k *Keys, spi uint32, f Flow, iv uint64) (*Sender, error) {
	s, err := NewSender(k, spi, f)
	if err != nil {
		return nil, err
	}
	s.iv = iv
	return s, nil
}

// State is what a receiver needs to go on in another process: its current
// SPI and the highest IV it accepted under it.
func (r *Receiver) State() (spi uint32, top uint64) { return r.cur.sa.SPI, r.cur.w.top }

// ResumeReceiver returns a receiver that goes on from State: under spi,
// taking every IV up to top as seen (a packet of before the move is
// refused as a replay; the sender resends it under a new IV).
func ResumeReceiver(k *Keys, spi uint32, f Flow, top uint64) (*Receiver, error) {
	r, err := NewReceiver(k, spi, f)
	if err != nil {
		return nil, err
	}
	r.cur.w.top = top
	for i := range r.cur.w.bitmap {
		r.cur.w.bitmap[i] = ^uint64(0)
	}
	return r, nil
}
