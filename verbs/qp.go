package verbs

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// QPType is a queue pair's transport service. ibex implements RC.
type QPType uint8

// QP types, numbered as in libibverbs.
const (
	QPTypeRC QPType = 2
)

// QPCap sizes a QP's queues (ibv_qp_cap). Zero fields take the defaults:
// 256 work requests per queue, 1 SGE per request, no inline data.
type QPCap struct {
	MaxSendWR     int
	MaxRecvWR     int
	MaxSendSGE    int
	MaxRecvSGE    int
	MaxInlineData int
}

// QPInitAttr creates a QP (ibv_qp_init_attr).
type QPInitAttr struct {
	Type   QPType // zero means RC
	SendCQ *CQ
	RecvCQ *CQ
	Cap    QPCap
	// SigAll makes every send request signaled.
	SigAll bool
	// QPN is zero for a new QP number. A daemon that takes over the QPs
	// of the daemon it replaces (ibexd's upgrade) gives the number each
	// had there; it must not be in use in this process.
	QPN uint32
}

// QP is a reliable-connection queue pair (ibv_qp). It is safe for concurrent
// use: PostSend, PostRecv and Modify may be called from any goroutine.
type QP struct {
	ctx       *Context
	pd        *PD
	num       uint32
	sendCQ    *CQ
	recvCQ    *CQ
	cap       QPCap
	sigAll    bool
	initPSN   uint32
	drv       qpDriver
	exec      executor       // drv, when it executes requests in the poster's goroutine
	issuer    issuer         // drv, when it completes requests asynchronously
	notify    stateNotifier  // drv, when it wants state changes
	recvNote  recvNotifier   // drv, when it wants to hear of posted receives
	recvIssue recvIssuer     // drv, when it takes each posted receive
	modNote   modifyNotifier // drv, when it must agree to every Modify
	statsRead statsReader    // drv, when its transport keeps the QP counters elsewhere
	secure    securer        // drv, when its transport can seal the connection (package psp)
	timer     *time.Timer

	// mu guards everything below it. Lock order: respMu, then mu, then a
	// CQ's mutex.
	mu        sync.Mutex
	state     QPState
	attr      QPAttr
	cause     error // why the QP entered ERR
	sq        sendQueue
	rq        recvQueue
	running   bool   // a goroutine holds the send token (see progress)
	epoch     uint64 // bumped on RESET: WQEs in flight are discarded
	drainWant bool   // SQD entered: report SQ_DRAINED once idle
	destroyed bool

	// respMu serialises the responder side: receive consumption, the
	// matching receive completion, and receive-queue flushes, so receive
	// completions keep posting order.
	respMu sync.Mutex

	heldQPN uint32 // the number reserved in qpns (0: none); a provider may renumber (qpNumberer)

	// Lock-free copies for providers' fast paths.
	destQPN atomic.Uint32 // attr.DestQPN
	dead    atomic.Bool   // destroyed

	// Counters, readable with Stats.
	ctr qpCounters
}

// QP numbers are random 24-bit numbers (never 0 or 1, which IBA reserves
// for the SMI and GSI QPs), unique among the live QPs of the process: a
// linear counter told an attacker on the network which QPNs were live and
// which came next (ReDMArk's "linear QPNs"). Like the rkeys they come from
// crypto/rand.
var qpns = struct {
	sync.Mutex
	live map[uint32]struct{}
}{live: map[uint32]struct{}{}}

// allocQPN reserves a random free QP number.
func allocQPN() uint32 {
	qpns.Lock()
	defer qpns.Unlock()
	for {
		n := randKey() & 0xffffff
		if _, used := qpns.live[n]; n > 1 && !used {
			qpns.live[n] = struct{}{}
			return n
		}
	}
}

// holdQPN reserves number n (a QP restored with the number it had, see
// QPInitAttr.QPN) and reports whether it was free: a number live in this
// process already (a handover's old and new owner in one test process) is
// used as asked, but not reserved twice.
func holdQPN(n uint32) bool {
	qpns.Lock()
	defer qpns.Unlock()
	if _, used := qpns.live[n]; used {
		return false
	}
	qpns.live[n] = struct{}{}
	return true
}

func freeQPN(n uint32) {
	qpns.Lock()
	delete(qpns.live, n)
	qpns.Unlock()
}

// CreateQP creates an RC QP in RESET.
func (pd *PD) CreateQP(init QPInitAttr) (*QP, error) {
	c := pd.ctx
	dev := &c.attr
	if init.Type != 0 && init.Type != QPTypeRC {
		return nil, errorf(ErrUnsupported, "create qp: type %d: only RC (2) is implemented", init.Type)
	}
	if init.SendCQ == nil || init.RecvCQ == nil {
		return nil, errorf(ErrInvalidArgument, "create qp: send_cq and recv_cq are required")
	}
	if init.SendCQ.ctx != c || init.RecvCQ.ctx != c {
		return nil, errorf(ErrInvalidArgument, "create qp: CQ belongs to another context")
	}
	cp := init.Cap
	if cp.MaxSendWR == 0 {
		cp.MaxSendWR = 256
	}
	if cp.MaxRecvWR == 0 {
		cp.MaxRecvWR = 256
	}
	if cp.MaxSendSGE == 0 {
		cp.MaxSendSGE = 1
	}
	if cp.MaxRecvSGE == 0 {
		cp.MaxRecvSGE = 1
	}
	switch {
	case cp.MaxSendWR < 0 || cp.MaxSendWR > dev.MaxQPWR:
		return nil, errorf(ErrInvalidArgument, "create qp: max_send_wr %d: device allows 1..%d", cp.MaxSendWR, dev.MaxQPWR)
	case cp.MaxRecvWR < 0 || cp.MaxRecvWR > dev.MaxQPWR:
		return nil, errorf(ErrInvalidArgument, "create qp: max_recv_wr %d: device allows 1..%d", cp.MaxRecvWR, dev.MaxQPWR)
	case cp.MaxSendSGE < 0 || cp.MaxSendSGE > dev.MaxSGE:
		return nil, errorf(ErrInvalidArgument, "create qp: max_send_sge %d: device allows 1..%d", cp.MaxSendSGE, dev.MaxSGE)
	case cp.MaxRecvSGE < 0 || cp.MaxRecvSGE > dev.MaxSGE:
		return nil, errorf(ErrInvalidArgument, "create qp: max_recv_sge %d: device allows 1..%d", cp.MaxRecvSGE, dev.MaxSGE)
	case cp.MaxInlineData < 0 || cp.MaxInlineData > dev.MaxInlineData:
		return nil, errorf(ErrInvalidArgument, "create qp: max_inline_data %d: device allows 0..%d", cp.MaxInlineData, dev.MaxInlineData)
	}
	if err := c.count(&c.nqp, 1, dev.MaxQP, "create qp"); err != nil {
		return nil, err
	}
	if err := pd.use(0, 1); err != nil {
		_ = c.count(&c.nqp, -1, 0, "create qp")
		return nil, fmt.Errorf("create qp: %w", err)
	}
	var num, held uint32
	if init.QPN != 0 {
		if init.QPN > 0xffffff || init.QPN < 2 {
			_ = pd.use(0, -1)
			_ = c.count(&c.nqp, -1, 0, "create qp")
			return nil, errorf(ErrInvalidArgument, "create qp: qp_num %#x: QP numbers are 2..0xffffff", init.QPN)
		}
		num = init.QPN
		if holdQPN(num) {
			held = num
		}
	} else {
		num = allocQPN()
		held = num
	}
	_ = init.SendCQ.attach(1)
	_ = init.RecvCQ.attach(1)
	qp := &QP{
		ctx: c, pd: pd, num: num, heldQPN: held, sendCQ: init.SendCQ, recvCQ: init.RecvCQ,
		cap: cp, sigAll: init.SigAll, initPSN: randKey() & 0xffffff,
	}
	qp.sq.init(cp.MaxSendWR, cp.MaxSendSGE, cp.MaxInlineData)
	qp.rq.init(cp.MaxRecvWR, cp.MaxRecvSGE)
	qp.timer = time.AfterFunc(time.Hour, qp.kick)
	qp.timer.Stop()
	d, err := c.bind.NewQPFor(qp)
	if err != nil {
		qp.release()
		return nil, fmt.Errorf("create qp: %w", err)
	}
	drv, ok := d.(qpDriver)
	if ok {
		qp.exec, _ = d.(executor)
		qp.issuer, _ = d.(issuer)
	}
	if !ok || (qp.exec == nil) == (qp.issuer == nil) {
		// A provider bug: the contract (verbs/driver.QPDriver) asks for
		// Destroy and exactly one of Execute and Issue.
		if ok {
			drv.Destroy()
		}
		qp.release()
		return nil, fmt.Errorf("create qp: provider %s: its QPDriver %T must have Destroy and exactly one of Execute and Issue", c.provider, d)
	}
	qp.drv = drv
	qp.notify, _ = d.(stateNotifier)
	qp.recvNote, _ = d.(recvNotifier)
	qp.recvIssue, _ = d.(recvIssuer)
	qp.modNote, _ = d.(modifyNotifier)
	qp.statsRead, _ = d.(statsReader)
	qp.secure, _ = d.(securer)
	if n, ok := d.(qpNumberer); ok {
		qp.num = n.QPNum()
	}
	c.addQP(qp)
	return qp, nil
}

func (qp *QP) release() {
	if qp.heldQPN != 0 {
		freeQPN(qp.heldQPN)
		qp.heldQPN = 0
	}
	_ = qp.sendCQ.attach(-1)
	_ = qp.recvCQ.attach(-1)
	_ = qp.pd.use(0, -1)
	_ = qp.ctx.count(&qp.ctx.nqp, -1, 0, "destroy qp")
}

// Num is the QP number.
func (qp *QP) Num() uint32 { return qp.num }

// PD is the QP's protection domain.
func (qp *QP) PD() *PD { return qp.pd }

// Context is the QP's device context.
func (qp *QP) Context() *Context { return qp.ctx }

// SendCQ is the CQ of the QP's send completions.
func (qp *QP) SendCQ() *CQ { return qp.sendCQ }

// RecvCQ is the CQ of the QP's receive completions.
func (qp *QP) RecvCQ() *CQ { return qp.recvCQ }

// Cap is the QP's queue sizes after defaults.
func (qp *QP) Cap() QPCap { return qp.cap }

// InitialPSN is the random starting send PSN that Info advertises.
func (qp *QP) InitialPSN() uint32 { return qp.initPSN }

// State returns the current state.
func (qp *QP) State() QPState {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.state
}

// Err explains why the QP is in ERR (the first error completion or event
// that put it there); nil in other states.
func (qp *QP) Err() error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.state != QPSErr {
		return nil
	}
	return qp.cause
}

// Query returns the QP's current attributes (ibv_query_qp).
func (qp *QP) Query() QPAttr {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	a := qp.attr
	a.State, a.CurState = qp.state, qp.state
	return a
}

// Modify changes attributes and state (ibv_modify_qp). mask names the
// fields of attr to apply; AttrState in mask asks for a transition to
// attr.State. Illegal transitions, missing required attributes, attributes
// the transition does not take and out-of-range values are rejected with
// an error that says which.
func (qp *QP) Modify(attr *QPAttr, mask AttrMask) error {
	// Holding respMu keeps the state still while a responder operation on
	// this QP is in progress.
	qp.respMu.Lock()
	qp.mu.Lock()
	unlock := func() {
		qp.mu.Unlock()
		qp.respMu.Unlock()
	}
	from := qp.state
	to := from
	if mask&AttrState != 0 {
		to = attr.State
	}
	if qp.destroyed {
		unlock()
		return errorf(ErrClosed, "modify qp %#x", qp.num)
	}
	if mask&AttrCurState != 0 && attr.CurState != from {
		unlock()
		return errorf(ErrInvalidState, "modify qp %#x: cur_qp_state %v but the QP is in %v", qp.num, attr.CurState, from)
	}
	err := checkTransition(from, to, mask)
	if err == nil {
		err = checkValues(attr, mask, &qp.ctx.attr)
	}
	if err == nil && mask&AttrPKeyIndex != 0 {
		port := qp.portLocked(attr, mask)
		if n := len(qp.ctx.pkeys(port)); int(attr.PKeyIndex) >= n {
			err = errorf(ErrInvalidArgument, "pkey_index %d: port %d's P_Key table has %d entries", attr.PKeyIndex, port, n)
		}
	}
	if err == nil && mask&AttrPathMTU != 0 {
		if pa, perr := qp.ctx.bind.PortAttr(qp.portLocked(attr, mask)); perr == nil && attr.PathMTU > pa.MaxMTU {
			err = errorf(ErrInvalidArgument, "path_mtu %d exceeds the port's max_mtu %d", attr.PathMTU.Bytes(), pa.MaxMTU.Bytes())
		}
	}
	if err == nil && qp.modNote != nil {
		// The device holds its own copy of the QP (a daemon's): it
		// must agree before the change is made here.
		err = qp.modNote.Modified(from, to, attr, mask)
	}
	if err != nil {
		unlock()
		return fmt.Errorf("modify qp %#x: %w", qp.num, err)
	}
	qp.attr.apply(attr, mask)
	qp.state = to
	qp.destQPN.Store(qp.attr.DestQPN)
	newAttr := qp.attr
	kick := false
	flushRQ := false
	switch {
	case to == QPSReset:
		qp.resetLocked()
	case to == QPSErr && from != QPSErr:
		qp.cause = fmt.Errorf("qp %#x moved to ERR by modify", qp.num)
		flushRQ = true
		kick = true
	case to == QPSSQD && from == QPSRTS:
		qp.drainWant = true
		kick = true
	case to == QPSRTS && from == QPSSQD:
		qp.drainWant = false
		kick = true
	}
	unlock()
	if qp.notify != nil && (mask&AttrState != 0 || to == from) {
		qp.notify.StateChanged(from, to, newAttr)
	}
	if flushRQ {
		qp.flushRQ()
	}
	if kick {
		qp.kick()
	}
	return nil
}

func (qp *QP) portLocked(attr *QPAttr, mask AttrMask) uint8 {
	if mask&AttrPort != 0 {
		return attr.Port
	}
	if qp.attr.Port != 0 {
		return qp.attr.Port
	}
	return 1
}

// resetLocked discards both queues without completions, as RESET does.
func (qp *QP) resetLocked() {
	qp.epoch++
	qp.sq.clear()
	qp.rq.clear()
	qp.rq.baseRSN = qp.rq.nextRSN
	qp.attr = QPAttr{}
	qp.cause = nil
	qp.drainWant = false
	qp.destQPN.Store(0)
	qp.timer.Stop()
}

// Destroy destroys the QP (ibv_destroy_qp). Outstanding requests are
// discarded without completions.
func (qp *QP) Destroy() error {
	qp.respMu.Lock()
	qp.mu.Lock()
	if qp.destroyed {
		qp.mu.Unlock()
		qp.respMu.Unlock()
		return errorf(ErrClosed, "destroy qp %#x", qp.num)
	}
	qp.destroyed = true
	qp.dead.Store(true)
	qp.state = QPSReset
	port := qp.portLocked(&QPAttr{}, 0)
	qp.resetLocked()
	qp.mu.Unlock()
	qp.respMu.Unlock()
	// The last counters, while the transport still has the QP (a
	// daemon's keeps the packet counts).
	last := qp.Stats()
	qp.drv.Destroy()
	qp.ctx.removeQP(qp, port, last)
	qp.release()
	return nil
}

// destroyedFast reports whether Destroy was called, without a lock;
// providers use it (driver.QP.Destroyed) to stop
// delivering to a QP.
func (qp *QP) destroyedFast() bool { return qp.dead.Load() }

// Info returns the connection info a peer needs: QPN, initial PSN, the
// port's GID, LID and active MTU, and the SPI this QP receives sealed
// packets under (0 unless its device encrypts).
func (qp *QP) Info() ConnInfo {
	qp.mu.Lock()
	port := qp.portLocked(&QPAttr{}, 0)
	qp.mu.Unlock()
	pa, _ := qp.ctx.bind.PortAttr(port)
	ci := ConnInfo{QPN: qp.num, PSN: qp.initPSN, GID: pa.GID, LID: pa.LID, MTU: pa.ActiveMTU}
	if qp.secure != nil {
		ci.SPI = qp.secure.RecvSPI()
	}
	return ci
}

// SetPeerSPI tells the QP, before it moves to RTR, the SPI its peer
// receives sealed packets under (the peer's ConnInfo.SPI; 0: the peer does
// not encrypt). Connect calls it; a program that moves the QP with Modify
// itself calls it first. The device's policy decides: a device that
// requires encryption refuses the move to RTR after SetPeerSPI(0) (or
// without it); one that does not encrypt ignores the SPI. An error names
// what is wrong with the SPI.
func (qp *QP) SetPeerSPI(spi uint32) error {
	if qp.secure == nil {
		return nil
	}
	if err := qp.secure.PeerSPI(spi); err != nil {
		return fmt.Errorf("qp %#x: peer spi: %w", qp.num, err)
	}
	return nil
}

// ConnectOptions adjusts QP.Connect. Attr fields named in Set override the
// defaults: access REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC (atomic only if
// the device has atomics), path MTU the smaller of both ports' active MTUs,
// timeout 14 (67 ms), retry_cnt 7, rnr_retry 7 (infinite), min_rnr_timer 12
// (0.64 ms), max_rd_atomic and max_dest_rd_atomic the device maximum.
type ConnectOptions struct {
	Set  AttrMask
	Attr QPAttr
}

// Connect moves a QP from RESET through INIT and RTR to RTS, connected to
// the peer described by remote — the usual three ibv_modify_qp calls.
func (qp *QP) Connect(remote ConnInfo, opt ConnectOptions) error {
	if err := remote.validate(); err != nil {
		return fmt.Errorf("connect qp %#x: %w", qp.num, err)
	}
	dev := &qp.ctx.attr
	pa, err := qp.ctx.QueryPort(1)
	if err != nil {
		return fmt.Errorf("connect qp %#x: %w", qp.num, err)
	}
	a := QPAttr{
		Port:            1,
		AccessFlags:     AccessRemoteWrite | AccessRemoteRead,
		AH:              AH{DGID: remote.GID, DLID: remote.LID, PortNum: 1, HopLimit: 64},
		PathMTU:         min(pa.ActiveMTU, remote.MTU),
		DestQPN:         remote.QPN,
		RQPSN:           remote.PSN,
		MaxDestRdAtomic: uint8(min(dev.MaxQPRdAtom, 255)),
		MinRNRTimer:     12,
		SQPSN:           qp.initPSN,
		Timeout:         14,
		RetryCnt:        7,
		RNRRetry:        7,
		MaxQPRdAtomic:   uint8(min(dev.MaxQPInitRdAtom, 255)),
	}
	if dev.AtomicCap != AtomicNone {
		a.AccessFlags |= AccessRemoteAtomic
	}
	a.apply(&opt.Attr, opt.Set)
	if err := qp.SetPeerSPI(remote.SPI); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	steps := []struct {
		state QPState
		mask  AttrMask
	}{
		{QPSInit, AttrPKeyIndex | AttrPort | AttrAccessFlags},
		{QPSRTR, AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer},
		{QPSRTS, AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		a.State = s.state
		if err := qp.Modify(&a, AttrState|s.mask); err != nil {
			return fmt.Errorf("connect: %w", err)
		}
	}
	return nil
}

// QPStats are a QP's counters.
type QPStats struct {
	Sends   uint64 // send WQEs completed (any status)
	Recvs   uint64 // receive WQEs consumed by incoming messages
	RNRNaks uint64 // RNR NAKs received as requester
	Retries uint64 // timeouts retried as requester

	// Counted by verbs from the completions it writes (a transport's
	// AddStats does not carry them). Of Sends: the SEND and
	// SEND_WITH_IMM requests that completed, flushes not counted (rxe's
	// rdma_sends); the completions with RETRY_EXC_ERR and with
	// RNR_RETRY_EXC_ERR (rxe's retry_exceeded_err and
	// retry_rnr_exceeded_err). Of Recvs: those completed in error.
	SendOps                         uint64
	RetryExceeded, RNRRetryExceeded uint64
	RecvErrs                        uint64

	// Kept by network transports (zero on loopback).
	PktsSent, PktsRecv       uint64
	Retransmits              uint64 // packets sent again (go-back-N)
	SeqNaksSent, SeqNaksRecv uint64 // PSN sequence error NAKs
	RNRNaksSent              uint64
	ErrNaksSent, ErrNaksRecv uint64 // invalid request, remote access, remote operational
	Duplicates               uint64 // duplicate requests received
	OutOfSequence            uint64 // requests beyond the expected PSN

	// Congestion (network transports): RoCEv2 CNPs sent as responder
	// (mlx5's np_cnp_sent) and received as requester (rp_cnp_handled),
	// packets received ECN CE-marked (np_ecn_marked_roce_packets), send
	// window cuts, and retransmissions the device's pacer put off.
	CNPsSent, CNPsRecv uint64
	ECNMarked          uint64
	WindowCuts         uint64
	Paced              uint64

	// OutOfWindow counts ACKs, NAKs and read/atomic responses the
	// requester ignored because their PSN was outside its outstanding
	// window (older than the oldest unacknowledged PSN or not yet sent):
	// stale copies, or forgeries by someone who guessed the QPN.
	OutOfWindow uint64
}

type qpCounters struct {
	// sends counts the send completions that are not sendOps: Stats'
	// Sends is their sum, so a completion costs one atomic add as before.
	sends, recvs, rnrNaks, retries                                   atomic.Uint64
	sendOps, retryExceeded, rnrRetryExceeded, recvErrs               atomic.Uint64
	pktsSent, pktsRecv, retransmits, seqNaksSent, seqNaksRecv        atomic.Uint64
	rnrNaksSent, errNaksSent, errNaksRecv, duplicates, outOfSequence atomic.Uint64
	cnpsSent, cnpsRecv, ecnMarked, windowCuts, paced                 atomic.Uint64
	outOfWindow                                                      atomic.Uint64
}

// addStats adds a transport's counts (what its protocol engine saw) to the
// QP's counters.
func (qp *QP) addStats(d QPStats) {
	c := &qp.ctr
	c.rnrNaks.Add(d.RNRNaks)
	c.retries.Add(d.Retries)
	c.pktsSent.Add(d.PktsSent)
	c.pktsRecv.Add(d.PktsRecv)
	c.retransmits.Add(d.Retransmits)
	c.seqNaksSent.Add(d.SeqNaksSent)
	c.seqNaksRecv.Add(d.SeqNaksRecv)
	c.rnrNaksSent.Add(d.RNRNaksSent)
	c.errNaksSent.Add(d.ErrNaksSent)
	c.errNaksRecv.Add(d.ErrNaksRecv)
	c.duplicates.Add(d.Duplicates)
	c.outOfSequence.Add(d.OutOfSequence)
	if d.CNPsSent|d.CNPsRecv|d.ECNMarked|d.WindowCuts|d.Paced|d.OutOfWindow != 0 { // rare: one test
		c.cnpsSent.Add(d.CNPsSent)
		c.cnpsRecv.Add(d.CNPsRecv)
		c.ecnMarked.Add(d.ECNMarked)
		c.windowCuts.Add(d.WindowCuts)
		c.paced.Add(d.Paced)
		c.outOfWindow.Add(d.OutOfWindow)
	}
}

// Stats returns the QP's counters.
func (qp *QP) Stats() QPStats {
	c := &qp.ctr
	s := QPStats{Sends: c.sends.Load(), Recvs: c.recvs.Load(), RNRNaks: c.rnrNaks.Load(), Retries: c.retries.Load(),
		PktsSent: c.pktsSent.Load(), PktsRecv: c.pktsRecv.Load(), Retransmits: c.retransmits.Load(),
		SeqNaksSent: c.seqNaksSent.Load(), SeqNaksRecv: c.seqNaksRecv.Load(), RNRNaksSent: c.rnrNaksSent.Load(),
		ErrNaksSent: c.errNaksSent.Load(), ErrNaksRecv: c.errNaksRecv.Load(), Duplicates: c.duplicates.Load(),
		OutOfSequence: c.outOfSequence.Load(), CNPsSent: c.cnpsSent.Load(), CNPsRecv: c.cnpsRecv.Load(),
		ECNMarked: c.ecnMarked.Load(), WindowCuts: c.windowCuts.Load(), Paced: c.paced.Load(),
		SendOps: c.sendOps.Load(), RetryExceeded: c.retryExceeded.Load(), RNRRetryExceeded: c.rnrRetryExceeded.Load(),
		RecvErrs: c.recvErrs.Load(), OutOfWindow: c.outOfWindow.Load()}
	s.Sends += s.SendOps
	if qp.statsRead != nil {
		// The transport's own engine counts (a daemon's QP): everything
		// but the completions verbs counts here.
		d := qp.statsRead.TransportStats()
		d.Sends, d.Recvs, d.SendOps, d.RetryExceeded, d.RNRRetryExceeded, d.RecvErrs = 0, 0, 0, 0, 0, 0
		s.Add(&d)
	}
	return s
}

// Add adds every counter of d to s (a sum over QPs).
func (s *QPStats) Add(d *QPStats) {
	s.Sends += d.Sends
	s.Recvs += d.Recvs
	s.RNRNaks += d.RNRNaks
	s.Retries += d.Retries
	s.PktsSent += d.PktsSent
	s.PktsRecv += d.PktsRecv
	s.Retransmits += d.Retransmits
	s.SeqNaksSent += d.SeqNaksSent
	s.SeqNaksRecv += d.SeqNaksRecv
	s.RNRNaksSent += d.RNRNaksSent
	s.ErrNaksSent += d.ErrNaksSent
	s.ErrNaksRecv += d.ErrNaksRecv
	s.Duplicates += d.Duplicates
	s.OutOfSequence += d.OutOfSequence
	s.CNPsSent += d.CNPsSent
	s.CNPsRecv += d.CNPsRecv
	s.ECNMarked += d.ECNMarked
	s.WindowCuts += d.WindowCuts
	s.Paced += d.Paced
	s.SendOps += d.SendOps
	s.RetryExceeded += d.RetryExceeded
	s.RNRRetryExceeded += d.RNRRetryExceeded
	s.RecvErrs += d.RecvErrs
	s.OutOfWindow += d.OutOfWindow
}

// DestQPN is the connected peer's QP number (0 before RTR).
func (qp *QP) DestQPN() uint32 { return qp.destQPN.Load() }
