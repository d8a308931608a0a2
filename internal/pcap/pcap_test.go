package pcap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	in := &File{LinkType: LinkEthernet, Records: []Record{
		{Sec: 1, Frac: 2, Data: []byte{1, 2, 3}},
		{Sec: 3, Frac: 4, OrigLen: 100, Data: []byte{4}},
		{Sec: 5, Frac: 6, Data: []byte{}},
	}}
	var buf bytes.Buffer
	if err := Write(&buf, in); err != nil {
		t.Fatal(err)
	}
	out, err := Read(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if out.LinkType != in.LinkType || len(out.Records) != len(in.Records) {
		t.Fatalf("got link %d, %d records; want %d, %d", out.LinkType, len(out.Records), in.LinkType, len(in.Records))
	}
	for i, r := range out.Records {
		w := in.Records[i]
		wantOrig := max(w.OrigLen, uint32(len(w.Data)))
		if r.Sec != w.Sec || r.Frac != w.Frac || r.OrigLen != wantOrig || !bytes.Equal(r.Data, w.Data) {
			t.Errorf("record %d: got %+v, want %+v (orig %d)", i, r, w, wantOrig)
		}
	}
}

func TestBigEndianAndErrors(t *testing.T) {
	var g [24 + 16 + 2]byte
	be := binary.BigEndian
	be.PutUint32(g[0:], magicNano)
	be.PutUint16(g[4:], 2)
	be.PutUint32(g[20:], LinkRaw)
	be.PutUint32(g[24+8:], 2)
	be.PutUint32(g[24+12:], 2)
	f, err := Read(bytes.NewReader(g[:]))
	if err != nil {
		t.Fatal(err)
	}
	if !f.Nano || f.LinkType != LinkRaw || len(f.Records) != 1 || len(f.Records[0].Data) != 2 {
		t.Fatalf("got %+v", f)
	}
	for name, b := range map[string][]byte{
		"short global":    g[:10],
		"bad magic":       make([]byte, 24),
		"short record":    g[:30],
		"record past end": g[:len(g)-1],
	} {
		if _, err := Read(bytes.NewReader(b)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestWriter: records streamed through a Writer read back as written, the
// header states the snaplen given, and a record costs no allocation.
func TestWriter(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, LinkEthernet, true, 128)
	if err != nil {
		t.Fatal(err)
	}
	recs := []Record{{Sec: 7, Frac: 999999999, OrigLen: 300, Data: bytes.Repeat([]byte{0xab}, 128)}, {Sec: 8, Data: []byte{1}}}
	for i := range recs {
		if err := w.WriteRecord(&recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	f, err := Read(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if f.LinkType != LinkEthernet || !f.Nano || f.Snaplen != 128 || len(f.Records) != 2 {
		t.Fatalf("got link %d nano %v snaplen %d, %d records; want 1, true, 128, 2", f.LinkType, f.Nano, f.Snaplen, len(f.Records))
	}
	if r := f.Records[0]; r.Sec != 7 || r.Frac != 999999999 || r.OrigLen != 300 || !bytes.Equal(r.Data, recs[0].Data) {
		t.Errorf("record 0: got %+v", r)
	}
	if r := f.Records[1]; r.OrigLen != 1 || !bytes.Equal(r.Data, []byte{1}) {
		t.Errorf("record 1: got %+v, want OrigLen raised to the data's length", r)
	}
	// Write (a whole File) is the same stream; snaplen 0 states the default.
	var whole bytes.Buffer
	if err := Write(&whole, &File{LinkType: LinkEthernet, Nano: true, Snaplen: 128, Records: recs}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(whole.Bytes(), buf.Bytes()) {
		t.Error("Write and a Writer produced different files")
	}
	whole.Reset()
	if err := Write(&whole, &File{LinkType: LinkRaw}); err != nil {
		t.Fatal(err)
	}
	if f, err := Read(&whole); err != nil || f.Snaplen != DefaultSnaplen || f.Nano {
		t.Errorf("default header: %+v, %v; want snaplen %d, microseconds", f, err, DefaultSnaplen)
	}
	w, _ = NewWriter(io.Discard, LinkEthernet, true, 0)
	if a := testing.AllocsPerRun(100, func() { _ = w.WriteRecord(&recs[0]) }); a != 0 {
		t.Errorf("WriteRecord: %v allocations", a)
	}
}

// TestWriterError: a failing writer's error comes back from NewWriter and
// from WriteRecord.
func TestWriterError(t *testing.T) {
	if _, err := NewWriter(ptr(failAfter(10)), LinkEthernet, false, 0); err == nil {
		t.Error("NewWriter on a failing writer: no error")
	}
	w, err := NewWriter(ptr(failAfter(globalLen+recordLen)), LinkEthernet, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteRecord(&Record{Data: []byte{1, 2}}); err == nil {
		t.Error("WriteRecord past the writer's limit: no error")
	}
}

// failAfter is a writer that takes n bytes, then fails.
type failAfter int

func (f *failAfter) Write(b []byte) (int, error) {
	if len(b) > int(*f) {
		return 0, errors.New("disk full")
	}
	*f -= failAfter(len(b))
	return len(b), nil
}

func ptr(f failAfter) *failAfter { return &f }
