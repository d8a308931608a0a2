package coll

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sort"
)

// NoColor is the color of a rank that joins no communicator in Split (as
// NCCL_SPLIT_NOCOLOR and MPI_UNDEFINED).
const NoColor = -1

// Split partitions the communicator, as ncclCommSplit and MPI_Comm_split:
// the ranks that pass the same color form a new communicator, ranked by
// key and then by their rank here. A rank that passes NoColor (any
// negative color) gets nil. Every rank must call it. The new communicator
// has its own bootstrap and links, with this one's options and cost model;
// each is closed on its own.
//
// The lowest-keyed rank of each color hosts the new rendezvous on the
// address its bootstrap traffic uses; two gathers over this communicator's
// bootstrap network publish colors, then rendezvous addresses.
func (c *Comm) Split(ctx context.Context, color, key int) (*Comm, error) {
	if c.boot == nil {
		return nil, fmt.Errorf("coll: split: rank %d: communicator closed", c.rank)
	}
	if color < 0 {
		color = NoColor
	}
	var mine [16]byte
	binary.BigEndian.PutUint64(mine[:], uint64(int64(color)))
	binary.BigEndian.PutUint64(mine[8:], uint64(int64(key)))
	all, err := c.boot.AllGather(ctx, mine[:])
	if err != nil {
		return nil, fmt.Errorf("coll: split: %w", err)
	}
	type member struct{ rank, color, key int }
	var group []member
	for r, b := range all {
		if len(b) != 16 {
			return nil, fmt.Errorf("coll: split: rank %d sent %d bytes of color and key, want 16", r, len(b))
		}
		m := member{r, int(int64(binary.BigEndian.Uint64(b))), int(int64(binary.BigEndian.Uint64(b[8:])))}
		if m.color == color && color != NoColor {
			group = append(group, m)
		}
	}
	sort.SliceStable(group, func(i, j int) bool { return group[i].key < group[j].key })
	newRank := -1
	for i, m := range group {
		if m.rank == c.rank {
			newRank = i
		}
	}
	// The leaders open their listeners and publish their IDs.
	var l net.Listener
	var pub []byte
	if newRank == 0 {
		var lc net.ListenConfig
		if l, err = lc.Listen(ctx, "tcp", net.JoinHostPort(c.boot.localIP(), "0")); err != nil {
			return nil, fmt.Errorf("coll: split: rank %d: listen: %w", c.rank, err)
		}
		id, err := NewUniqueID(l.Addr().String())
		if err != nil {
			_ = l.Close()
			return nil, err
		}
		pub = []byte(id.String())
	}
	ids, err := c.boot.AllGather(ctx, pub)
	if err != nil {
		if l != nil {
			_ = l.Close()
		}
		return nil, fmt.Errorf("coll: split: %w", err)
	}
	if newRank < 0 {
		return nil, nil
	}
	id, err := ParseUniqueID(string(ids[group[0].rank]))
	if err != nil {
		if l != nil {
			_ = l.Close()
		}
		return nil, fmt.Errorf("coll: split: rendezvous of color %d from rank %d: %w", color, group[0].rank, err)
	}
	opt := c.opt
	m := c.model
	opt.Model = &m
	sub, err := newComm(ctx, id, newRank, len(group), opt, l)
	if err != nil {
		return nil, fmt.Errorf("coll: split: color %d, new rank %d of %d: %w", color, newRank, len(group), err)
	}
	return sub, nil
}
