package algo

// BusFactor is nccl-tests' busbw/algbw factor for collective c over n
// ranks: busbw = algbw × BusFactor is what each rank's link carries, which
// can be compared with the link's rate whatever n is. The factors are those
// of nccl-tests' GetBw functions (src/all_reduce.cu, all_gather.cu,
// reduce_scatter.cu, alltoall.cu, broadcast.cu, reduce.cu, sendrecv.cu):
//
//	all_reduce                              2(n-1)/n
//	reduce_scatter, all_gather, all_to_all  (n-1)/n
//	broadcast, reduce                       1
//
// Any other c, such as the zero Collective that coll's benchmark uses for
// sendrecv (sendrecv_perf), gives sendrecv's 1.
//
// At n = 1 this is nccl-tests' value too: 0 for all_reduce, reduce_scatter,
// all_gather and all_to_all (one rank moves nothing over a link), 1 for the
// others. n < 1 (no ranks, where nccl-tests would divide by zero) gives 0.
func BusFactor(c Collective, n int) float64 {
	if n < 1 {
		return 0
	}
	switch c {
	case AllReduce:
		return 2 * float64(n-1) / float64(n)
	case ReduceScatter, AllGather, AllToAll:
		return float64(n-1) / float64(n)
	}
	return 1
}
