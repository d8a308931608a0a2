package coll

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/ibex-rdma/ibex/coll/reduce"
)

// BenchmarkAllReduce: 2 ranks of one process (goroutines) on shm0,
// float32 sum, in place; b.N all-reduces per rank.
func BenchmarkAllReduce(b *testing.B) { benchAllReduce(b, "shm0") }

// BenchmarkAllReduceUDP is BenchmarkAllReduce on a udp device (udp1 on
// loopback): the network path's per-step costs, without a network.
func BenchmarkAllReduceUDP(b *testing.B) { benchAllReduce(b, secondUDP(b)) }

func benchAllReduce(b *testing.B, transport string) {
	for _, size := range []int{8, 2 << 10, 128 << 10, 512 << 10, 2 << 20, 32 << 20} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			id, err := NewUniqueID(freeAddr(b))
			if err != nil {
				b.Fatal(err)
			}
			comms := make([]*Comm, 2)
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for r := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					comms[r], errs[r] = NewComm(context.Background(), id, r, 2, Options{Transport: transport})
				}()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(size))
			b.ResetTimer()
			for r := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					buf := make([]byte, size)
					for range b.N {
						if err := comms[r].AllReduce(context.Background(), buf, buf, size/4, reduce.Float32, reduce.Sum); err != nil {
							errs[r] = err
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			for r := range 2 {
				wg.Add(1)
				go func() { defer wg.Done(); _ = comms[r].Close() }()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
