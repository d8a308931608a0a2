package algo

import (
	"fmt"
	"strings"
)

// Collective is the operation a schedule computes. The zero value is not a
// collective, so a forgotten field is caught.
type Collective uint8

// The collectives, named as in NCCL.
const (
	AllReduce Collective = iota + 1
	ReduceScatter
	AllGather
	Broadcast
	Reduce
	AllToAll
	numCollectives = iota
)

var collectiveNames = [...]string{"", "all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all"}

// String returns the nccl-tests name: "all_reduce", "reduce_scatter",
// "all_gather", "broadcast", "reduce", "all_to_all".
func (c Collective) String() string {
	if c.valid() {
		return collectiveNames[c]
	}
	return fmt.Sprintf("Collective(%d)", uint8(c))
}

func (c Collective) valid() bool { return c >= AllReduce && c <= AllToAll }

// rooted reports whether the collective has a root (Broadcast, Reduce).
func (c Collective) rooted() bool { return c == Broadcast || c == Reduce }

// ParseCollective is the inverse of String.
func ParseCollective(s string) (Collective, error) {
	for c := AllReduce; c <= AllToAll; c++ {
		if s == collectiveNames[c] {
			return c, nil
		}
	}
	return 0, fmt.Errorf("coll/algo: %w: collective %q (want one of %s)", ErrInvalid, s, strings.Join(collectiveNames[1:], ", "))
}

// Algorithm is how a schedule computes its collective. The zero value is
// not an algorithm.
type Algorithm uint8

// The algorithms. The package documentation says where each comes from,
// which collectives it supports and how many steps it takes.
const (
	Ring Algorithm = iota + 1
	Tree
	RecHalvingDoubling
	RecDoubling
	Direct
)

var algorithmNames = [...]string{"", "ring", "tree", "rhd", "rd", "direct"}

// String returns "ring", "tree", "rhd", "rd" or "direct".
func (a Algorithm) String() string {
	if a.valid() {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

func (a Algorithm) valid() bool { return a >= Ring && a <= Direct }

// ParseAlgorithm is the inverse of String.
func ParseAlgorithm(s string) (Algorithm, error) {
	for a := Ring; a <= Direct; a++ {
		if s == algorithmNames[a] {
			return a, nil
		}
	}
	return 0, fmt.Errorf("coll/algo: %w: algorithm %q (want one of %s)", ErrInvalid, s, strings.Join(algorithmNames[1:], ", "))
}

// supported[c] lists the algorithms Generate implements for c.
var supported = [numCollectives + 1][]Algorithm{
	AllReduce:     {Ring, Tree, RecHalvingDoubling, RecDoubling, Direct},
	ReduceScatter: {Ring, RecHalvingDoubling, Direct},
	AllGather:     {Ring, RecDoubling, Direct},
	Broadcast:     {Ring, Tree, Direct},
	Reduce:        {Ring, Tree, Direct},
	AllToAll:      {Direct},
}

// Supported returns the algorithms Generate implements for c, in the order
// of the Algorithm constants; nil if c is not a collective.
func Supported(c Collective) []Algorithm {
	if !c.valid() {
		return nil
	}
	return append([]Algorithm(nil), supported[c]...)
}

func supports(c Collective, a Algorithm) bool {
	for _, b := range supported[c] {
		if a == b {
			return true
		}
	}
	return false
}
