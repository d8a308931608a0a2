package rctest

import (
	"testing"

	"github.com/ibex-rdma/ibex/ib"
)

// TestRun: a few simulations from their seeds, a perfect network (the
// zero Faults) among them. rc's TestSimulation runs thousands.
func TestRun(t *testing.T) {
	cfgs := []Config{{Seed: 1}, {Seed: 2, MTU: 256, Window: 4, Faults: Faults{Loss: 0.05, Dup: 0.05, Corrupt: 0.05, Jitter: 50_000}}}
	for seed := uint64(1); seed <= 20; seed++ {
		cfgs = append(cfgs, RandomConfig(seed))
	}
	for _, cfg := range cfgs {
		res, err := Run(cfg)
		if err != nil {
			t.Fatalf("%v: %v", cfg, err)
		}
		if cfg.Faults.Loss > 0 && res.A.Retransmits+res.B.Retransmits == 0 {
			t.Errorf("%v: no retransmits on a lossy network: %+v", cfg, res)
		}
	}
}

// TestRunPartition: a partition longer than the retry budget ends in
// RETRY_EXC_ERR, and Run says so when a run that must fail does not.
func TestRunPartition(t *testing.T) {
	cfg := Config{Seed: 1, Requests: 20, Timeout: 8, RetryCnt: 3, WantFail: ib.WCRetryExcErr,
		Faults: Faults{MinDelay: 5000, Partitions: []Window{{From: 20_000, To: 1 << 62}}}}
	if _, err := Run(cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Faults.Partitions = nil
	if _, err := Run(cfg); err == nil {
		t.Fatal("a run without a partition ended in RETRY_EXC_ERR")
	}
}
