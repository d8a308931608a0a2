package rctest

import (
	"errors"
	"strings"
	"testing"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/rc"
)

// newTestHost returns a host with a region, a receive, and requests 1 (a
// 100-byte WRITE), 2 (a 64-byte READ) and 3 (a FETCH_ADD) outstanding on a
// live engine.
func newTestHost(t *testing.T) *Host {
	t.Helper()
	h := NewHost("h", 0x1000, 0x1000)
	h.Register(Region{RKey: 7, Addr: 0x1800, Len: 0x100, Access: ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessRemoteAtomic})
	h.PostRecv(50, 0x1200, 64)
	c, err := rc.New(rc.Config{QPN: 1, DestQPN: 2, MaxRdAtomic: 4}, h)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		req   rc.Request
		local uint64
	}{
		{rc.Request{ID: 1, Op: ib.WRRDMAWrite, Len: 100, RemoteAddr: 0x1800, RKey: 7}, 0x1000},
		{rc.Request{ID: 2, Op: ib.WRRDMARead, Len: 64, RemoteAddr: 0x1800, RKey: 7}, 0x1100},
		{rc.Request{ID: 3, Op: ib.WRAtomicFetchAndAdd, Len: 8, RemoteAddr: 0x1808, RKey: 7}, 0x1140},
	} {
		if err := h.Post(c, r.req, r.local); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// TestHostAllows: calls the contract allows leave no breach.
func TestHostAllows(t *testing.T) {
	h := newTestHost(t)
	buf := make([]byte, 100)
	ok := h.Payload(1, 0, buf) && h.Payload(1, 50, buf[:50])
	h.SendComplete(1, ib.WCSuccess, 100, nil)
	ok = ok && h.ReadResponse(2, 0, buf[:64]) && h.AtomicResult(3, 9)
	h.SendComplete(2, ib.WCSuccess, 64, nil)
	h.SendComplete(3, ib.WCSuccess, 8, nil)
	ok = ok && h.RemoteCheck(7, 0x1800, 0x100, ib.AccessRemoteWrite) == ib.WCSuccess &&
		h.RemoteWrite(7, 0x1800, buf) && h.RemoteWrite(7, 0x18f0, buf[:16]) &&
		h.RemoteCheck(7, 0x1810, 16, ib.AccessRemoteRead) == ib.WCSuccess && h.RemoteRead(7, 0x1818, buf[:8])
	if h.RemoteCheck(7, 0x1808, 8, ib.AccessRemoteAtomic) != ib.WCSuccess {
		t.Fatal("atomic check refused")
	}
	if _, aok := h.RemoteAtomic(7, 0x1808, ib.WRAtomicFetchAndAdd, 1, 0); !aok || !ok {
		t.Fatal("an allowed call failed")
	}
	if !h.RecvBegin() || h.RecvPlace(0, buf[:64]) != ib.WCSuccess || h.RecvPlace(60, buf[:8]) != ib.WCLocLenErr {
		t.Fatal("receive calls")
	}
	h.RecvComplete(ib.WCSuccess, 64, 0, false, false)
	if h.RecvBegin() {
		t.Error("RecvBegin with no receive posted")
	}
	h.Fatal(errors.New("class C"))
	if err := h.Err(); err != nil {
		t.Fatal(err)
	}
	if len(h.Sends) != 3 || len(h.Recvs) != 1 || h.Recvs[0].ID != 50 || h.Stop == nil || h.Outstanding() != 0 {
		t.Errorf("sends %+v recvs %+v stop %v", h.Sends, h.Recvs, h.Stop)
	}
}

// TestHostCatches: each breach of the contract is reported.
func TestHostCatches(t *testing.T) {
	buf := make([]byte, 200)
	check := func(h *Host) { h.RemoteCheck(7, 0x1800, 16, ib.AccessRemoteWrite) }
	for _, c := range []struct {
		name string
		call func(h *Host)
		want string
	}{
		{"completion out of order", func(h *Host) { h.SendComplete(2, ib.WCSuccess, 64, nil) }, "out of order"},
		{"completion twice", func(h *Host) {
			h.SendComplete(1, ib.WCSuccess, 100, nil)
			h.SendComplete(1, ib.WCSuccess, 100, nil)
		}, "completed twice"},
		{"completion of nothing", func(h *Host) {
			for id := uint64(1); id <= 4; id++ {
				h.SendComplete(id, ib.WCSuccess, []uint32{100, 64, 8, 0}[id-1], nil)
			}
		}, "no request outstanding"},
		{"success with a cause", func(h *Host) { h.SendComplete(1, ib.WCSuccess, 100, errors.New("x")) }, "with a cause"},
		{"success with the wrong length", func(h *Host) { h.SendComplete(1, ib.WCSuccess, 99, nil) }, "for a request of 100"},
		{"error without a cause", func(h *Host) { h.SendComplete(1, ib.WCRetryExcErr, 0, nil) }, "without a cause"},
		{"completion after an error", func(h *Host) {
			h.SendComplete(1, ib.WCRetryExcErr, 0, errors.New("gone"))
			h.SendComplete(2, ib.WCSuccess, 64, nil)
		}, "after the engine stopped"},
		{"Fatal after an error completion", func(h *Host) {
			h.SendComplete(1, ib.WCRemAccessErr, 0, errors.New("nak"))
			h.Fatal(errors.New("again"))
		}, "Fatal"},
		{"Fatal twice", func(h *Host) { h.Fatal(errors.New("a")); h.Fatal(errors.New("b")) }, "after the engine stopped"},
		{"Payload beyond the request", func(h *Host) { h.Payload(1, 90, buf[:20]) }, "beyond its length"},
		{"Payload for a READ", func(h *Host) { h.Payload(2, 0, buf[:8]) }, "Payload(2) for RDMA_READ"},
		{"Payload for no request", func(h *Host) { h.Payload(9, 0, buf[:8]) }, "no such request"},
		{"ReadResponse beyond the READ", func(h *Host) { h.ReadResponse(2, 60, buf[:8]) }, "beyond its length"},
		{"ReadResponse for a WRITE", func(h *Host) { h.ReadResponse(1, 0, buf[:8]) }, "for RDMA_WRITE"},
		{"AtomicResult for a READ", func(h *Host) { h.AtomicResult(2, 1) }, "for RDMA_READ"},
		{"RemoteWrite unchecked", func(h *Host) { h.RemoteWrite(7, 0x1800, buf[:8]) }, "outside what RemoteCheck accepted"},
		{"RemoteWrite past the check", func(h *Host) { check(h); h.RemoteWrite(7, 0x1808, buf[:16]) }, "outside what RemoteCheck accepted"},
		{"RemoteRead after a write check", func(h *Host) { check(h); h.RemoteRead(7, 0x1800, buf[:8]) }, "outside what RemoteCheck accepted"},
		{"RemoteAtomic unchecked", func(h *Host) { h.RemoteAtomic(7, 0x1808, ib.WRAtomicCmpAndSwp, 0, 1) }, "outside what RemoteCheck accepted"},
		{"RemoteAtomic twice on one check", func(h *Host) {
			h.RemoteCheck(7, 0x1808, 8, ib.AccessRemoteAtomic)
			h.RemoteAtomic(7, 0x1808, ib.WRAtomicFetchAndAdd, 1, 0)
			h.RemoteAtomic(7, 0x1808, ib.WRAtomicFetchAndAdd, 1, 0)
		}, "outside what RemoteCheck accepted"},
		{"RemoteAtomic unaligned", func(h *Host) { h.RemoteAtomic(7, 0x1804, ib.WRAtomicFetchAndAdd, 1, 0) }, "unaligned"},
		{"RemoteAtomic with a READ", func(h *Host) { h.RemoteAtomic(7, 0x1808, ib.WRRDMARead, 1, 0) }, "with RDMA_READ"},
		{"RecvPlace with none current", func(h *Host) { h.RecvPlace(0, buf[:8]) }, "no receive current"},
		{"RecvComplete with none current", func(h *Host) { h.RecvComplete(ib.WCSuccess, 8, 0, false, false) }, "no receive current"},
		{"RecvBegin twice", func(h *Host) { h.RecvBegin(); h.RecvBegin() }, "receive 50 current"},
		{"RecvComplete beyond the receive", func(h *Host) { h.RecvBegin(); h.RecvComplete(ib.WCSuccess, 65, 0, false, false) }, "into a receive of 64"},
	} {
		h := newTestHost(t)
		c.call(h)
		if err := h.Err(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Err() = %v, want %q", c.name, err, c.want)
		}
	}
}

func TestHostRefuses(t *testing.T) {
	h := newTestHost(t)
	for _, c := range []struct {
		rkey uint32
		va   uint64
		n    uint32
		need ib.Access
	}{{8, 0x1800, 8, ib.AccessRemoteRead}, {7, 0x17ff, 8, ib.AccessRemoteRead}, {7, 0x18f9, 8, ib.AccessRemoteRead}, {7, 0x1800, 1 << 31, ib.AccessRemoteWrite}} {
		if st := h.RemoteCheck(c.rkey, c.va, c.n, c.need); st != ib.WCRemAccessErr {
			t.Errorf("RemoteCheck(%+v) = %v", c, st)
		}
	}
	// A deregistered region: checks refuse it, accesses already checked
	// fail without a breach.
	h.RemoteCheck(7, 0x1800, 16, ib.AccessRemoteWrite)
	h.Deregister(7)
	if h.RemoteWrite(7, 0x1800, make([]byte, 8)) || h.RemoteCheck(7, 0x1800, 8, ib.AccessRemoteWrite) != ib.WCRemAccessErr {
		t.Error("a deregistered region still accepts")
	}
	// Local memory outside Mem fails (LOC_PROT_ERR), without a breach.
	c, _ := rc.New(rc.Config{QPN: 1, DestQPN: 2}, h)
	h.SendComplete(1, ib.WCSuccess, 100, nil)
	h.SendComplete(2, ib.WCSuccess, 64, nil)
	h.SendComplete(3, ib.WCSuccess, 8, nil)
	if err := h.Post(c, rc.Request{ID: 4, Op: ib.WRSend, Len: 16}, 0x1ff8); err != nil {
		t.Fatal(err)
	}
	if h.Payload(4, 0, make([]byte, 16)) {
		t.Error("Payload beyond memory succeeded")
	}
	if err := h.Err(); err != nil {
		t.Error(err)
	}
}
