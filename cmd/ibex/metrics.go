package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/ibex-rdma/ibex/metrics/prom"
)

// Prometheus metrics (package metrics/prom): `ibex daemon`, `ibex perf`
// and `ibex coll` have a --metrics ADDR flag, whose default is
// IBEX_METRICS; every other command serves this process's counters on
// IBEX_METRICS when it is set (serveMetricsFromEnv, run before each).

// metricsFlagHelp is the --metrics flag's help in perf and coll.
const metricsFlagHelp = "serve this process's counters to Prometheus on host:port (/metrics), e.g. 127.0.0.1:9101; default IBEX_METRICS"

// serveMetricsFromEnv is the root command's PersistentPreRunE: it serves
// on IBEX_METRICS (prom.ServeFromEnv) unless the command, or one it is
// under, has a --metrics flag of its own.
func serveMetricsFromEnv(cmd *cobra.Command, _ []string) error {
	for c := cmd; c != nil; c = c.Parent() {
		if c.Flags().Lookup("metrics") != nil {
			return nil
		}
	}
	_, err := prom.ServeFromEnv(cmd.Context())
	return err
}

// metricsAddr is the address a command's --metrics flag gives, else
// IBEX_METRICS's ("": none).
func metricsAddr(cmd *cobra.Command) string {
	if f := cmd.Flags().Lookup("metrics"); f != nil && f.Changed {
		return f.Value.String()
	}
	return os.Getenv(prom.EnvVar)
}

// serveMetrics serves this process's counters on addr ("": nothing) and
// says where on errOut, as what ("perf", "coll rank 2"); stop ends the
// server and waits for it.
func serveMetrics(ctx context.Context, errOut io.Writer, what, addr string) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	s, err := prom.Serve(ctx, addr, prom.ProcessSource)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("%s: --metrics: %w", what, err)
	}
	fmt.Fprintf(errOut, "ibex %s: metrics on %s\n", what, s.URL())
	return func() {
		cancel()
		_ = s.Wait()
	}, nil
}

// rankMetricsAddr is where rank serves its metrics in a job whose
// --metrics (or IBEX_METRICS) is addr: the port plus the rank, so that
// the ranks on one host do not collide (127.0.0.1:9101 gives rank 0 9101,
// rank 3 9104); port 0 stays 0 (each rank a free port, printed).
func rankMetricsAddr(addr string, rank int) (string, error) {
	if addr == "" {
		return "", nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("coll: --metrics %q: want host:port: %w", addr, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return "", fmt.Errorf("coll: --metrics %q: port %q is not a number in 0..65535", addr, port)
	}
	if n == 0 {
		return addr, nil
	}
	if n+rank > 65535 {
		return "", fmt.Errorf("coll: --metrics %q: rank %d would serve on port %d, beyond 65535", addr, rank, n+rank)
	}
	return net.JoinHostPort(host, strconv.Itoa(n+rank)), nil
}
