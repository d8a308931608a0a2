package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ibex-rdma/ibex/internal/units"
	"github.com/ibex-rdma/ibex/store"
)

// newStoreCmd is `ibex store`: the dataset server and the client tools.
// The loader's `load` is in storeload.go.
func newStoreCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Serve a directory's files over verbs, and read them back",
		Long: "ibex store serves a directory's files (datasets, shards) over verbs: clients read\n" +
			"ranges by RDMA READ from the server's registered buffers (--mode read) or have the\n" +
			"server RDMA WRITE them into their memory (--mode write), many ranges per request.",
	}
	cmd.AddCommand(newStoreServeCmd(), newStoreLsCmd(), newStoreGetCmd(), newStoreBenchCmd())
	cmd.AddCommand(newStoreLoadCmd())
	return cmd
}

// bytesFlag is a byte size with an optional K, M, G or T suffix.
type bytesFlag struct{ p *int64 }

func (f bytesFlag) String() string {
	if f.p == nil {
		return ""
	}
	return units.FormatBytes(*f.p)
}
func (f bytesFlag) Set(s string) error {
	v, err := units.ParseBytes(s)
	if err != nil {
		return err
	}
	*f.p = v
	return nil
}
func (f bytesFlag) Type() string { return "bytes" }

func newStoreServeCmd() *cobra.Command {
	var (
		cfg         store.ServerConfig
		pool, chunk int64
	)
	cmd := &cobra.Command{
		Use:   "serve DIR",
		Short: "Serve DIR's files (recursively, the list fixed at start) until SIGINT or SIGTERM",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg.Dir = args[0]
			cfg.PoolBytes = pool
			if chunk > 1<<30 {
				return fmt.Errorf("store serve: --chunk %s: at most 1G", units.FormatBytes(chunk))
			}
			cfg.ChunkBytes = int(chunk)
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			s, err := store.NewServer(cfg)
			if err != nil {
				return err
			}
			st, c := s.Stats(), s.Config()
			dev := c.Device
			if dev == "" {
				dev = "(default)"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "serving %d files, %.3f GB (%d bytes) of %s on %s, device %s\n",
				st.Files, float64(st.DatasetBytes)/1e9, st.DatasetBytes, cfg.Dir, s.Addr(), dev)
			direct := "page cache"
			if c.Direct {
				direct = "O_DIRECT"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pool %s registered: %d buffers of %s (%s); up to %d clients, %d buffers held each\n",
				units.FormatBytes(st.PoolBytes), st.PoolBuffers, units.FormatBytes(int64(st.ChunkBytes)), direct, c.MaxClients, c.MaxHeld)
			<-ctx.Done()
			_ = s.Close()
			st = s.Stats()
			fmt.Fprintf(cmd.OutOrStdout(), "served %d requests, %d ranges, %s to %d clients; errors %+v\n",
				st.Requests, st.Ranges, units.FormatBytes(int64(st.Bytes)), st.ClientsTotal, st.Errors)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", fmt.Sprintf(":%d", store.DefaultPort), "TCP address clients connect to")
	f.StringVarP(&cfg.Device, "device", "d", "", "verbs device (default: the first)")
	pool, chunk = 256<<20, 1<<20
	f.Var(bytesFlag{&pool}, "pool", "registered buffer pool, fixed at start (K, M, G suffixes)")
	f.Var(bytesFlag{&chunk}, "chunk", "one buffer: the most one range of a request moves")
	f.BoolVar(&cfg.Direct, "direct", false, "read files with O_DIRECT instead of through the page cache")
	f.IntVar(&cfg.MaxClients, "max-clients", 64, "most clients at once")
	f.IntVar(&cfg.MaxHeld, "max-held", 0, "most buffers one client holds (default a quarter of the pool, at most 256)")
	f.IntVar(&cfg.MaxDepth, "max-depth", 16, "most requests one client has in flight")
	return cmd
}

// storeClientFlags are the flags every client command shares.
type storeClientFlags struct {
	server, device, mode string
	timeout              time.Duration
}

func (o *storeClientFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.server, "server", "", "the server's host:port (port default 18520)")
	f.StringVarP(&o.device, "device", "d", "", "verbs device (default: the first)")
	f.StringVar(&o.mode, "mode", "read", "read (RDMA READ from the server's buffers) or write (the server WRITEs)")
	f.DurationVar(&o.timeout, "connect-timeout", 10*time.Second, "how long to wait for the server")
	_ = cmd.MarkFlagRequired("server")
}

func (o *storeClientFlags) dial(ctx context.Context) (*store.Client, error) {
	mode, err := store.ParseMode(o.mode)
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	return store.Dial(dctx, store.ClientConfig{Server: o.server, Device: o.device, Mode: mode})
}

func newStoreLsCmd() *cobra.Command {
	var o storeClientFlags
	cmd := &cobra.Command{
		Use:   "ls --server ADDR",
		Short: "List a server's files: size in bytes and name",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			var total int64
			w := cmd.OutOrStdout()
			for _, f := range c.Files() {
				fmt.Fprintf(w, "%12d  %s\n", f.Size, f.Name)
				total += f.Size
			}
			fmt.Fprintf(w, "%d files, %d bytes (%.3f GB)\n", len(c.Files()), total, float64(total)/1e9)
			return nil
		},
	}
	o.add(cmd)
	return cmd
}

func newStoreGetCmd() *cobra.Command {
	var (
		o           storeClientFlags
		off, length int64
		out         string
	)
	cmd := &cobra.Command{
		Use:   "get --server ADDR FILE",
		Short: "Read a file (or --offset/--length of it) from a server to -o OUT or stdout",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			fi := -1
			for i, f := range c.Files() {
				if f.Name == args[0] {
					fi = i
				}
			}
			if fi < 0 {
				return fmt.Errorf("store get: %s: no such file on %s", args[0], o.server)
			}
			size := c.Files()[fi].Size
			if length < 0 {
				length = size - off
			}
			if off < 0 || length < 0 || off > size || length > size-off {
				return fmt.Errorf("store get: %s: --offset %d --length %d: outside the file's %d bytes", args[0], off, length, size)
			}
			var w io.Writer = cmd.OutOrStdout()
			if out != "" && out != "-" {
				fl, err := os.Create(out)
				if err != nil {
					return err
				}
				defer fl.Close()
				w = fl
			}
			return getRange(cmd.Context(), c, fi, off, length, w, out)
		},
	}
	o.add(cmd)
	cmd.Flags().Int64Var(&off, "offset", 0, "first byte")
	cmd.Flags().Int64Var(&length, "length", -1, "bytes (default: to the end)")
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to this file (default stdout)")
	return cmd
}

// getRange reads [off, off+n) of file fi in batches of 16 chunks and
// writes it to w.
func getRange(ctx context.Context, c *store.Client, fi int, off, n int64, w io.Writer, out string) error {
	const per = 16
	chunk := int64(c.ChunkBytes())
	mem, err := c.Alloc(int(per * chunk))
	if err != nil {
		return err
	}
	exts := make([]store.Extent, 0, per)
	dst := make([][]byte, 0, per)
	for n > 0 {
		exts, dst = exts[:0], dst[:0]
		var got int64
		for len(exts) < per && n > 0 {
			l := min(chunk, n)
			exts = append(exts, store.Extent{File: fi, Off: off, Len: int(l)})
			dst = append(dst, mem[got:got+l])
			got += l
			off += l
			n -= l
		}
		if err := c.ReadBatch(ctx, exts, dst); err != nil {
			return err
		}
		if _, err := w.Write(mem[:got]); err != nil {
			return fmt.Errorf("store get: %s: %w", out, err)
		}
	}
	return nil
}

func newStoreBenchCmd() *cobra.Command {
	var (
		o      storeClientFlags
		cfg    store.BenchConfig
		size   int64
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "bench --server ADDR",
		Short: "Read a server's files as fast as it goes: GB/s, reads/s, client CPU per GB",
		Long: "Read ranges of --size bytes at random offsets (multiples of --size, seeded) of the\n" +
			"server's files, round-robin, for --duration, from --conns clients (one QP each) with\n" +
			"--depth batches of --batch ranges in flight per client. GB is 10^9 bytes; client CPU\n" +
			"is this process's user+sys time (getrusage) per GB read.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			mode, err := store.ParseMode(o.mode)
			if err != nil {
				return err
			}
			if size <= 0 || size > 1<<30 {
				return fmt.Errorf("store bench: --size %d: want 1 byte to 1G", size)
			}
			cfg.Server, cfg.Device, cfg.Mode, cfg.Size = o.server, o.device, mode, int(size)
			res, err := store.Bench(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if asJSON {
				b, err := json.MarshalIndent(res, "", "  ")
				if err != nil {
					return err
				}
				fmt.Fprintln(w, string(b))
				return nil
			}
			fmt.Fprintf(w, "mode %s, %d conns x %d batches of %d x %s in flight\n", res.Mode, res.Conns, res.Depth, res.Batch, units.FormatBytes(int64(res.Size)))
			fmt.Fprintf(w, "%.3f GB in %.2f s: %.3f GB/s, %.0f reads/s, client CPU %.3f s/GB\n",
				float64(res.Bytes)/1e9, res.Seconds, res.GBps, res.ReadsPerSec, res.ClientCPUPerGB)
			return nil
		},
	}
	o.add(cmd)
	f := cmd.Flags()
	f.IntVar(&cfg.Conns, "conns", 1, "clients (QPs)")
	f.IntVar(&cfg.Depth, "depth", 4, "batches in flight per client")
	size = 1 << 20
	f.Var(bytesFlag{&size}, "size", "bytes per range")
	f.IntVar(&cfg.Batch, "batch", 16, "ranges per batch")
	f.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long to read")
	f.Uint64Var(&cfg.Seed, "seed", 1, "seed of the offsets")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}
