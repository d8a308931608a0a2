// Package rc is the InfiniBand reliable-connection protocol engine of one
// queue pair, as a pure state machine: no sockets, goroutines or clock. The
// caller hands it work requests (Post), incoming packets (Receive) and the
// time (every call takes now, in nanoseconds of any monotonic clock), and
// takes packets out (Poll); completions and memory accesses go through the
// Host interface the caller implements. The shape is etcd raft's: the same
// engine runs over real UDP sockets and in a seeded simulation.
//
// What it implements, following IBA chapter 9 and Linux rxe:
//   - requester: segmentation into path-MTU packets, 24-bit PSNs, AckReq on
//     the last packet of a message and every Window/4 packets, a window of
//     unacknowledged PSNs, max_rd_atomic and fence gating, go-back-N
//     retransmission on PSN-sequence NAK and on timeout, with the timeout
//     derived from the measured round trip and bounded by the QP's timeout
//     attribute; retry_cnt and rnr_retry (7 = infinite); READ responses,
//     including re-requesting the missing part of a partially received READ;
//     atomic acknowledgements; error NAKs become error completions;
//   - responder: PSN checking with one sequence NAK per gap, duplicate
//     handling (re-ACK, READ replay from responder resources, atomic replay
//     of the saved original value: atomics execute exactly once), opcode
//     sequence, length and access checks, RNR NAK with min_rnr_timer, ACK
//     coalescing, READ responses, atomic execution;
//   - congestion (congestion.go): a send window that halves on a sequence
//     NAK, a CNP or a CE-marked response, drops to one packet on a
//     retransmit timeout and grows back with the ACKs (AIMD); a Pacer
//     shared by a device's engines spaces their retransmissions; a
//     responder answers CE-marked requests (Packet.CE) with RoCEv2 CNPs.
//
// Large READs are issued as several READ requests of at most Window
// packets each, so neither side ever has more than a window of packets in
// flight: the receiver's UDP socket, not the wire, is the bottleneck on a
// host, and a window sized below its buffer keeps drops the exception.
package rc

import (
	"fmt"

	"github.com/ibex-rdma/ibex/ib"
)

// Request is one send work request handed to the engine.
type Request struct {
	ID         uint64 // the caller's handle, returned in SendComplete
	Op         ib.WROpcode
	Len        uint32 // message length (8 for atomics)
	RemoteAddr uint64
	RKey       uint32
	Imm        uint32
	CompareAdd uint64
	Swap       uint64
	Fence      bool
	Solicited  bool
}

// Host is the engine's window on the QP's memory, receive queue and
// completion queue. The engine calls it synchronously from Post, Receive,
// Poll and Tick.
type Host interface {
	// Payload copies bytes [off, off+len(dst)) of request id's local data
	// into dst (the SGE list or inline data); false means the local memory
	// is gone (an MR deregistered after posting: LOC_PROT_ERR).
	Payload(id uint64, off uint32, dst []byte) bool
	// ReadResponse places READ response bytes at off of request id's local
	// SGE list; false means the local memory refused (LOC_PROT_ERR).
	ReadResponse(id uint64, off uint32, src []byte) bool
	// AtomicResult stores an atomic's original value in request id's local
	// 8-byte buffer; false means LOC_PROT_ERR.
	AtomicResult(id uint64, orig uint64) bool
	// SendComplete reports the completion of request id, in posting order.
	// An error status (st != ib.WCSuccess) comes with its cause and is the
	// engine's last act: the QP must move to ERR, and Fatal does not follow.
	// cause is nil on success.
	SendComplete(id uint64, st ib.WCStatus, byteLen uint32, cause error)

	// RecvBegin makes the next posted receive current; false: none posted.
	RecvBegin() bool
	// RecvPlace writes a SEND's payload at off of the current receive:
	// ib.WCLocLenErr if it does not fit, ib.WCLocProtErr if its memory
	// refuses; any other error status is taken as ib.WCLocProtErr.
	RecvPlace(off uint32, src []byte) ib.WCStatus
	// RecvComplete completes the current receive. write says it was taken
	// by an RDMA WRITE with immediate.
	RecvComplete(st ib.WCStatus, byteLen uint32, imm uint32, hasImm, write bool)

	// RemoteCheck validates rkey, protection domain, access and bounds of
	// [va, va+n): ib.WCSuccess or ib.WCRemAccessErr.
	RemoteCheck(rkey uint32, va uint64, n uint32, need ib.Access) ib.WCStatus
	// RemoteWrite, RemoteRead and RemoteAtomic access memory RemoteCheck
	// accepted; false means it became inaccessible since (deregistered),
	// which the engine answers with a remote access NAK. op is
	// ib.WRAtomicCmpAndSwp or ib.WRAtomicFetchAndAdd.
	RemoteWrite(rkey uint32, va uint64, src []byte) bool
	RemoteRead(rkey uint32, va uint64, dst []byte) bool
	RemoteAtomic(rkey uint32, va uint64, op ib.WROpcode, compareAdd, swap uint64) (uint64, bool)

	// Fatal reports that the QP must move to ERR for a reason that is not a
	// send completion (a responder class C error: the cause wraps
	// ErrInvalidRequest, ErrRemoteAccess or ErrRemoteOperation). The engine
	// stops after it.
	Fatal(cause error)
}

// Config is a connection's attributes (the RTR and RTS attributes of
// ibv_modify_qp). Zero fields take the defaults noted.
type Config struct {
	QPN, DestQPN     uint32
	SendPSN, RecvPSN uint32
	MTU              int       // path MTU in bytes, 256..4096; 0 = 1024
	Timeout          uint8     // local ACK timeout 4.096 µs × 2^Timeout bounds the RTO; 0 = never time out
	RetryCnt         uint8     // retries after timeouts and sequence NAKs
	RNRRetry         uint8     // retries after RNR NAKs; 7 = infinite
	MinRNRTimer      uint8     // RNR timer code this responder sends
	MaxRdAtomic      int       // outstanding READ/atomic requests as requester
	MaxDestRdAtomic  int       // responder resources for READ/atomic
	Access           ib.Access // remote rights granted to the peer
	Window           int       // max unacknowledged PSNs; 0 = 128
	MaxSendWR        int       // capacity of the request queue; 0 = 256
	MinRTO           int64     // lower bound of the retransmit timeout, ns; 0 = 1 ms
	// CNPInterval is the least time between two CNPs the responder sends
	// (mlx5's cnp interval), ns; 0 = 50 µs; negative: never send one.
	CNPInterval int64
	// Pacer, if set, limits the retransmissions of every engine that
	// shares it (one per device); nil: none.
	Pacer *Pacer
}

func (c *Config) setDefaults() {
	if c.MTU == 0 {
		c.MTU = 1024
	}
	if c.Window == 0 {
		c.Window = 128
	}
	if c.MaxSendWR == 0 {
		c.MaxSendWR = 256
	}
	if c.MinRTO == 0 {
		c.MinRTO = 1e6
	}
	if c.CNPInterval == 0 {
		c.CNPInterval = 50_000
	}
}

// Stats are an engine's counters.
type Stats struct {
	PktsSent, PktsRecv       uint64
	BytesSent, BytesRecv     uint64 // payload bytes
	Retransmits              uint64 // packets sent again
	Timeouts                 uint64 // retransmit timer expiries
	Retries                  uint64 // go-back-N retries after a timeout (what retry_cnt bounds)
	SeqNaksSent, SeqNaksRecv uint64
	RNRNaksSent, RNRNaksRecv uint64
	ErrNaksSent, ErrNaksRecv uint64
	Duplicates               uint64 // duplicate requests received
	OutOfSequence            uint64 // requests beyond the expected PSN
	AcksSent, AcksRecv       uint64
	Dropped                  uint64 // packets dropped as invalid or unexpected
	// OutOfWindow counts ACKs, NAKs and responses ignored because their
	// PSN is outside the requester's outstanding window: older than the
	// oldest unacknowledged PSN (an ACK one older is a duplicate, allowed)
	// or not yet sent. Stale copies or forgeries; they change nothing.
	OutOfWindow        uint64
	CNPsSent, CNPsRecv uint64 // RoCEv2 congestion notifications
	ECNMarked          uint64 // packets received with ECN CE
	WindowCuts         uint64 // send window reductions (timeout, NAK, CNP, CE)
	Paced              uint64 // retransmissions the Pacer held back for later
}

// Conn is the engine of one RC QP: requester, completer and responder.
type Conn struct {
	cfg  Config
	host Host
	req  requester
	resp responder
	dead bool
	st   Stats
}

// New creates the engine for a QP that has reached RTS.
func New(cfg Config, host Host) (*Conn, error) {
	cfg.setDefaults()
	switch {
	case cfg.MTU != 256 && cfg.MTU != 512 && cfg.MTU != 1024 && cfg.MTU != 2048 && cfg.MTU != 4096:
		return nil, fmt.Errorf("rc: mtu %d: must be 256, 512, 1024, 2048 or 4096", cfg.MTU)
	case cfg.Window < 2 || cfg.Window > 1<<22:
		return nil, fmt.Errorf("rc: window %d: must be 2..2^22", cfg.Window)
	case cfg.RetryCnt > 7 || cfg.RNRRetry > 7 || cfg.Timeout > 31 || cfg.MinRNRTimer > 31:
		return nil, fmt.Errorf("rc: retry_cnt %d, rnr_retry %d, timeout %d or min_rnr_timer %d out of range",
			cfg.RetryCnt, cfg.RNRRetry, cfg.Timeout, cfg.MinRNRTimer)
	case cfg.SendPSN > ib.PSNMask || cfg.RecvPSN > ib.PSNMask || cfg.QPN > ib.PSNMask || cfg.DestQPN > ib.PSNMask:
		return nil, fmt.Errorf("rc: PSNs and QPNs are 24 bits")
	}
	c := &Conn{cfg: cfg, host: host}
	c.req.init(c)
	c.resp.init(c)
	return c, nil
}

// StartSend configures the requester when the QP reaches RTS (the engine
// may be created at RTR, when only the responder runs). It must be called
// before the first Post.
func (c *Conn) StartSend(sendPSN uint32, timeout, retryCnt, rnrRetry uint8, maxRdAtomic int) error {
	if c.req.n != 0 {
		return fmt.Errorf("rc: qp %#x: StartSend with %d requests queued", c.cfg.QPN, c.req.n)
	}
	if sendPSN > ib.PSNMask || timeout > 31 || retryCnt > 7 || rnrRetry > 7 {
		return fmt.Errorf("rc: qp %#x: sq_psn %#x, timeout %d, retry_cnt %d or rnr_retry %d out of range", c.cfg.QPN, sendPSN, timeout, retryCnt, rnrRetry)
	}
	c.cfg.SendPSN, c.cfg.Timeout, c.cfg.RetryCnt, c.cfg.RNRRetry, c.cfg.MaxRdAtomic = sendPSN, timeout, retryCnt, rnrRetry, maxRdAtomic
	ring := c.req.ring
	c.req = requester{}
	c.req.init(c)
	c.req.ring = ring
	return nil
}

// SetMaxRdAtomic changes max_rd_atomic (an SQD→SQD modify); requests
// queued behind a change to 0 fail with LOC_QP_OP_ERR.
func (c *Conn) SetMaxRdAtomic(n int) { c.cfg.MaxRdAtomic = n }

// Stats returns the engine's counters.
func (c *Conn) Stats() Stats { return c.st }

// Dead reports whether the engine stopped after a fatal error.
func (c *Conn) Dead() bool { return c.dead }

// Idle reports whether nothing is queued, in flight or waiting to be sent.
func (c *Conn) Idle() bool { return c.req.n == 0 && c.resp.outN == 0 && !c.resp.cnpPending }

// fatal stops the engine and tells the host (for what is not a send
// completion: requester errors end in SendComplete, see requester.fail).
func (c *Conn) fatal(cause error) {
	if c.dead {
		return
	}
	c.dead = true
	c.host.Fatal(cause)
}

// Poll fills pkt with the next packet to send and returns true, or returns
// false when there is nothing to send now. buf is scratch space for the
// payload, at least MTU bytes; pkt.Payload aliases it.
func (c *Conn) Poll(now int64, pkt *Packet, buf []byte) bool {
	if c.dead && c.resp.outN == 0 {
		return false
	}
	*pkt = Packet{DestQPN: c.cfg.DestQPN}
	if c.resp.cnpPending && !c.dead {
		// Congestion feedback first: it is worth most when it is early.
		c.resp.cnpPending = false
		pkt.Opcode = ib.CNP
		c.st.CNPsSent++
		c.st.PktsSent++
		return true
	}
	if c.resp.poll(now, pkt, buf) || (!c.dead && c.req.poll(now, pkt, buf)) {
		c.st.PktsSent++
		c.st.BytesSent += uint64(len(pkt.Payload))
		return true
	}
	return false
}

// PollAck emits the next queued response if it is an acknowledgement
// (ACK, NAK, atomic ACK). A provider calls it for a QP it is about to
// destroy: the acknowledgements of requests the responder has executed
// still leave, as they do from hardware and rxe, which acknowledge as they
// execute; a READ response still owed does not start. Without it, a QP
// destroyed right after its application saw the peer's last WRITE land
// (ib_write_lat's end) takes that WRITE's ACK with it, and the peer's
// request ends in RETRY_EXC_ERR.
func (c *Conn) PollAck(pkt *Packet) bool {
	r := &c.resp
	if r.outN == 0 || r.out[r.outHead].kind == itemRead {
		return false
	}
	*pkt = Packet{DestQPN: c.cfg.DestQPN}
	r.poll(0, pkt, nil)
	c.st.PktsSent++
	return true
}

// Receive processes one incoming packet addressed to this QP.
func (c *Conn) Receive(now int64, pkt *Packet) {
	if c.dead {
		return
	}
	c.st.PktsRecv++
	c.st.BytesRecv += uint64(len(pkt.Payload))
	if pkt.Opcode == ib.CNP {
		// Outside the PSN sequence and never acknowledged: it only slows
		// the requester.
		c.st.CNPsRecv++
		c.req.cutWindow(now)
		return
	}
	if pkt.CE {
		c.st.ECNMarked++
	}
	if pkt.Opcode.Has(ib.MaskResponse) {
		if pkt.CE {
			// The requester is the sender this marking is about too:
			// READ responses fill its own window.
			c.req.cutWindow(now)
		}
		c.req.receive(now, pkt)
	} else {
		if pkt.CE {
			c.resp.ceMarked(now)
		}
		c.resp.receive(now, pkt)
	}
}

// Deadline returns when the engine next needs Tick or Poll for a timer (a
// retransmit timeout or the end of an RNR wait), or 0 for none.
func (c *Conn) Deadline() int64 {
	if c.dead {
		return 0
	}
	return c.req.deadline()
}

// Tick fires the timers due at now.
func (c *Conn) Tick(now int64) {
	if !c.dead {
		c.req.tick(now)
	}
}
