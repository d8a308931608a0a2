package route

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/ibex-rdma/ibex/sim/topo"
)

// ErrUnreachable is wrapped by the errors about NICs without a route.
var ErrUnreachable = errors.New("unreachable NICs")

// maxProblems is how many problems an UnreachableError spells out; it
// counts them all.
const maxProblems = 10

// UnreachableError says which NICs have no route to which, after failures
// (or, on a graph Check rejects, cabling). New returns it with a Router
// that routes all the other pairs.
type UnreachableError struct {
	// Pairs counts the ordered pairs of distinct NICs of one plane without
	// a route; NICs of different planes are never routed and not counted.
	Pairs int64
	// CutOff are the NICs that reach no NIC outside their own leaf (in an
	// explicit graph: no other NIC), in node order within each cause.
	CutOff   []topo.NodeID
	Problems []string // the first maxProblems, naming links, leaves and NICs
	Total    int      // all problems found
}

func (e *UnreachableError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "route: %d ordered NIC pairs have no route:", e.Pairs)
	for _, p := range e.Problems {
		b.WriteString("\n")
		b.WriteString(p)
	}
	if more := e.Total - len(e.Problems); more > 0 {
		fmt.Fprintf(&b, "\n... and %d more", more)
	}
	return b.String()
}

func (e *UnreachableError) Unwrap() error { return ErrUnreachable }

func (e *UnreachableError) add(format string, args ...any) {
	e.Total++
	if len(e.Problems) < maxProblems {
		e.Problems = append(e.Problems, fmt.Sprintf(format, args...))
	}
}

func (r *Router) unreachable() *UnreachableError {
	var e *UnreachableError
	if r.tree {
		e = r.unreachableTree()
	} else {
		e = r.unreachableExplicit()
	}
	if e.Pairs == 0 && e.Total == 0 {
		return nil
	}
	return e
}

// deadNICs reports the NICs whose own link is failed or missing.
func (r *Router) deadNICs(e *UnreachableError) {
	g := r.g
	for i := range r.nics {
		if r.nicOut[i] != topo.NoPort {
			continue
		}
		id := r.nic0 + topo.NodeID(i)
		e.CutOff = append(e.CutOff, id)
		if l := g.Ports[g.Nodes[id].FirstPort].Link; l != topo.NoLink && g.Nodes[id].NumPorts > 0 {
			e.add("%s: cut off: its link %s is failed", g.NodeName(id), g.LinkName(l))
		} else {
			e.add("%s: cut off: not cabled", g.NodeName(id))
		}
	}
}

// unreachableTree works per leaf pair: a NIC with a live link reaches
// every NIC of its own leaf with one, and those of another leaf if its
// leaf has a route there. Counting by leaf ranges keeps this linear in the
// segments, not quadratic in the NICs. Each plane is counted alone: its
// leaves are a range, and no route leaves it.
func (r *Router) unreachableTree() *UnreachableError {
	g := r.g
	e := &UnreachableError{}
	r.deadNICs(e)
	nl := len(r.leaves)
	planes := len(r.planeLeaf0) - 1
	alive := make([]int64, nl)
	inPlane := make([]int64, planes)
	for i := range r.nics {
		inPlane[g.Nodes[r.nic0+topo.NodeID(i)].Plane]++
		if r.nicOut[i] != topo.NoPort {
			alive[r.class[i]]++
		}
	}
	pre := prefix(alive)
	// reach[l]: live NICs of other leaves that leaf l's NICs reach.
	reach := make([]int64, nl)
	var reachable int64
	for l := range nl {
		if alive[l] == 0 {
			continue
		}
		r.leafSegs(int32(l), func(lo, hi int32, ok bool) {
			if ok {
				reach[l] += pre[hi] - pre[lo]
			}
		})
		reachable += alive[l] * (alive[l] - 1 + reach[l])
	}
	for _, n := range inPlane {
		e.Pairs += n * (n - 1)
	}
	e.Pairs -= reachable

	// A leaf cut off from all others is one problem, named by its NICs,
	// not one for every leaf that cannot reach it.
	cut := make([]bool, nl)
	var members [][]topo.NodeID
	for l := range nl {
		lo, hi := r.planeLeaves(int32(l))
		others := pre[hi] - pre[lo] - alive[l]
		if alive[l] == 0 || reach[l] > 0 || others == 0 {
			continue
		}
		cut[l] = true
		if members == nil {
			members = make([][]topo.NodeID, nl)
			for i := range r.nics {
				if c := r.class[i]; c >= 0 && r.nicOut[i] != topo.NoPort {
					members[c] = append(members[c], r.nic0+topo.NodeID(i))
				}
			}
		}
		e.CutOff = append(e.CutOff, members[l]...)
		of := ""
		if planes > 1 {
			of = " of plane " + strconv.Itoa(int(g.Nodes[r.leaves[l]].Plane))
		}
		e.add("%s: cut off: its NICs %s reach none of the other %d NICs%s (no up/down route out of the leaf)",
			g.NodeName(r.leaves[l]), r.names(members[l]), others, of)
	}
	open := make([]int64, nl)
	for l := range nl {
		if !cut[l] {
			open[l] = alive[l]
		}
	}
	preOpen := prefix(open)
	for l := range nl {
		if alive[l] == 0 || cut[l] {
			continue
		}
		r.leafSegs(int32(l), func(lo, hi int32, ok bool) {
			if c := preOpen[hi] - preOpen[lo]; !ok && c > 0 {
				e.add("%s: no up/down route to %s (%d NICs)", g.NodeName(r.leaves[l]), r.leafRange(lo, hi), c)
			}
		})
	}
	return e
}

// planeLeaves is the range of leaf indices of leaf l's plane.
func (r *Router) planeLeaves(l int32) (lo, hi int32) {
	p := r.g.Nodes[r.leaves[l]].Plane
	return r.planeLeaf0[p], r.planeLeaf0[p+1]
}

// leafSegs calls f for each range of the other leaves of its plane in
// leaf l's routes, saying whether they are reachable.
func (r *Router) leafSegs(l int32, f func(lo, hi int32, ok bool)) {
	inf := &r.info[r.leaves[l]-r.nic0]
	segs := r.segs[inf.seg0 : inf.seg0+inf.nseg]
	first, end := r.planeLeaves(l)
	for k, s := range segs {
		lo, hi := s.lo, r.classes
		if k+1 < len(segs) {
			hi = segs[k+1].lo
		}
		lo, hi = max(lo, first), min(hi, end)
		if lo >= hi || lo == l && hi == l+1 {
			continue // another plane, or its own leaf
		}
		f(lo, hi, s.n > 0)
	}
}

func prefix(v []int64) []int64 {
	p := make([]int64, len(v)+1)
	for i, x := range v {
		p[i+1] = p[i] + x
	}
	return p
}

func (r *Router) leafRange(lo, hi int32) string {
	if hi-lo == 1 {
		return r.g.NodeName(r.leaves[lo])
	}
	return r.g.NodeName(r.leaves[lo]) + ".." + r.g.NodeName(r.leaves[hi-1]) + " (" + strconv.Itoa(int(hi-lo)) + " leaves)"
}

// names lists the first few nodes by name.
func (r *Router) names(ids []topo.NodeID) string {
	const show = 8
	var b strings.Builder
	for i, id := range ids {
		if i == show {
			fmt.Fprintf(&b, " and %d more", len(ids)-show)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(r.g.NodeName(id))
	}
	return b.String()
}

// unreachableExplicit checks every pair; explicit graphs are small.
func (r *Router) unreachableExplicit() *UnreachableError {
	e := &UnreachableError{}
	r.deadNICs(e)
	reach := make([]int, r.nics)
	for s := range r.nics {
		for d := range r.nics {
			if s != d && r.Reachable(r.nic0+topo.NodeID(s), r.nic0+topo.NodeID(d)) {
				reach[s]++
			}
		}
		e.Pairs += int64(r.nics - 1 - reach[s])
	}
	cut := make([]bool, r.nics)
	for s := range r.nics {
		if r.nicOut[s] != topo.NoPort && reach[s] == 0 && r.nics > 1 {
			cut[s] = true
			id := r.nic0 + topo.NodeID(s)
			e.CutOff = append(e.CutOff, id)
			e.add("%s: cut off: reaches no other NIC", r.g.NodeName(id))
		}
	}
	var miss []topo.NodeID
	for s := range r.nics {
		if r.nicOut[s] == topo.NoPort || cut[s] {
			continue
		}
		miss = miss[:0]
		for d := range r.nics {
			if d != s && !cut[d] && r.nicOut[d] != topo.NoPort && !r.Reachable(r.nic0+topo.NodeID(s), r.nic0+topo.NodeID(d)) {
				miss = append(miss, r.nic0+topo.NodeID(d))
			}
		}
		if len(miss) > 0 {
			e.add("%s: no route to %s", r.g.NodeName(r.nic0+topo.NodeID(s)), r.names(miss))
		}
	}
	return e
}
