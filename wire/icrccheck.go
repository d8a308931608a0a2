package wire

// CheckID is Check for a packet that travelled with IPv4 ID id (known
// from its IP header, as an AF_XDP receiver sees it) instead of the ID the
// prefix was built with: all 32 bits of the ICRC are checked, where
// CheckAnyID, for a receiver that sees no IP header, cannot tell the ID's
// 16 bits apart. For IPv6 the ID is ignored.
func (c *ICRCPrefix) CheckID(pkt []byte, id uint16) error {
	if c.v6 || id == c.id {
		return c.Check(pkt)
	}
	p := *c
	p.id = id
	return p.Check(pkt)
}
