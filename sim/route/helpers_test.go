package route

import (
	"errors"
	"flag"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/sim/topo"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the randomized tests (0: from the clock); each test logs the seed it used")

// rng returns the test's random source and logs its seed, so that a
// failure can be replayed with -seed.
func rng(t testing.TB) *rand.Rand {
	t.Helper()
	s := *seedFlag
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay: go test ./sim/route -run '^%s$' -seed %d)", s, t.Name(), s)
	return rand.New(rand.NewPCG(s, 0x5eed))
}

// build parses, builds and checks a topology.
func build(t testing.TB, yml string) *topo.Graph {
	t.Helper()
	s, err := topo.Parse([]byte(yml))
	if err != nil {
		t.Fatalf("parse:\n%s\n%v", yml, err)
	}
	g, err := s.Build()
	if err != nil {
		t.Fatalf("build:\n%s\n%v", yml, err)
	}
	if err := g.Check(); err != nil {
		t.Fatalf("check:\n%s\n%v", yml, err)
	}
	return g
}

func mustNew(t testing.TB, g *topo.Graph, failed ...topo.LinkID) *Router {
	t.Helper()
	r, err := New(g, failed...)
	if err != nil {
		t.Fatalf("New(%s, %d failed): %v", g.Name, len(failed), err)
	}
	return r
}

func nic(g *topo.Graph, i int) topo.NodeID { return topo.NodeID(g.NumHosts + i) }

// oracle returns, for every node, the fewest links from NIC src to it on a
// walk over live links that NICs do not forward, -1 where there is none.
// With updown it is restricted to up/down walks (climbing a tier at a
// time, then descending), the routes a tree may take; without, shortest
// paths, as explicit graphs route. It is written apart from the Router's
// algorithm: a BFS over (node, descending) states.
func oracle(g *topo.Graph, dead func(topo.LinkID) bool, src topo.NodeID, updown bool) []int32 {
	best := make([]int32, len(g.Nodes))
	seen := make([]int32, 2*len(g.Nodes))
	for i := range best {
		best[i] = -1
	}
	for i := range seen {
		seen[i] = -1
	}
	type state struct {
		n    topo.NodeID
		down int
	}
	best[src], seen[2*int(src)] = 0, 0
	queue := []state{{src, 0}}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		d := seen[2*int(s.n)+s.down]
		n := &g.Nodes[s.n]
		for p := n.FirstPort; p < n.FirstPort+topo.PortID(n.NumPorts); p++ {
			pt := &g.Ports[p]
			if pt.Link == topo.NoLink || dead(pt.Link) {
				continue
			}
			m := g.Ports[pt.Peer].Node
			if best[m] < 0 {
				best[m] = d + 1
			}
			if g.Nodes[m].Kind != topo.KindSwitch {
				continue
			}
			down := s.down
			if updown && n.Kind == topo.KindSwitch {
				switch {
				case g.Nodes[m].Tier < n.Tier:
					down = 1
				case s.down == 1:
					continue // no climbing after a descent
				}
			}
			if k := 2*int(m) + down; seen[k] < 0 {
				seen[k] = d + 1
				queue = append(queue, state{m, down})
			}
		}
	}
	return best
}

// leafOf is the switch NIC n is cabled to.
func leafOf(g *topo.Graph, n topo.NodeID) topo.NodeID { return g.PeerNode(g.Nodes[n].FirstPort) }

// shareParent says whether two switches have a common neighbour of a
// higher tier.
func shareParent(g *topo.Graph, a, b topo.NodeID) bool {
	up := map[topo.NodeID]bool{}
	na := &g.Nodes[a]
	for p := na.FirstPort; p < na.FirstPort+topo.PortID(na.NumPorts); p++ {
		if m := g.PeerNode(p); m >= 0 && g.Nodes[m].Tier > na.Tier {
			up[m] = true
		}
	}
	nb := &g.Nodes[b]
	for p := nb.FirstPort; p < nb.FirstPort+topo.PortID(nb.NumPorts); p++ {
		if m := g.PeerNode(p); m >= 0 && up[m] {
			return true
		}
	}
	return false
}

// checkPath routes src to dst under the policy and checks the route
// against the oracle's distance want (-1: unreachable): ends at dst, as
// long as want, loop-free, every hop eligible, no dead link. It returns
// the path.
func checkPath(t *testing.T, r *Router, src, dst topo.NodeID, pol Policy, hash uint64, want int32, buf []topo.PortID) []topo.PortID {
	t.Helper()
	g := r.Graph()
	path, err := r.Path(src, dst, pol, hash, buf[:0])
	if want < 0 {
		if err == nil || !errors.Is(err, ErrUnreachable) {
			t.Fatalf("%v %s -> %s: want unreachable, got path %v err %v", pol, g.NodeName(src), g.NodeName(dst), names(g, path), err)
		}
		if r.Reachable(src, dst) {
			t.Fatalf("%s -> %s: Reachable, but no path", g.NodeName(src), g.NodeName(dst))
		}
		return path
	}
	if err != nil {
		t.Fatalf("%v %s -> %s: %v", pol, g.NodeName(src), g.NodeName(dst), err)
	}
	if !r.Reachable(src, dst) {
		t.Fatalf("%s -> %s: a path, but not Reachable", g.NodeName(src), g.NodeName(dst))
	}
	if int32(len(path)) != want {
		t.Fatalf("%v %s -> %s: %d links %v, want %d", pol, g.NodeName(src), g.NodeName(dst), len(path), names(g, path), want)
	}
	if path[0] != g.Nodes[src].FirstPort && g.Nodes[src].NumPorts == 1 {
		t.Fatalf("%s -> %s: first hop %s, not the NIC's port", g.NodeName(src), g.NodeName(dst), g.PortName(path[0]))
	}
	at := src
	var elig [64]topo.PortID
	visited := map[topo.NodeID]bool{src: true}
	for i, p := range path {
		if g.Ports[p].Node != at {
			t.Fatalf("%s -> %s: hop %d leaves by %s, not a port of %s", g.NodeName(src), g.NodeName(dst), i, g.PortName(p), g.NodeName(at))
		}
		if r.Dead(g.Ports[p].Link) {
			t.Fatalf("%s -> %s: hop %d crosses failed link %s", g.NodeName(src), g.NodeName(dst), i, g.LinkName(g.Ports[p].Link))
		}
		found := false
		for _, q := range r.Eligible(at, dst, elig[:0]) {
			found = found || q == p
		}
		if !found {
			t.Fatalf("%s -> %s: hop %d port %s is not in Eligible(%s)", g.NodeName(src), g.NodeName(dst), i, g.PortName(p), g.NodeName(at))
		}
		at = g.PeerNode(p)
		if visited[at] {
			t.Fatalf("%s -> %s: loop at %s: %v", g.NodeName(src), g.NodeName(dst), g.NodeName(at), names(g, path))
		}
		visited[at] = true
	}
	if at != dst {
		t.Fatalf("%s -> %s: path ends at %s", g.NodeName(src), g.NodeName(dst), g.NodeName(at))
	}
	return path
}

func names(g *topo.Graph, ports []topo.PortID) []string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = g.PortName(p)
	}
	return s
}

// allPairs checks every ordered NIC pair (or, if sources > 0, the pairs
// from that many random sources) under both policies against the oracle
// and returns the counts of the paths' lengths.
func allPairs(t *testing.T, r *Router, updown bool, sources int, rnd *rand.Rand) map[int]int {
	t.Helper()
	g := r.Graph()
	lengths := map[int]int{}
	buf := make([]topo.PortID, 0, 16)
	from := func(s int) {
		dist := oracle(g, r.Dead, nic(g, s), updown)
		for d := range g.NumNICs {
			if s == d {
				continue
			}
			src, dst := nic(g, s), nic(g, d)
			want := dist[dst]
			checkPath(t, r, src, dst, PolicyDModK, 0, want, buf)
			p := checkPath(t, r, src, dst, PolicyECMP, FlowHash(src, dst, uint32(s*7+d)), want, buf)
			if want >= 0 {
				lengths[len(p)]++
			}
		}
	}
	if sources > 0 {
		for range sources {
			from(rnd.IntN(g.NumNICs))
		}
		return lengths
	}
	for s := range g.NumNICs {
		from(s)
	}
	return lengths
}
