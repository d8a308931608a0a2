// Package pcap reads and writes classic libpcap capture files: the tests
// that use captures (wire's golden and tshark tests, the rxe interop tests
// of rc and provider/udp) read and write them whole, provider/udp's
// captures stream them record by record (Writer). Both byte orders,
// microsecond and nanosecond timestamps; no pcapng.
package pcap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// Link types (https://www.tcpdump.org/linktypes.html).
const (
	LinkEthernet = 1   // LINKTYPE_ETHERNET
	LinkRaw      = 101 // LINKTYPE_RAW: bare IPv4 or IPv6
	LinkLinuxSLL = 113 // LINKTYPE_LINUX_SLL: Linux cooked capture v1
)

const (
	magicMicro = 0xa1b2c3d4
	magicNano  = 0xa1b23c4d
	globalLen  = 24
	recordLen  = 16
)

// DefaultSnaplen is the snapshot length a file's header states when none
// is given: tcpdump's, larger than any packet.
const DefaultSnaplen = 262144

// File is a whole capture.
type File struct {
	LinkType uint32
	Nano     bool   // timestamps in nanoseconds
	Snaplen  uint32 // the most bytes captured of a packet, as the header states (0 when writing: DefaultSnaplen)
	Records  []Record
}

// Record is one captured packet.
type Record struct {
	Sec, Frac uint32 // timestamp: seconds, and micro- or nanoseconds
	OrigLen   uint32 // length on the wire; len(Data) is the captured length
	Data      []byte
}

// Read parses a capture.
func Read(r io.Reader) (*File, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if len(b) < globalLen {
		return nil, fmt.Errorf("pcap: global header: %d bytes, need %d", len(b), globalLen)
	}
	var bo binary.ByteOrder
	f := new(File)
	switch m := binary.LittleEndian.Uint32(b); {
	case m == magicMicro || m == magicNano:
		bo = binary.LittleEndian
	case binary.BigEndian.Uint32(b) == magicMicro || binary.BigEndian.Uint32(b) == magicNano:
		bo = binary.BigEndian
	default:
		return nil, fmt.Errorf("pcap: magic %#08x is not classic pcap", m)
	}
	f.Nano = bo.Uint32(b) == magicNano
	if major := bo.Uint16(b[4:]); major != 2 {
		return nil, fmt.Errorf("pcap: version %d, want 2", major)
	}
	f.Snaplen = bo.Uint32(b[16:])
	f.LinkType = bo.Uint32(b[20:]) & 0x0fffffff // the high bits may carry FCS information
	for off := globalLen; off < len(b); {
		if len(b)-off < recordLen {
			return nil, fmt.Errorf("pcap: record %d: header truncated at offset %d", len(f.Records)+1, off)
		}
		h := b[off : off+recordLen]
		n := int(bo.Uint32(h[8:]))
		off += recordLen
		if n > len(b)-off {
			return nil, fmt.Errorf("pcap: record %d: %d bytes captured, %d left", len(f.Records)+1, n, len(b)-off)
		}
		f.Records = append(f.Records, Record{
			Sec: bo.Uint32(h), Frac: bo.Uint32(h[4:]), OrigLen: bo.Uint32(h[12:]),
			Data: b[off : off+n : off+n],
		})
		off += n
	}
	return f, nil
}

// ReadFile parses the capture in the named file.
func ReadFile(name string) (*File, error) {
	fd, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer fd.Close()
	f, err := Read(fd)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return f, nil
}

// Write writes f in little-endian classic pcap.
func Write(w io.Writer, f *File) error {
	pw, err := NewWriter(w, f.LinkType, f.Nano, f.Snaplen)
	if err != nil {
		return err
	}
	for i := range f.Records {
		if err := pw.WriteRecord(&f.Records[i]); err != nil {
			return err
		}
	}
	return nil
}

// Writer writes a capture one record at a time, allocating nothing per
// record. It writes each record with two Writes (header, data): give it a
// buffered writer.
type Writer struct {
	w   io.Writer
	hdr [recordLen]byte
}

// NewWriter writes the global header of a little-endian classic pcap
// (link type, nanosecond timestamps or not, snaplen: 0 is DefaultSnaplen)
// to w and returns the Writer of its records.
func NewWriter(w io.Writer, linkType uint32, nano bool, snaplen uint32) (*Writer, error) {
	var g [globalLen]byte
	le := binary.LittleEndian
	magic := uint32(magicMicro)
	if nano {
		magic = magicNano
	}
	if snaplen == 0 {
		snaplen = DefaultSnaplen
	}
	le.PutUint32(g[0:], magic)
	le.PutUint16(g[4:], 2)
	le.PutUint16(g[6:], 4)
	le.PutUint32(g[16:], snaplen)
	le.PutUint32(g[20:], linkType)
	if _, err := w.Write(g[:]); err != nil {
		return nil, err
	}
	return &Writer{w: w}, nil
}

// WriteRecord writes r; an OrigLen below len(r.Data) is written as
// len(r.Data).
func (pw *Writer) WriteRecord(r *Record) error {
	le := binary.LittleEndian
	orig := max(r.OrigLen, uint32(len(r.Data)))
	le.PutUint32(pw.hdr[0:], r.Sec)
	le.PutUint32(pw.hdr[4:], r.Frac)
	le.PutUint32(pw.hdr[8:], uint32(len(r.Data)))
	le.PutUint32(pw.hdr[12:], orig)
	if _, err := pw.w.Write(pw.hdr[:]); err != nil {
		return err
	}
	_, err := pw.w.Write(r.Data)
	return err
}

// WriteFile writes f to the named file.
func WriteFile(name string, f *File) error {
	fd, err := os.Create(name)
	if err != nil {
		return err
	}
	return errors.Join(Write(fd, f), fd.Close())
}
