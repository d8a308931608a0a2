package daemon

import (
	"context"
	"errors"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/ibex-rdma/ibex/metrics"
	"github.com/ibex-rdma/ibex/metrics/prom"
)

// Snapshot is the daemon's counters: its status (what `ibex daemon
// status` shows) as package metrics maps it, every device's port and
// every attached process's QPs with its PID. It takes the control-path
// locks Status takes, never an engine's.
func (d *Daemon) Snapshot() (metrics.Snapshot, error) {
	return metrics.FromStatus(d.Status()), nil
}

// ServeMetrics serves the daemon's counters to Prometheus (/metrics, with
// node_exporter's infiniband names, and /counters as JSON: package
// metrics/prom) on Config.Metrics until ctx ends; with no address it does
// nothing and returns nil, nil. An address in use is retried for up to
// wait: after a takeover the old daemon holds it until it exits.
func (d *Daemon) ServeMetrics(ctx context.Context, wait time.Duration) (*prom.Server, error) {
	if d.cfg.Metrics == "" {
		return nil, nil
	}
	deadline := time.Now().Add(wait)
	for {
		s, err := prom.Serve(ctx, d.cfg.Metrics, d.Snapshot)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			return s, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// validateMetrics checks the metrics field: empty, or a host:port whose
// port Prometheus can be told (0 would be any free port).
func validateMetrics(v *validator, addr string) {
	if addr == "" {
		return
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		v.bad("metrics", "%q is not host:port; want an address such as 127.0.0.1:9101 or :9101", addr)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		v.bad("metrics", "%q has port %q; want a port in 1..65535, which Prometheus is told to scrape", addr, port)
	}
}
