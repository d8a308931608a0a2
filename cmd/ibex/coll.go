package main

import (
	"context"
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/ibex-rdma/ibex/coll"
	"github.com/ibex-rdma/ibex/coll/algo"
	"github.com/ibex-rdma/ibex/coll/reduce"
	"github.com/ibex-rdma/ibex/internal/units"
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
	timeout             time.Duration
	algo, save          string
	rendezvous          string
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
			"srun or mpirun (with IBEX_RENDEZVOUS=host:port reachable by every rank); with no launcher\n" +
			"either, start 2 local ranks. Rank 0 prints nccl-tests' table: size count type redop root,\n" +
			"then time algbw busbw #wrong out of place and in place, and the average bus bandwidth.\n\n" +
			"With no COLLECTIVE: all_reduce from 8 bytes to 32 MiB, factor 4, on 2 local ranks.",
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
				if !cmd.Flags().Changed("stepfactor") {
					o.factor = 4
				}
			}
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
	f.StringVarP(&o.dtype, "datatype", "d", "float", "int8 uint8 int32 uint32 int64 uint64 half bfloat16 float double")
	f.StringVarP(&o.op, "op", "o", "sum", "sum prod min max avg")
	f.IntVarP(&o.root, "root", "r", 0, "root of broadcast and reduce")
	f.IntVar(&o.np, "np", 0, "start this many local rank processes")
	f.StringVar(&o.transport, "transport", "", "force a device for every peer (shm0, udp0); default: shm0 on one host, udp0 between hosts")
	f.BoolVar(&o.asJSON, "json", false, "print the rows as JSON instead of the table")
	f.StringVar(&o.plotFile, "plot", "", "draw busbw against size into this PNG/SVG/PDF file")
	f.DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up (naming the ranks not heard from) after this long")
	f.StringVar(&o.algo, "algo", "", "force an algorithm (ring, tree, rhd, rd, direct) where the collective has it (as IBEX_ALGO)")
	f.StringVar(&o.rendezvous, "rendezvous", "", "host:port where rank 0 listens, under srun or mpirun (else IBEX_RENDEZVOUS)")
	f.StringVar(&o.save, "save", "", "calibrate: write the measured model to this file")
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
	cfg := coll.BenchConfig{Collective: kind, Factor: o.factor, Iters: o.iters, Warmup: o.warmup, Check: o.check != 0, Root: o.root}
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
	if cfg.DType, err = reduce.ParseDType(o.dtype); err != nil {
		return fmt.Errorf("coll: -d %s: %w", o.dtype, err)
	}
	if cfg.Op, err = reduce.ParseOp(o.op); err != nil {
		return fmt.Errorf("coll: -o %s: %w", o.op, err)
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
	if o.np < 0 {
		return fmt.Errorf("coll: --np %d: want a number of ranks", o.np)
	}
	if o.np == 0 && os.Getenv(collRankEnv) == "" {
		if _, err := coll.FromEnv(nil, o.rendezvous); err != nil {
			o.np = 2 // no launcher: the built-in default
		}
	}
	if o.np > 0 && os.Getenv(collRankEnv) == "" {
		return launchRanks(ctx, out, errOut, o.np)
	}
	env, err := collEnv(o.rendezvous)
	if err != nil {
		return err
	}
	if name == "calibrate" {
		return runCalibrate(ctx, out, env, o)
	}
	if cfg.Root < 0 || cfg.Root >= env.Size {
		return fmt.Errorf("coll: -r %d: root must be a rank of %d", cfg.Root, env.Size)
	}
	cctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	c, err := coll.NewComm(cctx, coll.EnvUniqueID(env), env.Rank, env.Size, coll.Options{Transport: o.transport})
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
	err = c.Bench(cctx, cfg, func(r coll.BenchRow) {
		rows = append(rows, r)
		if !o.asJSON {
			coll.WriteBenchRow(out, r)
		}
	})
	if err != nil {
		return err
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
		if err := plotBusBW(o.plotFile, name, rows); err != nil {
			return err
		}
	}
	for _, r := range rows {
		if r.OOPWrong+r.IPWrong > 0 {
			return fmt.Errorf("coll: %d wrong elements at %d bytes", r.OOPWrong+r.IPWrong, r.Size)
		}
	}
	return nil
}

// runCalibrate measures the cost model on this job's communicator; rank 0
// prints it and saves it with --save.
func runCalibrate(ctx context.Context, out io.Writer, env coll.Env, o collOptions) error {
	cctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	c, err := coll.NewComm(cctx, coll.EnvUniqueID(env), env.Rank, env.Size, coll.Options{Transport: o.transport})
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

func plotBusBW(file, name string, rows []coll.BenchRow) error {
	p := plot.New()
	p.Title.Text = "ibex coll " + name
	p.X.Label.Text = "size [bytes]"
	p.Y.Label.Text = "busbw [GB/s]"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())
	for i, s := range []struct {
		label string
		f     func(coll.BenchRow) float64
	}{{"out-of-place", func(r coll.BenchRow) float64 { return r.OOPBusBW }}, {"in-place", func(r coll.BenchRow) float64 { return r.IPBusBW }}} {
		pts := make(plotter.XYs, 0, len(rows))
		for _, r := range rows {
			pts = append(pts, plotter.XY{X: float64(r.Size), Y: s.f(r)})
		}
		l, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		c := []color.Color{color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}}[i]
		l.Color, sc.Color = c, c
		p.Add(l, sc)
		p.Legend.Add(s.label, l, sc)
	}
	if err := p.Save(8*vg.Inch, 5*vg.Inch, file); err != nil {
		return fmt.Errorf("coll: plot %s: %w", file, err)
	}
	return nil
}
