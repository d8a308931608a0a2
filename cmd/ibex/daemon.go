package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ibex-rdma/ibex/daemon"
	"github.com/ibex-rdma/ibex/internal/ibexdwire"
	"github.com/ibex-rdma/ibex/metrics/prom"
	"github.com/ibex-rdma/ibex/provider/ibexd"
)

type daemonOptions struct {
	Config   string
	Socket   string
	Cores    []int
	Check    bool
	Takeover bool
	Metrics  string
}

func newDaemonCmd() *cobra.Command {
	var opt daemonOptions
	cmd := &cobra.Command{
		Use:   "daemon [--config FILE] [--socket PATH] [--cores LIST] [--metrics ADDR]",
		Short: "Run ibexd, the host's daemon that owns the devices and runs every process's transport",
		Long: "Run ibexd: one per host. It owns the network devices (udp0, ... on AF_XDP or\n" +
			"a UDP socket) and runs the RC transport of every process attached to it on its\n" +
			"own cores, as a DPU does. Processes attach with no code change: while a daemon\n" +
			"answers on its socket (IBEX_DAEMON_SOCKET, default " + daemon.DefaultSocket + "),\n" +
			"verbs.Open(\"udp0\") and -d udp0 go through it (provider ibexd); with none, they\n" +
			"run in-process. IBEX_DAEMON=off ignores a running daemon.\n\n" +
			"The configuration (YAML: socket, cores, devices, limits, poll, metrics, tenants,\n" +
			"default_tenant) is described in deploy/ibexd.yaml; --socket, --cores and --metrics\n" +
			"override it. Tenants: each attaching process is identified by the kernel (uid, gid,\n" +
			"cgroup) and given the first tenant that matches it, with that tenant's partitions,\n" +
			"quotas (QPs, CQs, MRs, bytes, a send rate) and no way to another tenant's QPs or\n" +
			"keys; with no tenants configured, every process is in one. SIGTERM or SIGINT\n" +
			"stops the daemon: attached processes see their QPs go to ERR, naming the daemon.\n\n" +
			"With --metrics ADDR (or the config's metrics, else IBEX_METRICS), the daemon serves\n" +
			"its devices' and its processes' QPs' counters to Prometheus on http://ADDR/metrics,\n" +
			"under node_exporter's infiniband names, and as JSON on /counters.\n\n" +
			"Examples:\n" +
			"  ibex daemon --config /etc/ibex/ibexd.yaml\n" +
			"  ibex daemon --socket /tmp/ibexd.sock --cores 1\n" +
			"  ibex daemon --metrics :9101          # Prometheus scrapes http://HOST:9101/metrics\n" +
			"  ibex daemon --takeover              # upgrade: the new binary takes over the running daemon\n" +
			"  ibex daemon status",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadDaemonConfig(cmd, opt)
			if err != nil {
				return err
			}
			if opt.Check {
				tenants := "one tenant (none configured)"
				if len(cfg.Tenants) > 0 {
					tenants = fmt.Sprintf("%d tenants", len(cfg.Tenants))
					if cfg.DefaultTenant == "" {
						tenants += ", processes no tenant matches refused"
					} else {
						tenants += ", default " + cfg.DefaultTenant
					}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "config ok: socket %s, %d devices, cores %v, %s\n", cfg.Socket, len(cfg.Devices), cfg.Cores, tenants)
				return nil
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			var d *daemon.Daemon
			if opt.Takeover {
				var took time.Duration
				if d, took, err = daemon.Takeover(cfg); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "ibexd: took over %s in %v\n", d.Socket(), took.Round(time.Microsecond))
			} else if d, err = daemon.New(cfg); err != nil {
				return err
			}
			st := d.Status()
			for _, dv := range st.Devices {
				fmt.Fprintf(cmd.ErrOrStderr(), "ibexd: %s on %s (%s)\n", dv.Name, dv.Address, dv.Mode)
			}
			// After a takeover the old daemon holds the metrics address
			// until it exits; this one serves the processes by then, so
			// an address it still cannot have is reported, not fatal.
			ms, err := d.ServeMetrics(ctx, 5*time.Second)
			switch {
			case err != nil && opt.Takeover:
				fmt.Fprintf(cmd.ErrOrStderr(), "ibexd: serving without metrics: %v\n", err)
			case err != nil:
				_ = d.Close()
				return err
			case ms != nil:
				fmt.Fprintf(cmd.ErrOrStderr(), "ibexd: metrics on %s\n", ms.URL())
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "ibexd: pid %d serving %s\n", os.Getpid(), d.Socket())
			return d.Serve(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opt.Config, "config", "", "configuration file (YAML); default: built-in defaults")
	f.StringVar(&opt.Socket, "socket", "", "unix socket to serve (overrides the config's socket)")
	f.IntSliceVar(&opt.Cores, "cores", nil, "CPUs to run on, e.g. 2,3 (overrides the config's cores)")
	f.BoolVar(&opt.Check, "check", false, "validate the configuration and exit")
	f.StringVar(&opt.Metrics, "metrics", "", "serve Prometheus metrics on this host:port, e.g. :9101 (overrides the config's metrics; default IBEX_METRICS)")
	f.BoolVar(&opt.Takeover, "takeover", false, "take over the daemon serving the socket (an upgrade: its devices, processes and QPs, no connection dropped); it exits once this one serves")
	cmd.AddCommand(newDaemonStatusCmd())
	return cmd
}

func loadDaemonConfig(cmd *cobra.Command, opt daemonOptions) (daemon.Config, error) {
	cfg := daemon.DefaultConfig()
	if opt.Config != "" {
		var err error
		if cfg, err = daemon.LoadConfig(opt.Config); err != nil {
			return cfg, err
		}
	}
	if cmd.Flags().Changed("socket") {
		cfg.Socket = opt.Socket
	}
	if cmd.Flags().Changed("cores") {
		cfg.Cores = opt.Cores
	}
	if cmd.Flags().Changed("metrics") {
		cfg.Metrics = opt.Metrics
	} else if cfg.Metrics == "" {
		cfg.Metrics = os.Getenv(prom.EnvVar)
	}
	return cfg, cfg.Validate()
}

func newDaemonStatusCmd() *cobra.Command {
	var socket string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [--socket PATH] [--json]",
		Short: "List the daemon's devices, attached processes, their QPs and counters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if socket == "" {
				socket = ibexd.SocketPath()
			}
			st, err := ibexd.QueryStatus(socket, 5*time.Second)
			if err != nil {
				return fmt.Errorf("no daemon answers: %w", err)
			}
			if asJSON {
				e := json.NewEncoder(cmd.OutOrStdout())
				e.SetIndent("", "  ")
				return e.Encode(st)
			}
			writeDaemonStatus(cmd.OutOrStdout(), st)
			return nil
		},
	}
	cmd.Flags().StringVar(&socket, "socket", "", "the daemon's socket (default IBEX_DAEMON_SOCKET or "+daemon.DefaultSocket+")")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	return cmd
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func writeDaemonStatus(w io.Writer, st *ibexdwire.Status) {
	fmt.Fprintf(w, "ibexd pid %d on %s, up since %s, cores %v, %d processes attached, %d detached for misbehaving\n",
		st.PID, st.Socket, st.Started, st.Cores, len(st.Clients), st.Detached)
	for _, d := range st.Devices {
		fmt.Fprintf(w, "device %s on %s (%s)\n", d.Name, d.Address, d.Mode)
		var ctrs []string
		for _, c := range d.Counters {
			ctrs = append(ctrs, fmt.Sprintf("%s=%d", c.Name, c.Value))
		}
		if len(ctrs) > 0 {
			fmt.Fprintf(w, "  counters: %s\n", strings.Join(ctrs, " "))
		}
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "PID\tUID\tGID\tTENANT\tDEVICE\tQPS\tCQS\tMRS\tMR_BYTES\tPOSTED\tCOMPLETED\tCGROUP\tCOMMAND")
	for _, c := range st.Clients {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", c.PID, c.UID, c.GID, c.Tenant, c.Device,
			len(c.QPs), c.CQs, c.MRs, c.MRBytes, c.Posted, c.Comps, orDash(c.Cgroup), c.Command)
	}
	tw.Flush()
	if len(st.Tenants) > 0 {
		// Each count with its quota ("3/8"; no quota: the count alone).
		of := func(n, max uint64) string {
			if max == 0 {
				return fmt.Sprint(n)
			}
			return fmt.Sprintf("%d/%d", n, max)
		}
		tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "TENANT\tPROCESSES\tQPS\tCQS\tMRS\tMR_BYTES\tRATE\tHELD")
		for _, t := range st.Tenants {
			rate := "-"
			if t.Rate > 0 {
				rate = fmt.Sprintf("%d B/s (burst %d)", t.Rate, t.Burst)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", t.Name, of(uint64(t.Clients), t.MaxClients), of(t.QPs, t.MaxQPs), of(t.CQs, t.MaxCQs),
				of(t.MRs, t.MaxMRs), of(t.MRBytes, t.MaxMemory), rate, t.Held)
		}
		tw.Flush()
	}
	for _, c := range st.Clients {
		for _, q := range c.QPs {
			fmt.Fprintf(w, "  pid %d qp %#x %s -> %#x sends=%d recvs=%d pkts_sent=%d pkts_recv=%d retransmits=%d",
				c.PID, q.QPN, q.State, q.DestQPN, q.Stats.Sends, q.Stats.Recvs, q.Stats.PktsSent, q.Stats.PktsRecv, q.Stats.Retransmits)
			if q.Err != "" {
				fmt.Fprintf(w, " err=%q", q.Err)
			}
			fmt.Fprintln(w)
		}
	}
}
