package algo

// direct: every rank talks to every other rank at once (MPI's linear and
// pairwise algorithms; Gloo's alltoall; NCCL's all-to-all as grouped
// point-to-point). Rank r lists its sends to r+1, r+2, …, r-1 and its
// receives from r-1, r-2, …, r+1, so that at every position in the lists
// the ranks form a permutation and no rank is everyone's first target.
// Every rank sends N-1 messages per step, so this is for small N or small
// messages. P only makes the slots finer.
//
//	all_to_all      1 step: block j of the send blocks goes to rank j
//	all_reduce      2 steps: everyone sends block j to rank j, which reduces
//	                it; then rank j sends its complete block j to everyone
//	reduce_scatter  1 step (the first half of all_reduce)
//	all_gather      1 step (the second half)
//	broadcast       1 step: Root sends the buffer to everyone
//	reduce          1 step: everyone sends its buffer to Root, which
//	                reduces them in its receive order
func (pl *plan) direct(b *builder, r int) {
	n, p := pl.n, pl.p
	block := func(peer, blk int, reduce bool) Transfer {
		return Transfer{Peer: peer, Src: blk * p, Dst: blk * p, Len: p, Reduce: reduce}
	}
	whole := func(peer int, reduce bool) Transfer {
		return Transfer{Peer: peer, Src: 0, Dst: 0, Len: pl.w, Reduce: reduce}
	}
	for i := 1; i < n; i++ {
		to, from := mod(r+i, n), mod(r-i, n)
		switch pl.c {
		case AllToAll:
			b.send(0, Transfer{Peer: to, Src: to * p, Dst: (n + r) * p, Len: p})
			b.recv(0, Transfer{Peer: from, Src: r * p, Dst: (n + from) * p, Len: p})
		case AllReduce, ReduceScatter:
			b.send(0, block(to, to, true))
			b.recv(0, block(from, r, true))
			if pl.c == AllReduce {
				b.send(1, block(to, r, false))
				b.recv(1, block(from, from, false))
			}
		case AllGather:
			b.send(0, block(to, r, false))
			b.recv(0, block(from, from, false))
		case Broadcast:
			if r == pl.root {
				b.send(0, whole(to, false))
			} else if from == pl.root {
				b.recv(0, whole(from, false))
			}
		case Reduce:
			if r == pl.root {
				b.recv(0, whole(from, true))
			} else if to == pl.root {
				b.send(0, whole(to, true))
			}
		}
	}
}
