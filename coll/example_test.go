package coll_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/ibex-rdma/ibex/coll"
	"github.com/ibex-rdma/ibex/coll/reduce"
	_ "github.com/ibex-rdma/ibex/provider/shm" // shm0: ranks of one host
)

// Four ranks, here goroutines of one process (in a job, processes given
// the same UniqueID, or FromEnv), each make a communicator and all-reduce
// three float32s. The zero Options connect ranks of one host over shm0.
func Example() {
	l, err := net.Listen("tcp", "127.0.0.1:0") // a free port for rank 0's rendezvous
	if err != nil {
		panic(err)
	}
	addr := l.Addr().String()
	l.Close()
	id, err := coll.NewUniqueID(addr)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	const size, count = 4, 3
	out := make([][]byte, size)
	var wg sync.WaitGroup
	for rank := range size {
		wg.Go(func() {
			c, err := coll.NewComm(ctx, id, rank, size, coll.Options{})
			if err != nil {
				panic(err)
			}
			defer c.Close()
			buf := make([]byte, count*reduce.Float32.Size())
			for i := range count {
				reduce.SetValue(buf, reduce.Float32, i, float64(10*rank+i))
			}
			if err := c.AllReduce(ctx, buf, buf, count, reduce.Float32, reduce.Sum); err != nil {
				panic(err)
			}
			out[rank] = buf
		})
	}
	wg.Wait()
	for rank, buf := range out {
		fmt.Println("rank", rank, reduce.Value(buf, reduce.Float32, 0), reduce.Value(buf, reduce.Float32, 1), reduce.Value(buf, reduce.Float32, 2))
	}
	// Output:
	// rank 0 60 64 68
	// rank 1 60 64 68
	// rank 2 60 64 68
	// rank 3 60 64 68
}
