// Package ibexdwire is the control protocol between ibexd and the processes
// attached to it: one message per SOCK_SEQPACKET packet on a unix socket,
// JSON-encoded, with file descriptors (memfds) passed beside it by
// SCM_RIGHTS. Its one job is the shape of those messages and the layout
// of the shared segments they hand over; the daemon (package daemon) and
// the attaching provider (provider/ibexd) speak it.
//
// The data path does not use the socket: work requests and completions
// travel in internal/hwq rings inside memfd segments both sides map, and a
// doorbell word in a segment the daemon hands over at Hello wakes an idle
// engine.
package ibexdwire

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"unsafe"

	"github.com/ibex-rdma/ibex/internal/shmem"
	"github.com/ibex-rdma/ibex/verbs"
)

// Version is the protocol version; Hello refuses any other.
const Version = 1

// MaxMessage is the largest control message, request or response.
const MaxMessage = 64 << 10

// MaxFDs is the most descriptors one message carries.
const MaxFDs = 2

// Ops of a Request.
const (
	OpHello     = "hello"      // Device, Version, PID -> DaemonPID, Attr, Ports, PKeys, fd: doorbell segment
	OpAllocPD   = "alloc_pd"   // -> PD
	OpAddSeg    = "add_seg"    // fd: a sealed memfd -> Seg
	OpDelSeg    = "del_seg"    // Seg
	OpRegMR     = "reg_mr"     // PD, Seg, Off, Len, IOVA, Access -> MR, LKey, RKey
	OpDeregMR   = "dereg_mr"   // MR
	OpCreateCQ  = "create_cq"  // Depth -> CQ, fd: ring segment
	OpDestroyCQ = "destroy_cq" // CQ
	OpCreateQP  = "create_qp"  // PD, SendCQ, RecvCQ, Cap, SigAll -> QPN, SQOff, RQOff, fd: ring segment
	OpModifyQP  = "modify_qp"  // QPN, Attr, Mask
	OpDestroyQP = "destroy_qp" // QPN
	OpQPStats   = "qp_stats"   // QPN -> Stats, QPErr (why the QP is in ERR)
	OpQueryPort = "query_port" // Port -> Ports[0]
	OpCounters  = "counters"   // Port -> Counters
	OpStatus    = "status"     // -> Status (any connection, also one that did not Hello)
	OpCapture   = "capture"    // first message of a capture connection (no Hello): the daemon package's protocol follows
)

// Request is a message from a process to the daemon. ID matches the
// Response; zero fields are absent.
type Request struct {
	ID      uint64         `json:"id"`
	Op      string         `json:"op"`
	Version int            `json:"version,omitempty"`
	Device  string         `json:"device,omitempty"`
	PID     int            `json:"pid,omitempty"`
	PD      uint32         `json:"pd,omitempty"`
	Seg     uint32         `json:"seg,omitempty"`
	MR      uint32         `json:"mr,omitempty"`
	CQ      uint32         `json:"cq,omitempty"`
	QPN     uint32         `json:"qpn,omitempty"`
	Off     uint64         `json:"off,omitempty"`
	Len     uint64         `json:"len,omitempty"`
	IOVA    uint64         `json:"iova,omitempty"`
	Access  verbs.Access   `json:"access,omitempty"`
	Depth   int            `json:"depth,omitempty"`
	SendCQ  uint32         `json:"send_cq,omitempty"`
	RecvCQ  uint32         `json:"recv_cq,omitempty"`
	Cap     verbs.QPCap    `json:"cap,omitzero"`
	SigAll  bool           `json:"sig_all,omitempty"`
	Attr    *verbs.QPAttr  `json:"attr,omitempty"`
	Mask    verbs.AttrMask `json:"mask,omitempty"`
	Port    uint8          `json:"port,omitempty"`
	// SPI is the peer's receive SPI (package psp; verbs.ConnInfo.SPI),
	// with a modify_qp to RTR; 0: the peer does not encrypt.
	SPI uint32 `json:"spi,omitempty"`
}

// Response answers one Request (ID equal), or, with ID 0, is an Event the
// daemon sends on its own.
type Response struct {
	ID        uint64              `json:"id"`
	Err       string              `json:"err,omitempty"`
	Code      string              `json:"code,omitempty"` // the verbs sentinel Err wraps: see Sentinel
	Event     *Event              `json:"event,omitempty"`
	DaemonPID int                 `json:"daemon_pid,omitempty"`
	Attr      *verbs.DeviceAttr   `json:"attr,omitempty"`
	Ports     []verbs.PortAttr    `json:"ports,omitempty"`
	PD        uint32              `json:"pd,omitempty"`
	Seg       uint32              `json:"seg,omitempty"`
	MR        uint32              `json:"mr,omitempty"`
	CQ        uint32              `json:"cq,omitempty"`
	QPN       uint32              `json:"qpn,omitempty"`
	LKey      uint32              `json:"lkey,omitempty"`
	RKey      uint32              `json:"rkey,omitempty"`
	SQOff     int                 `json:"sq_off,omitempty"`
	RQOff     int                 `json:"rq_off,omitempty"`
	Counters  []verbs.PortCounter `json:"counters,omitempty"`
	Stats     *verbs.QPStats      `json:"stats,omitempty"`
	QPErr     string              `json:"qp_err,omitempty"`
	Status    *Status             `json:"status,omitempty"`
	// PKeys is port 1's P_Key table (hello): the daemon's device's, which
	// the process's verbs gives QueryPKey and checks pkey_index against.
	PKeys []uint16 `json:"pkeys,omitempty"`
	// SPI is the new QP's receive SPI (create_qp): what the process's
	// QP.Info announces; 0 when the daemon's device does not encrypt.
	SPI uint32 `json:"spi,omitempty"`
}

// Event kinds.
const (
	// EventQP: a QP moved to ERR in the daemon for a reason that has no
	// completion (a responder error); Type and Cause say which.
	EventQP = "qp"
	// EventDetach: the daemon detached this process (Cause says why)
	// and closes the socket next.
	EventDetach = "detach"
)

// Event is something the daemon tells a process without being asked.
type Event struct {
	Kind  string               `json:"kind"`
	QPN   uint32               `json:"qpn,omitempty"`
	Type  verbs.AsyncEventType `json:"type,omitempty"`
	Cause string               `json:"cause"`
}

// Status is what `ibex daemon status` prints.
type Status struct {
	PID      int            `json:"pid"`
	Socket   string         `json:"socket"`
	Started  string         `json:"started"`
	Cores    []int          `json:"cores"`
	Devices  []DeviceStatus `json:"devices"`
	Clients  []ClientStatus `json:"clients"`
	Detached uint64         `json:"detached"` // processes detached for misbehaving
	Tenants  []TenantStatus `json:"tenants,omitempty"`
}

// TenantStatus is one tenant of the daemon: what its processes hold
// together and its quotas (0: none).
type TenantStatus struct {
	Name       string `json:"name"`
	Clients    int    `json:"clients"`
	QPs        uint64 `json:"qps"`
	CQs        uint64 `json:"cqs"`
	MRs        uint64 `json:"mrs"`
	MRBytes    uint64 `json:"mr_bytes"`
	MaxClients uint64 `json:"max_clients,omitempty"`
	MaxQPs     uint64 `json:"max_qps,omitempty"`
	MaxCQs     uint64 `json:"max_cqs,omitempty"`
	MaxMRs     uint64 `json:"max_mrs,omitempty"`
	MaxMemory  uint64 `json:"max_memory,omitempty"`
	Rate       uint64 `json:"rate,omitempty"`  // bytes per second its send WQEs may move
	Burst      uint64 `json:"burst,omitempty"` // the rate's token bucket depth, bytes
	Held       uint64 `json:"held,omitempty"`  // engine passes that held its send WQEs back for the rate
}

// DeviceStatus is one device the daemon owns.
type DeviceStatus struct {
	Name     string              `json:"name"`
	Address  string              `json:"address"`
	Mode     string              `json:"mode"` // "af_xdp" or "socket"
	Counters []verbs.PortCounter `json:"counters"`
	// Destroyed sums the last counters of the device's QPs destroyed
	// since the daemon started (verbs.Context.DestroyedQPStats), so that
	// sums over its QPs do not drop when a process detaches.
	Destroyed *verbs.QPStats `json:"destroyed_qps,omitempty"`
}

// ClientStatus is one attached process.
type ClientStatus struct {
	PID int `json:"pid"`
	// Who the process is, as the kernel said when it attached
	// (SO_PEERCRED, /proc/PID/cgroup), and the tenant that made it.
	UID     int        `json:"uid"`
	GID     int        `json:"gid"`
	Groups  []int      `json:"groups,omitempty"` // supplementary
	Cgroup  string     `json:"cgroup,omitempty"`
	Tenant  string     `json:"tenant"`
	Command string     `json:"command"`
	Device  string     `json:"device"`
	MRs     int        `json:"mrs"`
	MRBytes uint64     `json:"mr_bytes"`
	CQs     int        `json:"cqs"`
	QPs     []QPStatus `json:"qps"`
	Posted  uint64     `json:"posted"`    // send WQEs taken from its rings
	Comps   uint64     `json:"completed"` // CQEs written to its rings
}

// QPStatus is one QP of an attached process.
type QPStatus struct {
	QPN     uint32        `json:"qpn"`
	State   string        `json:"state"`
	DestQPN uint32        `json:"dest_qpn"`
	Stats   verbs.QPStats `json:"stats"`
	Err     string        `json:"err,omitempty"`
}

// Sentinel codes: the verbs errors a daemon-side failure wraps, so the
// process's error wraps the same sentinel (errors.Is works across the
// socket).
var sentinels = map[string]error{
	"invalid_argument": verbs.ErrInvalidArgument,
	"busy":             verbs.ErrBusy,
	"closed":           verbs.ErrClosed,
	"unsupported":      verbs.ErrUnsupported,
	"invalid_state":    verbs.ErrInvalidState,
	"limit":            verbs.ErrLimit,
}

// Code names the verbs sentinel err wraps ("" if none).
func Code(err error) string {
	for k, s := range sentinels {
		if errors.Is(err, s) {
			return k
		}
	}
	return ""
}

// Error rebuilds a daemon error on the process's side: the text, wrapping
// the sentinel code names.
func (r *Response) Error() error {
	if r.Err == "" {
		return nil
	}
	if s, ok := sentinels[r.Code]; ok {
		return fmt.Errorf("ibexd: %s: %w", r.Err, s)
	}
	return fmt.Errorf("ibexd: %s", r.Err)
}

// Send writes one message with fds.
func Send(c *net.UnixConn, v any, fds ...int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > MaxMessage {
		return fmt.Errorf("ibexdwire: message of %d bytes exceeds %d", len(b), MaxMessage)
	}
	return shmem.SendFDs(c, b, fds...)
}

// Recv reads one message into v, returning the descriptors that came with
// it (the caller owns them). A message that does not decode is an error
// and its descriptors are closed.
func Recv(c *net.UnixConn, buf []byte, v any) ([]int, error) {
	n, fds, err := shmem.RecvFDs(c, buf, MaxFDs)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		closeFDs(fds)
		return nil, errors.New("ibexdwire: peer closed the connection")
	}
	if err := json.Unmarshal(buf[:n], v); err != nil {
		closeFDs(fds)
		return nil, fmt.Errorf("ibexdwire: malformed message (%d bytes): %w", n, err)
	}
	return fds, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		_ = os.NewFile(uintptr(fd), "").Close()
	}
}

// CloseFDs closes descriptors a caller received and will not use.
func CloseFDs(fds []int) { closeFDs(fds) }

// Doorbell segment: one page the daemon creates per attached context and
// both map. The word at DoorbellSleeping is 1 while the context's engine
// is (about to be) asleep in a futex wait on it; a process that publishes
// work and finds it 1 sets it to 0 and wakes it.
const (
	DoorbellSize     = 4096
	DoorbellSleeping = 0
)

// Sleeping is the engine's sleeping word in a doorbell segment.
func Sleeping(db []byte) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&db[DoorbellSleeping]))
}

// Ring writes the doorbell: it wakes the engine if it sleeps. No syscall
// while the engine is awake.
func Ring(db []byte) {
	w := Sleeping(db)
	if w.Load() != 0 && w.CompareAndSwap(1, 0) {
		shmem.FutexWake(w, 1)
	}
}
