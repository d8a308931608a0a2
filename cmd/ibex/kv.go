package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ibex-rdma/ibex/internal/kvload"
	"github.com/ibex-rdma/ibex/internal/units"
	"github.com/ibex-rdma/ibex/kv"
	"github.com/ibex-rdma/ibex/verbs"
)

// newKVCmd is `ibex kv`: serve the one-sided key-value store, talk to it,
// and benchmark it beside redis and memcached.
func newKVCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kv",
		Short: "a key-value store whose GETs are one-sided RDMA READs: serve, get, put, del, bench",
		Long: "ibex kv serve holds a key-value store in two memory regions registered once\n" +
			"(--index, --values); clients GET by RDMA-READing the key's buckets and entry and\n" +
			"checking versions and checksums, so the server's CPU never sees a GET. PUTs and\n" +
			"DELETEs are requests to the server. ibex kv bench loads it, redis or memcached\n" +
			"with the same closed loop (internal/kvload).",
	}
	cmd.AddCommand(newKVServeCmd(), newKVGetCmd(), newKVPutCmd(), newKVDelCmd(), newKVStatsCmd(), newKVBenchCmd())
	return cmd
}

func newKVServeCmd() *cobra.Command {
	cfg := kv.ServerConfig{Index: 64 << 20, Values: 256 << 20}
	var maxValue int64 = 4 << 20
	var inline int64 = 4096
	cmd := &cobra.Command{
		Use:   "serve --listen ADDR:PORT --device D [--index 64M] [--values 256M]",
		Short: "serve the store until interrupted",
		Long: "Register the index (--index bytes) and the value arena (--values bytes) once,\n" +
			"listen for clients on --listen, and serve PUTs and DELETEs until SIGINT or SIGTERM.\n" +
			"The registered memory never grows: a full arena or index is an error to the PUT\n" +
			"that hit it, naming the flag.",
		Example: "  ibex kv serve --listen 127.0.0.1:7470 --device shm0\n" +
			"  IBEX_UDP_ADDR=127.0.0.2 ibex kv serve --listen 127.0.0.2:7470 --device udp0",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.MaxValue, cfg.Inline = int(maxValue), int(inline)
			cfg.Logf = func(format string, args ...any) { fmt.Fprintf(cmd.ErrOrStderr(), format+"\n", args...) }
			srv, err := kv.NewServer(cfg)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			fmt.Fprintf(cmd.OutOrStdout(), "kv: serving on %s, device %s, index %s, values %s\n",
				srv.Addr(), srv.Device(), units.FormatBytes(cfg.Index), units.FormatBytes(cfg.Values))
			return srv.Serve(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:7470", "TCP address clients connect to")
	f.StringVarP(&cfg.Device, "device", "d", "", "verbs device (default: the first)")
	f.Var(bytesFlag{&cfg.Index}, "index", "index memory region bytes (header and two table areas)")
	f.Var(bytesFlag{&cfg.Values}, "values", "value arena memory region bytes")
	f.Var(bytesFlag{&maxValue}, "max-value", "largest value")
	f.Var(bytesFlag{&inline}, "inline", "largest value sent inside a request (larger ones the server READs)")
	f.IntVar(&cfg.MaxKey, "max-key", 1024, "largest key in bytes")
	f.IntVar(&cfg.MaxClients, "max-clients", 64, "clients connected at once")
	f.IntVar(&cfg.Credits, "credits", 16, "requests in flight per client")
	f.DurationVar(&cfg.Quarantine, "quarantine", 100*time.Millisecond, "how long a freed entry waits before reuse")
	return cmd
}

// kvClientFlags are the flags every client subcommand takes.
type kvClientFlags struct {
	server, device string
	timeout        time.Duration
}

func (o *kvClientFlags) bind(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.server, "server", "127.0.0.1:7470", "server's TCP address")
	f.StringVarP(&o.device, "device", "d", "", "verbs device (default: the first)")
	f.DurationVar(&o.timeout, "timeout", 10*time.Second, "give up after this long")
}

func (o *kvClientFlags) dial(cmd *cobra.Command) (*kv.Client, context.Context, context.CancelFunc, error) {
	ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
	c, err := kv.Dial(ctx, kv.ClientConfig{Server: o.server, Device: o.device, Pipeline: 1, Cache: -1})
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return c, ctx, cancel, nil
}

func newKVGetCmd() *cobra.Command {
	var o kvClientFlags
	cmd := &cobra.Command{
		Use:   "get --server ADDR --device D KEY",
		Short: "print KEY's value (exit status 1 and a message if there is none)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, cancel, err := o.dial(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			defer c.Close()
			_, maxValue := c.Limits()
			dst := make([]byte, maxValue)
			n, found, err := c.Get(ctx, []byte(args[0]), dst)
			if err != nil {
				return err
			}
			if !found {
				return fmt.Errorf("kv: %q: not found", args[0])
			}
			out := cmd.OutOrStdout()
			_, err = out.Write(dst[:n])
			if err == nil && isTerminal(out) {
				_, err = io.WriteString(out, "\n")
			}
			return err
		},
	}
	o.bind(cmd)
	return cmd
}

func newKVPutCmd() *cobra.Command {
	var o kvClientFlags
	cmd := &cobra.Command{
		Use:   "put --server ADDR --device D KEY [VALUE]",
		Short: "store VALUE (or standard input) under KEY",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var val []byte
			if len(args) == 2 {
				val = []byte(args[1])
			} else {
				var err error
				if val, err = io.ReadAll(cmd.InOrStdin()); err != nil {
					return err
				}
			}
			c, ctx, cancel, err := o.dial(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			defer c.Close()
			return c.Put(ctx, []byte(args[0]), val)
		},
	}
	o.bind(cmd)
	return cmd
}

func newKVDelCmd() *cobra.Command {
	var o kvClientFlags
	cmd := &cobra.Command{
		Use:   "del --server ADDR --device D KEY",
		Short: "delete KEY (exit status 1 if there was none)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, cancel, err := o.dial(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			defer c.Close()
			found, err := c.Delete(ctx, []byte(args[0]))
			if err == nil && !found {
				err = fmt.Errorf("kv: %q: not found", args[0])
			}
			return err
		},
	}
	o.bind(cmd)
	return cmd
}

func newKVStatsCmd() *cobra.Command {
	var o kvClientFlags
	cmd := &cobra.Command{
		Use:   "stats --server ADDR --device D",
		Short: "print the server's counters as JSON",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ctx, cancel, err := o.dial(cmd)
			if err != nil {
				return err
			}
			defer cancel()
			defer c.Close()
			st, err := c.ServerStats(ctx)
			if err != nil {
				return err
			}
			e := json.NewEncoder(cmd.OutOrStdout())
			e.SetIndent("", "  ")
			return e.Encode(st)
		},
	}
	o.bind(cmd)
	return cmd
}

// kvBenchJSON is ibex kv bench --json's object.
type kvBenchJSON struct {
	Target    string  `json:"target"`
	Device    string  `json:"device,omitempty"`
	Conns     int     `json:"conns"`
	Pipeline  int     `json:"pipeline"`
	Size      int     `json:"size"`
	Keys      int     `json:"keys"`
	GetRatio  float64 `json:"get_ratio"`
	Seconds   float64 `json:"elapsed_s"`
	OpsPerSec float64 `json:"ops_per_sec"`
	P50       float64 `json:"p50_us"`
	P99       float64 `json:"p99_us"`
	P999      float64 `json:"p999_us"`
	Ops       uint64  `json:"ops"`
	Gets      uint64  `json:"gets"`
	Sets      uint64  `json:"sets"`
	Misses    uint64  `json:"misses"`
	// ServerCPU is the ibex server process's CPU time (user+sys, from its
	// getrusage, read by STATS requests before and after the timed run)
	// per million GETs; absent for redis and memcached.
	ServerCPU *float64 `json:"server_cpu_s_per_million_gets,omitempty"`
	// ServerRequests is the requests the ibex server handled during the
	// timed run (its SETs and the closing STATS; never a GET).
	ServerRequests *uint64 `json:"server_requests,omitempty"`
}

func newKVBenchCmd() *cobra.Command {
	var (
		cfg    kvload.Config
		target string
		device string
		size   int64 = 100
		asJSON bool
		slot   int64
	)
	cmd := &cobra.Command{
		Use:   "bench --target ibex://ADDR|redis://ADDR|memcached://ADDR [flags]",
		Short: "closed-loop GET/SET load against ibex kv, redis or memcached, with latency percentiles",
		Long: "Run --conns connections, each sending --pipeline operations at once (GET with\n" +
			"probability --get-ratio, else SET of --size bytes) over --keys uniform keys for\n" +
			"--duration, and report ops/s and per-operation p50/p99/p99.9. --preload SETs\n" +
			"every key first, untimed. Against ibex, a batch's GETs are RDMA READs all posted\n" +
			"before it waits, and the report adds the server process's CPU time per million\n" +
			"GETs, read from the server's own getrusage by STATS requests before and after the\n" +
			"timed run (on shm0 the server's CPU does nothing for a GET; on udp0 its transport\n" +
			"answers the READs, which shows here).",
		Example: "  ibex kv bench --target ibex://127.0.0.1:7470 -d shm0 --conns 4 --pipeline 32 --preload\n" +
			"  ibex kv bench --target redis://127.0.0.1:6379 --conns 4 --pipeline 32 --preload --json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.ValueSize = int(size)
			scheme, addr, ok := strings.Cut(target, "://")
			if !ok || addr == "" {
				return fmt.Errorf("kv bench: --target %q: want ibex://ADDR, redis://ADDR or memcached://ADDR", target)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			out := kvBenchJSON{Target: target, Conns: cfg.Conns, Pipeline: cfg.Pipeline, Size: cfg.ValueSize, Keys: cfg.Keys, GetRatio: cfg.GetRatio}
			var dial kvload.Dialer
			var stats func() (kv.ServerStats, error)
			switch scheme {
			case "redis":
				dial = kvload.DialRedis(addr)
			case "memcached":
				dial = kvload.DialMemcached(addr)
			case "ibex":
				vc, err := verbs.Open(device)
				if err != nil {
					return err
				}
				defer vc.Close()
				out.Device = vc.Name()
				slotSize := int(slot)
				if slotSize == 0 {
					// An entry of the benchmark's keys and values fits a slot.
					slotSize = max(16<<10, int(size)+256)
				}
				ccfg := kv.ClientConfig{Server: addr, Context: vc, Pipeline: max(cfg.Pipeline, 1), SlotSize: slotSize}
				dial = func(ctx context.Context) (kvload.Client, error) {
					c, err := kv.Dial(ctx, ccfg)
					if err != nil {
						return nil, err
					}
					return &kvLoadClient{c: c, size: int(size)}, nil
				}
				sc, err := kv.Dial(ctx, kv.ClientConfig{Server: addr, Context: vc, Pipeline: 1, Cache: -1})
				if err != nil {
					return err
				}
				defer sc.Close()
				stats = func() (kv.ServerStats, error) { return sc.ServerStats(ctx) }
			default:
				return fmt.Errorf("kv bench: --target %q: scheme %q, want ibex, redis or memcached", target, scheme)
			}
			if cfg.Preload {
				pre := cfg
				pre.Duration, pre.Requests, pre.GetRatio = 0, 1, 1
				if _, err := kvload.Run(ctx, pre, dial); err != nil {
					return fmt.Errorf("kv bench: preload: %w", err)
				}
				cfg.Preload = false
			}
			var before kv.ServerStats
			if stats != nil {
				var err error
				if before, err = stats(); err != nil {
					return err
				}
			}
			rep, err := kvload.Run(ctx, cfg, dial)
			if err != nil {
				return fmt.Errorf("kv bench: %w", err)
			}
			out.Seconds, out.OpsPerSec = rep.Elapsed.Seconds(), rep.OpsPerSec
			out.P50, out.P99, out.P999 = us(rep.P50), us(rep.P99), us(rep.P999)
			out.Ops, out.Gets, out.Sets, out.Misses = rep.Ops, rep.Gets, rep.Sets, rep.Misses
			if stats != nil {
				after, err := stats()
				if err != nil {
					return err
				}
				cpu := (after.CPUUser + after.CPUSys - before.CPUUser - before.CPUSys).Seconds()
				reqs := after.Requests - before.Requests
				out.ServerRequests = &reqs
				if rep.Gets > 0 {
					v := cpu / (float64(rep.Gets) / 1e6)
					out.ServerCPU = &v
				}
			}
			w := cmd.OutOrStdout()
			if asJSON {
				e := json.NewEncoder(w)
				e.SetIndent("", "  ")
				return e.Encode(out)
			}
			fmt.Fprintf(w, "%s: %s\n", target, rep)
			if out.ServerCPU != nil {
				fmt.Fprintf(w, "server CPU: %.3f s per million GETs (%d requests reached the server, none of them GETs)\n", *out.ServerCPU, *out.ServerRequests)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&target, "target", "", "ibex://ADDR, redis://ADDR or memcached://ADDR")
	f.StringVarP(&device, "device", "d", "", "verbs device for ibex:// (default: the first)")
	f.IntVar(&cfg.Conns, "conns", kvload.DefaultConns, "connections, each its own goroutine")
	f.IntVar(&cfg.Pipeline, "pipeline", kvload.DefaultPipeline, "operations in flight per connection")
	f.Var(bytesFlag{&size}, "size", "SET value bytes")
	f.IntVar(&cfg.Keys, "keys", kvload.DefaultKeys, "key space (uniform)")
	f.Float64Var(&cfg.GetRatio, "get-ratio", kvload.DefaultGetRatio, "fraction of operations that are GETs (negative: SETs only)")
	f.DurationVar(&cfg.Duration, "duration", kvload.DefaultDuration, "timed run's length")
	f.IntVar(&cfg.Requests, "requests", 0, "operations per connection instead of --duration")
	f.BoolVar(&cfg.Preload, "preload", false, "SET every key once before the timed run")
	f.Int64Var(&cfg.Seed, "seed", 1, "seed of the op mix and keys (the same seed, the same sequences)")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.Var(bytesFlag{&slot}, "slot", "ibex: bytes each GET in flight reads into (default: 16K, or the size plus 256)")
	_ = cmd.MarkFlagRequired("target")
	return cmd
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// kvLoadClient is kvload's Client for ibex kv: one Do is one pipelined
// batch (every GET's READs posted before it waits; SETs as PUT requests).
type kvLoadClient struct {
	c    *kv.Client
	size int
	ops  []kv.Op
	bufs [][]byte // a GET destination per position in the batch
}

func (a *kvLoadClient) Do(ctx context.Context, ops []kvload.Op, res []kvload.Result) error {
	for len(a.ops) < len(ops) {
		a.ops = append(a.ops, kv.Op{})
		a.bufs = append(a.bufs, make([]byte, a.size))
	}
	kops := a.ops[:len(ops)]
	for i, o := range ops {
		if o.Kind == kvload.Set {
			kops[i] = kv.Op{Kind: kv.OpPut, Key: o.Key, Value: o.Value}
		} else {
			kops[i] = kv.Op{Kind: kv.OpGet, Key: o.Key, Value: a.bufs[i]}
		}
	}
	err := a.c.Do(ctx, kops)
	for i := range kops {
		o := &kops[i]
		// A value longer than --size (another run's) still counts as found.
		if err == nil && o.Err != nil && !errors.Is(o.Err, io.ErrShortBuffer) {
			err = fmt.Errorf("kv bench: %v %q: %w", ops[i].Kind, ops[i].Key, o.Err)
		}
		res[i] = kvload.Result{Found: o.Found || ops[i].Kind == kvload.Set, Len: o.N}
		o.Key, o.Value = nil, nil // the caller's, valid only during Do
	}
	return err
}

func (a *kvLoadClient) Close() error { return a.c.Close() }
