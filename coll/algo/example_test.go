package algo_test

import (
	"fmt"

	"github.com/ibex-rdma/ibex/coll/algo"
)

// A three-rank ring all-reduce, as rank 0 runs it, and where its slots lie
// in a call on 10 elements.
func Example() {
	s, err := algo.Generate(algo.AllReduce, algo.Ring, 3, 0, 1)
	if err != nil {
		panic(err)
	}
	if err := s.Verify(); err != nil {
		panic(err)
	}
	fmt.Println(s, "slots:", s.Slots, "steps:", s.NumSteps)
	for slot := 0; slot < s.Slots; slot++ {
		lo, hi := s.SlotRange(10, slot)
		fmt.Printf("slot %d: elements [%d, %d)\n", slot, lo, hi)
	}
	for i, st := range s.Program(0) {
		fmt.Printf("step %d: send %+v, receive %+v\n", i, st.Sends, st.Recvs)
	}
	// Output:
	// ring all_reduce ranks=3 pipeline=1 slots: 3 steps: 4
	// slot 0: elements [0, 4)
	// slot 1: elements [4, 7)
	// slot 2: elements [7, 10)
	// step 0: send [{Peer:1 Src:0 Dst:0 Len:1 Reduce:true}], receive [{Peer:2 Src:2 Dst:2 Len:1 Reduce:true}]
	// step 1: send [{Peer:1 Src:2 Dst:2 Len:1 Reduce:true}], receive [{Peer:2 Src:1 Dst:1 Len:1 Reduce:true}]
	// step 2: send [{Peer:1 Src:1 Dst:1 Len:1 Reduce:false}], receive [{Peer:2 Src:0 Dst:0 Len:1 Reduce:false}]
	// step 3: send [{Peer:1 Src:0 Dst:0 Len:1 Reduce:false}], receive [{Peer:2 Src:2 Dst:2 Len:1 Reduce:false}]
}
