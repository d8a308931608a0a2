package verbs

import (
	"fmt"
	"sort"
	"sync"
)

// Provider is a family of devices (loopback, shm, udp, ...). Providers
// register themselves from an init function; programs open devices by name.
type Provider interface {
	// Name is the provider's short name, e.g. "loopback".
	Name() string
	// Devices lists the device names this provider offers now.
	Devices() []string
	// Open opens a device for one Context. The driver reports asynchronous
	// events through c.PostEvent.
	Open(device string, c *Context) (Driver, error)
}

// Driver is one opened device: what a provider implements under a Context.
type Driver interface {
	DeviceAttr() DeviceAttr
	PortAttr(port uint8) (PortAttr, error)
	// NewQP attaches the transport to a newly created QP.
	NewQP(qp *QP) (QPDriver, error)
	// Close releases the device; every QP has been destroyed by then.
	Close() error
}

// QPDriver is a provider's transport for one QP.
type QPDriver interface {
	// Execute runs the send WQE at the head of the send queue and reports
	// its outcome. It is called by one goroutine at a time per QP, in posting
	// order, never with a verbs lock held. A provider that executes
	// synchronously (loopback) moves the bytes here.
	Execute(w *SendWQE) Outcome
	// Destroy detaches the transport; Execute is not called afterwards.
	Destroy()
}

// OutcomeKind says how a send attempt ended.
type OutcomeKind uint8

// Outcome kinds.
const (
	// Done: the request completed with Outcome.Status.
	Done OutcomeKind = iota
	// RNR: the responder had no receive posted; retry after the RNR timer
	// given by Outcome.RNRTimer (counted against rnr_retry).
	RNR
	// Lost: no response arrived (unreachable or not-ready responder); retry
	// after the QP's timeout (counted against retry_cnt).
	Lost
)

// Outcome is what a QPDriver reports for one send attempt.
type Outcome struct {
	Kind     OutcomeKind
	Status   WCStatus // for Done
	ByteLen  uint32   // for Done: bytes moved (READ, atomics, SEND)
	RNRTimer uint8    // for RNR: the responder's min_rnr_timer code
	// Cause explains an error status; it becomes QP.Err() when the QP moves
	// to ERR. Errors only: the success path allocates nothing.
	Cause error
}

var (
	regMu     sync.RWMutex
	providers = map[string]Provider{}
)

// Register makes a provider available by name. It panics on a duplicate
// name: registration happens in init functions, where that is a programming
// error.
func Register(p Provider) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := providers[p.Name()]; dup {
		panic(fmt.Sprintf("verbs: provider %q registered twice", p.Name()))
	}
	providers[p.Name()] = p
}

// Providers returns the registered providers, sorted by name.
func Providers() []Provider {
	regMu.RLock()
	defer regMu.RUnlock()
	out := make([]Provider, 0, len(providers))
	for _, p := range providers {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}

// DeviceName is a device and the provider that offers it.
type DeviceName struct {
	Provider string
	Device   string
}

// Devices lists every device of every registered provider.
func Devices() []DeviceName {
	var out []DeviceName
	for _, p := range Providers() {
		for _, d := range p.Devices() {
			out = append(out, DeviceName{Provider: p.Name(), Device: d})
		}
	}
	return out
}
