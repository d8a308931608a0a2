package daemon_test

import (
	"encoding/binary"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/internal/hwq"
	"github.com/ibex-rdma/ibex/internal/ibexdwire"
	"github.com/ibex-rdma/ibex/internal/shmem"
	"github.com/ibex-rdma/ibex/provider/ibexd"
	"github.com/ibex-rdma/ibex/verbs"
)

// raw is a process that speaks the control protocol itself, to send the
// daemon what provider/ibexd never would.
type raw struct {
	t   *testing.T
	c   *net.UnixConn
	id  uint64
	gid verbs.GID      // the device's port GID, from hello
	db  *shmem.Segment // the engine's doorbell page, from hello
	cq  *hwq.Consumer  // the last CQ made by qp
	// events the daemon sent while raw waited for answers
	events []ibexdwire.Event
}

func dialRaw(t *testing.T, d *testDaemon) *raw { return dialRawAt(t, d.sock) }

func dialRawAt(t *testing.T, sock string) *raw {
	t.Helper()
	c, err := net.Dial("unixpacket", sock)
	if err != nil {
		t.Fatal(err)
	}
	r := &raw{t: t, c: c.(*net.UnixConn)}
	t.Cleanup(func() { r.c.Close() })
	resp, fds, err := r.do(&ibexdwire.Request{Op: ibexdwire.OpHello, Version: ibexdwire.Version, Device: "udp0"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Attr == nil || len(resp.Ports) == 0 || len(fds) != 1 {
		t.Fatal("hello: no device or port attributes, or no doorbell")
	}
	if r.db, err = shmem.Map(fds[0]); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.db.Close() })
	r.gid = resp.Ports[0].GID
	return r
}

// do sends req and returns its answer; a Response error is returned as
// err. Events that arrive meanwhile are kept.
func (r *raw) do(req *ibexdwire.Request, fds ...int) (*ibexdwire.Response, []int, error) {
	r.t.Helper()
	r.id++
	req.ID = r.id
	if err := ibexdwire.Send(r.c, req, fds...); err != nil {
		return nil, nil, err
	}
	return r.answer(r.id)
}

func (r *raw) answer(id uint64) (*ibexdwire.Response, []int, error) {
	buf := make([]byte, ibexdwire.MaxMessage)
	_ = r.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		var resp ibexdwire.Response
		fds, err := ibexdwire.Recv(r.c, buf, &resp)
		if err != nil {
			return nil, nil, err
		}
		if resp.Event != nil {
			r.events = append(r.events, *resp.Event)
			continue
		}
		if resp.ID == id {
			return &resp, fds, resp.Error()
		}
		ibexdwire.CloseFDs(fds)
	}
}

// mustErr runs req and checks the daemon refuses it with an error that
// contains want.
func (r *raw) mustErr(req *ibexdwire.Request, want string, fds ...int) {
	r.t.Helper()
	_, got, err := r.do(req, fds...)
	ibexdwire.CloseFDs(got)
	if err == nil || !strings.Contains(err.Error(), want) {
		r.t.Errorf("%s: error %v, want one containing %q", req.Op, err, want)
	}
}

// detached waits for the daemon's detach event and the end of the
// connection, and returns the event's cause.
func (r *raw) detached() string {
	r.t.Helper()
	for _, e := range r.events {
		if e.Kind == ibexdwire.EventDetach {
			return e.Cause
		}
	}
	_, _, err := r.answer(0)
	for _, e := range r.events {
		if e.Kind == ibexdwire.EventDetach {
			return e.Cause
		}
	}
	r.t.Fatalf("no detach event before the connection ended (%v)", err)
	return ""
}

// stillServes checks the daemon is alive and serves a well-behaved
// process: a new one attaches and moves data.
func stillServes(t *testing.T, d *testDaemon) {
	t.Helper()
	st, err := ibexd.QueryStatus(d.sock, 5*time.Second)
	if err != nil {
		t.Fatalf("the daemon does not answer after the hostile process: %v", err)
	}
	if st.Detached == 0 {
		t.Errorf("status: %d processes detached for misbehaving, want at least 1", st.Detached)
	}
	a, b := openEnd(t, 4096), openEnd(t, 4096)
	if err := a.qp.Connect(b.qp.Info(), verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(a.qp.Info(), verbs.ConnectOptions{}); err != nil {
		t.Fatal(err)
	}
	copy(a.mr.Bytes(), "still served")
	if wc := a.write(t, peerInfo{addr: b.mr.Addr(), rkey: b.mr.RKey()}, 0, 0, 12); wc.Status != verbs.WCSuccess {
		t.Fatalf("write after the hostile process: %v", wc.Status)
	}
	if got := string(b.mr.Bytes()[:12]); got != "still served" {
		t.Fatalf("write after the hostile process landed %q", got)
	}
}

// TestHostileControl: control messages that no honest provider sends get
// an error naming what is wrong, and the connection stays usable; a
// message that is not the protocol at all detaches the process. The
// daemon serves others throughout.
func TestHostileControl(t *testing.T) {
	d := startDaemon(t, "127.0.0.45")
	r := dialRaw(t, d)
	r.mustErr(&ibexdwire.Request{Op: "format_disk"}, `unknown op "format_disk"`)
	r.mustErr(&ibexdwire.Request{Op: ibexdwire.OpAddSeg}, "want one memfd")
	// An unsealed memfd could be truncated under the daemon's mapping.
	fd, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	_ = unix.Ftruncate(fd, 4096)
	r.mustErr(&ibexdwire.Request{Op: ibexdwire.OpAddSeg}, "F_SEAL_SHRINK", fd)
	unix.Close(fd)
	f, _ := os.CreateTemp(t.TempDir(), "file")
	_ = f.Truncate(4096)
	r.mustErr(&ibexdwire.Request{Op: ibexdwire.OpAddSeg}, "not a sealable memfd", int(f.Fd()))
	f.Close()
	pdResp, _, err := r.do(&ibexdwire.Request{Op: ibexdwire.OpAllocPD})
	if err != nil {
		t.Fatal(err)
	}
	seg, err := shmem.Create("hostile", 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	segResp, _, err := r.do(&ibexdwire.Request{Op: ibexdwire.OpAddSeg}, seg.FD)
	if err != nil {
		t.Fatal(err)
	}
	r.mustErr(&ibexdwire.Request{Op: ibexdwire.OpRegMR, PD: pdResp.PD, Seg: segResp.Seg, Off: 4000, Len: 200, Access: verbs.AccessLocalWrite}, "is not inside segment")
	r.mustErr(&ibexdwire.Request{Op: ibexdwire.OpRegMR, PD: pdResp.PD, Seg: segResp.Seg, Off: 1 << 63, Len: 1 << 63, Access: verbs.AccessLocalWrite}, "is not inside segment")
	r.mustErr(&ibexdwire.Request{Op: ibexdwire.OpRegMR, PD: 999, Seg: segResp.Seg, Len: 64}, "no PD 999")
	r.mustErr(&ibexdwire.Request{Op: ibexdwire.OpRegMR, PD: pdResp.PD, Seg: segResp.Seg, Len: 64, Access: 1 << 20}, "unknown access")
	r.mustErr(&ibexdwire.Request{Op: ibexdwire.OpCreateCQ, Depth: 1 << 30}, "depth")
	r.mustErr(&ibexdwire.Request{Op: ibexdwire.OpCreateCQ, Depth: -1}, "depth")
	r.mustErr(&ibexdwire.Request{Op: ibexdwire.OpCreateQP, PD: pdResp.PD, SendCQ: 77, RecvCQ: 78}, "no CQ")
	r.mustErr(&ibexdwire.Request{Op: ibexdwire.OpModifyQP, QPN: 0x123456}, "no QP")
	r.mustErr(&ibexdwire.Request{Op: ibexdwire.OpDestroyQP, QPN: 0x123456}, "no QP")
	r.mustErr(&ibexdwire.Request{Op: ibexdwire.OpDelSeg, Seg: 4242}, "no segment")
	// Still attached after all that.
	if _, _, err := r.do(&ibexdwire.Request{Op: ibexdwire.OpAllocPD}); err != nil {
		t.Fatalf("the connection is unusable after refused requests: %v", err)
	}
	// Bytes that are not a message at all.
	if _, err := r.c.Write([]byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if cause := r.detached(); !strings.Contains(cause, "hostile control message") {
		t.Errorf("detach cause %q", cause)
	}
	stillServes(t, d)
}

// rawQP is a QP the raw process made, with its rings mapped.
type rawQP struct {
	qpn    uint32
	seg    *shmem.Segment
	sq, rq *hwq.Producer
	sqRing *hwq.Ring
}

func (r *raw) qp(depth int) (*rawQP, uint32, uint32) {
	r.t.Helper()
	pd, _, err := r.do(&ibexdwire.Request{Op: ibexdwire.OpAllocPD})
	if err != nil {
		r.t.Fatal(err)
	}
	cq, fds, err := r.do(&ibexdwire.Request{Op: ibexdwire.OpCreateCQ, Depth: depth})
	if err != nil || len(fds) != 1 {
		r.t.Fatalf("create cq: %v (%d fds)", err, len(fds))
	}
	cqSeg, err := shmem.Map(fds[0])
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { cqSeg.Close() })
	cqRing, err := hwq.Attach(cqSeg.Mem)
	if err != nil {
		r.t.Fatal(err)
	}
	if r.cq, err = cqRing.Consumer(hwq.WaitOptions{}); err != nil {
		r.t.Fatal(err)
	}
	resp, fds, err := r.do(&ibexdwire.Request{Op: ibexdwire.OpCreateQP, PD: pd.PD, SendCQ: cq.CQ, RecvCQ: cq.CQ,
		Cap: verbs.QPCap{MaxSendWR: depth, MaxRecvWR: depth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil || len(fds) != 1 {
		r.t.Fatalf("create qp: %v (%d fds)", err, len(fds))
	}
	seg, err := shmem.Map(fds[0])
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { seg.Close() })
	q := &rawQP{qpn: resp.QPN, seg: seg}
	if q.sqRing, err = hwq.Attach(seg.Mem[:resp.RQOff]); err != nil {
		r.t.Fatal(err)
	}
	q.sq, _ = q.sqRing.Producer()
	rr, _ := hwq.Attach(seg.Mem[resp.RQOff:])
	q.rq, _ = rr.Producer()
	return q, pd.PD, cq.CQ
}

// TestGarbageRing: a process that scribbles over its send ring (a
// producer index far past what the ring holds) is detached with an error
// naming the ring; the daemon serves others.
func TestGarbageRing(t *testing.T) {
	d := startDaemon(t, "127.0.0.46")
	r := dialRaw(t, d)
	q, _, _ := r.qp(16)
	// The producer index lives at offset 64 of the ring's region.
	binary.LittleEndian.PutUint64(q.seg.Mem[64:], 1<<40)
	cause := r.detached()
	if !strings.Contains(cause, "ring protocol violated") || !strings.Contains(cause, "send queue") {
		t.Errorf("detach cause %q: want the send ring named", cause)
	}
	stillServes(t, d)
}

// TestSGEOutsideMR: a send WQE whose SGE reaches past the registered
// memory (which the process's own verbs would refuse) is refused by the
// daemon's verbs: the daemon never reads memory the process did not
// register, and detaches it.
func TestSGEOutsideMR(t *testing.T) {
	d := startDaemon(t, "127.0.0.47")
	r := dialRaw(t, d)
	q, pd, _ := r.qp(16)
	// Of an 8 KiB segment, register the first page only, at 0x10000.
	mr := r.segMR(pd, 8192, 4096, 0x10000, verbs.AccessLocalWrite)
	r.connectSelf(q)
	// 64 bytes starting at the last byte of the MR: 63 bytes past it, in
	// memory the process mapped but did not register.
	w := hwq.SendWQE{WRID: 1, Opcode: ib.WRRDMAWrite, RemoteAddr: 0x10000, RKey: mr.RKey,
		SGL: []hwq.SGE{{Addr: 0x10000 + 4095, Length: 64, LKey: mr.LKey}}}
	if _, err := q.sq.Reserve(1); err != nil {
		t.Fatal(err)
	}
	if err := w.Encode(q.sq.Entry(0)); err != nil {
		t.Fatal(err)
	}
	q.sq.Publish()
	cause := r.detached()
	if !strings.Contains(cause, "outside MR") {
		t.Errorf("detach cause %q: want the SGE outside the MR named", cause)
	}
	stillServes(t, d)
}

// connectSelf moves q through INIT and RTR to RTS, connected to itself.
func (r *raw) connectSelf(q *rawQP) { r.connectTo(q, q.qpn) }

// connectTo moves q through INIT and RTR to RTS, connected to QP dest of
// the same device.
func (r *raw) connectTo(q *rawQP, dest uint32) {
	r.t.Helper()
	attr := verbs.QPAttr{Port: 1, AccessFlags: verbs.AccessRemoteWrite, PathMTU: verbs.MTU1024, DestQPN: dest,
		AH:              verbs.AH{DGID: r.gid, PortNum: 1, HopLimit: 64},
		MaxDestRdAtomic: 1, MinRNRTimer: 12, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxQPRdAtomic: 1}
	for _, s := range []struct {
		st   verbs.QPState
		mask verbs.AttrMask
	}{
		{verbs.QPSInit, verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{verbs.QPSRTR, verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
		{verbs.QPSRTS, verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic},
	} {
		attr.State = s.st
		a := attr
		if _, _, err := r.do(&ibexdwire.Request{Op: ibexdwire.OpModifyQP, QPN: q.qpn, Attr: &a, Mask: verbs.AttrState | s.mask}); err != nil {
			r.t.Fatalf("modify to %v: %v", s.st, err)
		}
	}
}

// segMR hands the daemon a fresh memfd of size bytes and registers its
// first n bytes in pd at iova; the answer holds the keys.
func (r *raw) segMR(pd uint32, size int64, n, iova uint64, access verbs.Access) *ibexdwire.Response {
	r.t.Helper()
	seg, err := shmem.Create("raw", size)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { seg.Close() })
	sr, _, err := r.do(&ibexdwire.Request{Op: ibexdwire.OpAddSeg}, seg.FD)
	if err != nil {
		r.t.Fatal(err)
	}
	mr, _, err := r.do(&ibexdwire.Request{Op: ibexdwire.OpRegMR, PD: pd, Seg: sr.Seg, Len: n, IOVA: iova, Access: access})
	if err != nil {
		r.t.Fatal(err)
	}
	return mr
}
