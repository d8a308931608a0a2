package wq

// SGE is a scatter/gather element as a queue holds it: Length bytes at
// virtual address Addr of the region named by LKey (verbs.SGE's layout).
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// Cursor walks a scatter/gather list, or one flat buffer.
type Cursor struct {
	flat []byte
	sge  []SGE
	rs   []*Region
	i    int
	off  uint32
}

// Flat is a cursor over one buffer.
func Flat(b []byte) Cursor { return Cursor{flat: b} }

// List is a cursor over an SGE list and its regions, starting off bytes in.
func List(sge []SGE, rs []*Region, off uint64) Cursor {
	c := Cursor{sge: sge, rs: rs}
	for c.i < len(c.sge) && off >= uint64(c.sge[c.i].Length) {
		off -= uint64(c.sge[c.i].Length)
		c.i++
	}
	c.off = uint32(off)
	return c
}

// Peek returns the next non-empty contiguous chunk, or nil at the end.
func (c *Cursor) Peek() []byte {
	if c.sge == nil {
		return c.flat
	}
	for c.i < len(c.sge) {
		s := &c.sge[c.i]
		if c.off < s.Length {
			b, _ := c.rs[c.i].Slice(s.Addr+uint64(c.off), uint64(s.Length-c.off))
			return b
		}
		c.i++
		c.off = 0
	}
	return nil
}

// Advance moves the cursor n bytes on, within the chunk Peek returned.
func (c *Cursor) Advance(n int) {
	if c.sge == nil {
		c.flat = c.flat[n:]
		return
	}
	c.off += uint32(n)
}

// Copy copies from src to dst until either runs out and returns the count.
func Copy(dst, src Cursor) int {
	total := 0
	for {
		d, s := dst.Peek(), src.Peek()
		if len(d) == 0 || len(s) == 0 {
			return total
		}
		n := copy(d, s)
		dst.Advance(n)
		src.Advance(n)
		total += n
	}
}
