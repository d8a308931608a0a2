package verbs

import (
	"cmp"
	"slices"
	"sync"
)

// The process-wide registry of open contexts and their QPs, for tools that
// report on a process (package metrics, `ibex stat`): lists changed only by
// Open, Close, CreateQP and QP.Destroy (the control path). Nothing on the
// data path reads or writes them.

var (
	// ctxMu guards contexts and devs. It is a leaf: nothing else is locked
	// while it is held.
	ctxMu    sync.Mutex
	contexts []*Context
	devs     = map[string]*devRecord{} // by provider/device
)

// devRecord is what outlives a device's contexts and QPs in this process:
// the last counters of its destroyed QPs (so that a sum over a device's QPs
// never goes backwards) and the transitions of its ports to DOWN.
type devRecord struct {
	destroyed map[uint8]*QPStats // by port
	ports     map[uint8]*portRecord
}

type portRecord struct {
	down       bool   // the last port event was PORT_ERR
	linkDowned uint64 // transitions to DOWN (PORT_ERR after PORT_ACTIVE or none)
}

func (c *Context) devKey() string { return c.provider + "/" + c.name }

// recordLocked returns c's device record, creating it. ctxMu is held.
func (c *Context) recordLocked() *devRecord {
	r := devs[c.devKey()]
	if r == nil {
		r = &devRecord{destroyed: map[uint8]*QPStats{}, ports: map[uint8]*portRecord{}}
		devs[c.devKey()] = r
	}
	return r
}

// Contexts returns the open contexts of this process, in the order they
// were opened.
func Contexts() []*Context {
	ctxMu.Lock()
	defer ctxMu.Unlock()
	return slices.Clone(contexts)
}

func (c *Context) register() {
	ctxMu.Lock()
	contexts = append(contexts, c)
	ctxMu.Unlock()
}

func (c *Context) unregister() {
	ctxMu.Lock()
	if i := slices.Index(contexts, c); i >= 0 {
		contexts = slices.Delete(contexts, i, i+1)
	}
	ctxMu.Unlock()
}

// QPs returns the context's QPs (created and not yet destroyed), by QP
// number.
func (c *Context) QPs() []*QP {
	c.mu.Lock()
	qps := slices.Clone(c.qps)
	c.mu.Unlock()
	slices.SortFunc(qps, func(a, b *QP) int { return cmp.Compare(a.num, b.num) })
	return qps
}

func (c *Context) addQP(qp *QP) {
	c.mu.Lock()
	c.qps = append(c.qps, qp)
	c.mu.Unlock()
}

// removeQP takes a destroyed QP off the list and keeps its last counters
// (st, on port) in the device's record.
func (c *Context) removeQP(qp *QP, port uint8, st QPStats) {
	c.mu.Lock()
	if i := slices.Index(c.qps, qp); i >= 0 {
		c.qps = slices.Delete(c.qps, i, i+1)
	}
	c.mu.Unlock()
	ctxMu.Lock()
	r := c.recordLocked()
	d := r.destroyed[port]
	if d == nil {
		d = &QPStats{}
		r.destroyed[port] = d
	}
	d.Add(&st)
	ctxMu.Unlock()
}

// DestroyedQPStats returns the sum of the last counters of the QPs on a
// port of this context's device destroyed in this process (by any context
// of the device). A sum of the counters of a device's QPs that adds it
// never goes backwards when a QP goes away, as a device's counters on an
// HCA do not.
func (c *Context) DestroyedQPStats(port uint8) QPStats {
	ctxMu.Lock()
	defer ctxMu.Unlock()
	if r := devs[c.devKey()]; r != nil && r.destroyed[port] != nil {
		return *r.destroyed[port]
	}
	return QPStats{}
}

// LinkDowned counts the transitions of a port of this context's device to
// DOWN that this process heard of (PORT_ERR events posted by the provider
// while the port was up), since the process first opened the device: the
// LinkDownedCounter of the IBA's PortCounters. A transition counts once
// however many contexts the device has.
func (c *Context) LinkDowned(port uint8) uint64 {
	ctxMu.Lock()
	defer ctxMu.Unlock()
	if r := devs[c.devKey()]; r != nil && r.ports[port] != nil {
		return r.ports[port].linkDowned
	}
	return 0
}

// portEvent follows a port's state from its events (called by postEvent
// for PORT_ERR and PORT_ACTIVE only).
func (c *Context) portEvent(ev AsyncEvent) {
	ctxMu.Lock()
	r := c.recordLocked()
	p := r.ports[ev.Port]
	if p == nil {
		p = &portRecord{}
		r.ports[ev.Port] = p
	}
	down := ev.Type == EventPortErr
	if down && !p.down {
		p.linkDowned++
	}
	p.down = down
	ctxMu.Unlock()
}
