package wire_test

import (
	"bytes"
	"encoding/hex"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/wire"
)

// TestReferenceVectors decodes the golden vectors of
// ../shared/reference/rdma-transport.md §1.8 (read from the document, so it
// stays the single source), checks their fields and re-encodes them.
func TestReferenceVectors(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(sharedDir(t), "reference", "rdma-transport.md"))
	if err != nil {
		t.Fatal(err)
	}
	sec := string(doc)
	i := strings.Index(sec, "### 1.8")
	if i < 0 {
		t.Fatal("rdma-transport.md: no section 1.8")
	}
	sec = sec[i:]
	if j := strings.Index(sec[4:], "\n### "); j >= 0 {
		sec = sec[:j+4]
	}
	rows := regexp.MustCompile("(?m)^\\| ([^|]+) \\| `([0-9a-f]+)` \\|$").FindAllStringSubmatch(sec, -1)

	src := netip.MustParseAddrPort("10.0.0.1:49152")
	dst := netip.MustParseAddrPort("10.0.0.2:4791")
	rc := func(op ib.Opcode, qpn, psn uint32, ack bool) wire.Packet {
		return wire.Packet{BTH: wire.BTH{Opcode: op, PKey: 0xffff, DestQP: qpn, PSN: psn, AckReq: ack}}
	}
	type vector struct {
		desc string // a word the row's description must contain
		p    wire.Packet
		icrc uint32 // 0: not stated by the document
	}
	sendOnly := rc(ib.RCSendOnly, 0x12, 0x123456, true)
	sendOnly.Payload, sendOnly.BTH.PadCnt = []byte("hello, rdma!!"), 3
	ackP := rc(ib.RCAck, 0x11, 0x123456, false)
	ackP.AETH = wire.AETH{Syndrome: ib.SynACK, MSN: 1}
	write := rc(ib.RCWriteOnly, 0x12, 0x123457, true)
	write.RETH, write.Payload = wire.RETH{VA: 0x1000, RKey: 0xabcd, DMALen: 8}, []byte("ABCDEFGH")
	rnr := rc(ib.RCAck, 0x11, 0x123457, false)
	rnr.AETH = wire.AETH{Syndrome: ib.SynRNR(14), MSN: 1}
	nak := rc(ib.RCAck, 0x11, 0x123458, false)
	nak.AETH = wire.AETH{Syndrome: ib.SynNAKPSNSeq, MSN: 1}
	fadd := rc(ib.RCFetchAdd, 0x12, 0x123459, true)
	fadd.AtomicETH = wire.AtomicETH{VA: 0x2000, RKey: 0xabcd, SwapAdd: 1}
	aack := rc(ib.RCAtomicAck, 0x11, 0x123459, false)
	aack.AETH, aack.AtomicAck = wire.AETH{Syndrome: ib.SynACK, MSN: 2}, 41
	want := []vector{
		{"SEND_ONLY", sendOnly, 0xe60ae018}, // "Invariant CRC: 0x18e00ae6 for CRC value 0xE60AE018"
		{"ACK", ackP, 0},
		{"RDMA_WRITE_ONLY", write, 0},
		{"RNR NAK", rnr, 0},
		{"NAK PSN-seq", nak, 0},
		{"FETCH_ADD", fadd, 0},
		{"ATOMIC_ACK", aack, 0},
	}
	if len(rows) != len(want) {
		t.Fatalf("rdma-transport.md §1.8: %d vectors, want %d", len(rows), len(want))
	}
	for i, row := range rows {
		w := want[i]
		t.Run(w.desc, func(t *testing.T) {
			if !strings.Contains(row[1], w.desc) {
				t.Fatalf("row %d is %q, want %s", i+1, row[1], w.desc)
			}
			raw, err := hex.DecodeString(row[2])
			if err != nil {
				t.Fatal(err)
			}
			var f wire.Frame
			if err := wire.DecodeFrame(raw, &f); err != nil {
				t.Fatal(err)
			}
			wantEncap := wire.Encap{Src: src, Dst: dst, ID: 1, DF: true, TTL: 64}
			if f.Encap != wantEncap {
				t.Errorf("encap %+v, want %+v", f.Encap, wantEncap)
			}
			got := f.Packet
			if !bytes.Equal(got.Payload, w.p.Payload) {
				t.Errorf("payload %q, want %q", got.Payload, w.p.Payload)
			}
			if w.icrc != 0 && got.ICRC != w.icrc {
				t.Errorf("ICRC %#08x, want %#08x", got.ICRC, w.icrc)
			}
			got.Payload, got.ICRC, w.p.Payload = nil, 0, nil
			if !reflect.DeepEqual(got, w.p) {
				t.Errorf("\n got %v\nwant %v", &got, &w.p)
			}
			out, err := wire.AppendFrame(nil, &f)
			if err != nil || !bytes.Equal(out, raw) {
				t.Errorf("re-encoded: %v\n got %x\nwant %x", err, out, raw)
			}
		})
	}
}
