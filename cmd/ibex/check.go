package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/spf13/cobra"

	"github.com/ibex-rdma/ibex/check"
	"github.com/ibex-rdma/ibex/coll"
	"github.com/ibex-rdma/ibex/coll/reduce"
	"github.com/ibex-rdma/ibex/internal/units"
	"github.com/ibex-rdma/ibex/sim/des"
	"github.com/ibex-rdma/ibex/sim/fabric"
	"github.com/ibex-rdma/ibex/sim/topo"
)

// ibex check's exit statuses.
const (
	checkFailed = 1 // the fabric failed: a slow link or rank, a drift, a wrong result
	checkUsage  = 2 // the check could not run: flags, baseline file, setup, a rank's error
)

// exitError carries a command's exit status to main.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// exitCode is the exit status for a command's error: the command's own
// (ibex check's), else 1.
func exitCode(err error) int {
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	return 1
}

// usage marks err as a check that could not run (exit status 2).
func usage(err error) error {
	if err == nil {
		return nil
	}
	var e *exitError
	if errors.As(err, &e) {
		return err
	}
	return &exitError{code: checkUsage, err: err}
}

type checkOptions struct {
	size, arSize         string
	iters, warmup        int
	repeats              int
	latIters, arIters    int
	threshold, latThresh float64
	baseline, save       string
	np                   int
	npSet                bool
	rendezvous           string
	transport            string
	timeout              secondsFlag
	sim                  string
	degrade, flap        []string
	retry                time.Duration
}

// newCheckCmd is `ibex check`, the fabric gate.
func newCheckCmd() *cobra.Command {
	var o checkOptions
	cmd := &cobra.Command{
		Use:   "check [flags]",
		Short: "Fabric gate: every pair's bandwidth and latency, an all-reduce, slow links and ranks, drift from a baseline",
		Long: "Measure the fabric between the ranks of a job. Every pair of ranks, in rounds of disjoint pairs (a\n" +
			"round's pairs at once), sends -n messages of -s bytes each way (bandwidth in GB/s, the best of -r\n" +
			"runs) and ping-pongs 8 bytes (latency: half the median round trip); then the ranks all-reduce\n" +
			"--allreduce-size bytes (float sum; nccl-tests' busbw). Rank 0 prints a row per pair and names the\n" +
			"slow links (a direction's bandwidth below (1 - threshold) x the median of every direction on the\n" +
			"same transport, or a latency above (1 + threshold) x the median) and the slow ranks (most of whose\n" +
			"pairs are slow: the rank is named instead of its links).\n\n" +
			"--save FILE writes the figures (JSON, versioned: pairs, all-reduce, hosts, transport, sizes, ibex\n" +
			"version); --baseline FILE compares with such a file and lists every figure that drifted beyond the\n" +
			"threshold the bad way (less bandwidth, more latency). A baseline of another shape (ranks, transport,\n" +
			"sizes, topology) is refused.\n\n" +
			"The ranks start as for `ibex coll`: --np N on this host, or one rank per process under mpirun, srun\n" +
			"or torchrun (their environment; --rendezvous or IBEX_RENDEZVOUS where they need it).\n\n" +
			"--sim TOPO.yaml runs the same schedule and all-reduce on the flow-level simulator instead (rank r on\n" +
			"host r; --np: the first N hosts), with --degrade LINK=FACTOR (the cable at FACTOR of its rate) and\n" +
			"--flap LINK=PERIOD (down for the second half of every PERIOD; a message lost to it is resent after\n" +
			"--retry-timeout, 7 times at most); LINK is a port (leaf0:8, host3.nic0), a cable as the report\n" +
			"names it, or a link number. The report also names the suspect cables: those the slow pairs' routes\n" +
			"share.\n\n" +
			"Exit status: 0 the fabric passed; 1 it failed (a slow link or rank, a broken pair, a drift from the\n" +
			"baseline, a wrong all-reduce result); 2 the check could not run (flags, the baseline file or its\n" +
			"shape, setup, a rank's error).",
		Example: "  ibex check --np 4 --save base.json\n" +
			"  mpirun -np 16 ibex check --baseline base.json --threshold 0.2\n" +
			"  ibex check --sim examples/fattree-3tier-k16.yaml --np 16 --degrade leaf0:8=0.25 --flap host5.nic0=2ms",
		Args: func(cmd *cobra.Command, args []string) error {
			return usage(cobra.NoArgs(cmd, args))
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.npSet = cmd.Flags().Changed("np")
			return runCheck(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usage(err) })
	f := cmd.Flags()
	f.StringVarP(&o.size, "size", "s", "1M", "bytes per message of the bandwidth test (K, M, G suffixes)")
	f.IntVarP(&o.iters, "iters", "n", 8, "messages each way per pair in the bandwidth test")
	f.IntVarP(&o.repeats, "repeats", "r", 3, "runs of each direction's bandwidth test; the best counts")
	f.IntVarP(&o.warmup, "warmup", "w", 2, "untimed exchanges of --size each way before a pair's tests")
	f.IntVar(&o.latIters, "lat-iters", 100, "timed ping-pongs of 8 bytes per pair")
	f.StringVar(&o.arSize, "allreduce-size", "4M", "bytes of the all-reduce (float sum)")
	f.IntVar(&o.arIters, "allreduce-iters", 5, "timed all-reduce iterations")
	f.Float64Var(&o.threshold, "threshold", 0.2, "how far a figure may be from its reference (the median, the baseline): 0.2 = 20%")
	f.Float64Var(&o.latThresh, "lat-threshold", 0, "the latency's threshold, if not --threshold's (1 = twice the reference)")
	f.StringVar(&o.baseline, "baseline", "", "compare with the figures in this file (from --save)")
	f.StringVar(&o.save, "save", "", "write this run's figures to this file, a baseline for later runs")
	f.IntVar(&o.np, "np", 0, "start this many local rank processes (with --sim: simulate this many ranks)")
	f.StringVar(&o.rendezvous, "rendezvous", "", "host:port where rank 0 listens, under srun or mpirun (else IBEX_RENDEZVOUS)")
	f.StringVar(&o.transport, "transport", "", "force a device for every pair (shm0, udp0); default: shm0 on one host, udp0 between hosts")
	o.timeout.d = 2 * time.Minute
	f.VarP(&o.timeout, "timeout", "T", "give up on setup, and on the measurement, after this long: seconds or a duration; 0: never")
	f.StringVar(&o.sim, "sim", "", "simulate the check on this topology file instead (see ibex sim)")
	f.StringArrayVar(&o.degrade, "degrade", nil, "with --sim: run a cable at a fraction of its rate: LINK=FACTOR (leaf0:8=0.25); repeatable")
	f.StringArrayVar(&o.flap, "flap", nil, "with --sim: take a cable down for the second half of every period: LINK=PERIOD (host3.nic0=2ms); repeatable")
	f.DurationVar(&o.retry, "retry-timeout", 0, "with --sim: how long a QP waits before resending a lost message (default 4.096us x 2^20, NCCL_IB_TIMEOUT=20)")
	return cmd
}

// checkConfig turns the flags into the check's settings.
func checkConfig(o checkOptions) (check.Config, check.Thresholds, error) {
	var cfg check.Config
	var err error
	if cfg.Bytes, err = units.ParseBytes(o.size); err != nil {
		return cfg, check.Thresholds{}, fmt.Errorf("check: --size %q: %w", o.size, err)
	}
	if cfg.AllReduceBytes, err = units.ParseBytes(o.arSize); err != nil {
		return cfg, check.Thresholds{}, fmt.Errorf("check: --allreduce-size %q: %w", o.arSize, err)
	}
	cfg.Iters, cfg.Repeats, cfg.LatIters, cfg.AllReduceIters = o.iters, o.repeats, o.latIters, o.arIters
	cfg.Warmup = o.warmup
	if o.warmup == 0 {
		cfg.Warmup = -1 // none, as asked (0 would be the default)
	}
	// 0 is Config's "default"; on the command line it is a mistake.
	for _, v := range []struct {
		flag string
		n    int64
	}{{"--size", cfg.Bytes}, {"--iters", int64(o.iters)}, {"--repeats", int64(o.repeats)}, {"--lat-iters", int64(o.latIters)}, {"--allreduce-size", cfg.AllReduceBytes}, {"--allreduce-iters", int64(o.arIters)}} {
		if v.n <= 0 {
			return cfg, check.Thresholds{}, fmt.Errorf("check: %s %d: want at least 1", v.flag, v.n)
		}
	}
	if o.warmup < 0 {
		return cfg, check.Thresholds{}, fmt.Errorf("check: --warmup %d: want 0 or more", o.warmup)
	}
	if cfg, err = cfg.WithDefaults(); err != nil {
		return cfg, check.Thresholds{}, fmt.Errorf("check: %w", err)
	}
	th := check.Thresholds{BW: o.threshold, Lat: o.latThresh}
	if o.threshold <= 0 || o.latThresh < 0 {
		return cfg, th, fmt.Errorf("check: --threshold %g --lat-threshold %g: want fractions above 0 (0.2 = 20%%)", o.threshold, o.latThresh)
	}
	if th, err = th.WithDefaults(); err != nil {
		return cfg, th, fmt.Errorf("check: %w", err)
	}
	return cfg, th, nil
}

func runCheck(ctx context.Context, out, errOut io.Writer, o checkOptions) error {
	cfg, th, err := checkConfig(o)
	if err != nil {
		return usage(err)
	}
	if o.sim != "" {
		return runCheckSim(out, o, cfg, th)
	}
	if len(o.degrade)+len(o.flap) > 0 || o.retry != 0 {
		return usage(errors.New("check: --degrade, --flap and --retry-timeout are for a simulated fabric (--sim TOPO.yaml); on a real one, impair the link itself (tc)"))
	}
	if o.npSet && o.np < 2 {
		return usage(fmt.Errorf("check: --np %d: want at least 2 ranks (pairs of them are measured)", o.np))
	}
	if err := checkTransport(o.transport); err != nil {
		return usage(err)
	}
	child := os.Getenv(collRankEnv) != ""
	if !child {
		// As `ibex coll`: under a launcher this process is one of its
		// ranks; an incomplete launcher environment is an error on every
		// rank. Without a launcher, only --np starts ranks.
		env, err := coll.FromEnv(nil, o.rendezvous)
		switch {
		case err == nil && o.npSet && env.Size > 1:
			return usage(fmt.Errorf("check: --np %d under %s, which started %d ranks: the launcher starts the ranks; drop --np", o.np, env.Launcher, env.Size))
		case o.npSet:
		case err == nil:
		case errors.Is(err, coll.ErrNoLauncher):
			return usage(errors.New("check: no ranks: start them with --np N (on this host) or under mpirun, srun or torchrun; or simulate with --sim TOPO.yaml"))
		default:
			return usage(err)
		}
	}
	if o.np > 0 && !child {
		// A bad baseline fails here, before any rank starts.
		if o.baseline != "" {
			if _, err := check.Load(o.baseline); err != nil {
				return usage(err)
			}
		}
		return checkRanksExit(launchRanks(ctx, out, errOut, o.np))
	}
	env, err := collEnv(o.rendezvous)
	if err != nil {
		return usage(err)
	}
	if env.Size < 2 {
		return usage(fmt.Errorf("check: %s started 1 rank: a check needs at least 2", env.Launcher))
	}
	sctx, cancel := withTimeout(ctx, o.timeout.d)
	c, err := coll.NewCommEnv(sctx, env, coll.Options{Transport: o.transport})
	cancel()
	if err != nil {
		return usage(err)
	}
	f, base, err := measure(ctx, c, o, cfg)
	if cerr := c.Close(); err == nil && cerr != nil {
		err = usage(cerr)
	}
	if err != nil || env.Rank != 0 {
		return err
	}
	return checkVerdict(out, f, base, th, o, nil)
}

// measure runs the check on c once rank 0 has read the baseline file (it
// may be on rank 0's host alone) and checked its ranks and sizes; every
// rank hears the outcome, so that a refused baseline ends every rank at
// once, before the measurement. Rank 0 returns the figures and the
// baseline.
func measure(ctx context.Context, c *coll.Comm, o checkOptions, cfg check.Config) (f, base *check.Figures, err error) {
	mctx, cancel := withTimeout(ctx, o.timeout.d)
	defer cancel()
	var refused error
	if c.Rank() == 0 && o.baseline != "" {
		base, refused = check.Load(o.baseline)
		if refused == nil {
			// The transport is known once every pair has been measured.
			s := base.Shape
			s.Ranks, s.Config = c.Size(), cfg
			if refused = check.CheckShape(base.Shape, s); refused != nil {
				refused = fmt.Errorf("%s: %w", o.baseline, refused)
			}
		}
	}
	ok := []byte{1}
	if refused != nil {
		ok[0] = 0
	}
	if err := c.Broadcast(mctx, ok, ok, 1, reduce.Uint8, 0); err != nil {
		return nil, nil, usage(fmt.Errorf("check: %w", err))
	}
	switch {
	case refused != nil:
		return nil, nil, usage(refused)
	case ok[0] == 0:
		return nil, nil, usage(errors.New("check: rank 0 refused the baseline (its error says why)"))
	}
	f, err = check.Measure(mctx, c, cfg)
	return f, base, usage(err)
}

// checkVerdict evaluates f (against base), prints the report, saves the
// figures, and returns the exit status's error.
func checkVerdict(out io.Writer, f, base *check.Figures, th check.Thresholds, o checkOptions, sim *check.Sim) error {
	rep, err := check.Evaluate(f, base, th)
	if err != nil {
		if errors.Is(err, check.ErrShape) {
			err = fmt.Errorf("%s: %w", o.baseline, err)
		}
		return usage(err)
	}
	if sim != nil {
		if err := sim.Locate(rep); err != nil {
			return usage(err)
		}
	}
	if err := rep.WriteText(out, o.baseline); err != nil {
		return usage(err)
	}
	if o.save != "" {
		if err := f.Save(o.save); err != nil {
			return usage(err)
		}
		fmt.Fprintf(out, "# figures saved to %s (a baseline: --baseline %s)\n", o.save, o.save)
	}
	if rep.Failed() {
		return &exitError{code: checkFailed, err: fmt.Errorf("check: %s", rep.Summary())}
	}
	return nil
}

// checkRanksExit maps the rank processes' end to ibex check's exit
// status: a rank that exited 1 found the fabric failing (only rank 0
// judges); anything else is a check that could not run.
func checkRanksExit(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == checkFailed {
		return &exitError{code: checkFailed, err: errors.New("check: the fabric failed the check (rank 0's report above)")}
	}
	return usage(err)
}

// runCheckSim is ibex check --sim: the same check on the flow-level
// simulator.
func runCheckSim(out io.Writer, o checkOptions, cfg check.Config, th check.Thresholds) error {
	if o.transport != "" || o.rendezvous != "" {
		return usage(errors.New("check: --transport and --rendezvous are for real ranks, not --sim"))
	}
	if o.npSet && o.np < 2 {
		return usage(fmt.Errorf("check: --np %d: want at least 2 simulated ranks", o.np))
	}
	s, err := topo.Load(o.sim)
	if err != nil {
		return usage(err)
	}
	g, err := s.Build()
	if err != nil {
		return usage(fmt.Errorf("%s: %w", o.sim, err))
	}
	if err := g.Check(); err != nil {
		return usage(fmt.Errorf("%s: %w", o.sim, err))
	}
	sc := check.SimConfig{Graph: g, File: o.sim, Ranks: o.np}
	if o.retry < 0 {
		return usage(fmt.Errorf("check: --retry-timeout %v: want more than 0", o.retry))
	}
	sc.Params = fabric.Params{RetryTimeout: des.Time(o.retry.Nanoseconds()) * des.Nanosecond}
	for _, d := range o.degrade {
		x, err := check.ParseDegrade(g, d)
		if err != nil {
			return usage(err)
		}
		sc.Degrade = append(sc.Degrade, x)
	}
	for _, fl := range o.flap {
		x, err := check.ParseFlap(g, fl)
		if err != nil {
			return usage(err)
		}
		sc.Flap = append(sc.Flap, x)
	}
	var base *check.Figures
	if o.baseline != "" {
		if base, err = check.Load(o.baseline); err != nil {
			return usage(err)
		}
	}
	f, sim, err := check.Simulate(cfg, sc)
	if err != nil {
		return usage(err)
	}
	return checkVerdict(out, f, base, th, o, sim)
}

func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d > 0 {
		return context.WithTimeout(ctx, d)
	}
	return ctx, func() {}
}
