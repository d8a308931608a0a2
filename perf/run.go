package perf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/ibex-rdma/ibex/perf/oob"
)

// Options say where the report goes. A nil Out prints no report (the
// caller prints JSON); Err receives a server's per-client errors.
type Options struct {
	Out io.Writer
	Err io.Writer
}

func (o Options) out() io.Writer {
	if o.Out == nil {
		return io.Discard
	}
	return o.Out
}

// Run is the client: it connects to cfg.Peer, runs the test (every size
// with -a) and returns the results it printed.
func Run(ctx context.Context, cfg Config, opt Options) ([]Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort(cfg.Peer, strconv.Itoa(cfg.Port))
	// perftest's client tries once; a server that is still starting is
	// given a few seconds.
	var conn *oob.Conn
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		dctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		conn, err = oob.Dial(dctx, addr)
		cancel()
		if err == nil || !errors.Is(err, oob.ErrRefused) || time.Since(start) > min(cfg.Timeout, 3*time.Second) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("perf: connect to the server at %s: %w", addr, err)
	}
	defer conn.Close()
	return (&session{cfg: cfg, conn: conn}).do(ctx, opt)
}

// Serve is the server: it accepts clients on cfg.Port one after another
// and runs the test with each, until ctx ends. A failed client is
// reported on opt.Err and the server goes on.
func Serve(ctx context.Context, cfg Config, opt Options, report func([]Result) error) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	l, err := oob.Listen(net.JoinHostPort("", strconv.Itoa(cfg.Port)))
	if err != nil {
		return fmt.Errorf("perf: listen on port %d: %w", cfg.Port, err)
	}
	defer l.Close()
	errOut := opt.Err
	if errOut == nil {
		errOut = io.Discard
	}
	for {
		conn, err := l.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("perf: accept: %w", err)
		}
		results, err := (&session{cfg: cfg, conn: conn, server: true}).do(ctx, opt)
		_ = conn.Close()
		if err != nil {
			fmt.Fprintf(errOut, "perf: client failed: %v\n", err)
			continue
		}
		if report != nil {
			if err := report(results); err != nil {
				return err
			}
		}
	}
}

// params are this end's part of the handshake.
func (s *session) params(mtu int) oob.Params {
	c := s.cfg
	t := oob.Test{Name: c.Test.String(), Size: uint64(c.Size), AllSizes: c.All, Iters: uint64(c.Iters),
		Duration: int(c.Duration / time.Second), QPs: c.QPs}
	if c.Test.verb() == "atomic" {
		t.AllSizes = false
	}
	return oob.Params{MTU: mtu, Test: t}
}

// do runs a connected session in perftest's phases: handshake, dests,
// connect, ready, each size between StartRun and EndRun, finish.
func (s *session) do(ctx context.Context, opt Options) (results []Result, err error) {
	cfg := s.cfg
	defer func() {
		if cerr := s.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if err := s.open(); err != nil {
		return nil, err
	}
	local := s.params(s.port.ActiveMTU.Bytes())
	hctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	remote, err := s.conn.Handshake(hctx, local)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("perf: handshake with %v: %w", s.conn.RemoteAddr(), err)
	}
	s.peerIbex = remote.Ibex
	mtu := oob.Negotiate(local, remote).MTU
	if err := s.setup(ctx, mtu); err != nil {
		return nil, err
	}
	w := opt.out()
	writeHeader(w, headerInfo{test: cfg.Test, device: s.vc.Name(), qps: cfg.QPs, txDepth: cfg.TxDepth,
		mtu: mtu, linkLayer: s.port.LinkLayer, local: s.local, remote: s.remote})
	printed := false
	print := func(r Result) {
		if !printed {
			writeColumns(w, cfg.Test, cfg.Gbits)
			printed = true
		}
		writeResult(w, cfg.Test, r)
		results = append(results, r)
	}
	var last oob.Report
	// A passive bandwidth server (write_bw, read_bw, atomic_bw) works
	// only through its provider while the client runs, which happens while
	// it waits in the exchanges below: its CPU span is the whole sweep,
	// reported when that is one size.
	passive := s.server && !cfg.Test.Latency() && cfg.Test != SendBW
	sweep := startCPU()
	for _, size := range cfg.sizes() {
		sctx, cancel := s.deadline(ctx)
		err := s.conn.StartRun(sctx)
		cancel()
		if err != nil {
			return results, fmt.Errorf("perf: before size %d: %w", size, err)
		}
		span := startCPU()
		r, ok, err := s.run(ctx, size)
		use := span.used()
		if err != nil {
			return results, err
		}
		if ok {
			if !cfg.Test.Latency() {
				r.setCPU(use)
			}
			print(r)
			last = oob.Report{Size: uint64(r.Bytes), Iters: uint64(r.Iters), BWPeak: r.BWPeak, BWAvg: r.BWAvg, MsgRateAvg: r.MsgRate}
		}
		// A passive server waits here while the client runs: no deadline
		// but the client's (its death closes the socket).
		ectx, cancel := ctx, context.CancelFunc(func() {})
		if !s.server {
			ectx, cancel = s.deadline(ctx)
		}
		_, _, err = s.conn.EndRun(ectx, last)
		cancel()
		if err != nil {
			return results, fmt.Errorf("perf: after size %d: %w", size, err)
		}
	}
	fctx, cancel := ctx, context.CancelFunc(func() {})
	if !s.server {
		fctx, cancel = s.deadline(ctx)
	}
	rep, err := s.conn.Finish(fctx, last)
	cancel()
	use := sweep.used()
	if err != nil {
		return results, fmt.Errorf("perf: end of the test: %w", err)
	}
	if s.server && !printed && !cfg.Test.Latency() && rep.Size > 0 {
		// A passive bandwidth server prints the client's report, as
		// perftest's does.
		r := Result{Test: cfg.Test.String(), Bytes: int(rep.Size), Iters: int(rep.Iters), BWPeak: rep.BWPeak,
			BWAvg: rep.BWAvg, MsgRate: rep.MsgRateAvg, Unit: unit(cfg.Gbits)}
		if passive && len(cfg.sizes()) == 1 {
			r.setCPU(use)
		}
		print(r)
	}
	fmt.Fprintln(w, rule)
	for _, r := range results {
		writeCPU(w, r)
	}
	return results, nil
}

func unit(gbits bool) string {
	if gbits {
		return "Gb/sec"
	}
	return "MiB/sec"
}
