package algo

// Double binary tree, as NCCL builds it (src/graph/trees.cc ncclGetBtree,
// ncclGetDtree; NCCL 2.4): two binary trees over the ranks, the second the
// mirror image of the first (N even) or the first shifted by one rank
// (N odd), so that most ranks that are inner nodes of one tree are leaves
// of the other (the two-tree idea of Sanders, Speck and Träff, "Two-tree
// algorithms for full bandwidth broadcast, reduction and scan", Parallel
// Computing 2009). Each tree carries half the data: slots [0, P) go over
// the first tree, [P, 2P) over the second.
//
// Pieces are pipelined. With h(x) the height of node x in its tree (leaves
// 0), d(x) its depth (root 0) and H the tree's height:
//
//	reduce up       x sends piece k to its parent at step k+h(x), reducing
//	broadcast down  x sends piece k to its children at step k+o+d(x), o = 0
//	                for Broadcast and H for AllReduce (after the root's
//	                piece k is complete)
//
//	all_reduce  P+2H-1 steps   H ≈ log2 N + 1
//	reduce      P+H-1 steps
//	broadcast   P+H-1 steps
//
// AllReduce uses NCCL's trees as they are (roots 0 and N-1, or 1 when N is
// odd). Broadcast and Reduce build them on virtual ranks (r-Root) mod N and
// re-root the second tree at Root: Root's edge to its parent there is cut
// and the second tree's old root becomes a child of Root.
type tree struct {
	root   int
	parent []int32 // -1 at the root
	kidOff []int32 // node x's children are kids[kidOff[x]:kidOff[x+1]], ascending
	kids   []int32
	height []int32
	depth  []int32
}

// btreeParent is x's parent in NCCL's binary tree over n ranks rooted at 0:
// clear x's lowest set bit and set the next one up, or if that is out of
// range just clear it. Rank 0 has one child, the rest form a binary tree in
// which odd ranks are leaves.
func btreeParent(n, x int) int {
	if x == 0 {
		return -1
	}
	bit := x & -x
	if up := (x ^ bit) | bit<<1; up < n {
		return up
	}
	return x ^ bit
}

// doubleTree returns the two trees of collective c over n ranks.
func doubleTree(c Collective, n, root int) []tree {
	p1, p2 := make([]int32, n), make([]int32, n)
	for x := 0; x < n; x++ {
		p1[x] = int32(btreeParent(n, x))
		if n%2 == 0 { // mirror
			if u := btreeParent(n, n-1-x); u >= 0 {
				p2[x] = int32(n - 1 - u)
			} else {
				p2[x] = -1
			}
		} else { // shift by one
			if u := btreeParent(n, mod(x-1, n)); u >= 0 {
				p2[x] = int32(mod(u+1, n))
			} else {
				p2[x] = -1
			}
		}
	}
	if c != AllReduce && n > 1 {
		// Re-root the second tree at virtual rank 0, then map virtual
		// rank x to rank (x+root) mod n.
		for x, u := range p2 {
			if u < 0 && x != 0 {
				p2[0], p2[x] = -1, 0
				break
			}
		}
		for _, p := range [][]int32{p1, p2} {
			q := make([]int32, n)
			for x, u := range p {
				if u >= 0 {
					u = int32(mod(int(u)+root, n))
				}
				q[mod(x+root, n)] = u
			}
			copy(p, q)
		}
	}
	return []tree{newTree(p1), newTree(p2)}
}

// newTree completes a tree given by its parent array.
func newTree(parent []int32) tree {
	n := len(parent)
	t := tree{root: -1, parent: parent, kidOff: make([]int32, n+1), kids: make([]int32, n-1),
		height: make([]int32, n), depth: make([]int32, n)}
	for x, u := range parent {
		if u < 0 {
			t.root = x
		} else {
			t.kidOff[u+1]++
		}
	}
	for x := 0; x < n; x++ {
		t.kidOff[x+1] += t.kidOff[x]
	}
	fill := append([]int32(nil), t.kidOff[:n]...)
	for x, u := range parent {
		if u >= 0 {
			t.kids[fill[u]] = int32(x)
			fill[u]++
		}
	}
	// Breadth-first order gives depths going down and heights coming back.
	order := make([]int32, 0, n)
	order = append(order, int32(t.root))
	for i := 0; i < len(order); i++ {
		x := order[i]
		for _, c := range t.children(int(x)) {
			t.depth[c] = t.depth[x] + 1
			order = append(order, c)
		}
	}
	for i := len(order) - 1; i >= 0; i-- {
		x := order[i]
		if u := parent[x]; u >= 0 {
			t.height[u] = max(t.height[u], t.height[x]+1)
		}
	}
	return t
}

func (t *tree) children(x int) []int32 { return t.kids[t.kidOff[x]:t.kidOff[x+1]] }

func (pl *plan) tree(b *builder, r int) {
	p := pl.p
	up := pl.c == AllReduce || pl.c == Reduce
	down := pl.c == AllReduce || pl.c == Broadcast
	// Trees in order, so that two transfers between the same two ranks in
	// one step (one per tree) are listed in the same order on both sides.
	for ti := range pl.trees {
		t := &pl.trees[ti]
		par, kids := int(t.parent[r]), t.children(r)
		h, d := int(t.height[r]), int(t.depth[r])
		o := 0
		if up {
			o = int(t.height[t.root])
		}
		for k := 0; k < p; k++ {
			s := ti*p + k
			x := Transfer{Src: s, Dst: s, Len: 1}
			if up {
				x.Reduce = true
				for _, c := range kids {
					x.Peer = int(c)
					b.recv(k+int(t.height[c]), x)
				}
				if par >= 0 {
					x.Peer = par
					b.send(k+h, x)
				}
			}
			if down {
				x.Reduce = false
				if par >= 0 {
					x.Peer = par
					b.recv(k+o+d-1, x)
				}
				for _, c := range kids {
					x.Peer = int(c)
					b.send(k+o+d, x)
				}
			}
		}
	}
}
