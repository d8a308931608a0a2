// Command fakeverbs is libibexverbs.so, a stand-in libibverbs that runs
// Debian's perftest binaries (ib_write_bw, ...) over a real ibex device.
// Build it with
//
//	go build -buildmode=c-shared -o libibexverbs.so ./internal/perftestrun/testdata/fakeverbs
//
// and load it into perftest with LD_PRELOAD (package internal/perftestrun
// does both). abi.c is the libibverbs ABI; this file implements every verb
// with package verbs on the device named by FAKEVERBS_DEVICE (default
// udp0), so perftest's WRITEs, READs, SENDs and atomics go over ibex's
// transport and land at the addresses perftest names, with ibex's MR
// checks. provider/udp takes its address from IBEX_UDP_ADDR: two perftest
// processes on one host need two, e.g. 127.0.0.2 and 127.0.0.3.
//
// Supported: RC QPs (UD and UC fail with EOPNOTSUPP), no SRQ, no address
// handles, no ibv_qp_ex (run perftest with --use_old_post_send), completion
// channels without a file descriptor (ibv_get_cq_event blocks). A verb
// called wrongly returns the errno libibverbs would and, with
// FAKEVERBS_TRACE set, prints a one-line reason on stderr.
//
// C objects (abi.c) hold the handle of their Go object in the table below;
// Go holds only C pointers, never the reverse (the cgo pointer rules).
package main

/*
#cgo LDFLAGS: -Wl,--version-script=${SRCDIR}/libibverbs.map
#include <errno.h>
#include "fv.h"
*/
import "C"

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	_ "github.com/ibex-rdma/ibex/provider/udp"
	"github.com/ibex-rdma/ibex/verbs"
)

func main() {}

var trace = os.Getenv("FAKEVERBS_TRACE") != ""

// fail prints why a verb failed (with FAKEVERBS_TRACE) and returns its errno.
func fail(what string, err error) C.int {
	if trace {
		fmt.Fprintf(os.Stderr, "fakeverbs: %s: %v\n", what, err)
	}
	return errnoOf(err)
}

func errnoOf(err error) C.int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, verbs.ErrQueueFull), errors.Is(err, verbs.ErrLimit):
		return C.ENOMEM
	case errors.Is(err, verbs.ErrBusy):
		return C.EBUSY
	case errors.Is(err, verbs.ErrUnsupported):
		return C.EOPNOTSUPP
	case errors.Is(err, verbs.ErrNoDevice):
		return C.ENODEV
	case errors.Is(err, verbs.ErrCQOverflow):
		return C.EOVERFLOW
	case errors.Is(err, verbs.ErrInvalidArgument), errors.Is(err, verbs.ErrInvalidState),
		errors.Is(err, verbs.ErrInvalidLKey), errors.Is(err, verbs.ErrClosed):
		return C.EINVAL
	}
	var en syscall.Errno
	if errors.As(err, &en) {
		return C.int(en)
	}
	return C.EIO
}

// guard turns a panic in a verb into EIO and a line on stderr: perftest
// gets an error, not a crashed process.
func guard(what string, rc *C.int) {
	if r := recover(); r != nil {
		fmt.Fprintf(os.Stderr, "fakeverbs: %s: internal error: %v\n", what, r)
		*rc = C.EIO
	}
}

// The handle table. Handle 0 is never used.
var table struct {
	mu   sync.RWMutex
	objs []any
	free []uintptr
}

func put(o any) C.uintptr_t {
	table.mu.Lock()
	defer table.mu.Unlock()
	if len(table.objs) == 0 {
		table.objs = append(table.objs, nil)
	}
	if n := len(table.free); n > 0 {
		h := table.free[n-1]
		table.free = table.free[:n-1]
		table.objs[h] = o
		return C.uintptr_t(h)
	}
	table.objs = append(table.objs, o)
	return C.uintptr_t(len(table.objs) - 1)
}

func drop(h C.uintptr_t) {
	table.mu.Lock()
	defer table.mu.Unlock()
	table.objs[h] = nil
	table.free = append(table.free, uintptr(h))
}

func get[T any](h C.uintptr_t, what string) (T, error) {
	table.mu.RLock()
	var o any
	if uintptr(h) < uintptr(len(table.objs)) {
		o = table.objs[h]
	}
	table.mu.RUnlock()
	t, ok := o.(T)
	if !ok {
		return t, fmt.Errorf("handle %d is not a live %s: %w", uintptr(h), what, verbs.ErrInvalidArgument)
	}
	return t, nil
}

type ctxObj struct{ c *verbs.Context }

type pdObj struct {
	ctx *ctxObj
	pd  *verbs.PD
}

type mrObj struct {
	pd *pdObj
	mr *verbs.MR
}

type chanObj struct {
	ctx *ctxObj
	mu  sync.Mutex
	cqs map[*cqObj]struct{}
}

type cqObj struct {
	ctx   *ctxObj
	cq    *verbs.CQ
	ch    *chanObj
	cptr  unsafe.Pointer // the C struct ibv_cq, for ibv_get_cq_event
	armed atomic.Bool
	mu    sync.Mutex
	wcs   []verbs.WC
}

type qpObj struct {
	pd  *pdObj
	qp  *verbs.QP
	mu  sync.Mutex
	swr []verbs.SendWR
	rwr []verbs.RecvWR
	sge []verbs.SGE
	off []int
}

// release destroys what the context still holds, children first.
func (o *ctxObj) release() {
	table.mu.Lock()
	objs := append([]any(nil), table.objs...)
	table.mu.Unlock()
	owned := func(pass int, x any) func() error {
		switch x := x.(type) {
		case *qpObj:
			if pass == 0 && x.pd.ctx == o {
				return x.qp.Destroy
			}
		case *cqObj:
			if pass == 1 && x.ctx == o {
				return x.cq.Destroy
			}
		case *mrObj:
			if pass == 2 && x.pd.ctx == o {
				return x.mr.Dereg
			}
		case *pdObj:
			if pass == 3 && x.ctx == o {
				return x.pd.Dealloc
			}
		case *chanObj:
			if pass == 4 && x.ctx == o {
				return func() error { return nil }
			}
		}
		return nil
	}
	for pass := range 5 {
		for h, x := range objs {
			if destroy := owned(pass, x); destroy != nil {
				if err := destroy(); err != nil && trace {
					fmt.Fprintf(os.Stderr, "fakeverbs: close_device: %v\n", err)
				}
				drop(C.uintptr_t(h))
			}
		}
	}
}

//export fvHasDevice
func fvHasDevice(name *C.char) C.int {
	n := C.GoString(name)
	for _, d := range verbs.Devices() {
		if d.Device == n || d.Provider+"/"+d.Device == n {
			return 1
		}
	}
	return 0
}

//export fvOpen
func fvOpen(name *C.char, h *C.uintptr_t) (rc C.int) {
	defer guard("open_device", &rc)
	c, err := verbs.Open(C.GoString(name))
	if err != nil {
		return fail("open_device", err)
	}
	*h = put(&ctxObj{c: c})
	return 0
}

//export fvDestroy
func fvDestroy(h C.uintptr_t) (rc C.int) {
	defer guard("destroy", &rc)
	o, err := get[any](h, "object")
	if err != nil {
		return fail("destroy", err)
	}
	what := "destroy"
	switch o := o.(type) {
	case *ctxObj:
		what = "close_device"
		if err = o.c.Close(); errors.Is(err, verbs.ErrBusy) {
			// libibverbs closes a context whatever it still holds (the
			// kernel frees it with the file); perftest relies on that.
			o.release()
			err = o.c.Close()
		}
	case *pdObj:
		what, err = "dealloc_pd", o.pd.Dealloc()
	case *mrObj:
		what, err = "dereg_mr", o.mr.Dereg()
	case *chanObj:
		what = "destroy_comp_channel"
		o.mu.Lock()
		if len(o.cqs) > 0 {
			err = fmt.Errorf("%d CQs still use the channel: %w", len(o.cqs), verbs.ErrBusy)
		}
		o.mu.Unlock()
	case *cqObj:
		what, err = "destroy_cq", o.cq.Destroy()
		if err == nil && o.ch != nil {
			o.ch.mu.Lock()
			delete(o.ch.cqs, o)
			o.ch.mu.Unlock()
		}
	case *qpObj:
		what, err = "destroy_qp", o.qp.Destroy()
	}
	if err != nil {
		return fail(what, err)
	}
	drop(h)
	return 0
}

//export fvQueryDevice
func fvQueryDevice(h C.uintptr_t, a *C.struct_ibv_device_attr) (rc C.int) {
	defer guard("query_device", &rc)
	o, err := get[*ctxObj](h, "context")
	if err != nil {
		return fail("query_device", err)
	}
	d := o.c.QueryDevice()
	*a = C.struct_ibv_device_attr{}
	fw := unsafe.Slice((*byte)(unsafe.Pointer(&a.fw_ver[0])), len(a.fw_ver))
	copy(fw[:len(fw)-1], d.FWVersion)
	binary.BigEndian.PutUint64(unsafe.Slice((*byte)(unsafe.Pointer(&a.node_guid)), 8), d.NodeGUID)
	binary.BigEndian.PutUint64(unsafe.Slice((*byte)(unsafe.Pointer(&a.sys_image_guid)), 8), d.SysImageGUID)
	a.max_mr_size = C.uint64_t(d.MaxMRSize)
	a.page_size_cap = C.uint64_t(d.PageSizeCap)
	a.vendor_id = C.uint32_t(d.VendorID)
	a.vendor_part_id = C.uint32_t(d.VendorPartID)
	a.hw_ver = C.uint32_t(d.HWVersion)
	a.max_qp = C.int(d.MaxQP)
	a.max_qp_wr = C.int(d.MaxQPWR)
	a.max_sge = C.int(d.MaxSGE)
	a.max_sge_rd = C.int(d.MaxSGE)
	a.max_cq = C.int(d.MaxCQ)
	a.max_cqe = C.int(d.MaxCQE)
	a.max_mr = C.int(d.MaxMR)
	a.max_pd = C.int(d.MaxPD)
	a.max_qp_rd_atom = C.int(d.MaxQPRdAtom)
	a.max_qp_init_rd_atom = C.int(d.MaxQPInitRdAtom)
	a.max_res_rd_atom = C.int(d.MaxQPRdAtom * d.MaxQP)
	a.atomic_cap = uint32(d.AtomicCap)
	a.max_pkeys = 1
	a.local_ca_ack_delay = 15
	a.phys_port_cnt = C.uint8_t(d.PhysPortCnt)
	return 0
}

//export fvQueryPort
func fvQueryPort(h C.uintptr_t, port C.int, a *C.struct_ibv_port_attr) (rc C.int) {
	defer guard("query_port", &rc)
	o, err := get[*ctxObj](h, "context")
	if err != nil {
		return fail("query_port", err)
	}
	if port < 1 || port > 255 {
		return fail("query_port", fmt.Errorf("port %d: %w", port, verbs.ErrInvalidArgument))
	}
	p, err := o.c.QueryPort(uint8(port))
	if err != nil {
		return fail("query_port", err)
	}
	*a = C.struct_ibv_port_attr{}
	a.state = uint32(p.State)
	a.max_mtu = uint32(p.MaxMTU)
	a.active_mtu = uint32(p.ActiveMTU)
	a.gid_tbl_len = C.int(p.GIDTblLen)
	a.max_msg_sz = C.uint32_t(min(p.MaxMsgSize, 1<<31))
	a.pkey_tbl_len = 1
	a.lid = C.uint16_t(p.LID)
	a.sm_lid = C.uint16_t(p.SMLID)
	a.lmc = C.uint8_t(p.LMC)
	a.max_vl_num = 1
	a.active_width = C.uint8_t(p.ActiveWidth)
	a.active_speed = 32
	a.phys_state = C.uint8_t(p.PhysState)
	a.link_layer = C.IBV_LINK_LAYER_INFINIBAND
	if p.LinkLayer == "Ethernet" {
		a.link_layer = C.IBV_LINK_LAYER_ETHERNET
	}
	return 0
}

//export fvQueryGID
func fvQueryGID(h C.uintptr_t, port, index C.int, gid *C.uint8_t) (rc C.int) {
	defer guard("query_gid", &rc)
	o, err := get[*ctxObj](h, "context")
	if err != nil {
		return fail("query_gid", err)
	}
	if port < 1 || port > 255 {
		return fail("query_gid", fmt.Errorf("port %d: %w", port, verbs.ErrInvalidArgument))
	}
	p, err := o.c.QueryPort(uint8(port))
	if err != nil {
		return fail("query_gid", err)
	}
	if index < 0 || int(index) >= max(p.GIDTblLen, 1) {
		return fail("query_gid", fmt.Errorf("index %d: the GID table has %d entries: %w", index, max(p.GIDTblLen, 1), verbs.ErrInvalidArgument))
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(gid)), 16), p.GID[:])
	return 0
}

//export fvAllocPD
func fvAllocPD(hctx C.uintptr_t, h *C.uintptr_t) (rc C.int) {
	defer guard("alloc_pd", &rc)
	o, err := get[*ctxObj](hctx, "context")
	if err != nil {
		return fail("alloc_pd", err)
	}
	pd, err := o.c.AllocPD()
	if err != nil {
		return fail("alloc_pd", err)
	}
	*h = put(&pdObj{ctx: o, pd: pd})
	return 0
}

//export fvRegMR
func fvRegMR(hpd C.uintptr_t, addr unsafe.Pointer, length C.size_t, iova C.uint64_t, access C.uint, h *C.uintptr_t, lkey, rkey *C.uint32_t) (rc C.int) {
	defer guard("reg_mr", &rc)
	o, err := get[*pdObj](hpd, "PD")
	if err != nil {
		return fail("reg_mr", err)
	}
	switch {
	case addr == nil || length == 0:
		return fail("reg_mr", fmt.Errorf("addr %p length %d: %w", addr, length, verbs.ErrInvalidArgument))
	case uint64(iova) != uint64(uintptr(addr)):
		return fail("reg_mr", fmt.Errorf("iova %#x is not the address %p: ibex MRs are named by their virtual address: %w", uint64(iova), addr, verbs.ErrInvalidArgument))
	case uint64(length) > 1<<40:
		return fail("reg_mr", fmt.Errorf("length %d: %w", length, verbs.ErrInvalidArgument))
	}
	// C memory (perftest's buffers), not Go's: the slice only names it.
	buf := unsafe.Slice((*byte)(addr), int(length))
	mr, err := o.pd.RegMR(buf, verbs.Access(access))
	if err != nil {
		return fail("reg_mr", err)
	}
	*h = put(&mrObj{pd: o, mr: mr})
	*lkey, *rkey = C.uint32_t(mr.LKey()), C.uint32_t(mr.RKey())
	return 0
}

//export fvCreateChannel
func fvCreateChannel(hctx C.uintptr_t, h *C.uintptr_t) (rc C.int) {
	defer guard("create_comp_channel", &rc)
	o, err := get[*ctxObj](hctx, "context")
	if err != nil {
		return fail("create_comp_channel", err)
	}
	*h = put(&chanObj{ctx: o, cqs: map[*cqObj]struct{}{}})
	return 0
}

//export fvCreateCQ
func fvCreateCQ(hctx C.uintptr_t, cqe C.int, hch C.uintptr_t, cptr unsafe.Pointer, h *C.uintptr_t, actual *C.int) (rc C.int) {
	defer guard("create_cq", &rc)
	o, err := get[*ctxObj](hctx, "context")
	if err != nil {
		return fail("create_cq", err)
	}
	var ch *chanObj
	if hch != 0 {
		if ch, err = get[*chanObj](hch, "completion channel"); err != nil {
			return fail("create_cq", err)
		}
	}
	if cqe < 1 || int(cqe) > o.c.QueryDevice().MaxCQE {
		return fail("create_cq", fmt.Errorf("cqe %d: device allows 1..%d: %w", cqe, o.c.QueryDevice().MaxCQE, verbs.ErrInvalidArgument))
	}
	// Round up as mlx5 does; the CQ holds at least what was asked for.
	depth := 64
	for depth < int(cqe) {
		depth *= 2
	}
	depth = min(depth, o.c.QueryDevice().MaxCQE)
	cq, err := o.c.CreateCQ(depth)
	if err != nil {
		return fail("create_cq", err)
	}
	c := &cqObj{ctx: o, cq: cq, ch: ch, cptr: cptr, wcs: make([]verbs.WC, 32)}
	if ch != nil {
		ch.mu.Lock()
		ch.cqs[c] = struct{}{}
		ch.mu.Unlock()
	}
	*h = put(c)
	*actual = C.int(depth)
	return 0
}

//export fvPollCQ
func fvPollCQ(h C.uintptr_t, num C.int, out *C.struct_fv_wc) (rc C.int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(os.Stderr, "fakeverbs: poll_cq: internal error: %v\n", r)
			rc = -C.EIO
		}
	}()
	c, err := get[*cqObj](h, "CQ")
	if err != nil {
		return -fail("poll_cq", err)
	}
	if num <= 0 {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	wcs := c.wcs[:min(int(num), len(c.wcs))]
	n, err := c.cq.Poll(wcs)
	if err != nil && n == 0 {
		return -fail("poll_cq", err)
	}
	dst := unsafe.Slice(out, n)
	for i, w := range wcs[:n] {
		dst[i] = C.struct_fv_wc{
			wr_id: C.uint64_t(w.WRID), status: C.uint32_t(w.Status), opcode: C.uint32_t(w.Opcode),
			byte_len: C.uint32_t(w.ByteLen), imm: C.uint32_t(w.Imm), qp_num: C.uint32_t(w.QPNum),
			src_qp: C.uint32_t(w.SrcQP), flags: C.uint32_t(w.Flags),
		}
		if trace && w.Status != verbs.WCSuccess {
			fmt.Fprintf(os.Stderr, "fakeverbs: poll_cq: %v\n", w)
		}
	}
	return C.int(n)
}

//export fvArmCQ
func fvArmCQ(h C.uintptr_t, solicited C.int) (rc C.int) {
	defer guard("req_notify_cq", &rc)
	c, err := get[*cqObj](h, "CQ")
	if err != nil {
		return fail("req_notify_cq", err)
	}
	if c.ch == nil {
		return fail("req_notify_cq", fmt.Errorf("the CQ has no completion channel: %w", verbs.ErrInvalidArgument))
	}
	c.armed.Store(true)
	return 0
}

//export fvGetCQEvent
func fvGetCQEvent(hch C.uintptr_t, cq *unsafe.Pointer) (rc C.int) {
	defer guard("get_cq_event", &rc)
	ch, err := get[*chanObj](hch, "completion channel")
	if err != nil {
		return fail("get_cq_event", err)
	}
	ch.mu.Lock()
	var armed []*cqObj
	for c := range ch.cqs {
		if c.armed.Load() {
			armed = append(armed, c)
		}
	}
	ch.mu.Unlock()
	if len(armed) == 0 {
		return fail("get_cq_event", fmt.Errorf("no CQ of the channel is armed (ibv_req_notify_cq): %w", verbs.ErrInvalidState))
	}
	// An event is a completion in an armed CQ: wait on each, take the first.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		c   *cqObj
		err error
	}
	done := make(chan result, len(armed))
	for _, c := range armed {
		go func() { done <- result{c, c.cq.Wait(ctx)} }()
	}
	var r result
	for range armed {
		if r = <-done; r.err == nil {
			break
		}
	}
	if r.err != nil {
		return fail("get_cq_event", r.err)
	}
	r.c.armed.Store(false)
	*cq = r.c.cptr
	return 0
}

//export fvCreateQP
func fvCreateQP(hpd, hscq, hrcq C.uintptr_t, sigAll C.int, cp *C.struct_fv_cap, h *C.uintptr_t, qpn *C.uint32_t) (rc C.int) {
	defer guard("create_qp", &rc)
	pd, err := get[*pdObj](hpd, "PD")
	if err != nil {
		return fail("create_qp", err)
	}
	scq, err := get[*cqObj](hscq, "send CQ")
	if err != nil {
		return fail("create_qp", err)
	}
	rcq, err := get[*cqObj](hrcq, "recv CQ")
	if err != nil {
		return fail("create_qp", err)
	}
	const lim = 1 << 30
	if cp.max_send_wr > lim || cp.max_recv_wr > lim || cp.max_send_sge > lim || cp.max_recv_sge > lim || cp.max_inline_data > lim {
		return fail("create_qp", fmt.Errorf("cap %+v: %w", *cp, verbs.ErrInvalidArgument))
	}
	qp, err := pd.pd.CreateQP(verbs.QPInitAttr{
		Type: verbs.QPTypeRC, SendCQ: scq.cq, RecvCQ: rcq.cq, SigAll: sigAll != 0,
		Cap: verbs.QPCap{
			MaxSendWR: int(cp.max_send_wr), MaxRecvWR: int(cp.max_recv_wr),
			MaxSendSGE: int(cp.max_send_sge), MaxRecvSGE: int(cp.max_recv_sge),
			MaxInlineData: int(cp.max_inline_data),
		},
	})
	if err != nil {
		return fail("create_qp", err)
	}
	got := qp.Cap()
	*cp = C.struct_fv_cap{
		max_send_wr: C.uint32_t(got.MaxSendWR), max_recv_wr: C.uint32_t(got.MaxRecvWR),
		max_send_sge: C.uint32_t(got.MaxSendSGE), max_recv_sge: C.uint32_t(got.MaxRecvSGE),
		max_inline_data: C.uint32_t(got.MaxInlineData),
	}
	*h = put(&qpObj{pd: pd, qp: qp})
	*qpn = C.uint32_t(qp.Num())
	return 0
}

// u8 narrows an ibv_qp_attr field that is a uint8_t in C.
func u8(v C.uint32_t) uint8 { return uint8(min(v, 255)) }

//export fvModifyQP
func fvModifyQP(h C.uintptr_t, f *C.struct_fv_qpattr, mask C.int) (rc C.int) {
	defer guard("modify_qp", &rc)
	q, err := get[*qpObj](h, "QP")
	if err != nil {
		return fail("modify_qp", err)
	}
	a := verbs.QPAttr{
		State: verbs.QPState(u8(f.state)), CurState: verbs.QPState(u8(f.cur_state)),
		EnSQDAsyncNotify: f.en_sqd_async_notify != 0, AccessFlags: verbs.Access(f.access),
		PKeyIndex: uint16(min(f.pkey_index, 0xffff)), Port: u8(f.port),
		AH: verbs.AH{
			DGID: verbs.GID(*(*[16]byte)(unsafe.Pointer(&f.dgid))), DLID: uint16(min(f.dlid, 0xffff)), SL: u8(f.sl),
			SGIDIndex: u8(f.sgid_index), HopLimit: u8(f.hop_limit), PortNum: u8(f.ah_port),
		},
		PathMTU: verbs.MTU(u8(f.path_mtu)), Timeout: u8(f.timeout), RetryCnt: u8(f.retry_cnt),
		RNRRetry: u8(f.rnr_retry), RQPSN: uint32(f.rq_psn), SQPSN: uint32(f.sq_psn),
		MaxQPRdAtomic: u8(f.max_rd_atomic), MaxDestRdAtomic: u8(f.max_dest_rd_atomic),
		MinRNRTimer: u8(f.min_rnr_timer), DestQPN: uint32(f.dest_qp_num),
	}
	if err := q.qp.Modify(&a, verbs.AttrMask(uint32(mask))); err != nil {
		return fail("modify_qp", err)
	}
	return 0
}

//export fvQueryQP
func fvQueryQP(h C.uintptr_t, f *C.struct_fv_qpattr) (rc C.int) {
	defer guard("query_qp", &rc)
	q, err := get[*qpObj](h, "QP")
	if err != nil {
		return fail("query_qp", err)
	}
	a := q.qp.Query()
	*f = C.struct_fv_qpattr{
		state: C.uint32_t(a.State), cur_state: C.uint32_t(a.CurState), access: C.uint32_t(a.AccessFlags),
		pkey_index: C.uint32_t(a.PKeyIndex), port: C.uint32_t(a.Port), path_mtu: C.uint32_t(a.PathMTU),
		timeout: C.uint32_t(a.Timeout), retry_cnt: C.uint32_t(a.RetryCnt), rnr_retry: C.uint32_t(a.RNRRetry),
		rq_psn: C.uint32_t(a.RQPSN), sq_psn: C.uint32_t(a.SQPSN), max_rd_atomic: C.uint32_t(a.MaxQPRdAtomic),
		max_dest_rd_atomic: C.uint32_t(a.MaxDestRdAtomic), min_rnr_timer: C.uint32_t(a.MinRNRTimer),
		dest_qp_num: C.uint32_t(a.DestQPN), dlid: C.uint32_t(a.AH.DLID), sl: C.uint32_t(a.AH.SL),
		sgid_index: C.uint32_t(a.AH.SGIDIndex), hop_limit: C.uint32_t(a.AH.HopLimit), ah_port: C.uint32_t(a.AH.PortNum),
	}
	if a.EnSQDAsyncNotify {
		f.en_sqd_async_notify = 1
	}
	for i, b := range a.AH.DGID {
		f.dgid[i] = C.uint8_t(b)
	}
	return 0
}

// postErr is the errno of a failed post and the number of requests posted.
func postErr(what string, err error, n int) (C.int, int) {
	var pe *verbs.PostError
	if errors.As(err, &pe) {
		return fail(what, err), pe.Index
	}
	return fail(what, err), 0
}

//export fvPostSend
func fvPostSend(h C.uintptr_t, wr *C.struct_fv_swr, n C.int, posted *C.int) (rc C.int) {
	defer guard("post_send", &rc)
	*posted = 0
	q, err := get[*qpObj](h, "QP")
	if err != nil {
		return fail("post_send", err)
	}
	if n <= 0 {
		return 0
	}
	ws := unsafe.Slice(wr, int(n))
	q.mu.Lock()
	defer q.mu.Unlock()
	q.swr, q.sge, q.off = q.swr[:0], q.sge[:0], q.off[:0]
	for i := range ws {
		f := &ws[i]
		if f.opcode > C.uint32_t(verbs.WRAtomicFetchAndAdd) || f.flags > 0xff {
			*posted = C.int(i)
			return fail("post_send", fmt.Errorf("wr %#x: opcode %d flags %#x: %w", uint64(f.wr_id), f.opcode, f.flags, verbs.ErrInvalidArgument))
		}
		w := verbs.SendWR{
			ID: uint64(f.wr_id), Opcode: verbs.Opcode(f.opcode), Flags: verbs.SendFlags(f.flags),
			Imm: uint32(f.imm), RemoteAddr: uint64(f.raddr), RKey: uint32(f.rkey),
			CompareAdd: uint64(f.compare_add), Swap: uint64(f.swap),
		}
		q.off = append(q.off, len(q.sge))
		if w.Flags&verbs.SendInline != 0 {
			// abi.c copied the payload: sg is its bytes, num_sge their count.
			if f.num_sge > 0 {
				w.Inline = unsafe.Slice((*byte)(unsafe.Pointer(f.sg)), int(f.num_sge))
			}
		} else if f.num_sge > 0 {
			if f.num_sge > 1024 {
				*posted = C.int(i)
				return fail("post_send", fmt.Errorf("wr %#x: num_sge %d: %w", uint64(f.wr_id), f.num_sge, verbs.ErrInvalidArgument))
			}
			for _, s := range unsafe.Slice(f.sg, int(f.num_sge)) {
				q.sge = append(q.sge, verbs.SGE{Addr: uint64(s.addr), Length: uint32(s.length), LKey: uint32(s.lkey)})
			}
		}
		q.swr = append(q.swr, w)
	}
	for i := range q.swr {
		if q.swr[i].Flags&verbs.SendInline == 0 {
			end := len(q.sge)
			if i+1 < len(q.off) {
				end = q.off[i+1]
			}
			q.swr[i].SGL = q.sge[q.off[i]:end:end]
		}
	}
	err = q.qp.PostSend(q.swr)
	clear(q.swr) // drop the references to C memory
	if err != nil {
		rc, k := postErr("post_send", err, len(ws))
		*posted = C.int(k)
		return rc
	}
	*posted = n
	return 0
}

//export fvPostRecv
func fvPostRecv(h C.uintptr_t, wr *C.struct_fv_rwr, n C.int, posted *C.int) (rc C.int) {
	defer guard("post_recv", &rc)
	*posted = 0
	q, err := get[*qpObj](h, "QP")
	if err != nil {
		return fail("post_recv", err)
	}
	if n <= 0 {
		return 0
	}
	ws := unsafe.Slice(wr, int(n))
	q.mu.Lock()
	defer q.mu.Unlock()
	q.rwr, q.sge, q.off = q.rwr[:0], q.sge[:0], q.off[:0]
	for i := range ws {
		f := &ws[i]
		if f.num_sge > 1024 {
			*posted = C.int(i)
			return fail("post_recv", fmt.Errorf("wr %#x: num_sge %d: %w", uint64(f.wr_id), f.num_sge, verbs.ErrInvalidArgument))
		}
		q.off = append(q.off, len(q.sge))
		if f.num_sge > 0 {
			for _, s := range unsafe.Slice(f.sg, int(f.num_sge)) {
				q.sge = append(q.sge, verbs.SGE{Addr: uint64(s.addr), Length: uint32(s.length), LKey: uint32(s.lkey)})
			}
		}
		q.rwr = append(q.rwr, verbs.RecvWR{ID: uint64(f.wr_id)})
	}
	for i := range q.rwr {
		end := len(q.sge)
		if i+1 < len(q.off) {
			end = q.off[i+1]
		}
		q.rwr[i].SGL = q.sge[q.off[i]:end:end]
	}
	err = q.qp.PostRecv(q.rwr)
	if err != nil {
		rc, k := postErr("post_recv", err, len(ws))
		*posted = C.int(k)
		return rc
	}
	*posted = n
	return 0
}
