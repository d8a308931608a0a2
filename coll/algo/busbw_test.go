package algo

import "testing"

// TestBusFactor: nccl-tests' factors for every collective (and the zero
// Collective, coll's sendrecv) over 1 to 8 ranks, written out as fractions.
func TestBusFactor(t *testing.T) {
	sendrecv := Collective(0)
	for _, c := range []struct {
		c    Collective
		want [8]float64 // n = 1..8
	}{
		{AllReduce, [8]float64{0, 2.0 / 2, 4.0 / 3, 6.0 / 4, 8.0 / 5, 10.0 / 6, 12.0 / 7, 14.0 / 8}},
		{ReduceScatter, [8]float64{0, 1.0 / 2, 2.0 / 3, 3.0 / 4, 4.0 / 5, 5.0 / 6, 6.0 / 7, 7.0 / 8}},
		{AllGather, [8]float64{0, 1.0 / 2, 2.0 / 3, 3.0 / 4, 4.0 / 5, 5.0 / 6, 6.0 / 7, 7.0 / 8}},
		{AllToAll, [8]float64{0, 1.0 / 2, 2.0 / 3, 3.0 / 4, 4.0 / 5, 5.0 / 6, 6.0 / 7, 7.0 / 8}},
		{Broadcast, [8]float64{1, 1, 1, 1, 1, 1, 1, 1}},
		{Reduce, [8]float64{1, 1, 1, 1, 1, 1, 1, 1}},
		{sendrecv, [8]float64{1, 1, 1, 1, 1, 1, 1, 1}},
	} {
		for i, want := range c.want {
			if got := BusFactor(c.c, i+1); got != want {
				t.Errorf("BusFactor(%v, %d) = %v, want %v", c.c, i+1, got, want)
			}
		}
		for _, n := range []int{0, -1} {
			if got := BusFactor(c.c, n); got != 0 {
				t.Errorf("BusFactor(%v, %d) = %v, want 0", c.c, n, got)
			}
		}
	}
}
