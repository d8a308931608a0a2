package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ibex-rdma/ibex/verbs"
)

// demoOptions configure runDemo.
type demoOptions struct {
	Device string // device to open
	Size   int    // message size of SEND, RDMA_WRITE and RDMA_READ
}

func defaultDemoOptions() demoOptions {
	return demoOptions{Device: "loop0", Size: 4096}
}

// waitTimeout bounds every wait for a completion or an event.
const waitTimeout = 5 * time.Second

const (
	demoMaxSize   = 1 << 30 // keeps a typo from allocating gigabytes
	demoInlineMax = 64      // inline payload the client QP asks room for
	demoQueue     = 16      // send and receive queue depth
	demoCQDepth   = 64
)

// end is one side of the demo: its own Context on the device, PD, memory
// region, CQ (for both queues) and RC QP.
type end struct {
	name string
	ctx  *verbs.Context
	pd   *verbs.PD
	buf  []byte
	mr   *verbs.MR
	cq   *verbs.CQ
	qp   *verbs.QP

	// Layout of buf: data [0, size), aux [size, 2*size), an 8-byte aligned
	// atomic word at atom.
	size int
	atom int
}

func (e *end) data() []byte { return e.buf[:e.size] }
func (e *end) aux() []byte  { return e.buf[e.size : 2*e.size] }
func (e *end) word() []byte { return e.buf[e.atom : e.atom+8] }

func (e *end) dataAddr() uint64 { return e.mr.Addr() }
func (e *end) auxAddr() uint64  { return e.mr.Addr() + uint64(e.size) }
func (e *end) wordAddr() uint64 { return e.mr.Addr() + uint64(e.atom) }

func openEnd(name, device string, size int, qcap verbs.QPCap) (e *end, err error) {
	e = &end{name: name, size: size}
	defer func() {
		if err != nil {
			err = errors.Join(fmt.Errorf("%s: %w", name, err), e.close())
		}
	}()
	if e.ctx, err = verbs.Open(device); err != nil {
		return e, err
	}
	if e.pd, err = e.ctx.AllocPD(); err != nil {
		return e, err
	}
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	if e.ctx.QueryDevice().AtomicCap != verbs.AtomicNone {
		access |= verbs.AccessRemoteAtomic
	}
	e.buf = make([]byte, 2*size+16)
	if e.mr, err = e.pd.RegMR(e.buf, access); err != nil {
		return e, err
	}
	e.atom = 2*size + int(-(e.mr.Addr()+uint64(2*size))&7)
	if e.cq, err = e.ctx.CreateCQ(demoCQDepth); err != nil {
		return e, err
	}
	e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, Cap: qcap})
	return e, err
}

// close releases what openEnd created, in reverse order.
func (e *end) close() error {
	var errs []error
	if e.qp != nil {
		errs = append(errs, e.qp.Destroy())
	}
	if e.cq != nil {
		errs = append(errs, e.cq.Destroy())
	}
	if e.mr != nil {
		errs = append(errs, e.mr.Dereg())
	}
	if e.pd != nil {
		errs = append(errs, e.pd.Dealloc())
	}
	if e.ctx != nil {
		errs = append(errs, e.ctx.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: cleanup: %w", e.name, err)
	}
	return nil
}

// demo is the state of one runDemo.
type demo struct {
	ctx            context.Context
	w              io.Writer
	size           int
	client, server *end
	remote         verbs.ConnInfo // the server's info as the client received it
	detail         []string       // lines printed under the current step
	nextID         uint64
}

// runDemo opens device twice, connects a client and a server RC QP and runs
// every verbs operation between them, checking each result. It writes one
// line per step, with the completions under it, and returns an error naming
// the first step that went wrong.
func runDemo(ctx context.Context, w io.Writer, opt demoOptions) (err error) {
	if ctx == nil {
		ctx = context.Background()
	}
	out := &errWriter{w: w}
	c, err := verbs.Open(opt.Device)
	if err != nil {
		return err
	}
	dev := c.QueryDevice()
	if err := c.Close(); err != nil {
		return err
	}
	maxSize := min(dev.MaxMsgSize, demoMaxSize)
	if opt.Size < 3 || uint64(opt.Size) > maxSize {
		return fmt.Errorf("--size %d: must be 3..%d (the gather step needs 3 bytes; the device's max_msg_sz is %d)", opt.Size, maxSize, dev.MaxMsgSize)
	}
	if dev.MaxSGE < 3 {
		return fmt.Errorf("device %s: max_sge %d: the demo needs 3", opt.Device, dev.MaxSGE)
	}

	d := &demo{ctx: ctx, w: w, size: opt.Size, nextID: 1}
	qcap := verbs.QPCap{MaxSendWR: demoQueue, MaxRecvWR: demoQueue, MaxSendSGE: 3, MaxRecvSGE: 1,
		MaxInlineData: min(dev.MaxInlineData, demoInlineMax)}
	if d.client, err = openEnd("client", opt.Device, opt.Size, qcap); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.client.close()) }()
	if d.server, err = openEnd("server", opt.Device, opt.Size, qcap); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.server.close()) }()

	out.printf("ibex demo: device %s (provider %s), message size %d bytes\n", d.client.ctx.Name(), d.client.ctx.Provider(), opt.Size)
	for _, e := range []*end{d.client, d.server} {
		out.printf("%s: opened %s; pd; mr lkey %#x rkey %#x addr %#x len %d; cq depth %d; rc qp %#x in %v\n",
			e.name, e.ctx.Name(), e.mr.LKey(), e.mr.RKey(), e.mr.Addr(), e.mr.Len(), e.cq.Depth(), e.qp.Num(), e.qp.State())
	}
	if err := d.connect(out); err != nil {
		return err
	}
	if out.err != nil {
		return out.err
	}

	steps := []struct {
		name string
		run  func() (string, error)
	}{
		{verbs.WRSend.String(), d.stepSend},
		{verbs.WRSendWithImm.String(), d.stepSendImm},
		{verbs.WRRDMAWrite.String(), d.stepWrite},
		{verbs.WRRDMAWriteWithImm.String(), d.stepWriteImm},
		{verbs.WRRDMARead.String(), d.stepRead},
		{verbs.WRAtomicFetchAndAdd.String(), d.stepFetchAdd},
		{verbs.WRAtomicCmpAndSwp.String() + " (swaps)", d.stepCmpSwap},
		{verbs.WRAtomicCmpAndSwp.String() + " (compare fails)", d.stepCmpFail},
		{verbs.WRSend.String() + " (3-entry SGE list)", d.stepGather},
		{verbs.WRSend.String() + " (inline)", d.stepInline},
		{verbs.WRRDMAWrite.String() + " (wrong rkey)", d.stepBadRKey},
	}
	for i, s := range steps {
		d.detail = d.detail[:0]
		msg, err := s.run()
		if err == nil {
			err = d.expectIdle()
		}
		if err != nil {
			for _, l := range d.detail {
				out.printf("       %s\n", l)
			}
			return fmt.Errorf("step %d %s: %w", i+1, s.name, err)
		}
		out.printf("[%2d] %-36s %s\n", i+1, s.name, msg)
		for _, l := range d.detail {
			out.printf("       %s\n", l)
		}
	}
	for _, e := range []*end{d.client, d.server} {
		st := e.qp.Stats()
		out.printf("%s qp %#x counters: sends %d recvs %d pkts_sent %d pkts_recv %d retransmits %d rnr_naks_recv %d rnr_naks_sent %d seq_naks_sent %d err_naks_sent %d err_naks_recv %d duplicates %d out_of_sequence %d\n",
			e.name, e.qp.Num(), st.Sends, st.Recvs, st.PktsSent, st.PktsRecv, st.Retransmits, st.RNRNaks, st.RNRNaksSent,
			st.SeqNaksSent, st.ErrNaksSent, st.ErrNaksRecv, st.Duplicates, st.OutOfSequence)
	}
	if pcs, err := d.client.ctx.PortCounters(1); err == nil {
		out.printf("port 1 counters:")
		for _, c := range pcs {
			out.printf(" %s %d", c.Name, c.Value)
		}
		out.printf("\n")
	}
	out.printf("all %d steps passed; destroying QPs, CQs, MRs, PDs and closing both contexts\n", len(steps))
	return out.err
}

// connect exchanges ConnInfo in its text form, as an out-of-band channel
// would carry it, and moves both QPs to RTS.
func (d *demo) connect(out *errWriter) error {
	exchange := func(from, to *end) (verbs.ConnInfo, error) {
		ci := from.qp.Info()
		ci.RKey, ci.Addr, ci.Len = from.mr.RKey(), from.mr.Addr(), uint64(from.mr.Len())
		text, err := ci.MarshalText()
		if err != nil {
			return verbs.ConnInfo{}, fmt.Errorf("%s: marshal conn info: %w", from.name, err)
		}
		out.printf("%s -> %s: %s\n", from.name, to.name, text)
		var got verbs.ConnInfo
		if err := got.UnmarshalText(text); err != nil {
			return verbs.ConnInfo{}, fmt.Errorf("%s: unmarshal %s's conn info: %w", to.name, from.name, err)
		}
		if got != ci {
			return verbs.ConnInfo{}, fmt.Errorf("%s: conn info changed in its text form: sent %+v, got %+v", to.name, ci, got)
		}
		return got, nil
	}
	clientInfo, err := exchange(d.client, d.server)
	if err != nil {
		return err
	}
	if d.remote, err = exchange(d.server, d.client); err != nil {
		return err
	}
	for _, c := range []struct {
		e    *end
		peer verbs.ConnInfo
	}{{d.server, clientInfo}, {d.client, d.remote}} {
		if err := c.e.qp.Connect(c.peer, verbs.ConnectOptions{}); err != nil {
			return fmt.Errorf("%s: %w", c.e.name, err)
		}
		a := c.e.qp.Query()
		if a.State != verbs.QPSRTS || a.DestQPN != c.peer.QPN {
			return fmt.Errorf("%s: after connect qp %#x is in %v with dest_qp_num %#x, want RTS and %#x", c.e.name, c.e.qp.Num(), a.State, a.DestQPN, c.peer.QPN)
		}
		out.printf("%s: qp %#x connected to qp %#x: %v, path_mtu %d, access %v\n",
			c.e.name, c.e.qp.Num(), a.DestQPN, a.State, a.PathMTU.Bytes(), a.AccessFlags)
	}
	return nil
}

// id returns a fresh wr_id.
func (d *demo) id() uint64 {
	d.nextID++
	return d.nextID - 1
}

// wcWant is what one completion must say; byteLen < 0 skips the check.
type wcWant struct {
	id      uint64
	status  verbs.WCStatus
	opcode  verbs.WCOpcode
	byteLen int64
	imm     *uint32 // nil: the completion must not carry immediate data
	srcQP   uint32  // receive completions
}

// poll waits (at most waitTimeout) for the next completion of e's CQ,
// records it under the current step and checks it against want.
func (d *demo) poll(e *end, want wcWant) (verbs.WC, error) {
	ctx, cancel := context.WithTimeout(d.ctx, waitTimeout)
	defer cancel()
	var wc [1]verbs.WC
	n, err := e.cq.PollWait(ctx, wc[:])
	if err != nil {
		return verbs.WC{}, fmt.Errorf("%s: waiting for the completion of wr_id %#x (%v): %w", e.name, want.id, want.opcode, err)
	}
	if n != 1 {
		return verbs.WC{}, fmt.Errorf("%s: PollWait returned %d completions, want 1", e.name, n)
	}
	c := wc[0]
	d.detail = append(d.detail, fmt.Sprintf("%s wc: %s", e.name, formatWC(c)))
	var bad []string
	if c.WRID != want.id {
		bad = append(bad, fmt.Sprintf("wr_id %#x, want %#x", c.WRID, want.id))
	}
	if c.Status != want.status {
		bad = append(bad, fmt.Sprintf("status %v, want %v", c.Status, want.status))
	}
	if c.Opcode != want.opcode {
		bad = append(bad, fmt.Sprintf("opcode %v, want %v", c.Opcode, want.opcode))
	}
	if want.byteLen >= 0 && int64(c.ByteLen) != want.byteLen {
		bad = append(bad, fmt.Sprintf("byte_len %d, want %d", c.ByteLen, want.byteLen))
	}
	hasImm := c.Flags&verbs.WCWithImm != 0
	switch {
	case want.imm == nil && hasImm:
		bad = append(bad, fmt.Sprintf("unexpected imm %#x", c.Imm))
	case want.imm != nil && !hasImm:
		bad = append(bad, fmt.Sprintf("no immediate data, want imm %#x", *want.imm))
	case want.imm != nil && c.Imm != *want.imm:
		bad = append(bad, fmt.Sprintf("imm %#x, want %#x", c.Imm, *want.imm))
	}
	if c.QPNum != e.qp.Num() {
		bad = append(bad, fmt.Sprintf("qp_num %#x, want %#x", c.QPNum, e.qp.Num()))
	}
	if want.opcode >= verbs.WCRecv && want.status == verbs.WCSuccess && c.SrcQP != want.srcQP {
		bad = append(bad, fmt.Sprintf("src_qp %#x, want %#x", c.SrcQP, want.srcQP))
	}
	if len(bad) > 0 {
		if qerr := e.qp.Err(); qerr != nil && c.Status != want.status {
			bad = append(bad, fmt.Sprintf("qp %#x is in ERR: %v", e.qp.Num(), qerr))
		}
		return c, fmt.Errorf("%s: completion: %s", e.name, strings.Join(bad, "; "))
	}
	return c, nil
}

// formatWC prints a completion's fields in ibv_wc terms; imm and src_qp
// show "-" where the completion does not define them.
func formatWC(wc verbs.WC) string {
	imm := "-"
	if wc.Flags&verbs.WCWithImm != 0 {
		imm = fmt.Sprintf("%#x", wc.Imm)
	}
	src := "-"
	if wc.Opcode >= verbs.WCRecv && wc.Status == verbs.WCSuccess {
		src = fmt.Sprintf("%#x", wc.SrcQP)
	}
	return fmt.Sprintf("wr_id=%#x status=%v opcode=%v byte_len=%d imm=%s qp_num=%#x src_qp=%s",
		wc.WRID, wc.Status, wc.Opcode, wc.ByteLen, imm, wc.QPNum, src)
}

// expectIdle checks that no completion is left over on either CQ.
func (d *demo) expectIdle() error {
	var wc [1]verbs.WC
	for _, e := range []*end{d.client, d.server} {
		n, err := e.cq.Poll(wc[:])
		if err != nil {
			return fmt.Errorf("%s: poll: %w", e.name, err)
		}
		if n > 0 {
			return fmt.Errorf("%s: unexpected completion %s", e.name, formatWC(wc[0]))
		}
	}
	return nil
}

func (d *demo) postSend(wrs ...verbs.SendWR) error {
	if err := d.client.qp.PostSend(wrs); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	return nil
}

// postRecv posts one receive on the server into sgl and returns its wr_id.
func (d *demo) postRecv(sgl ...verbs.SGE) (uint64, error) {
	id := d.id()
	if err := d.server.qp.PostRecv([]verbs.RecvWR{{ID: id, SGL: sgl}}); err != nil {
		return 0, fmt.Errorf("server: %w", err)
	}
	return id, nil
}

// fill writes a pattern that differs per seed, so each step checks fresh bytes.
func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) + seed*31 + 1
	}
}

func sameBytes(what string, got, want []byte) error {
	if bytes.Equal(got, want) {
		return nil
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Errorf("%s: byte %d is %#02x, want %#02x", what, i, got[i], want[i])
		}
	}
	return fmt.Errorf("%s: %d bytes, want %d", what, len(got), len(want))
}

// sendStep sends the client's data area, with imm if given, into a receive
// the server posted on its data area.
func (d *demo) sendStep(seed byte, imm *uint32) (string, error) {
	c, s := d.client, d.server
	fill(c.data(), seed)
	clear(s.data())
	rid, err := d.postRecv(verbs.SGE{Addr: s.dataAddr(), Length: uint32(d.size), LKey: s.mr.LKey()})
	if err != nil {
		return "", err
	}
	wr := verbs.SendWR{ID: d.id(), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: c.dataAddr(), Length: uint32(d.size), LKey: c.mr.LKey()}}}
	if imm != nil {
		wr.Opcode, wr.Imm = verbs.WRSendWithImm, *imm
	}
	if err := d.postSend(wr); err != nil {
		return "", err
	}
	if _, err := d.poll(c, wcWant{id: wr.ID, opcode: verbs.WCSend, byteLen: -1}); err != nil {
		return "", err
	}
	if _, err := d.poll(s, wcWant{id: rid, opcode: verbs.WCRecv, byteLen: int64(d.size), imm: imm, srcQP: c.qp.Num()}); err != nil {
		return "", err
	}
	if err := sameBytes("server receive buffer", s.data(), c.data()); err != nil {
		return "", err
	}
	msg := fmt.Sprintf("%d bytes client -> server receive buffer, contents verified", d.size)
	if imm != nil {
		msg += fmt.Sprintf(", imm %#x", *imm)
	}
	return msg, nil
}

func (d *demo) stepSend() (string, error) { return d.sendStep(1, nil) }

func (d *demo) stepSendImm() (string, error) {
	imm := uint32(0x1b3c_0001)
	return d.sendStep(2, &imm)
}

func (d *demo) stepWrite() (string, error) {
	c, s := d.client, d.server
	fill(c.data(), 3)
	clear(s.aux())
	addr := d.remote.Addr + uint64(d.size) // the server's aux area
	wr := verbs.SendWR{ID: d.id(), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL:        []verbs.SGE{{Addr: c.dataAddr(), Length: uint32(d.size), LKey: c.mr.LKey()}},
		RemoteAddr: addr, RKey: d.remote.RKey}
	if err := d.postSend(wr); err != nil {
		return "", err
	}
	if _, err := d.poll(c, wcWant{id: wr.ID, opcode: verbs.WCRDMAWrite, byteLen: -1}); err != nil {
		return "", err
	}
	if err := sameBytes("server memory", s.aux(), c.data()); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d bytes -> server addr %#x rkey %#x, no receive consumed, contents verified", d.size, addr, d.remote.RKey), nil
}

func (d *demo) stepWriteImm() (string, error) {
	c, s := d.client, d.server
	fill(c.data(), 4)
	clear(s.data())
	rid, err := d.postRecv() // a receive with no SGE: it only carries the imm
	if err != nil {
		return "", err
	}
	imm := uint32(0x1b3c_0002)
	wr := verbs.SendWR{ID: d.id(), Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, Imm: imm,
		SGL:        []verbs.SGE{{Addr: c.dataAddr(), Length: uint32(d.size), LKey: c.mr.LKey()}},
		RemoteAddr: d.remote.Addr, RKey: d.remote.RKey}
	if err := d.postSend(wr); err != nil {
		return "", err
	}
	if _, err := d.poll(c, wcWant{id: wr.ID, opcode: verbs.WCRDMAWrite, byteLen: -1}); err != nil {
		return "", err
	}
	if _, err := d.poll(s, wcWant{id: rid, opcode: verbs.WCRecvRDMAWithImm, byteLen: int64(d.size), imm: &imm, srcQP: c.qp.Num()}); err != nil {
		return "", err
	}
	if err := sameBytes("server memory", s.data(), c.data()); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d bytes -> server addr %#x, imm %#x delivered through a receive, contents verified", d.size, d.remote.Addr, imm), nil
}

func (d *demo) stepRead() (string, error) {
	c, s := d.client, d.server
	fill(s.aux(), 5)
	clear(c.aux())
	addr := d.remote.Addr + uint64(d.size)
	wr := verbs.SendWR{ID: d.id(), Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGL:        []verbs.SGE{{Addr: c.auxAddr(), Length: uint32(d.size), LKey: c.mr.LKey()}},
		RemoteAddr: addr, RKey: d.remote.RKey}
	if err := d.postSend(wr); err != nil {
		return "", err
	}
	if _, err := d.poll(c, wcWant{id: wr.ID, opcode: verbs.WCRDMARead, byteLen: int64(d.size)}); err != nil {
		return "", err
	}
	if err := sameBytes("client memory", c.aux(), s.aux()); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d bytes <- server addr %#x, contents verified", d.size, addr), nil
}

// atomic runs one atomic on the server's word and checks the value returned
// to the client and the value left in the server's memory.
func (d *demo) atomic(op verbs.Opcode, cmpAdd, swap, wantOld, wantNew uint64) error {
	c, s := d.client, d.server
	binary.NativeEndian.PutUint64(c.word(), 0xffff_ffff_ffff_ffff)
	wr := verbs.SendWR{ID: d.id(), Opcode: op, Flags: verbs.SendSignaled,
		SGL:        []verbs.SGE{{Addr: c.wordAddr(), Length: 8, LKey: c.mr.LKey()}},
		RemoteAddr: d.remote.Addr + (s.wordAddr() - s.mr.Addr()), RKey: d.remote.RKey,
		CompareAdd: cmpAdd, Swap: swap}
	if err := d.postSend(wr); err != nil {
		return err
	}
	wcOp := verbs.WCFetchAdd
	if op == verbs.WRAtomicCmpAndSwp {
		wcOp = verbs.WCCompSwap
	}
	if _, err := d.poll(c, wcWant{id: wr.ID, opcode: wcOp, byteLen: 8}); err != nil {
		return err
	}
	if old := binary.NativeEndian.Uint64(c.word()); old != wantOld {
		return fmt.Errorf("returned original value %d, want %d", old, wantOld)
	}
	if now := binary.NativeEndian.Uint64(s.word()); now != wantNew {
		return fmt.Errorf("server word is %d after the operation, want %d", now, wantNew)
	}
	return nil
}

func (d *demo) stepFetchAdd() (string, error) {
	binary.NativeEndian.PutUint64(d.server.word(), 100)
	if err := d.atomic(verbs.WRAtomicFetchAndAdd, 23, 0, 100, 123); err != nil {
		return "", err
	}
	return "server word 100 + 23: returned 100, server word now 123", nil
}

func (d *demo) stepCmpSwap() (string, error) {
	if err := d.atomic(verbs.WRAtomicCmpAndSwp, 123, 4096, 123, 4096); err != nil {
		return "", err
	}
	return "compare 123 == 123, swap 4096: returned 123, server word now 4096", nil
}

func (d *demo) stepCmpFail() (string, error) {
	if err := d.atomic(verbs.WRAtomicCmpAndSwp, 123, 7, 4096, 4096); err != nil {
		return "", err
	}
	return "compare 123 != 4096: returned 4096, server word left at 4096", nil
}

func (d *demo) stepGather() (string, error) {
	c, s := d.client, d.server
	fill(c.data(), 9)
	clear(s.data())
	// Three pieces of the client's data area, listed out of order so the
	// receiver sees the gather order, not the memory order.
	n0 := d.size / 3
	n1 := (d.size - n0) / 2
	n2 := d.size - n0 - n1
	pieces := []struct{ off, n int }{{n0 + n1, n2}, {0, n0}, {n0, n1}}
	var sgl []verbs.SGE
	var want []byte
	for _, p := range pieces {
		sgl = append(sgl, verbs.SGE{Addr: c.dataAddr() + uint64(p.off), Length: uint32(p.n), LKey: c.mr.LKey()})
		want = append(want, c.data()[p.off:p.off+p.n]...)
	}
	rid, err := d.postRecv(verbs.SGE{Addr: s.dataAddr(), Length: uint32(d.size), LKey: s.mr.LKey()})
	if err != nil {
		return "", err
	}
	wr := verbs.SendWR{ID: d.id(), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: sgl}
	if err := d.postSend(wr); err != nil {
		return "", err
	}
	if _, err := d.poll(c, wcWant{id: wr.ID, opcode: verbs.WCSend, byteLen: -1}); err != nil {
		return "", err
	}
	if _, err := d.poll(s, wcWant{id: rid, opcode: verbs.WCRecv, byteLen: int64(d.size), srcQP: c.qp.Num()}); err != nil {
		return "", err
	}
	if err := sameBytes("server receive buffer", s.data(), want); err != nil {
		return "", err
	}
	return fmt.Sprintf("SGEs of %d+%d+%d bytes (client offsets %d, 0, %d) arrived as one %d-byte message in SGE order",
		n2, n0, n1, n0+n1, n0, d.size), nil
}

func (d *demo) stepInline() (string, error) {
	c, s := d.client, d.server
	if c.qp.Cap().MaxInlineData == 0 {
		return "skipped: the device's max_inline_data is 0", nil
	}
	payload := []byte(strings.Repeat("inline payload, copied at post time; ", 4))
	payload = payload[:min(len(payload), c.qp.Cap().MaxInlineData, d.size)]
	want := bytes.Clone(payload)
	clear(s.data())
	rid, err := d.postRecv(verbs.SGE{Addr: s.dataAddr(), Length: uint32(d.size), LKey: s.mr.LKey()})
	if err != nil {
		return "", err
	}
	wr := verbs.SendWR{ID: d.id(), Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, Inline: payload}
	if err := d.postSend(wr); err != nil {
		return "", err
	}
	clear(payload) // the buffer is the caller's again as soon as PostSend returns
	if _, err := d.poll(c, wcWant{id: wr.ID, opcode: verbs.WCSend, byteLen: -1}); err != nil {
		return "", err
	}
	if _, err := d.poll(s, wcWant{id: rid, opcode: verbs.WCRecv, byteLen: int64(len(want)), srcQP: c.qp.Num()}); err != nil {
		return "", err
	}
	if err := sameBytes("server receive buffer", s.data()[:len(want)], want); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d bytes from an unregistered buffer (max_inline_data %d), contents verified", len(want), c.qp.Cap().MaxInlineData), nil
}

// stepBadRKey posts an RDMA_WRITE with a wrong rkey and a SEND behind it.
// The write completes with REM_ACCESS_ERR and moves the client QP to ERR,
// which flushes the SEND; the server, as responder, moves to ERR too,
// flushes its receive and reports QP_ACCESS_ERR.
func (d *demo) stepBadRKey() (string, error) {
	c, s := d.client, d.server
	fill(c.data(), 11)
	fill(s.aux(), 12)
	before := bytes.Clone(s.aux())
	rid, err := d.postRecv(verbs.SGE{Addr: s.dataAddr(), Length: uint32(d.size), LKey: s.mr.LKey()})
	if err != nil {
		return "", err
	}
	badRKey := d.remote.RKey ^ 0x5a5a_5a5a
	write := verbs.SendWR{ID: d.id(), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL:        []verbs.SGE{{Addr: c.dataAddr(), Length: uint32(d.size), LKey: c.mr.LKey()}},
		RemoteAddr: d.remote.Addr + uint64(d.size), RKey: badRKey}
	send := verbs.SendWR{ID: d.id(), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: c.dataAddr(), Length: uint32(d.size), LKey: c.mr.LKey()}}}
	if err := d.postSend(write, send); err != nil {
		return "", err
	}
	if _, err := d.poll(c, wcWant{id: write.ID, status: verbs.WCRemAccessErr, opcode: verbs.WCRDMAWrite, byteLen: -1}); err != nil {
		return "", err
	}
	if st := c.qp.State(); st != verbs.QPSErr {
		return "", fmt.Errorf("client: qp %#x is in %v after REM_ACCESS_ERR, want ERR", c.qp.Num(), st)
	}
	cerr := c.qp.Err()
	if cerr == nil {
		return "", fmt.Errorf("client: qp %#x is in ERR but Err() is nil", c.qp.Num())
	}
	d.detail = append(d.detail, fmt.Sprintf("client qp %#x: %v, Err(): %v", c.qp.Num(), verbs.QPSErr, cerr))
	if _, err := d.poll(c, wcWant{id: send.ID, status: verbs.WCWRFlushErr, opcode: verbs.WCSend, byteLen: -1}); err != nil {
		return "", err
	}
	if err := sameBytes("server memory after the rejected write", s.aux(), before); err != nil {
		return "", err
	}

	// The responder side. Where the requester finds the error itself
	// (shm checks the target's key table), the responder hears of it
	// through its ring a moment later.
	for deadline := time.Now().Add(2 * time.Second); s.qp.State() != verbs.QPSErr && time.Now().Before(deadline); {
		time.Sleep(100 * time.Microsecond)
	}
	if st := s.qp.State(); st != verbs.QPSErr {
		return "", fmt.Errorf("server: qp %#x is in %v after the remote access error, want ERR", s.qp.Num(), st)
	}
	d.detail = append(d.detail, fmt.Sprintf("server qp %#x: %v, Err(): %v", s.qp.Num(), verbs.QPSErr, s.qp.Err()))
	if _, err := d.poll(s, wcWant{id: rid, status: verbs.WCWRFlushErr, opcode: verbs.WCRecv, byteLen: -1}); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(d.ctx, waitTimeout)
	defer cancel()
	ev, err := s.ctx.AsyncEvent(ctx)
	if err != nil {
		return "", fmt.Errorf("server: waiting for an async event: %w", err)
	}
	d.detail = append(d.detail, fmt.Sprintf("server async event: %v", ev))
	if ev.Type != verbs.EventQPAccessErr || ev.QP != s.qp {
		return "", fmt.Errorf("server: async event %v, want %v on qp %#x", ev, verbs.EventQPAccessErr, s.qp.Num())
	}
	return fmt.Sprintf("rkey %#x: %v, client qp moved to %v, queued %v flushed with %v; server memory untouched",
		badRKey, verbs.WCRemAccessErr, verbs.QPSErr, verbs.WRSend, verbs.WCWRFlushErr), nil
}
