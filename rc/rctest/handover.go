package rctest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"

	"github.com/ibex-rdma/ibex/rc"
)

// DropInFlight loses every datagram in flight to or from addr, queued or
// held, as closing a socket loses what it had not read and what the
// network had not delivered of what it sent: the process at addr is
// replaced (a daemon upgrade). It returns how many it dropped (counted in
// NetStats.Dropped).
func (n *Network) DropInFlight(addr netip.AddrPort) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	dropped := 0
	gone := func(d Datagram) bool {
		if d.From != addr && d.To != addr {
			return false
		}
		n.free = append(n.free, d.Data)
		dropped++
		return true
	}
	n.held = slices.DeleteFunc(n.held, gone)
	for _, e := range n.eps {
		e.q = slices.DeleteFunc(e.q, gone)
		// A sorted slice is a min-heap.
		slices.SortFunc(e.q, func(a, b Datagram) int {
			switch {
			case a.before(&b):
				return -1
			case b.before(&a):
				return 1
			}
			return 0
		})
		if len(e.q) > 0 {
			e.head.Store(e.q[0].At)
		} else {
			e.head.Store(math.MaxInt64)
		}
	}
	n.stats.Dropped += uint64(dropped)
	return dropped
}

// handover carries out Config.Handover in Run: at thresholds of a's
// posted work it holds a's posting back until a's requester is quiet (no
// request outstanding), lets a few more rounds of the run go by (the
// peer's requests keep arriving: the state has responses queued, a
// message half received), then replaces a's engine.
type handover struct {
	fn    func(q *QP, cfg rc.Config) (*rc.Conn, error)
	rng   *rand.Rand
	at    []int // a.posted thresholds, ascending
	wait  int   // rounds still to wait once quiet; -1: not drawn yet
	done  int
	trace func(string)
}

// newHandover draws cfg.Handovers points in a's workload of n requests
// from its own stream of the seed (the rest of the run draws what it
// would without handovers until the first). nil if cfg.Handover is nil.
func newHandover(cfg *Config, n int) *handover {
	if cfg.Handover == nil {
		return nil
	}
	k := cfg.Handovers
	if k == 0 {
		k = 1
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x68616e646f766572))
	h := &handover{fn: cfg.Handover, rng: rng, wait: -1, trace: cfg.Trace}
	for range k {
		h.at = append(h.at, rng.IntN(n+1))
	}
	slices.Sort(h.at)
	return h
}

// holding reports whether a must not post more work: a handover is due.
func (h *handover) holding(posted int) bool {
	return h != nil && h.done < len(h.at) && posted >= h.at[h.done]
}

// pending reports whether a handover has still to happen.
func (h *handover) pending() bool { return h != nil && h.done < len(h.at) }

// step replaces a's engine if a handover is due and a's requester is
// quiet.
func (h *handover) step(net *Network, a *side, addr netip.AddrPort, cfg rc.Config) error {
	if !h.holding(a.posted) || a.h.Outstanding() != 0 || a.h.Stop != nil {
		return nil
	}
	if h.wait < 0 {
		h.wait = h.rng.IntN(8)
	}
	if h.wait > 0 {
		h.wait--
		return nil
	}
	h.wait = -1
	c, err := h.fn(a.q, cfg)
	if err != nil {
		return fmt.Errorf("handover %d of %s: %w", h.done+1, a.h.Name, err)
	}
	n := net.DropInFlight(addr)
	a.q.Conn = c
	h.done++
	if h.trace != nil {
		h.trace(fmt.Sprintf("%9d handover %d of %s: %d datagrams in flight dropped", net.Now(), h.done, a.h.Name, n))
	}
	return nil
}
