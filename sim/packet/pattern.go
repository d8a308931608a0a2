package packet

import (
	"fmt"
	"math/rand/v2"

	"github.com/ibex-rdma/ibex/coll/algo"
)

// Pattern is a point-to-point traffic pattern, run like a schedule with
// one step: every flow carries the run's Bytes (split over the channels).
type Pattern uint8

const (
	AllToAll    Pattern = iota + 1 // every rank to every other
	Incast                         // every rank to rank 0
	Permutation                    // every rank to one other, a random derangement by the seed
)

var patternNames = [...]string{"", "alltoall", "incast", "permutation"}

func (p Pattern) String() string {
	if p >= AllToAll && p <= Permutation {
		return patternNames[p]
	}
	return fmt.Sprintf("pattern(%d)", uint8(p))
}

// ParsePattern is the inverse of String.
func ParsePattern(s string) (Pattern, error) {
	for i := AllToAll; i <= Permutation; i++ {
		if patternNames[i] == s {
			return i, nil
		}
	}
	return 0, fmt.Errorf("pattern %q: want alltoall, incast or permutation", s)
}

// PatternSchedule returns pattern p over ranks as a one-step schedule with
// one slot: each flow moves the whole of a run's Bytes.
func PatternSchedule(p Pattern, ranks int, seed uint64) (*algo.Schedule, error) {
	if ranks < 2 || ranks > 1<<16 {
		return nil, fmt.Errorf("packet: %v over %d ranks: want 2 to 65536", p, ranks)
	}
	to := make([][]int, ranks)
	switch p {
	case AllToAll:
		if ranks > 4096 {
			return nil, fmt.Errorf("packet: alltoall over %d ranks: at most 4096 (%d flows)", ranks, ranks*(ranks-1))
		}
		for r := range ranks {
			for k := 1; k < ranks; k++ {
				to[r] = append(to[r], (r+k)%ranks)
			}
		}
	case Incast:
		for r := 1; r < ranks; r++ {
			to[r] = []int{0}
		}
	case Permutation:
		// Sattolo's algorithm: a uniformly random single cycle, so no rank
		// sends to itself.
		perm := make([]int, ranks)
		for i := range perm {
			perm[i] = i
		}
		rng := rand.New(rand.NewPCG(seed, 0x7065726d))
		for i := ranks - 1; i > 0; i-- {
			j := rng.IntN(i)
			perm[i], perm[j] = perm[j], perm[i]
		}
		for r := range ranks {
			to[r] = []int{perm[r]}
		}
	default:
		return nil, fmt.Errorf("packet: %v: not a pattern", p)
	}
	steps := make([][]algo.Step, ranks)
	for r := range steps {
		steps[r] = make([]algo.Step, 1)
	}
	for r, dsts := range to {
		for _, d := range dsts {
			t := algo.Transfer{Peer: d, Src: 0, Dst: 0, Len: 1}
			steps[r][0].Sends = append(steps[r][0].Sends, t)
			t.Peer = r
			steps[d][0].Recvs = append(steps[d][0].Recvs, t)
		}
	}
	return &algo.Schedule{Ranks: ranks, Slots: 1, NumSteps: 1, Steps: steps}, nil
}
