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
	"github.com/ibex-rdma/ibex/verbs"
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
	// The device first: a bad -d or a device that cannot start (udp0's
	// bind) fails here, before the server is contacted.
	vc, err := openDevice(cfg.Device)
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
		_ = vc.Close()
		return nil, fmt.Errorf("perf: connect to the server at %s: %w", addr, err)
	}
	defer conn.Close()
	return (&session{cfg: cfg, conn: conn, vc: vc}).do(ctx, opt)
}

// Serve is the server: it opens the device, prints perftest's "Waiting
// for client to connect..." and serves one client on cfg.Port, as
// ib_write_bw does; with cfg.ServeForever it serves one client after
// another until ctx ends, and a failed client is reported on opt.Err
// while the server goes on.
func Serve(ctx context.Context, cfg Config, opt Options, report func([]Result) error) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	// The device first, and kept open for the first client: a bad -d or a
	// device that cannot start (udp0's bind) fails now, not when a client
	// comes.
	vc, err := openDevice(cfg.Device)
	if err != nil {
		return err
	}
	defer func() {
		if vc != nil {
			_ = vc.Close()
		}
	}()
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
		fmt.Fprint(opt.out(), waitBanner)
		conn, err := l.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("perf: accept: %w", err)
		}
		if vc == nil {
			if vc, err = openDevice(cfg.Device); err != nil {
				_ = conn.Close()
				return err
			}
		}
		s := &session{cfg: cfg, conn: conn, server: true, vc: vc}
		vc = nil // the session closes it
		results, err := s.do(ctx, opt)
		_ = conn.Close()
		if err != nil {
			if !cfg.ServeForever {
				return fmt.Errorf("perf: client %v: %w", conn.RemoteAddr(), err)
			}
			fmt.Fprintf(errOut, "perf: client failed: %v\n", err)
			continue
		}
		if report != nil {
			if err := report(results); err != nil {
				return err
			}
		}
		if !cfg.ServeForever {
			return nil
		}
	}
}

// waitBanner is what perftest's servers print before they accept.
const waitBanner = "\n************************************\n* Waiting for client to connect... *\n************************************\n"

// openDevice opens the -d device ("" is DefaultDevice).
func openDevice(name string) (*verbs.Context, error) {
	if name == "" {
		var err error
		if name, err = DefaultDevice(); err != nil {
			return nil, err
		}
	}
	vc, err := verbs.Open(name)
	if err != nil {
		return nil, fmt.Errorf("perf: -d %s: %w", name, err)
	}
	return vc, nil
}

// params are this end's part of the handshake.
func (s *session) params(mtu int) oob.Params {
	c := s.cfg
	t := oob.Test{Name: c.Test.String(), Size: uint64(c.Size), AllSizes: c.All, Iters: uint64(c.Iters),
		Duration: int(c.Duration / time.Second), QPs: c.QPs, Device: s.vc.Name(), Gbits: c.Gbits, Duplex: c.Duplex}
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
	mtu := s.port.ActiveMTU.Bytes()
	if cfg.MTU != 0 {
		mtu = min(mtu, cfg.MTU)
	}
	local := s.params(mtu)
	hctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	remote, err := s.conn.Handshake(hctx, local)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("perf: handshake with %v: %w", s.conn.RemoteAddr(), err)
	}
	s.peerIbex = remote.Ibex
	peerGbits := remote.Ibex && remote.Test.Gbits
	np := oob.Negotiate(local, remote)
	mtu = np.MTU
	if err := s.setup(ctx, np); err != nil {
		return nil, err
	}
	w := opt.out()
	writeHeader(w, headerInfo{test: cfg.Test, device: s.vc.Name(), qps: cfg.QPs, txDepth: cfg.TxDepth, cqMod: cfg.CQMod, postList: cfg.PostList, inline: cfg.Inline,
		mtu: mtu, linkLayer: s.port.LinkLayer, events: cfg.Events, local: s.local, remote: s.remote})
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
	var both [][2]Result // -b: this end's and the peer's report of each size
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
			last = oob.Report{Size: uint64(r.Bytes), Iters: uint64(r.Iters), BWPeak: r.BWPeak, BWAvg: r.BWAvg, MsgRateAvg: r.MsgRate}
			if !cfg.Duplex {
				print(r)
			}
		}
		// A passive server waits here while the client runs: no deadline
		// but the client's (its death closes the socket).
		ectx, cancel := ctx, context.CancelFunc(func() {})
		if !s.server {
			ectx, cancel = s.deadline(ctx)
		}
		rem, exchanged, err := s.conn.EndRun(ectx, last)
		cancel()
		if err != nil {
			return results, fmt.Errorf("perf: after size %d: %w", size, err)
		}
		if ok && cfg.Duplex {
			// -b: each end prints the sum of both directions, as
			// perftest's print_full_bw_report(my, rem).
			if !exchanged {
				return results, fmt.Errorf("perf: after size %d: no report from the peer of a bidirectional test", size)
			}
			conv := bwConversion(peerGbits, cfg.Gbits)
			peer := Result{Test: r.Test, Bytes: int(rem.Size), Iters: int(rem.Iters), BWPeak: rem.BWPeak * conv,
				BWAvg: rem.BWAvg * conv, MsgRate: rem.MsgRateAvg, Unit: r.Unit}
			local := r
			r.BWPeak, r.BWAvg, r.MsgRate = r.BWPeak+peer.BWPeak, r.BWAvg+peer.BWAvg, r.MsgRate+peer.MsgRate
			print(r)
			both = append(both, [2]Result{local, peer})
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
		// perftest's server prints the client's figures as they come,
		// in the client's unit under its own header; an ibex client says
		// its unit, and the figures are converted to this end's.
		r := Result{Test: cfg.Test.String(), Bytes: int(rep.Size), Iters: int(rep.Iters), BWPeak: rep.BWPeak,
			BWAvg: rep.BWAvg, MsgRate: rep.MsgRateAvg, Unit: unit(cfg.Gbits)}
		if conv := bwConversion(peerGbits, cfg.Gbits); conv != 1 {
			r.BWPeak, r.BWAvg = r.BWPeak*conv, r.BWAvg*conv
		}
		if passive && len(cfg.sizes()) == 1 {
			r.setCPU(use)
		}
		print(r)
	}
	fmt.Fprintln(w, rule)
	if cfg.ReportBoth && len(both) == 1 {
		// perftest's --report-both (regular runs, not -a).
		for i, title := range []string{"Local", "Remote"} {
			fmt.Fprintf(w, "\n %s results: \n", title)
			fmt.Fprintln(w, rule)
			writeColumns(w, cfg.Test, cfg.Gbits)
			writeResult(w, cfg.Test, both[0][i])
			fmt.Fprintln(w, rule)
		}
	}
	for _, r := range results {
		writeCPU(w, r)
	}
	return results, nil
}

// bwConversion is the factor from the peer's bandwidth unit to ours.
func bwConversion(peerGbits, gbits bool) float64 {
	const gbPerMiB = float64(1<<20) * 8 / 1e9 // 1 MiB/s in Gb/s
	switch {
	case peerGbits && !gbits:
		return 1 / gbPerMiB
	case !peerGbits && gbits:
		return gbPerMiB
	}
	return 1
}

func unit(gbits bool) string {
	if gbits {
		return "Gb/sec"
	}
	return "MiB/sec"
}
