package check

// Rounds is the round-robin (circle) schedule of n ranks: every unordered
// pair once, in rounds of disjoint pairs, each pair as {lower, higher}.
// An even n gives n-1 rounds of n/2 pairs; an odd n gives n rounds of
// (n-1)/2 pairs, a different rank resting in each. n < 2 gives none.
func Rounds(n int) [][][2]int {
	if n < 2 {
		return nil
	}
	// The circle method: rank m-1 stays put, the others rotate; with an
	// odd n a phantom rank m-1 = n makes the resting rank's pair.
	m := n + n%2
	rounds := make([][][2]int, m-1)
	for r := range rounds {
		pairs := make([][2]int, 0, m/2)
		for i := range m / 2 {
			a := (r + i) % (m - 1)
			b := (r - i + m - 1) % (m - 1)
			if i == 0 {
				b = m - 1
			}
			if b >= n {
				continue
			}
			pairs = append(pairs, [2]int{min(a, b), max(a, b)})
		}
		rounds[r] = pairs
	}
	return rounds
}

// partner is rank's peer in a round, or -1 when it rests.
func partner(round [][2]int, rank int) int {
	for _, p := range round {
		switch rank {
		case p[0]:
			return p[1]
		case p[1]:
			return p[0]
		}
	}
	return -1
}
