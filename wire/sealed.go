package wire

// AppendIBNoICRC appends p as AppendIB does but leaves the ICRC's four
// bytes zero: for a packet whose integrity something else protects
// (package psp seals it and puts its tag in the ICRC's place), where
// computing a CRC would be wasted.
func AppendIBNoICRC(dst []byte, p *Packet) ([]byte, error) {
	dst, _, err := p.appendIB(dst)
	return dst, err
}
