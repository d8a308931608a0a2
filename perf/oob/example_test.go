package oob_test

import (
	"context"
	"log"
	"time"

	"github.com/ibex-rdma/ibex/perf/oob"
)

// A client of `ibex perf write_bw -q 2 -a server` (or of a real ib_write_bw
// server): the OOB calls in the order perftest makes its exchanges.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := oob.Dial(ctx, "server") // port 18515
	if err != nil {
		log.Fatal(err) // errors.Is(err, oob.ErrRefused): the server is not up yet
	}
	defer c.Close()
	local := oob.Params{MTU: 4096, Test: oob.Test{Name: oob.WriteBW, QPs: 2, AllSizes: true, Iters: 5000}}
	remote, err := c.Handshake(ctx, local)
	if err != nil {
		log.Fatal(err) // a *oob.MismatchError if the server is ibex running another test
	}
	agreed := oob.Negotiate(local, remote) // MTU, cycle buffer, cache line for both ends

	mine := make([]oob.Dest, 2) // from the local QPs, MRs and GID
	peers, err := c.ExchangeDests(ctx, mine)
	if err != nil {
		log.Fatal(err)
	}
	_, _ = agreed, peers // move the QPs to RTR and RTS with peers[i], path MTU agreed.MTU
	if err := c.Ready(ctx); err != nil {
		log.Fatal(err)
	}
	var last oob.Report
	for size := uint64(2); size <= 1<<23; size *= 2 {
		if err := c.StartRun(ctx); err != nil {
			log.Fatal(err)
		}
		// ... run, measure ...
		last = oob.Report{Size: size, Iters: 5000}
		if _, _, err := c.EndRun(ctx, last); err != nil {
			log.Fatal(err)
		}
	}
	if _, err := c.Finish(ctx, last); err != nil { // the server prints this report
		log.Fatal(err)
	}
}
