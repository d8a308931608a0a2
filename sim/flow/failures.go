package flow

import (
	"fmt"
	"math/rand/v2"
	"sort"

	"github.com/ibex-rdma/ibex/sim/des"
	"github.com/ibex-rdma/ibex/sim/fabric"
	"github.com/ibex-rdma/ibex/sim/topo"
)

// SwitchFailure fails every link of switch sw at time at: a switch going
// down is all its cables going down at once.
func SwitchFailure(g *topo.Graph, sw topo.NodeID, at des.Time) ([]fabric.Failure, error) {
	if sw < 0 || int(sw) >= len(g.Nodes) || g.Nodes[sw].Kind != topo.KindSwitch {
		return nil, fmt.Errorf("flow: %w: %s is not a switch", ErrConfig, g.NodeName(sw))
	}
	n := &g.Nodes[sw]
	var out []fabric.Failure
	for p := n.FirstPort; p < n.FirstPort+topo.PortID(n.NumPorts); p++ {
		if l := g.Ports[p].Link; l != topo.NoLink {
			out = append(out, fabric.Failure{At: at, Link: l})
		}
	}
	return out, nil
}

// RandomFailures draws n distinct switch-to-switch links (the cables whose
// loss routing can work around) and failure times uniform in [0, window),
// from seed: the same seed draws the same failures. They are sorted by
// time.
func RandomFailures(g *topo.Graph, n int, window des.Time, seed uint64) ([]fabric.Failure, error) {
	var cand []topo.LinkID
	for l := range g.Links {
		if t := g.Links[l].Tier; t == topo.LinkLeafSpine || t == topo.LinkSpineCore {
			cand = append(cand, topo.LinkID(l))
		}
	}
	if n < 0 || n > len(cand) {
		return nil, fmt.Errorf("flow: %w: %d random failures: the topology has %d switch-to-switch links", ErrConfig, n, len(cand))
	}
	if window <= 0 {
		return nil, fmt.Errorf("flow: %w: failure window %v: want > 0", ErrConfig, window)
	}
	rng := rand.New(rand.NewPCG(seed, 0x6661696c))
	rng.Shuffle(len(cand), func(i, j int) { cand[i], cand[j] = cand[j], cand[i] })
	out := make([]fabric.Failure, n)
	for i := range out {
		out[i] = fabric.Failure{At: des.Time(rng.Int64N(int64(window))), Link: cand[i]}
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].At < out[b].At })
	return out, nil
}

// Hit compares a run with failures to the same run without: the overall
// slowdown and, per iteration, how much longer it took.
type Hit struct {
	Slowdown float64 // Time with failures / Time without - 1
	Iters    []IterHit
}

// IterHit is one iteration's length with and without the failures.
type IterHit struct {
	Base, Failed des.Time
}

// Hit says whether the failures made this iteration slower.
func (h IterHit) Hit() bool { return h.Failed > h.Base }

// Compare computes the Hit of failed against base (both with the same
// iterations).
func Compare(base, failed *Result) Hit {
	h := Hit{}
	if base.Time > 0 {
		h.Slowdown = float64(failed.Time)/float64(base.Time) - 1
	}
	var pb, pf des.Time
	for i := range min(len(base.Iters), len(failed.Iters)) {
		h.Iters = append(h.Iters, IterHit{Base: base.Iters[i] - pb, Failed: failed.Iters[i] - pf})
		pb, pf = base.Iters[i], failed.Iters[i]
	}
	return h
}
