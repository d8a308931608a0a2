package store

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/internal/cm"
	"github.com/ibex-rdma/ibex/verbs"
)

// FuzzDecodeRequest: whatever a client sends, decoding and checking never
// panics, and what is accepted is within the limits.
func FuzzDecodeRequest(f *testing.F) {
	good := make([]byte, requestLen(2, 1))
	encodeRequestHeader(good, opRead, 7, 2, 1)
	encodeRelease(good, 0, 3)
	encodeRange(good, 1, 0, reqRange{file: 1, n: 100, off: 5})
	encodeRange(good, 1, 1, reqRange{file: 0, n: 4096, off: 1 << 40, dst: 0xdead, rkey: 9})
	f.Add(good)
	f.Add(good[:reqHdrLen])
	f.Add([]byte{})
	f.Add([]byte{1, 2, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	w := make([]byte, requestLen(MaxBatchLimit, 0))
	encodeRequestHeader(w, opWrite, 1, MaxBatchLimit, 0)
	f.Add(w)
	sizes := []int64{0, 1, 4096, 1 << 20, 1<<63 - 1}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r request
		st := decodeRequest(b, MaxBatchLimit, MaxHeldLimit, &r)
		if st != msgOK {
			_ = st.String()
			return
		}
		if r.n > MaxBatchLimit || r.nrel > MaxHeldLimit || len(b) != requestLen(r.n, r.nrel) {
			t.Fatalf("accepted n %d nrel %d in %d bytes", r.n, r.nrel, len(b))
		}
		for i := 0; i < r.n; i++ {
			rs := checkRange(&r.ranges[i], sizes, 1<<20)
			_ = rs.String()
			if rs == rangeOK {
				rr := r.ranges[i]
				if rr.n == 0 || rr.n > 1<<20 || rr.off+uint64(rr.n) > uint64(sizes[rr.file]) {
					t.Fatalf("accepted range %+v", rr)
				}
			}
		}
	})
}

// rawClient speaks the protocol by hand, to send what Client never would.
type rawClient struct {
	t    *testing.T
	vc   *verbs.Context
	pd   *verbs.PD
	cq   *verbs.CQ
	qp   *verbs.QP
	dqp  *verbs.QP
	mr   *verbs.MR // 0: send buffer (8 KiB), 8 KiB: receive buffers
	conn *cm.Conn
	w    welcome
}

func newRawClient(t *testing.T, s *Server) *rawClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := &rawClient{t: t}
	var err error
	if r.vc, err = verbs.Open("loop0"); err != nil {
		t.Fatal(err)
	}
	r.pd, _ = r.vc.AllocPD()
	r.cq, _ = r.vc.CreateCQ(64)
	r.qp, err = r.pd.CreateQP(verbs.QPInitAttr{SendCQ: r.cq, RecvCQ: r.cq, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16}})
	if err != nil {
		t.Fatal(err)
	}
	r.mr, err = r.pd.AllocMR(8192+8*respBufLen, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if r.conn != nil {
			_ = r.conn.Close()
		}
		_ = r.qp.Destroy()
		_ = r.dqp.Destroy()
		_ = r.cq.Destroy()
		_ = r.mr.Dereg()
		_ = r.pd.Dealloc()
		_ = r.vc.Close()
	})
	r.dqp, err = r.pd.CreateQP(verbs.QPInitAttr{SendCQ: r.cq, RecvCQ: r.cq, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 1}})
	if err != nil {
		t.Fatal(err)
	}
	hb, err := hello{depth: 4, data: r.dqp.Info()}.encode()
	if err != nil {
		t.Fatal(err)
	}
	r.conn, err = cm.Dial(ctx, s.Addr().String(), r.qp, hb, cm.Options{Ready: func(qp *verbs.QP) error {
		for i := 0; i < 8; i++ {
			if err := qp.PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{{Addr: r.mr.Addr() + 8192 + uint64(i*respBufLen), Length: respBufLen, LKey: r.mr.LKey()}}}}); err != nil {
				return err
			}
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if r.w, err = decodeWelcome(r.conn.Private()); err != nil {
		t.Fatal(err)
	}
	if err := r.dqp.Connect(r.w.data, verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	return r
}

// roundTrip sends msg and returns the response (nil if the QP failed).
func (r *rawClient) roundTrip(msg []byte) []byte {
	r.t.Helper()
	copy(r.mr.Bytes(), msg)
	if err := r.qp.PostSend([]verbs.SendWR{{ID: 100, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: r.mr.Addr(), Length: uint32(len(msg)), LKey: r.mr.LKey()}}}}); err != nil {
		r.t.Fatal(err)
	}
	// The server's end of the TCP connection closing ends the wait too:
	// a client whose WRITE failed gets no answer, its data QP's error
	// may complete nothing here.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		select {
		case <-r.conn.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	wc := make([]verbs.WC, 1)
	for {
		if _, err := r.cq.PollWait(ctx, wc); err != nil {
			select {
			case <-r.conn.Done():
				return nil
			default:
			}
			r.t.Fatal(err)
		}
		if wc[0].Status != verbs.WCSuccess {
			return nil
		}
		if wc[0].Opcode == verbs.WCRecv {
			id := int(wc[0].WRID)
			off := 8192 + id*respBufLen
			out := append([]byte(nil), r.mr.Bytes()[off:off+int(wc[0].ByteLen)]...)
			if err := r.qp.PostRecv([]verbs.RecvWR{{ID: uint64(id), SGL: []verbs.SGE{{Addr: r.mr.Addr() + uint64(off), Length: respBufLen, LKey: r.mr.LKey()}}}}); err != nil {
				r.t.Fatal(err)
			}
			return out
		}
	}
}

func request1(op uint8, nrel int, rels []uint32, rr ...reqRange) []byte {
	b := make([]byte, requestLen(len(rr), nrel))
	encodeRequestHeader(b, op, 42, len(rr), nrel)
	for i, x := range rels {
		encodeRelease(b, i, x)
	}
	for i, x := range rr {
		encodeRange(b, nrel, i, x)
	}
	return b
}

// TestGarbage: malformed messages are answered with the message status
// naming what is wrong, bad ranges with a status each, releases of buffers
// a client does not hold are refused; a client that WRITE-asks with a bad
// rkey is disconnected, costing the server nothing but itself; a client
// then reads correctly and every buffer is back. Client-side mistakes are
// errors naming the extent.
func TestGarbage(t *testing.T) {
	dir := t.TempDir()
	want := dataset(t, dir, []int64{10_000, 300_000}, 6)
	s := startServer(t, ServerConfig{Dir: dir, PoolBytes: 8 * 65536, ChunkBytes: 65536, MaxHeld: 4, MaxBatch: 8})
	r := newRawClient(t, s)
	if r.w.maxBatch != 8 || r.w.maxHeld != 4 || r.w.nfiles != 2 {
		t.Fatalf("welcome %+v", r.w)
	}
	msgCases := []struct {
		name string
		msg  []byte
		want msgStatus
	}{
		{"empty", []byte{}, msgShort},
		{"short", []byte{1, 1, 0}, msgShort},
		{"version", append([]byte{9}, make([]byte, 15)...), msgVersion},
		{"op", append([]byte{1, 7}, make([]byte, 14)...), msgOp},
		{"too many ranges", request1(opRead, 0, nil, make([]reqRange, 9)...), msgTooManyRanges},
		{"too many releases", func() []byte { b := request1(opRead, 0, nil); binary.LittleEndian.PutUint16(b[4:], 5); return b }(), msgTooManyReleases},
		{"length", append(request1(opRead, 0, nil, reqRange{file: 0, n: 10}), 0), msgLength},
		{"reserved", func() []byte { b := request1(opRead, 0, nil); b[6] = 1; return b }(), msgReserved},
		{"release not held", request1(opRead, 1, []uint32{3}), msgBadRelease},
		{"release out of range", request1(opRead, 1, []uint32{1 << 30}), msgBadRelease},
	}
	for _, tc := range msgCases {
		resp := r.roundTrip(tc.msg)
		_, st, _, n, ok := decodeResponseHeader(resp)
		if !ok || st != tc.want || n != 0 {
			t.Fatalf("%s: response ok %v status %v (%d entries), want %v", tc.name, ok, st, n, tc.want)
		}
	}
	rangeCases := []struct {
		rr   reqRange
		want rangeStatus
	}{
		{reqRange{file: 2, n: 10}, rangeBadFile},
		{reqRange{file: 1 << 31, n: 10}, rangeBadFile},
		{reqRange{file: 0, n: 0}, rangeBadLen},
		{reqRange{file: 0, n: 65537}, rangeBadLen},
		{reqRange{file: 0, off: 9_999, n: 2}, rangePastEOF},
		{reqRange{file: 0, off: 1<<64 - 1, n: 2}, rangePastEOF},
		{reqRange{file: 0, n: 5, rsv: 1}, rangeReserved},
		{reqRange{file: 1, off: 299_000, n: 1000}, rangeOK},
	}
	rrs := make([]reqRange, len(rangeCases))
	for i, tc := range rangeCases {
		rrs[i] = tc.rr
	}
	resp := r.roundTrip(request1(opRead, 0, nil, rrs...))
	_, st, tag, n, ok := decodeResponseHeader(resp)
	if !ok || st != msgOK || tag != 42 || n != len(rangeCases) {
		t.Fatalf("ranges: ok %v status %v tag %d n %d", ok, st, tag, n)
	}
	var held uint32
	for i, tc := range rangeCases {
		e := decodeEntry(resp, i)
		if e.status != tc.want {
			t.Fatalf("range %+v: status %v, want %v", tc.rr, e.status, tc.want)
		}
		if e.status == rangeOK {
			held = e.buf
			// Read it as a client would.
			if err := r.dqp.PostSend([]verbs.SendWR{{ID: 5, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{{Addr: r.mr.Addr(), Length: e.n, LKey: r.mr.LKey()}}, RemoteAddr: e.addr, RKey: e.rkey}}); err != nil {
				t.Fatal(err)
			}
			wc := make([]verbs.WC, 1)
			if _, err := r.cq.PollWait(context.Background(), wc); err != nil || wc[0].Status != verbs.WCSuccess {
				t.Fatalf("RDMA READ of the buffer: %v %v", err, wc[0])
			}
			if string(r.mr.Bytes()[:1000]) != string(want["sub1/f001.bin"][299_000:]) {
				t.Fatal("buffer holds the wrong data")
			}
		}
	}
	// The cap: 4 held at most; the client holds one, asks for four more.
	four := []reqRange{{file: 1, n: 10}, {file: 1, n: 10}, {file: 1, n: 10}, {file: 1, n: 10}}
	resp = r.roundTrip(request1(opRead, 0, nil, four...))
	var got []rangeStatus
	var bufs []uint32
	for i := range four {
		e := decodeEntry(resp, i)
		got = append(got, e.status)
		if e.status == rangeOK {
			bufs = append(bufs, e.buf)
		}
	}
	if got[3] != rangeHeld || got[0] != rangeOK {
		t.Fatalf("statuses over the cap: %v", got)
	}
	// Releasing a buffer twice in one message is refused at the second.
	resp = r.roundTrip(request1(opRead, 2, []uint32{held, held}))
	if _, st, _, _, _ := decodeResponseHeader(resp); st != msgBadRelease {
		t.Fatalf("double release: %v", st)
	}
	// Release the rest: all back.
	resp = r.roundTrip(request1(opRead, 3, bufs))
	if _, st, _, _, _ := decodeResponseHeader(resp); st != msgOK {
		t.Fatalf("release: %v", st)
	}
	if st := s.Stats(); st.PoolFree != st.PoolBuffers {
		t.Fatalf("%d of %d buffers free after releases", st.PoolFree, st.PoolBuffers)
	}
	// A WRITE to a bad rkey: the server's QP fails, it drops the client.
	if resp := r.roundTrip(request1(opWrite, 0, nil, reqRange{file: 1, n: 1000, dst: r.mr.Addr(), rkey: r.mr.RKey() ^ 0x5a5a})); resp != nil {
		_, st, _, _, _ := decodeResponseHeader(resp)
		t.Fatalf("write to a bad rkey answered (%v)", st)
	}
	select {
	case <-r.conn.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("server kept the client whose WRITE failed")
	}
	// A SEND longer than the server's receive buffers fails the QP too.
	r2 := newRawClient(t, s)
	if resp := r2.roundTrip(make([]byte, reqBufLen+1)); resp != nil {
		t.Fatal("oversized request answered")
	}
	select {
	case <-r2.conn.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("server kept the client whose SEND was too long")
	}
	waitPoolFull(t, s)
	e := s.Stats().Errors
	if e.Malformed != uint64(len(msgCases))+1 || e.BadRelease != 3 || e.BadFile != 2 || e.BadLength != 2 || e.PastEOF != 2 ||
		e.Reserved != 1 || e.HeldCap != 1 || e.QPFailed != 2 {
		t.Fatalf("error counts %+v", e)
	}

	// A real client still works, and its own mistakes name the extent.
	c := dial(t, s, "loop0", ModeWrite, 2)
	mem, err := c.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	exts := []Extent{{File: 1, Off: 1000, Len: 200_000}, {File: 0, Len: 10_000}}
	dst := [][]byte{mem[:200_000], mem[200_000:210_000]}
	if err := c.ReadBatch(ctx, exts, dst); err != nil {
		t.Fatal(err)
	}
	checkBatch(t, c.Files(), want, exts, dst)
	for _, tc := range []struct {
		exts []Extent
		dst  [][]byte
		want string
	}{
		{[]Extent{{File: 2, Len: 1}}, [][]byte{mem[:1]}, "file index 2 of 2"},
		{[]Extent{{File: 0, Off: 9_999, Len: 2}}, [][]byte{mem[:2]}, "f000.bin offset 9999 length 2: past the end"},
		{[]Extent{{File: 0, Len: 2}}, [][]byte{mem[:3]}, "destination of 3 bytes"},
		{[]Extent{{File: 0, Len: 2}}, [][]byte{make([]byte, 2)}, "not in memory from Alloc"},
		{[]Extent{{File: 0, Len: 2}}, nil, "1 extents, 0 destinations"},
	} {
		if err := c.ReadBatch(ctx, tc.exts, tc.dst); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("ReadBatch(%v): %v, want an error with %q", tc.exts, err, tc.want)
		}
	}
}
