package packet

import (
	"testing"

	"github.com/ibex-rdma/ibex/coll/algo"
)

// TestProgress: OnProgress is called as the run starts (nothing done),
// while it runs (Done never falling, never above Total), and once at the
// end with Done == Total and End set; its bytes are the payload the NICs
// and NVLink carry, so Total is the run's Payload plus its NVLink bytes.
func TestProgress(t *testing.T) {
	t.Parallel() // see parallel in validate_test.go
	g := fatTreeK(t, 4)
	for _, c := range []algo.Collective{algo.AllReduce, algo.AllToAll} {
		a := algo.Ring
		if c == algo.AllToAll {
			a = algo.Direct
		}
		s, err := algo.Generate(c, a, 8, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		var seen []Progress
		res, err := Run(Config{Graph: g, Schedule: s, Bytes: 16 << 20, Iterations: 2, OnProgress: func(p Progress) { seen = append(seen, p) }})
		if err != nil {
			t.Fatal(err)
		}
		if len(seen) < 3 {
			t.Fatalf("%v: %d progress calls, want the start, some while running (%d events), and the end", c, len(seen), res.Events)
		}
		first, last := seen[0], seen[len(seen)-1]
		if first.Events != 0 || first.End || first.Total == 0 {
			t.Errorf("%v: first call %+v, want 0 events, a total, not the end", c, first)
		}
		if !last.End || last.Done != last.Total || last.Events != res.Events || last.Now != res.Time {
			t.Errorf("%v: last call %+v, want End, Done == Total, %d events at %v", c, last, res.Events, res.Time)
		}
		for i := 1; i < len(seen); i++ {
			if seen[i].Done < seen[i-1].Done || seen[i].Done > seen[i].Total || seen[i].Total != first.Total || seen[i-1].End {
				t.Fatalf("%v: call %d %+v after %+v", c, i, seen[i], seen[i-1])
			}
		}
		if res.NVLink == 0 && last.Total != res.Payload {
			t.Errorf("%v: total %d bytes, the NICs carried %d (no NVLink)", c, last.Total, res.Payload)
		}
	}
}
