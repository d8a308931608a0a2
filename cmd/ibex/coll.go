package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ibex-rdma/ibex/coll"
	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/coll/reduce"
	"github.com/ibex-rdma/ibex/internal/units"
	"github.com/ibex-rdma/ibex/verbs"
)

// collRankEnv marks a rank process started by `ibex coll --np`.
const (
	collRankEnv = "IBEX_COLL_RANK"
	collSizeEnv = "IBEX_COLL_SIZE"
)

type collOptions struct {
	min, max, stepBytes string
	factor              int64
	iters, warmup       int
	check               int
	dtype, op           string
	root                int
	np                  int
	transport           string
	asJSON              bool
	plotFile            string
	timeout             secondsFlag
	algo, save          string
	rendezvous          string
	metrics             string // --metrics, else IBEX_METRICS: each rank on its port + rank
	npSet               bool
	// nccl-tests' flags that ibex takes with its meaning, or explains.
	threads, gpus     int
	average, aggIters int
	blocking, cycles  int
	parallelInit      int
	graphs, cputime   int
	register          int
}

// secondsFlag is -T/--timeout: nccl-tests' whole seconds (-T 30), or a Go
// duration (--timeout 90s); 0 means none.
type secondsFlag struct{ d time.Duration }

func (s *secondsFlag) String() string { return s.d.String() }
func (s *secondsFlag) Type() string   { return "seconds" }
func (s *secondsFlag) Set(v string) error {
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		if n < 0 {
			return fmt.Errorf("%s: want 0 (no timeout) or more seconds", v)
		}
		s.d = time.Duration(n * float64(time.Second))
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return fmt.Errorf("%q: want seconds (30) or a duration (90s, 2m)", v)
	}
	s.d = d
	return nil
}

// newCollCmd is `ibex coll COLLECTIVE`, nccl-tests' tools in one command.
func newCollCmd() *cobra.Command {
	var o collOptions
	cmd := &cobra.Command{
		Use:   "coll [COLLECTIVE] [flags]",
		Short: "nccl-tests' benchmarks (all_reduce_perf, ...) over ibex collectives",
		Long: "Run an nccl-tests benchmark: all_reduce, all_gather, reduce_scatter, broadcast, reduce, alltoall,\n" +
			"sendrecv. `ibex coll calibrate` measures the cost model the algorithms are chosen by\n" +
			"(--save FILE keeps it; IBEX_COLL_MODEL=FILE uses it).\n\n" +
			"With --np N, start N rank processes on this host (shared memory between them). Without it,\n" +
			"run as one rank of a job started by torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT),\n" +
			"srun or mpirun: on one host the ranks meet through a file named by the job id (in\n" +
			"IBEX_RENDEZVOUS_DIR, else the temporary directory); srun on several nodes at the first node of\n" +
			"SLURM_NODELIST; mpirun on several hosts needs IBEX_RENDEZVOUS=host:port (or --rendezvous)\n" +
			"reachable by every rank. With no launcher either, start 2 local ranks. Rank 0 prints\n" +
			"nccl-tests' table: size count type redop root,\n" +
			"then time algbw busbw #wrong out of place and in place, and the average bus bandwidth.\n\n" +
			"With no COLLECTIVE: all_reduce from 8 bytes to 32 MiB, factor 2, on 2 local ranks.\n\n" +
			"nccl-tests' other flags: -d all and -o all loop over the types and ops; -r -1 over the roots\n" +
			"(broadcast, reduce); -a reports rank 0's (0), the mean (1), min (2) or max (3) time of the ranks;\n" +
			"-m runs that many calls per timed iteration; -N repeats the sweep (0: until interrupted);\n" +
			"-T bounds setup and each size, in seconds; -C 1 labels the time cputime. ibex runs one rank per\n" +
			"process, without a GPU: -g and -t take only 1 (more ranks: --np or a launcher); -z, -p, -G and -R\n" +
			"are accepted and change nothing (each call returns complete, ranks start in parallel, no CUDA\n" +
			"graphs, user buffers from 64 KiB are registered and cached anyway), with a note.",
		Example: "  ibex coll\n  ibex coll all_reduce -b 8 -e 128M -f 2 -n 20 -w 5 -c 1 --np 4\n  ibex coll calibrate --np 2 --save model.json",
		Args:    cobra.RangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := "all_reduce"
			if len(args) == 1 {
				name = args[0]
			} else {
				// The built-in default: a sweep, unless the sizes were given.
				if !cmd.Flags().Changed("minbytes") {
					o.min = "8"
				}
			}
			o.npSet = cmd.Flags().Changed("np")
			o.metrics = metricsAddr(cmd)
			return runColl(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), name, o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.min, "minbytes", "b", "32M", "smallest size (K, M, G suffixes)")
	f.StringVarP(&o.max, "maxbytes", "e", "32M", "largest size")
	f.Int64VarP(&o.factor, "stepfactor", "f", 2, "multiply the size by this each step")
	f.StringVarP(&o.stepBytes, "stepbytes", "i", "0", "add this many bytes each step instead (overrides -f)")
	f.IntVarP(&o.iters, "iters", "n", 20, "timed iterations per size")
	f.IntVarP(&o.warmup, "warmup_iters", "w", 5, "untimed iterations first")
	f.IntVarP(&o.check, "check", "c", 1, "check the results (count wrong elements)")
	f.StringVarP(&o.dtype, "datatype", "d", "float", "int8 uint8 int32 uint32 int64 uint64 half bfloat16 float double, or all")
	f.StringVarP(&o.op, "op", "o", "sum", "sum prod min max avg, or all")
	f.IntVarP(&o.root, "root", "r", 0, "root of broadcast and reduce (-1: every rank in turn)")
	f.IntVar(&o.np, "np", 0, "start this many local rank processes (at least 1)")
	f.IntVarP(&o.threads, "nthreads", "t", 1, "threads per process: ibex runs one rank per process, so only 1")
	f.IntVarP(&o.gpus, "ngpus", "g", 1, "GPUs per thread: ibex ranks have no GPU, so only 1")
	f.IntVarP(&o.average, "average", "a", 1, "report rank 0's time (0), the mean over ranks (1), the minimum (2) or the maximum (3)")
	f.IntVarP(&o.aggIters, "agg_iters", "m", 1, "calls per timed iteration (one after another: ibex has no group launch)")
	f.IntVarP(&o.blocking, "blocking", "z", 0, "accepted: ibex's calls always return complete (0-3)")
	f.IntVarP(&o.cycles, "run_cycles", "N", 1, "run and print the sweep this many times (0: until interrupted)")
	f.IntVarP(&o.parallelInit, "parallel_init", "p", 0, "accepted: each rank is a process and starts in parallel (0/1)")
	f.IntVarP(&o.graphs, "cudagraph", "G", 0, "accepted: no CUDA graphs without a GPU; calls are launched directly")
	f.IntVarP(&o.cputime, "report_cputime", "C", 0, "label the time columns cputime (ibex's time is the host timer) (0/1)")
	f.IntVarP(&o.register, "local_register", "R", 0, "accepted: ibex registers user buffers of 64 KiB and more itself (0/1/2)")
	f.StringVar(&o.transport, "transport", "", "force a device for every peer (shm0, udp0); default: shm0 on one host, udp0 between hosts")
	f.BoolVar(&o.asJSON, "json", false, "print the rows as JSON instead of the table")
	f.StringVar(&o.plotFile, "plot", "", "draw busbw against size into this PNG/SVG/PDF file")
	o.timeout.d = 2 * time.Minute
	f.VarP(&o.timeout, "timeout", "T", "give up on setup (naming the ranks not heard from) or on a size after this long: seconds or a duration; 0: never")
	f.StringVar(&o.algo, "algo", "", "force an algorithm (ring, tree, rhd, rd, direct) where the collective has it (as IBEX_ALGO)")
	f.StringVar(&o.rendezvous, "rendezvous", "", "host:port where rank 0 listens, under srun or mpirun (else IBEX_RENDEZVOUS)")
	f.String("metrics", "", "serve each rank's counters to Prometheus on host:port plus its rank (/metrics), e.g. 127.0.0.1:9101; default IBEX_METRICS")
	f.StringVar(&o.save, "save", "", "calibrate: write the measured model to this file")
	cmd.AddCommand(newCollStatusCmd())
	return cmd
}

func parseBytes(s string) (int64, error) {
	v, err := units.ParseBytes(s)
	if err != nil {
		return 0, fmt.Errorf("coll: size %q: %w", s, err)
	}
	return v, nil
}

var collNames = map[string]algo.Collective{
	"all_reduce": algo.AllReduce, "all_gather": algo.AllGather, "reduce_scatter": algo.ReduceScatter,
	"broadcast": algo.Broadcast, "reduce": algo.Reduce, "alltoall": algo.AllToAll, "all_to_all": algo.AllToAll,
	"sendrecv": coll.SendRecvBench,
}

func runColl(ctx context.Context, out, errOut io.Writer, name string, o collOptions) error {
	kind, ok := collNames[strings.TrimSuffix(name, "_perf")]
	if name == "calibrate" {
		ok = true
	}
	if !ok {
		return fmt.Errorf("coll: unknown collective %q: want all_reduce, all_gather, reduce_scatter, broadcast, reduce, alltoall, sendrecv or calibrate", name)
	}
	cfg := coll.BenchConfig{Collective: kind, Factor: o.factor, Iters: o.iters, Warmup: o.warmup, Check: o.check != 0, Root: o.root,
		AggIters: o.aggIters, Timeout: o.timeout.d, CPUTime: o.cputime != 0}
	var err error
	if cfg.MinBytes, err = parseBytes(o.min); err != nil {
		return err
	}
	if cfg.MaxBytes, err = parseBytes(o.max); err != nil {
		return err
	}
	if cfg.Step, err = parseBytes(o.stepBytes); err != nil {
		return err
	}
	dtypes, ops, err := collTypesOps(o.dtype, o.op)
	if err != nil {
		return err
	}
	cfg.DType, cfg.Op = dtypes[0], ops[0]
	if cfg.Average, err = coll.ParseBenchAverage(o.average); err != nil {
		return err
	}
	notes, err := ncclTestsFlags(o)
	if err != nil {
		return err
	}
	switch {
	case cfg.MinBytes > cfg.MaxBytes:
		return fmt.Errorf("coll: -b %d is larger than -e %d", cfg.MinBytes, cfg.MaxBytes)
	case cfg.Iters < 1 || cfg.Warmup < 0:
		return fmt.Errorf("coll: -n %d -w %d: want at least one timed iteration", cfg.Iters, cfg.Warmup)
	case cfg.Factor < 2 && cfg.Step == 0:
		return fmt.Errorf("coll: -f %d: the step factor must be at least 2 (or give -i)", cfg.Factor)
	}
	if cfg.MinBytes == 0 {
		cfg.MinBytes = int64(cfg.DType.Size())
	}
	if o.algo != "" {
		if _, err := algo.ParseAlgorithm(o.algo); err != nil {
			return fmt.Errorf("coll: --algo: %w", err)
		}
		if err := os.Setenv("IBEX_ALGO", o.algo); err != nil {
			return err
		}
	}
	if o.npSet && o.np < 1 {
		return fmt.Errorf("coll: --np %d: want at least 1 rank", o.np)
	}
	if err := checkTransport(o.transport); err != nil {
		return err
	}
	// The job's size, to check -r here, once, before any rank starts.
	child := os.Getenv(collRankEnv) != ""
	size := o.np
	if !child {
		// Under a launcher, this process is one rank of the launcher's
		// job: an incomplete launcher environment is an error (on every
		// rank), never a job of its own. Only with no launcher at all
		// does ibex start 2 local ranks by default.
		env, err := coll.FromEnv(nil, o.rendezvous)
		switch {
		case err == nil && o.npSet && env.Size > 1:
			return fmt.Errorf("coll: --np %d under %s, which started %d ranks: the launcher starts the ranks; drop --np", o.np, env.Launcher, env.Size)
		case o.npSet:
		case err == nil:
			size = env.Size
		case errors.Is(err, coll.ErrNoLauncher):
			o.np, size = 2, 2 // no launcher: the built-in default
		default:
			return err
		}
	}
	if child {
		size, _ = strconv.Atoi(os.Getenv(collSizeEnv))
	}
	roots, err := collRoots(kind, o.root, size)
	if err != nil {
		return err
	}
	if o.np > 0 && !child {
		return launchRanks(ctx, out, errOut, o.np)
	}
	env, err := collEnv(o.rendezvous)
	if err != nil {
		return err
	}
	maddr, err := rankMetricsAddr(o.metrics, env.Rank)
	if err != nil {
		return err
	}
	stopMetrics, err := serveMetrics(ctx, errOut, fmt.Sprintf("coll rank %d", env.Rank), maddr)
	if err != nil {
		return err
	}
	defer stopMetrics()
	if env.Rank == 0 {
		for _, n := range notes {
			fmt.Fprintf(errOut, "ibex: coll: note: %s\n", n)
		}
	}
	if name == "calibrate" {
		return runCalibrate(ctx, out, env, o)
	}
	if _, err := collRoots(kind, o.root, env.Size); err != nil {
		return err
	}
	sctx, cancel := ctx, context.CancelFunc(func() {})
	if o.timeout.d > 0 {
		sctx, cancel = context.WithTimeout(ctx, o.timeout.d)
	}
	c, err := coll.NewCommEnv(sctx, env, coll.Options{Transport: o.transport})
	cancel()
	if err != nil {
		return err
	}
	defer c.Close()
	if env.Rank != 0 {
		out = io.Discard
	}
	if !o.asJSON {
		transports := map[string]bool{}
		for r := range env.Size {
			if t := c.Transport(r); t != "" {
				transports[t] = true
			}
		}
		var ts []string
		for t := range transports {
			ts = append(ts, t)
		}
		coll.WriteBenchHeader(out, cfg, env.Size, strings.Join(ts, ","))
	}
	var rows []coll.BenchRow
	row := func(r coll.BenchRow) {
		rows = append(rows, r)
		switch {
		case o.asJSON:
		case cfg.Check:
			coll.WriteBenchRow(out, r)
		default:
			coll.WriteBenchRowUnchecked(out, r) // -c 0: #wrong is N/A, as in nccl-tests
		}
	}
	// nccl-tests' order: per type, per op (per root), the sweep -N times.
	if !reduces(kind) {
		ops = ops[:1]
	}
	for _, dt := range dtypes {
		for _, op := range ops {
			for _, root := range roots {
				run := cfg
				run.DType, run.Op, run.Root = dt, op, root
				run.MinBytes = max(run.MinBytes, int64(dt.Size()))
				for cycle := 0; o.cycles == 0 || cycle < o.cycles; cycle++ {
					if err := c.Bench(ctx, run, row); err != nil {
						return err
					}
				}
			}
		}
	}
	if o.asJSON {
		b, err := json.MarshalIndent(rows, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintln(out, string(b))
	} else {
		coll.WriteBenchFooter(out, rows)
	}
	if o.plotFile != "" && env.Rank == 0 {
		if err := plotBusBW(o.plotFile, collPlotTitle(name, env.Size, c), rows); err != nil {
			return err
		}
	}
	for _, r := range rows {
		if r.OOPWrong+r.IPWrong > 0 {
			return fmt.Errorf("coll: %d wrong elements at %d bytes (%s %s)", r.OOPWrong+r.IPWrong, r.Size, r.Type, r.Redop)
		}
	}
	return nil
}

// reduces reports whether the collective takes an op (-o).
func reduces(k algo.Collective) bool {
	return k == algo.AllReduce || k == algo.ReduceScatter || k == algo.Reduce
}

// collTypesOps parses -d and -o; "all" is every type or op, in
// nccl-tests' order.
func collTypesOps(dtype, op string) ([]reduce.DType, []reduce.Op, error) {
	var dts []reduce.DType
	if strings.EqualFold(dtype, "all") {
		for t := reduce.DType(0); t.Size() > 0; t++ {
			dts = append(dts, t)
		}
	} else {
		t, err := reduce.ParseDType(dtype)
		if err != nil {
			return nil, nil, fmt.Errorf("coll: -d %s: %w (or all)", dtype, err)
		}
		dts = []reduce.DType{t}
	}
	var ops []reduce.Op
	if strings.EqualFold(op, "all") {
		ops = []reduce.Op{reduce.Sum, reduce.Prod, reduce.Max, reduce.Min, reduce.Avg}
	} else {
		o, err := reduce.ParseOp(op)
		if err != nil {
			return nil, nil, fmt.Errorf("coll: -o %s: %w (or all)", op, err)
		}
		ops = []reduce.Op{o}
	}
	return dts, ops, nil
}

// collRoots checks -r against the job's size: a rank, or -1 for every
// rank in turn (nccl-tests' broadcast and reduce). Collectives without a
// root ignore -r, as nccl-tests does, and take one pass.
func collRoots(k algo.Collective, root, size int) ([]int, error) {
	if k != algo.Broadcast && k != algo.Reduce {
		return []int{0}, nil
	}
	if root == -1 {
		roots := make([]int, size)
		for r := range roots {
			roots[r] = r
		}
		return roots, nil
	}
	if root < 0 || root >= size {
		return nil, fmt.Errorf("coll: -r %d: the root must be one of the %d ranks (0..%d), or -1 for each in turn", root, size, size-1)
	}
	return []int{root}, nil
}

// ncclTestsFlags checks nccl-tests' flags that ibex has no use for, or
// only one value of, and returns a note for each accepted one that
// changes nothing.
func ncclTestsFlags(o collOptions) (notes []string, err error) {
	oneRank := "ibex runs one rank per process, with no GPU; start more ranks with --np N or a launcher (mpirun -np N, srun, torchrun)"
	switch {
	case o.threads != 1:
		return nil, fmt.Errorf("coll: -t %d: only 1 thread per process: %s", o.threads, oneRank)
	case o.gpus != 1:
		return nil, fmt.Errorf("coll: -g %d: only 1 GPU per thread: %s", o.gpus, oneRank)
	case o.aggIters < 1:
		return nil, fmt.Errorf("coll: -m %d: want at least 1 call per iteration", o.aggIters)
	case o.cycles < 0:
		return nil, fmt.Errorf("coll: -N %d: want a number of cycles (0: until interrupted)", o.cycles)
	case o.blocking < 0 || o.blocking > 3:
		return nil, fmt.Errorf("coll: -z %d: want 0, 1, 2 or 3", o.blocking)
	case o.parallelInit < 0 || o.parallelInit > 1:
		return nil, fmt.Errorf("coll: -p %d: want 0 or 1", o.parallelInit)
	case o.graphs < 0:
		return nil, fmt.Errorf("coll: -G %d: want a number of graph launches", o.graphs)
	case o.cputime < 0 || o.cputime > 1:
		return nil, fmt.Errorf("coll: -C %d: want 0 or 1", o.cputime)
	case o.register < 0 || o.register > 2:
		return nil, fmt.Errorf("coll: -R %d: want 0, 1 (local) or 2 (symmetric)", o.register)
	}
	if o.blocking != 0 {
		notes = append(notes, fmt.Sprintf("-z %d: every ibex call returns when it is complete on this rank; nothing changes", o.blocking))
	}
	if o.parallelInit != 0 {
		notes = append(notes, "-p 1: each rank is a process of its own and initialises in parallel already; nothing changes")
	}
	if o.graphs != 0 {
		notes = append(notes, fmt.Sprintf("-G %d: no CUDA graphs without a GPU; each call is launched directly", o.graphs))
	}
	if o.register != 0 {
		notes = append(notes, fmt.Sprintf("-R %d: ibex registers the user buffers of all_reduce, all_gather and broadcast from 64 KiB itself (cached); nothing changes", o.register))
	}
	return notes, nil
}

// checkTransport fails on a --transport that names no device, before any
// rank starts.
func checkTransport(name string) error {
	if name == "" {
		return nil
	}
	var names []string
	for _, d := range verbs.Devices() {
		if name == d.Device || name == d.Provider+"/"+d.Device {
			return nil
		}
		names = append(names, d.Device)
	}
	return fmt.Errorf("coll: --transport %s: no such device (devices: %s)", name, strings.Join(names, " "))
}

// runCalibrate measures the cost model on this job's communicator; rank 0
// prints it and saves it with --save.
func runCalibrate(ctx context.Context, out io.Writer, env coll.Env, o collOptions) error {
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if o.timeout.d > 0 {
		cctx, cancel = context.WithTimeout(ctx, o.timeout.d)
	}
	defer cancel()
	c, err := coll.NewCommEnv(cctx, env, coll.Options{Transport: o.transport})
	if err != nil {
		return err
	}
	m, err := c.Calibrate(cctx)
	if cerr := c.Close(); err == nil {
		err = cerr
	}
	if err != nil || env.Rank != 0 {
		return err
	}
	fmt.Fprintf(out, "# ibex coll calibrate: %d ranks\n%s", env.Size, m)
	if o.save != "" {
		if err := m.Save(o.save); err != nil {
			return err
		}
		fmt.Fprintf(out, "# saved to %s (use it with %s=%s)\n", o.save, coll.ModelEnv, o.save)
	}
	return nil
}

// collEnv is this rank's place: from `ibex coll --np`, else a launcher.
func collEnv(rendezvous string) (coll.Env, error) {
	if r := os.Getenv(collRankEnv); r != "" {
		rank, err1 := strconv.Atoi(r)
		size, err2 := strconv.Atoi(os.Getenv(collSizeEnv))
		if err1 != nil || err2 != nil || size < 1 || rank < 0 || rank >= size {
			return coll.Env{}, fmt.Errorf("coll: %s=%q %s=%q: not a rank of a size", collRankEnv, r, collSizeEnv, os.Getenv(collSizeEnv))
		}
		return coll.Env{Rank: rank, Size: size, Addr: os.Getenv("IBEX_RENDEZVOUS"), Launcher: "ibex"}, nil
	}
	return coll.FromEnv(nil, rendezvous)
}

// launchRanks starts np copies of this command as rank processes on this
// host and waits for them; rank 0's output is ours.
func launchRanks(ctx context.Context, out, errOut io.Writer, np int) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := l.Addr().String()
	_ = l.Close()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmds := make([]*exec.Cmd, np)
	for r := range np {
		c := exec.CommandContext(ctx, exe, os.Args[1:]...)
		c.Env = append(os.Environ(), fmt.Sprintf("%s=%d", collRankEnv, r), fmt.Sprintf("%s=%d", collSizeEnv, np), "IBEX_RENDEZVOUS="+addr)
		if os.Getenv("IBEX_UDP_ADDR") == "" {
			// Each rank its own RoCEv2 address, should it use udp0.
			c.Env = append(c.Env, fmt.Sprintf("IBEX_UDP_ADDR=127.0.%d.%d", 100+os.Getpid()%100, 10+r))
		}
		c.Stderr = errOut
		if r == 0 {
			c.Stdout = out
		}
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			for _, p := range cmds[:r] {
				_ = p.Process.Kill()
			}
			return fmt.Errorf("coll: start rank %d: %w", r, err)
		}
		cmds[r] = c
	}
	var first error
	for r, c := range cmds {
		if err := c.Wait(); err != nil && first == nil {
			first = fmt.Errorf("coll: rank %d: %w", r, err)
			for _, p := range cmds {
				_ = p.Process.Kill()
			}
		}
	}
	return first
}
