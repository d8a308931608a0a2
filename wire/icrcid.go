package wire

import (
	"encoding/binary"
	"github.com/ibex-rdma/ibex/ib"
	"hash/crc32"
	"math/bits"
	"sync"
)

// CheckAnyID verifies the ICRC at the end of pkt like Check, but for IPv4
// without knowing the sender's IP identification, which a UDP socket does
// not report. It returns the ID the sender used.
//
// It first tries the prefix's ID (a full 32-bit check). If that fails, it
// solves for the ID: the ICRC is an affine function of the 16 ID bits, so
// the difference between the received and the computed ICRC must be the
// contribution of some ID, and the ID is read off with a few table
// look-ups. That leaves 16 of the 32 check bits: a random corruption passes
// with probability 2^-16. For IPv6, which has no ID, CheckAnyID is Check.
func (c *ICRCPrefix) CheckAnyID(pkt []byte) (id uint16, err error) {
	if len(pkt) < ib.BTHLen+ib.ICRCLen {
		return 0, truncated("icrc", len(pkt), ib.BTHLen+ib.ICRCLen)
	}
	if len(pkt) > MaxIBLen {
		return 0, errf("icrc", ErrBadLength, "packet of %d bytes exceeds %d", uint64(len(pkt)), MaxIBLen)
	}
	end := len(pkt) - ib.ICRCLen
	got := binary.LittleEndian.Uint32(pkt[end:])
	want := c.sum(pkt[:end])
	if got == want {
		return c.id, nil
	}
	if c.v6 {
		return 0, icrcMismatch(got, want)
	}
	// got ^ want = Z^end(h(x)), where x = ID ^ c.id, h(x) is x's
	// contribution to the state after the headers, and Z^end shifts that
	// state through the end bytes that follow. Undo the shift, then invert h.
	t := idTables()
	d := got ^ want
	for m := uint(end); m != 0; m &= m - 1 {
		d = t.unshift[bits.TrailingZeros(m)].apply(d)
	}
	y := t.solve.apply(d)
	if y>>16 != 0 { // d is not the contribution of any ID
		return 0, icrcMismatch(got, want)
	}
	return c.id ^ uint16(y), nil
}

// gf2 is a 32×32 matrix over GF(2), column i being the image of bit i: a
// linear map on CRC states.
type gf2 [32]uint32

func (m *gf2) apply(v uint32) (r uint32) {
	for ; v != 0; v &= v - 1 {
		r ^= m[bits.TrailingZeros32(v)]
	}
	return r
}

// mul returns m∘n.
func (m *gf2) mul(n *gf2) (r gf2) {
	for i := range r {
		r[i] = m.apply(n[i])
	}
	return r
}

// inverse returns m⁻¹ by Gauss–Jordan elimination on the columns: it keeps
// pairs (m·x, x) and reduces the left sides to unit vectors. ok is false if m
// is singular.
func (m *gf2) inverse() (inv gf2, ok bool) {
	cols := *m
	for i := range inv {
		inv[i] = 1 << i
	}
	for b := range 32 {
		p := b
		for p < 32 && cols[p]>>b&1 == 0 {
			p++
		}
		if p == 32 {
			return inv, false
		}
		cols[b], cols[p] = cols[p], cols[b]
		inv[b], inv[p] = inv[p], inv[b]
		for k := range 32 {
			if k != b && cols[k]>>b&1 != 0 {
				cols[k] ^= cols[b]
				inv[k] ^= inv[b]
			}
		}
	}
	return inv, true
}

// gf2Table applies a gf2 with four look-ups instead of up to 32 XORs.
type gf2Table [4][256]uint32

func newGF2Table(m *gf2) (t *gf2Table) {
	t = new(gf2Table)
	for k := range 4 {
		for v := range 256 {
			t[k][v] = m.apply(uint32(v) << (8 * k))
		}
	}
	return t
}

func (t *gf2Table) apply(v uint32) uint32 {
	return t[0][v&0xff] ^ t[1][v>>8&0xff] ^ t[2][v>>16&0xff] ^ t[3][v>>24]
}

// idSolver holds the tables CheckAnyID needs, 68 KiB, built on first use.
type idSolver struct {
	unshift [16]*gf2Table // [j] undoes the CRC of 2^j zero bytes
	solve   *gf2Table     // low 16 bits: the ID; high 16 bits: 0 iff an ID fits
}

var idTables = sync.OnceValue(func() *idSolver {
	s := new(idSolver)
	// One zero byte through the reflected CRC register: r>>8 ^ T[r&0xff].
	var z gf2
	for i := range z {
		r := uint32(1) << i
		z[i] = r>>8 ^ crc32.IEEETable[r&0xff]
	}
	u, ok := z.inverse()
	if !ok {
		panic("wire: CRC shift not invertible")
	}
	for j := range s.unshift {
		s.unshift[j] = newGF2Table(&u)
		u = u.mul(&u)
	}
	// Columns 0–15: the contributions of the ID bits; 16–31: unit vectors
	// completing a basis. Its inverse maps a contribution back to the ID in
	// the low half, and anything outside their span to a non-zero high half.
	var basis gf2
	var echelon [32]uint32 // echelon[b]: a basis vector whose lowest set bit is b
	add := func(v uint32) bool {
		for v != 0 {
			b := bits.TrailingZeros32(v)
			if echelon[b] == 0 {
				echelon[b] = v
				return true
			}
			v ^= echelon[b]
		}
		return false
	}
	for i := range 16 {
		basis[i] = prefixTables.v4.id.at(1 << i)
		if !add(basis[i]) {
			panic("wire: IPv4 ID contributions not independent")
		}
	}
	n := 16
	for b := 0; n < 32; b++ {
		if add(1 << b) {
			basis[n] = 1 << b
			n++
		}
	}
	inv, ok := basis.inverse()
	if !ok {
		panic("wire: ID basis not invertible")
	}
	s.solve = newGF2Table(&inv)
	return s
})
