package algo

// Ring algorithms, as NCCL runs them on one channel (src/device/
// all_reduce.h runRing and its siblings; Patarasuk and Yuan, "Bandwidth
// optimal all-reduce algorithms for clusters of workstations", JPDC 2009).
// Rank r sends only to r+1 and receives only from r-1 (mod N).
//
// The buffer is N chunks (blocks for ReduceScatter and AllGather) of P
// slots: slot c·P+k is piece k of chunk c. The ring runs P times, once per
// piece (NCCL's loop over the buffer in chunk-sized parts), so every
// message is one slot:
//
//	all_reduce      2(N-1)·P steps: N-1 reduce-scatter steps, then N-1 all-gather steps, per piece
//	reduce_scatter  (N-1)·P steps
//	all_gather      (N-1)·P steps
func (pl *plan) ring(b *builder, r int) {
	n, p := pl.n, pl.p
	next, prev := mod(r+1, n), mod(r-1, n)
	xfer := func(peer, chunk, k int, reduce bool) Transfer {
		s := chunk*p + k
		return Transfer{Peer: peer, Src: s, Dst: s, Len: 1, Reduce: reduce}
	}
	for k := 0; k < p; k++ {
		switch pl.c {
		case AllReduce:
			// Reduce-scatter: chunk r-s travels and gathers one
			// contribution per hop; after N-1 steps rank r holds chunk r+1
			// complete. All-gather: the complete chunks travel once more.
			t0 := k * 2 * (n - 1)
			for s := 0; s < n-1; s++ {
				b.send(t0+s, xfer(next, mod(r-s, n), k, true))
				b.recv(t0+s, xfer(prev, mod(r-s-1, n), k, true))
			}
			t0 += n - 1
			for s := 0; s < n-1; s++ {
				b.send(t0+s, xfer(next, mod(r+1-s, n), k, false))
				b.recv(t0+s, xfer(prev, mod(r-s, n), k, false))
			}
		case ReduceScatter:
			// Shifted by one against all-reduce so that block r ends at
			// rank r.
			t0 := k * (n - 1)
			for s := 0; s < n-1; s++ {
				b.send(t0+s, xfer(next, mod(r-s-1, n), k, true))
				b.recv(t0+s, xfer(prev, mod(r-s-2, n), k, true))
			}
		case AllGather:
			t0 := k * (n - 1)
			for s := 0; s < n-1; s++ {
				b.send(t0+s, xfer(next, mod(r-s, n), k, false))
				b.recv(t0+s, xfer(prev, mod(r-s-1, n), k, false))
			}
		}
	}
}

// chain is Broadcast and Reduce on the ring: a chain along r → r+1, the
// whole buffer in P pieces, pipelined so that piece k leaves position q
// of the chain at step k+q (NCCL's ring broadcast and reduce, which use
// only the ring's links).
//
//	broadcast  Root → Root+1 → … → Root-1; N+P-2 steps
//	reduce     Root+1 → Root+2 → … → Root, every hop reducing; N+P-2 steps
func (pl *plan) chain(b *builder, r int) {
	n, p := pl.n, pl.p
	v := mod(r-pl.root, n)
	pos, reduce := v, false // position in the chain
	if pl.c == Reduce {
		pos, reduce = mod(v-1, n), true
	}
	for k := 0; k < p; k++ {
		t := Transfer{Src: k, Dst: k, Len: 1, Reduce: reduce}
		if pos > 0 {
			t.Peer = mod(r-1, n)
			b.recv(k+pos-1, t)
		}
		if pos < n-1 {
			t.Peer = mod(r+1, n)
			b.send(k+pos, t)
		}
	}
}
