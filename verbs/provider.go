package verbs

import (
	"fmt"
	"sort"
	"sync"

	"github.com/ibex-rdma/ibex/verbs/internal/wq"
)

// The provider contract is package verbs/driver: a provider implements
// driver.Provider, driver.Device and driver.QPDriver and registers with
// driver.Register. verbs/driver adapts those to the unexported bindings
// below, whose method sets name only verbs' own types, so that verbs can
// call a provider without exporting anything for it.

// providerBinding is a registered provider, as verbs/driver hands it over.
type providerBinding interface {
	Name() string
	Devices() []string
	// OpenDevice opens a device for c and returns its deviceBinding.
	OpenDevice(device string, c *Context) (any, error)
}

// deviceBinding is one opened device.
type deviceBinding interface {
	DeviceAttr() DeviceAttr
	PortAttr(port uint8) (PortAttr, error)
	Close() error
	// NewQPFor attaches the transport to a new QP and returns the
	// provider's QPDriver (an executor or an issuer, see below).
	NewQPFor(qp *QP) (any, error)
	// RegMR and DeregMR tell a device that publishes MRs to its peers.
	RegMR(mr *MR) error
	DeregMR(mr *MR)
	// AssignKeys asks a device that owns the keys (a daemon in another
	// process) for an MR's lkey and rkey; ok is false when the device
	// leaves them to verbs.
	AssignKeys(mr *MR) (lkey, rkey uint32, ok bool, err error)
	// Device is the provider's own device value, for the optional
	// interfaces below.
	Device() any
}

// Optional device interfaces (see verbs/driver for their contracts).
type (
	memAllocator interface {
		AllocMem(n int) (buf []byte, free func(), err error)
	}
	portCounterReader interface {
		PortCounters(port uint8) []PortCounter
	}
	pkeyTable interface {
		PKeys(port uint8) []uint16
	}
	progresser interface {
		Progress()
	}
	idler interface {
		Idle()
	}
)

// A provider's QPDriver: Destroy plus exactly one of Execute or Issue, and
// optionally the notifiers.
type (
	qpDriver interface {
		Destroy()
	}
	executor interface {
		Execute(w *wq.SendWQE) wq.Outcome
	}
	issuer interface {
		Issue(w *wq.SendWQE)
	}
	stateNotifier interface {
		StateChanged(from, to QPState, attr QPAttr)
	}
	recvNotifier interface {
		RecvPosted()
	}
	recvIssuer interface {
		IssueRecv(rsn uint64, sgl []SGE) error
	}
	modifyNotifier interface {
		Modified(from, to QPState, attr *QPAttr, mask AttrMask) error
	}
	statsReader interface {
		TransportStats() QPStats
	}
	qpNumberer interface {
		QPNum() uint32
	}
	securer interface {
		RecvSPI() uint32
		PeerSPI(spi uint32) error
	}
)

var (
	regMu     sync.RWMutex
	providers = map[string]providerBinding{}
)

// register makes a provider available by name (driver.Register). It panics
// on a duplicate name: registration happens in init functions, where that
// is a programming error.
func register(p providerBinding) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := providers[p.Name()]; dup {
		panic(fmt.Sprintf("verbs: provider %q registered twice", p.Name()))
	}
	providers[p.Name()] = p
}

// sortedProviders returns the registered providers, sorted by name.
func sortedProviders() []providerBinding {
	regMu.RLock()
	defer regMu.RUnlock()
	out := make([]providerBinding, 0, len(providers))
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

// Devices lists every device of every registered provider, sorted by
// provider (ibv_get_device_list). A provider registers when its package
// is imported (for example `import _ "github.com/ibex-rdma/ibex/provider/udp"`).
func Devices() []DeviceName {
	var out []DeviceName
	for _, p := range sortedProviders() {
		for _, d := range p.Devices() {
			out = append(out, DeviceName{Provider: p.Name(), Device: d})
		}
	}
	return out
}
