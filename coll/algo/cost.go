package algo

// LinkCost is the alpha-beta cost of one link: a message of n bytes takes
// Alpha + n·Beta seconds.
type LinkCost struct {
	Alpha float64 // seconds per message: latency and per-message overhead
	Beta  float64 // seconds per byte: the inverse of bandwidth
}

// CostModel prices schedules. Link gives the cost of the link from rank a
// to rank b; Gamma is the seconds per byte a rank takes to reduce
// received data into its buffer.
type CostModel struct {
	Link  func(a, b int) LinkCost
	Gamma float64
}

// Cost estimates how long s takes on count elements of esize bytes (count
// as for SlotRange). Steps are synchronous, as in coll's executor: each
// takes as long as its slowest rank, and a rank's step takes the largest
// Alpha among its transfers times the larger of its number of sends and of
// receives (each message costs the CPU that drives it), plus the larger of
// its bytes sent and received, each byte weighted by its link's Beta, plus
// Gamma for every byte it reduces. Empty steps cost nothing. It computes every rank's
// program: O(ranks × steps).
func (s *Schedule) Cost(count, esize int, m CostModel) float64 {
	if count < 0 || esize < 1 {
		return 0
	}
	bytes := func(first, n int) float64 {
		lo, _ := s.SlotRange(count, first)
		_, hi := s.SlotRange(count, first+n-1)
		return float64((hi - lo) * esize)
	}
	step := make([]float64, s.NumSteps)
	var b builder
	for r := 0; r < s.Ranks; r++ {
		var prog []Step
		switch {
		case s.Steps != nil:
			prog = s.Steps[r]
		case s.plan != nil:
			prog = s.programWith(&b, r)
		}
		for i, st := range prog {
			if len(st.Sends)+len(st.Recvs) == 0 {
				continue
			}
			alpha, out, in, red := 0.0, 0.0, 0.0, 0.0
			for _, t := range st.Sends {
				l := m.Link(r, t.Peer)
				alpha = max(alpha, l.Alpha)
				out += bytes(t.Src, t.Len) * l.Beta
			}
			for _, t := range st.Recvs {
				l := m.Link(t.Peer, r)
				alpha = max(alpha, l.Alpha)
				n := bytes(t.Dst, t.Len)
				in += n * l.Beta
				if t.Reduce {
					red += n
				}
			}
			msgs := float64(max(len(st.Sends), len(st.Recvs)))
			step[i] = max(step[i], alpha*msgs+max(out, in)+red*m.Gamma)
		}
	}
	total := 0.0
	for _, t := range step {
		total += t
	}
	return total
}
