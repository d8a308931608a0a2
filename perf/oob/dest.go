package oob

import (
	"bytes"
	"fmt"
	"net/netip"
)

// Dest is one QP's connection data, perftest's struct pingpong_dest as it
// crosses the wire. perftest's gid_index is not sent (it only selects the
// message format, see Params.GIDIndex).
type Dest struct {
	LID      uint16
	OutReads int    // out_reads: max outstanding RDMA reads/atomics (16 bits on the wire)
	QPN      uint32 // 24 bits
	PSN      uint32 // 24 bits
	RKey     uint32
	VAddr    uint64
	SRQN     uint32 // XRC/DC only; 0 otherwise
	GID      [16]byte
}

// String prints the dest the way perftest's ctx_print_pingpong_data does,
// for logs and error messages.
func (d Dest) String() string {
	return fmt.Sprintf("LID %#04x QPN %#06x PSN %#06x OUT %#04x RKey %#08x VAddr %#016x GID %s",
		d.LID, d.QPN, d.PSN, d.OutReads, d.RKey, d.VAddr, netip.AddrFrom16(d.GID))
}

// Wire sizes of ethernet_write_keys / ethernet_read_keys
// (perftest_communication.h KEY_MSG_SIZE and KEY_MSG_SIZE_GID): the text
// and its terminating NUL, always sent whole.
const (
	keyMsgSize    = 59  // "%04x:%04x:%06x:%06x:%08x:%016llx:%08x" + NUL
	keyMsgSizeGID = 108 // "%04x:%04x:%06x:%06x:%08x:%016llx:" + 16 x "%02x:" + "%08x:" + NUL
)

// Field widths in hex digits, in wire order: lid, out_reads, qpn, psn, rkey,
// vaddr, [16 GID bytes], srqn.
var (
	keyFields    = []int{4, 4, 6, 6, 8, 16, 8}
	keyFieldsGID = []int{4, 4, 6, 6, 8, 16, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 8}
)

// appendDest appends d in perftest's text format: KEY_PRINT_FMT_GID when gid,
// KEY_PRINT_FMT otherwise, NUL-terminated. perftest formats with
// __sprintf_chk into a fixed buffer, so a value wider than its field would
// abort the C side; such values are refused here.
func appendDest(b []byte, d Dest, gid bool) ([]byte, error) {
	switch {
	case d.OutReads < 0 || d.OutReads > 0xffff:
		return b, wrapf(ErrInvalid, "out_reads %d does not fit perftest's %%04x", d.OutReads)
	case d.QPN > 0xffffff:
		return b, wrapf(ErrInvalid, "QPN %#x does not fit 24 bits", d.QPN)
	case d.PSN > 0xffffff:
		return b, wrapf(ErrInvalid, "PSN %#x does not fit 24 bits", d.PSN)
	}
	vals := []uint64{uint64(d.LID), uint64(d.OutReads), uint64(d.QPN), uint64(d.PSN), uint64(d.RKey), d.VAddr}
	if gid {
		for _, g := range d.GID {
			vals = append(vals, uint64(g))
		}
	}
	vals = append(vals, uint64(d.SRQN))
	widths := keyFields
	if gid {
		widths = keyFieldsGID
	}
	for i, w := range widths {
		if i > 0 {
			b = append(b, ':')
		}
		b = appendHex(b, vals[i], w)
	}
	if gid {
		b = append(b, ':') // KEY_PRINT_FMT_GID ends with a colon
	}
	return append(b, 0), nil
}

func appendHex(b []byte, v uint64, width int) []byte {
	const digits = "0123456789abcdef"
	for i := width - 1; i >= 0; i-- {
		b = append(b, digits[(v>>(4*uint(i)))&0xf])
	}
	return b
}

// parseDest parses one ethernet_write_keys message; len(msg) selects the
// format (keyMsgSize or keyMsgSizeGID). It is stricter than perftest's
// sscanf/strtol parser: every field must have its exact width, so a message
// from another step (a report, "done", a version) is reported instead of
// being read as a dest.
func parseDest(msg []byte) (Dest, error) {
	var widths []int
	switch len(msg) {
	case keyMsgSize:
		widths = keyFields
	case keyMsgSizeGID:
		widths = keyFieldsGID
	default:
		return Dest{}, wrapf(ErrProtocol, "dest message of %d bytes, want %d or %d", len(msg), keyMsgSize, keyMsgSizeGID)
	}
	if msg[len(msg)-1] != 0 {
		return Dest{}, wrapf(ErrProtocol, "dest message %s is not NUL-terminated", quote(msg))
	}
	vals := make([]uint64, 0, len(widths))
	p := 0
	for i, w := range widths {
		if i > 0 {
			if msg[p] != ':' {
				return Dest{}, wrapf(ErrProtocol, "dest message %s: want ':' at byte %d", quote(msg), p)
			}
			p++
		}
		var v uint64
		for _, c := range msg[p : p+w] {
			d, ok := unhex(c)
			if !ok {
				return Dest{}, wrapf(ErrProtocol, "dest message %s: field %d is not %d hex digits", quote(msg), i, w)
			}
			v = v<<4 | uint64(d)
		}
		vals = append(vals, v)
		p += w
	}
	if len(msg) == keyMsgSizeGID {
		if msg[p] != ':' {
			return Dest{}, wrapf(ErrProtocol, "dest message %s: want ':' at byte %d", quote(msg), p)
		}
		p++
	}
	if p != len(msg)-1 {
		panic("oob: dest field table does not add up") // the tables above are wrong
	}
	d := Dest{
		LID:      uint16(vals[0]),
		OutReads: int(vals[1]),
		QPN:      uint32(vals[2]),
		PSN:      uint32(vals[3]),
		RKey:     uint32(vals[4]),
		VAddr:    vals[5],
		SRQN:     uint32(vals[len(vals)-1]),
	}
	if len(msg) == keyMsgSizeGID {
		for i := range d.GID {
			d.GID[i] = byte(vals[6+i])
		}
	}
	return d, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// gidIsIPv4 is perftest's ipv6_addr_v4mapped: ::ffff:a.b.c.d, or the IPv4
// encoded multicast form ff0e::ffff:a.b.c.d.
func gidIsIPv4(g [16]byte) bool {
	v4mapped := [12]byte{10: 0xff, 11: 0xff}
	if bytes.Equal(g[:12], v4mapped[:]) {
		return true
	}
	mc := [12]byte{0: 0xff, 1: 0x0e, 10: 0xff, 11: 0xff}
	return bytes.Equal(g[:12], mc[:])
}

// quote shows wire bytes in error messages: printable text as is, the rest
// escaped, long messages cut.
func quote(b []byte) string {
	const max = 120
	if len(b) > max {
		return fmt.Sprintf("%+q...", b[:max])
	}
	return fmt.Sprintf("%+q", b)
}
