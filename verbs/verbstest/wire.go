package verbstest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ibex-rdma/ibex/verbs"
)

// The remote protocol: gob-encoded requests from the suite (the client) and
// responses from Serve, matched by ID, so several of the suite's goroutines
// may wait on the server at once. Objects are named by handles the server
// allocates (1, 2, ...). A response's Err is the verbs call's error, rebuilt
// on the client so that errors.Is and errors.As see what they would see
// locally.

// protocolVersion is checked at open: both sides must be this package at
// the same revision, since errors travel as indexes into sentinels.
const protocolVersion = 1

type op uint8

const (
	opOpen op = iota + 1
	opClose
	opSetPort
	opQueryPort
	opEvent
	opAllocPD
	opDeallocPD
	opCreateCQ
	opDestroyCQ
	opPoll
	opPollWait
	opWait
	opRegMR
	opDereg
	opRead
	opWrite
	opCreateQP
	opDestroyQP
	opState
	opErr
	opInfo
	opQuery
	opModify
	opConnect
	opPostSend
	opPostRecv
	opStats
	opEnd
)

var opNames = [...]string{
	opOpen: "open", opClose: "close", opSetPort: "set port state", opQueryPort: "query port",
	opEvent: "async event", opAllocPD: "alloc pd", opDeallocPD: "dealloc pd", opCreateCQ: "create cq",
	opDestroyCQ: "destroy cq", opPoll: "poll cq", opPollWait: "poll-wait cq", opWait: "wait cq",
	opRegMR: "reg mr", opDereg: "dereg mr", opRead: "read mr", opWrite: "write mr",
	opCreateQP: "create qp", opDestroyQP: "destroy qp", opState: "qp state", opErr: "qp err",
	opInfo: "qp info", opQuery: "query qp", opModify: "modify qp", opConnect: "connect qp",
	opPostSend: "post send", opPostRecv: "post recv", opStats: "qp stats",
}

func (o op) String() string {
	if o > 0 && o < opEnd {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// request is one call. H names the object the call is on; the other fields
// are the call's arguments, those the op does not use left zero.
type request struct {
	ID  uint64
	Op  op
	H   uint64
	CQ  uint64 // create qp: its send and receive CQ
	N   int    // version, depth, length, count
	Off int

	Port      uint8
	PortState verbs.PortState
	Access    verbs.Access
	Cap       verbs.QPCap
	SigAll    bool
	Attr      verbs.QPAttr
	Mask      verbs.AttrMask
	Info      verbs.ConnInfo
	Conn      verbs.ConnectOptions
	Send      []verbs.SendWR
	Recv      []verbs.RecvWR
	Data      []byte

	// Waits run on the server with the caller's remaining time.
	HasTimeout bool
	Timeout    time.Duration
}

// response answers the request with the same ID.
type response struct {
	ID  uint64
	Err *wireErr

	H          uint64
	N          int
	QPN, PSN   uint32
	Addr       uint64
	LKey, RKey uint32
	CanSetPort bool
	State      verbs.QPState
	Cause      *wireErr // QP.Err
	Attr       verbs.QPAttr
	Info       verbs.ConnInfo
	Stats      verbs.QPStats
	PortAttr   verbs.PortAttr
	WC         []verbs.WC
	Data       []byte
	Event      wireEvent
}

// wireEvent is an AsyncEvent without pointers: the QP by number, the CQ by
// handle.
type wireEvent struct {
	Type  verbs.AsyncEventType
	QPN   uint32
	IsCQ  bool
	CQ    uint64
	Port  uint8
	Cause *wireErr
	Text  string
}

// wireErr is an error as text plus the sentinel it wraps; a *verbs.PostError
// keeps its fields.
type wireErr struct {
	Msg      string
	Sentinel int // 1 + index into sentinels; 0: none
	Post     *wirePost
}

type wirePost struct {
	Op    string
	QPN   uint32
	Index int
}

// sentinels are the errors a remote call's error may wrap and still be
// recognised by errors.Is on the client.
var sentinels = []error{
	verbs.ErrNoDevice, verbs.ErrInvalidArgument, verbs.ErrInvalidState, verbs.ErrInvalidLKey,
	verbs.ErrQueueFull, verbs.ErrLimit, verbs.ErrBusy, verbs.ErrClosed, verbs.ErrCQOverflow,
	verbs.ErrUnsupported, context.DeadlineExceeded, context.Canceled,
}

func sentinelOf(err error) int {
	for i, s := range sentinels {
		if errors.Is(err, s) {
			return i + 1
		}
	}
	return 0
}

func encodeErr(err error) *wireErr {
	if err == nil {
		return nil
	}
	if pe, ok := err.(*verbs.PostError); ok {
		return &wireErr{Msg: pe.Err.Error(), Sentinel: sentinelOf(pe.Err), Post: &wirePost{Op: pe.Op, QPN: pe.QPN, Index: pe.Index}}
	}
	return &wireErr{Msg: err.Error(), Sentinel: sentinelOf(err)}
}

func (w *wireErr) decode() error {
	if w == nil {
		return nil
	}
	var err error = &remoteError{msg: w.Msg}
	if w.Sentinel > 0 && w.Sentinel <= len(sentinels) {
		err = &remoteError{msg: w.Msg, sentinel: sentinels[w.Sentinel-1]}
	}
	if w.Post != nil {
		return &verbs.PostError{Op: w.Post.Op, QPN: w.Post.QPN, Index: w.Post.Index, Err: err}
	}
	return err
}

// remoteError is an error of the server's verbs call: its message, and
// the sentinel it wrapped there.
type remoteError struct {
	msg      string
	sentinel error
}

func (e *remoteError) Error() string { return e.msg }

func (e *remoteError) Unwrap() error { return e.sentinel }
