package udp

import (
	"net/netip"

	"github.com/ibex-rdma/ibex/wire"
)

// The ICRC prefixes the loop caches (a prefix is the ICRC's view of one
// flow, precomputed so that a packet costs the CRC of its own bytes): per
// source for receiving, per peer and IPv4 ID for the segments of the
// super-datagrams it sends. A QP's prefix for datagrams sent alone is the
// QP's own (qpDriver.sendICRC).

// prefix returns the ICRC prefix of the flow src → dst, cached per source.
func (d *device) prefix(src, dst netip.AddrPort) *wire.ICRCPrefix {
	if p, ok := d.icrc[src]; ok {
		return p
	}
	if len(d.icrc) > 4096 {
		clear(d.icrc) // bound the cache against a flood of spoofed sources
	}
	p, err := wire.NewICRCPrefix(&wire.Encap{Src: src, Dst: dst, DF: true, TTL: 64})
	if err != nil {
		return nil
	}
	d.icrc[src] = &p
	return &p
}

// idPrefixes returns the ICRC prefixes of the flow to peer for IPv4 IDs 0
// to 63 (the IDs of the segments of a super-datagram).
func (d *device) idPrefixes(peer netip.AddrPort) *[udpMaxSegs]wire.ICRCPrefix {
	if p, ok := d.idPre[peer]; ok {
		return p
	}
	if len(d.idPre) > 4096 {
		clear(d.idPre)
	}
	p := new([udpMaxSegs]wire.ICRCPrefix)
	for i := range p {
		var err error
		if p[i], err = wire.NewICRCPrefix(&wire.Encap{Src: d.addr, Dst: peer, DF: true, TTL: 64, ID: uint16(i)}); err != nil {
			p = nil
			break
		}
	}
	d.idPre[peer] = p
	return p
}
