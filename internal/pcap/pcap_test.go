package pcap

import (
	"bytes"
	"encoding/binary"
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
