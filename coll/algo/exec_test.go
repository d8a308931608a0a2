package algo

import (
	"slices"
	"testing"
)

// A numeric cross-check of the symbolic verifier: run schedules on float64
// data the way an executor would (sends read the state before their step,
// receives applied in list order, each pair's messages in FIFO order) and
// compare with the collective computed directly. Inputs are small integers,
// so every sum is exact in any order and the comparison is bitwise.

// execute runs s on count elements; in[r] is rank r's input (count
// elements, or N·count for reduce_scatter and all_to_all). It returns every
// rank's working buffer.
func execute(t *testing.T, s *Schedule, count int, in [][]float64) [][]float64 {
	n := s.Ranks
	size := count * s.blocks()
	buf := make([][]float64, n)
	for r := range buf {
		buf[r] = make([]float64, size)
		switch s.Collective {
		case AllReduce, Reduce, ReduceScatter:
			copy(buf[r], in[r])
		case Broadcast:
			if r == s.Root {
				copy(buf[r], in[r])
			}
		case AllGather:
			copy(buf[r][r*count:], in[r])
		case AllToAll:
			copy(buf[r], in[r])
			copy(buf[r][(n+r)*count:(n+r+1)*count], in[r][r*count:(r+1)*count])
		}
	}
	type msg struct {
		t    Transfer
		data []float64
	}
	fifo := map[[2]int][]msg{}
	elems := func(first, slots int) (int, int) {
		lo, _ := s.SlotRange(count, first)
		_, hi := s.SlotRange(count, first+slots-1)
		return lo, hi
	}
	progs := make([][]Step, n)
	for r := range progs {
		progs[r] = s.Program(r)
	}
	for i := 0; i < s.NumSteps; i++ {
		for a := 0; a < n; a++ {
			for _, x := range progs[a][i].Sends {
				lo, hi := elems(x.Src, x.Len)
				k := [2]int{a, x.Peer}
				fifo[k] = append(fifo[k], msg{x, append([]float64(nil), buf[a][lo:hi]...)})
			}
		}
		for b := 0; b < n; b++ {
			for _, x := range progs[b][i].Recvs {
				k := [2]int{x.Peer, b}
				if len(fifo[k]) == 0 {
					t.Fatalf("%v: rank %d step %d: nothing from rank %d", s, b, i, x.Peer)
				}
				m := fifo[k][0]
				fifo[k] = fifo[k][1:]
				lo, hi := elems(x.Dst, x.Len)
				if m.t.Src != x.Src || len(m.data) != hi-lo {
					t.Fatalf("%v: rank %d step %d: got %+v (%d elements), receive %+v wants %d", s, b, i, m.t, len(m.data), x, hi-lo)
				}
				for e, v := range m.data {
					if x.Reduce {
						buf[b][lo+e] += v
					} else {
						buf[b][lo+e] = v
					}
				}
			}
		}
	}
	return buf
}

// expect computes the collective directly; nil entries are undefined.
func expect(s *Schedule, count int, in [][]float64) [][]float64 {
	n := s.Ranks
	out := make([][]float64, n)
	sum := make([]float64, len(in[0]))
	for r := range in {
		for e, v := range in[r] {
			sum[e] += v
		}
	}
	for r := range out {
		switch s.Collective {
		case AllReduce:
			out[r] = sum
		case Reduce:
			if r == s.Root {
				out[r] = sum
			}
		case Broadcast:
			out[r] = in[s.Root]
		case ReduceScatter:
			out[r] = sum[r*count : (r+1)*count]
		case AllGather:
			for q := 0; q < n; q++ {
				out[r] = append(out[r], in[q]...)
			}
		case AllToAll:
			for q := 0; q < n; q++ {
				out[r] = append(out[r], in[q][r*count:(r+1)*count]...)
			}
		}
	}
	return out
}

// output is the part of rank r's working buffer that holds its result.
func output(s *Schedule, r, count int, buf []float64) []float64 {
	switch s.Collective {
	case ReduceScatter:
		return buf[r*count : (r+1)*count]
	case AllToAll:
		return buf[s.Ranks*count:]
	}
	return buf
}

func TestExecuteNumeric(t *testing.T) {
	for _, ca := range combos() {
		c, a := Collective(ca[0]), Algorithm(ca[1])
		for _, n := range []int{1, 2, 3, 5, 8, 13} {
			for _, root := range roots(c, n) {
				for _, p := range []int{1, 3} {
					s, err := Generate(c, a, n, root, p)
					if err != nil {
						t.Fatal(err)
					}
					for _, count := range []int{0, 1, 7, 100} {
						in := inputs(s, count)
						got := execute(t, s, count, in)
						want := expect(s, count, in)
						for r := 0; r < n; r++ {
							if want[r] == nil {
								continue
							}
							if g := output(s, r, count, got[r]); !slices.Equal(g, want[r]) {
								t.Fatalf("%v count %d: rank %d has\n%v\nwant\n%v", s, count, r, g, want[r])
							}
						}
					}
				}
			}
		}
	}
}

// inputs returns small-integer inputs, different on every rank.
func inputs(s *Schedule, count int) [][]float64 {
	in := make([][]float64, s.Ranks)
	for r := range in {
		m := count
		if s.Collective == ReduceScatter || s.Collective == AllToAll {
			m *= s.Ranks
		}
		in[r] = make([]float64, m)
		for e := range in[r] {
			in[r][e] = float64((r+1)*1000 + e%997)
		}
	}
	return in
}

// The other direction: mutants that Verify rejects compute wrong numbers.
func TestExecuteNumericMutants(t *testing.T) {
	s, _ := Generate(AllReduce, Ring, 4, 0, 1)
	s.Materialize()
	const count = 10
	in := inputs(s, count)
	want := expect(s, count, in)

	dup := clone(s) // rank 0's first reduce sent twice
	dup.Steps[0][0].Sends = append(dup.Steps[0][0].Sends, dup.Steps[0][0].Sends[0])
	dup.Steps[1][0].Recvs = append(dup.Steps[1][0].Recvs, dup.Steps[1][0].Recvs[0])

	wrong := clone(s) // rank 2 reduces what it gets in step 1 into the next slot
	wrong.Steps[1][1].Sends[0].Dst++
	wrong.Steps[2][1].Recvs[0].Dst++

	for name, m := range map[string]*Schedule{"duplicate reduce": dup, "wrong slot": wrong} {
		if m.Verify() == nil {
			t.Fatalf("%s: Verify passed", name)
		}
		got := execute(t, m, count, in)
		same := true
		for r := range got {
			same = same && slices.Equal(got[r], want[r])
		}
		if same {
			t.Errorf("%s: rejected by Verify, yet computes the right numbers", name)
		}
	}
}
