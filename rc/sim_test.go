package rc_test

import (
	"errors"
	"flag"
	"testing"

	"github.com/ibex-rdma/ibex/ib"
	"github.com/ibex-rdma/ibex/rc"
	"github.com/ibex-rdma/ibex/rc/rctest"
)

// The deterministic simulation (package rctest): two engines joined by a
// seeded network that loses, duplicates, reorders, delays, corrupts and
// partitions, under a random workload of every opcode in both directions.
// One seed drives everything; a failure prints it, and -rc.seed replays it.
var (
	flagSeed  = flag.Uint64("rc.seed", 0, "run only this simulation seed")
	flagSeeds = flag.Int("rc.seeds", 2000, "number of simulation seeds")
	flagLong  = flag.Bool("rc.long", false, "long mode: 50,000 seeds")
	flagTrace = flag.Bool("rc.trace", false, "print every packet delivered")
)

// check is the engine's invariants, run after every packet and every
// flush of every simulation.
func check(c *rc.Conn) error {
	return errors.Join(rc.Invariants(c), rc.Armed(c))
}

func simulate(t *testing.T, cfg rctest.Config) error {
	cfg.Check, cfg.Describe = check, rc.DebugState
	if *flagTrace {
		cfg.Trace = func(line string) { t.Log(line) }
	}
	_, err := rctest.Run(cfg)
	return err
}

func TestSimulation(t *testing.T) {
	t.Parallel() // one goroutine's simulation, like the two below: two at a time use both cores
	seeds := *flagSeeds
	if *flagLong {
		seeds = 50000
	}
	if testing.Short() {
		seeds = 200
	}
	if rc.RaceEnabled && !*flagLong {
		// The engine and the simulated network run in one goroutine:
		// the race detector finds nothing here and makes each seed
		// ten times slower. .ci/run runs the 2,000 seeds again
		// without it.
		seeds /= 20
	}
	run := func(seed uint64) {
		cfg := rctest.RandomConfig(seed)
		if err := simulate(t, cfg); err != nil {
			t.Fatalf("%v (replay: go test ./rc -run 'TestSimulation$' -rc.seed=%d): %v", cfg, seed, err)
		}
	}
	if *flagSeed != 0 {
		run(*flagSeed)
		return
	}
	for s := range seeds {
		run(uint64(s + 1))
	}
}

// TestSimulationPartition: a partition longer than the retry budget ends in
// RETRY_EXC_ERR, never a hang.
func TestSimulationPartition(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 50; seed++ {
		cfg := rctest.Config{Seed: seed, Requests: 30, MTU: 1024, Window: 32, Timeout: 8, RetryCnt: 3,
			Faults:   rctest.Faults{MinDelay: 5_000, Jitter: 10_000, Partitions: []rctest.Window{{From: 100_000, To: 1 << 62}}},
			WantFail: ib.WCRetryExcErr}
		if err := simulate(t, cfg); err != nil {
			t.Fatalf("%v: %v", cfg, err)
		}
	}
}

// TestSimulationCongestion: the random simulations with a bottleneck
// (RandomConfig) do exercise the congestion response: over the first 300
// seeds, queues overflow and mark, responders send CNPs that requesters
// receive, windows are cut and the pacer defers retransmissions.
func TestSimulationCongestion(t *testing.T) {
	t.Parallel()
	var net rctest.NetStats
	var st rc.Stats
	runs := 0
	for seed := uint64(1); seed <= 300; seed++ {
		cfg := rctest.RandomConfig(seed)
		if cfg.Faults.Bottleneck.Rate == 0 {
			continue
		}
		runs++
		cfg.Check, cfg.Describe = check, rc.DebugState
		res, err := rctest.Run(cfg)
		if err != nil {
			t.Fatalf("%v (replay: go test ./rc -run 'TestSimulation$' -rc.seed=%d): %v", cfg, seed, err)
		}
		net.Overflowed += res.Net.Overflowed
		net.Marked += res.Net.Marked
		for _, s := range []rc.Stats{res.A, res.B} {
			st.CNPsSent += s.CNPsSent
			st.CNPsRecv += s.CNPsRecv
			st.WindowCuts += s.WindowCuts
			st.Paced += s.Paced
		}
	}
	t.Logf("%d runs with a bottleneck: %d overflowed, %d marked; %d CNPs sent, %d received; %d window cuts; %d retransmissions paced",
		runs, net.Overflowed, net.Marked, st.CNPsSent, st.CNPsRecv, st.WindowCuts, st.Paced)
	if runs == 0 || net.Overflowed == 0 || net.Marked == 0 || st.CNPsSent == 0 || st.CNPsRecv == 0 || st.WindowCuts == 0 || st.Paced == 0 {
		t.Fatal("the simulations do not exercise every part of the congestion response")
	}
}
