// Package flow is ibex's flow-level fabric simulator: flows get max-min
// fair fluid rates over the links of their paths, re-solved when flows
// start or end, so that a collective over a hundred thousand GPUs takes
// seconds where the packet-level engine (sim/packet) would take days.
package flow

import "math"

// MaxMin computes max-min fair rates by progressive filling: all flows'
// rates rise together; when a resource (a link direction, a NIC's own
// limit) fills, the flows through it freeze at its fair share, and the
// rest keep rising. The result is the unique max-min fair allocation:
// every flow crosses a saturated resource on which no flow has a higher
// rate.
//
// A MaxMin is reused across solves so that they allocate nothing once
// its buffers have grown.
type MaxMin struct {
	left   []float64 // per resource: capacity not yet given out
	users  []int32   // per resource: unfrozen flows through it
	byRes  []int32   // flows by resource (CSR)
	resOff []int32
	frozen []bool
	h      shareHeap
}

// Flows are the flows of one solve, in CSR form: flow i crosses resources
// Res[Off[i]:Off[i+1]].
type Flows struct {
	Off []int32
	Res []int32
}

// Reset empties f for reuse.
func (f *Flows) Reset() {
	f.Off = append(f.Off[:0], 0)
	f.Res = f.Res[:0]
}

// Add appends a flow through resources res and returns its index.
func (f *Flows) Add(res ...int32) int {
	if len(f.Off) == 0 {
		f.Off = append(f.Off, 0)
	}
	f.Res = append(f.Res, res...)
	f.Off = append(f.Off, int32(len(f.Res)))
	return len(f.Off) - 2
}

// Len is the number of flows.
func (f *Flows) Len() int { return max(len(f.Off)-1, 0) }

// Solve writes into rate (len ≥ f.Len()) the max-min fair rate of every
// flow given each resource's capacity. A flow through no resource gets
// +Inf. Capacities must be positive.
func (m *MaxMin) Solve(capacity []float64, f *Flows, rate []float64) {
	nres, nf := len(capacity), f.Len()
	m.left = append(m.left[:0], capacity...)
	m.users = grow(m.users, nres)
	clear(m.users)
	for _, r := range f.Res {
		m.users[r]++
	}
	// Transpose: the flows through each resource.
	m.resOff = grow(m.resOff, nres+1)
	m.resOff[0] = 0
	for r := range nres {
		m.resOff[r+1] = m.resOff[r] + m.users[r]
	}
	m.byRes = grow(m.byRes, len(f.Res))
	fill := m.h.fill[:0]
	fill = append(fill, m.resOff[:nres]...)
	for i := range nf {
		for _, r := range f.Res[f.Off[i]:f.Off[i+1]] {
			m.byRes[fill[r]] = int32(i)
			fill[r]++
		}
	}
	m.h.fill = fill
	m.frozen = grow(m.frozen, nf)
	clear(m.frozen)
	for i := range nf {
		if f.Off[i] == f.Off[i+1] {
			rate[i] = math.Inf(1)
			m.frozen[i] = true
		}
	}
	m.h.items = m.h.items[:0]
	for r := range nres {
		if m.users[r] > 0 {
			m.h.items = append(m.h.items, shareItem{share: m.left[r] / float64(m.users[r]), res: int32(r)})
		}
	}
	m.h.init()
	for m.h.Len() > 0 {
		it := m.h.pop()
		r := it.res
		if m.users[r] == 0 {
			continue
		}
		share := m.left[r] / float64(m.users[r])
		if share != it.share {
			// Stale: the resource's share changed since it was pushed.
			m.h.push(shareItem{share: share, res: r})
			continue
		}
		share = max(share, 0)
		for _, fi := range m.byRes[m.resOff[r]:m.resOff[r+1]] {
			if m.frozen[fi] {
				continue
			}
			m.frozen[fi] = true
			rate[fi] = share
			for _, q := range f.Res[f.Off[fi]:f.Off[fi+1]] {
				m.left[q] -= share
				m.users[q]--
				if q != r && m.users[q] > 0 {
					m.h.push(shareItem{share: m.left[q] / float64(m.users[q]), res: q})
				}
			}
		}
	}
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

type shareItem struct {
	share float64
	res   int32
}

// shareHeap is a binary min-heap of resources by fair share, then by
// index (so that a solve does not depend on heap layout).
type shareHeap struct {
	items []shareItem
	fill  []int32 // scratch for the transpose
}

func (h *shareHeap) Len() int { return len(h.items) }

func (a shareItem) less(b shareItem) bool {
	return a.share < b.share || a.share == b.share && a.res < b.res
}

func (h *shareHeap) init() {
	for i := len(h.items)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *shareHeap) push(it shareItem) {
	h.items = append(h.items, it)
	i := len(h.items) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.items[i].less(h.items[p]) {
			break
		}
		h.items[i], h.items[p] = h.items[p], h.items[i]
		i = p
	}
}

func (h *shareHeap) pop() shareItem {
	top := h.items[0]
	n := len(h.items) - 1
	h.items[0] = h.items[n]
	h.items = h.items[:n]
	if n > 0 {
		h.down(0)
	}
	return top
}

func (h *shareHeap) down(i int) {
	n := len(h.items)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && h.items[c+1].less(h.items[c]) {
			c++
		}
		if !h.items[c].less(h.items[i]) {
			return
		}
		h.items[i], h.items[c] = h.items[c], h.items[i]
		i = c
	}
}
