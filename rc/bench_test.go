package rc_test

import (
	"testing"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/rc"
)

// nopHost is an rc.Host that accepts everything and keeps nothing: the
// engine's own cost, without a Host's bookkeeping.
type nopHost struct{ done int }

func (h *nopHost) Payload(id uint64, off uint32, dst []byte) bool      { return true }
func (h *nopHost) ReadResponse(id uint64, off uint32, src []byte) bool { return true }
func (h *nopHost) AtomicResult(id uint64, orig uint64) bool            { return true }
func (h *nopHost) SendComplete(id uint64, st ib.WCStatus, n uint32, cause error) {
	h.done++
}
func (h *nopHost) RecvBegin() bool                                      { return true }
func (h *nopHost) RecvPlace(off uint32, src []byte) ib.WCStatus         { return ib.WCSuccess }
func (h *nopHost) RecvComplete(ib.WCStatus, uint32, uint32, bool, bool) {}
func (h *nopHost) RemoteCheck(rkey uint32, va uint64, n uint32, need ib.Access) ib.WCStatus {
	return ib.WCSuccess
}
func (h *nopHost) RemoteWrite(rkey uint32, va uint64, src []byte) bool { return true }
func (h *nopHost) RemoteRead(rkey uint32, va uint64, dst []byte) bool  { return true }
func (h *nopHost) RemoteAtomic(uint32, uint64, ib.WROpcode, uint64, uint64) (uint64, bool) {
	return 0, true
}
func (h *nopHost) Fatal(error) {}

// enginePair is two engines joined back to back, sharing a Pacer, with
// every eighth request packet CE-marked (so CNPs and window cuts run too).
type enginePair struct {
	a, b   *rc.Conn
	ha, hb nopHost
	pkt    rc.Packet
	buf    []byte
	now    int64
	n      int
}

func newEnginePair(tb testing.TB) *enginePair {
	p := &enginePair{buf: make([]byte, 4096)}
	pacer := rc.NewPacer(0, 0)
	cfg := rc.Config{QPN: 1, DestQPN: 2, MTU: 1024, Timeout: 14, RetryCnt: 7, RNRRetry: 7,
		Access: ib.AccessRemoteWrite, Pacer: pacer}
	var err error
	if p.a, err = rc.New(cfg, &p.ha); err != nil {
		tb.Fatal(err)
	}
	cfg.QPN, cfg.DestQPN = 2, 1
	if p.b, err = rc.New(cfg, &p.hb); err != nil {
		tb.Fatal(err)
	}
	return p
}

// write moves one 4 KiB RDMA WRITE (4 packets) from a to b and its ACK
// (and any CNP) back.
func (p *enginePair) write() {
	p.now += 1000
	if err := p.a.Post(rc.Request{ID: uint64(p.n), Op: ib.WRRDMAWrite, Len: 4096, RemoteAddr: 0x1000, RKey: 1}); err != nil {
		panic(err)
	}
	for p.a.Poll(p.now, &p.pkt, p.buf) {
		p.n++
		p.pkt.CE = p.n%8 == 0
		p.b.Receive(p.now, &p.pkt)
	}
	for p.b.Poll(p.now, &p.pkt, p.buf) {
		p.a.Receive(p.now, &p.pkt)
	}
}

// BenchmarkWrite: the engines' data path, both sides, per 4 KiB WRITE.
func BenchmarkWrite(b *testing.B) {
	p := newEnginePair(b)
	b.SetBytes(4096)
	b.ReportAllocs()
	for b.Loop() {
		p.write()
	}
	b.ReportMetric(float64(p.a.Stats().PktsSent+p.b.Stats().PktsSent)/float64(b.N), "pkts/op")
	if p.ha.done < b.N-1 {
		b.Fatalf("%d of %d WRITEs completed", p.ha.done, b.N)
	}
}

// TestDataPathAllocs: posting, sending, receiving and acknowledging a
// WRITE, with a pacer and CE marks (CNPs, window cuts), allocate nothing.
func TestDataPathAllocs(t *testing.T) {
	p := newEnginePair(t)
	p.write()
	if n := testing.AllocsPerRun(200, p.write); n != 0 {
		t.Fatalf("%v allocations per WRITE", n)
	}
	if st := p.a.Stats(); st.CNPsRecv == 0 || p.ha.done != 202 { // one before, one warm-up run, 200 measured
		t.Fatalf("CNPs received %d, WRITEs completed %d: the path measured is not the one meant", st.CNPsRecv, p.ha.done)
	}
}
