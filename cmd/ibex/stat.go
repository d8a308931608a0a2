package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ibex-rdma/ibex/daemon"
	"github.com/ibex-rdma/ibex/metrics"
)

// statOptions are ibex stat's flags.
type statOptions struct {
	Socket string  // --socket: the daemon's ("": IBEX_DAEMON_SOCKET or the default)
	URL    string  // --url: a process's /counters instead of the daemon
	Device string  // -d: only this device
	QP     bool    // --qp: the QPs too
	JSON   bool    // --json
	Watch  float64 // -w: seconds between samples; 0 is one sample
	Count  int     // --count: samples in watch mode; 0 is until interrupted
}

// statTimeout bounds each sample's query.
const statTimeout = 5 * time.Second

func newStatCmd() *cobra.Command {
	var opt statOptions
	cmd := &cobra.Command{
		Use:   "stat [-d DEVICE] [--qp] [--json] [-w SECONDS [--count K]] [--socket PATH | --url URL]",
		Short: "Print port and QP counters under their InfiniBand and rxe names (perfquery, rdma statistic)",
		Long: "Print the counters of the daemon's devices (default) or of a process (--url):\n" +
			"per port the PMA PortCounters and PortCountersExtended as perfquery names them\n" +
			"(PortXmitData and PortRcvData in 4-byte words), then rxe's hw counters as\n" +
			"`rdma statistic` prints them (link udp0/1 sent_pkts N ...), then ibex's own\n" +
			"counters that have no standard name. --qp adds a line per QP, as\n" +
			"`rdma statistic qp show` does (link udp0/1 lqpn N state S pid P sent_pkts N ...).\n" +
			"Package metrics says where each counter comes from.\n\n" +
			"The daemon is the one on --socket (default IBEX_DAEMON_SOCKET or " + daemon.DefaultSocket + ").\n" +
			"--url reads the JSON snapshot a process serves (http://HOST:PORT/counters).\n\n" +
			"-w N samples every N seconds (fractions allowed) and, after the first sample,\n" +
			"prints what changed since the previous one: the delta and the rate per second,\n" +
			"until interrupted or --count samples. With --json each sample is one line of\n" +
			"JSON (the snapshot itself).\n\n" +
			"Examples:\n" +
			"  ibex stat\n" +
			"  ibex stat -d udp0 --qp\n" +
			"  ibex stat -w 1\n" +
			"  ibex stat --url http://127.0.0.1:9464/counters --json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opt.Count != 0 && opt.Watch == 0 {
				return errors.New("--count counts the samples of -w: give -w too")
			}
			if opt.Watch < 0 || opt.Count < 0 {
				return fmt.Errorf("-w %v, --count %d: want positive numbers", opt.Watch, opt.Count)
			}
			if opt.URL != "" && cmd.Flags().Changed("socket") {
				return errors.New("--url and --socket name two sources: give one")
			}
			return runStat(cmd.Context(), cmd.OutOrStdout(), opt)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opt.Socket, "socket", "", "the daemon's socket (default IBEX_DAEMON_SOCKET or "+daemon.DefaultSocket+")")
	f.StringVar(&opt.URL, "url", "", "read a process's counters from its JSON snapshot, e.g. http://127.0.0.1:9464/counters")
	f.StringVarP(&opt.Device, "ib-dev", "d", "", "only this device (default all)")
	f.BoolVar(&opt.QP, "qp", false, "also print each QP's counters")
	f.BoolVar(&opt.JSON, "json", false, "print the snapshot as JSON")
	f.Float64VarP(&opt.Watch, "watch", "w", 0, "sample every SECONDS and print the changes and rates")
	f.IntVar(&opt.Count, "count", 0, "with -w, stop after this many samples (default: until interrupted)")
	return cmd
}

// runStat takes one sample, or with opt.Watch one every opt.Watch seconds,
// and prints them.
func runStat(ctx context.Context, w io.Writer, opt statOptions) error {
	prev, err := statSample(ctx, opt)
	if err != nil {
		return err
	}
	if opt.JSON && opt.Watch == 0 {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(prev)
	}
	if opt.JSON {
		err = json.NewEncoder(w).Encode(prev)
	} else {
		err = writeStat(w, prev, opt.QP)
	}
	if err != nil || opt.Watch == 0 {
		return err
	}
	tick := time.NewTicker(time.Duration(opt.Watch * float64(time.Second)))
	defer tick.Stop()
	for n := 1; opt.Count == 0 || n < opt.Count; n++ {
		select {
		case <-ctx.Done():
			return nil // interrupted: the samples so far are the output
		case <-tick.C:
		}
		cur, err := statSample(ctx, opt)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if opt.JSON {
			err = json.NewEncoder(w).Encode(cur)
		} else {
			err = writeStatDelta(w, prev, cur, opt.QP)
		}
		if err != nil {
			return err
		}
		prev = cur
	}
	return nil
}

// statSample takes a snapshot from the source opt names, filtered by
// opt.Device.
func statSample(ctx context.Context, opt statOptions) (metrics.Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, statTimeout)
	defer cancel()
	var s metrics.Snapshot
	var err error
	if opt.URL != "" {
		s, err = fetchSnapshot(ctx, opt.URL)
	} else {
		s, err = metrics.Daemon(ctx, opt.Socket)
		if err != nil {
			err = fmt.Errorf("%w; a process's counters: --url http://HOST:PORT/counters", err)
		}
	}
	if err != nil || opt.Device == "" {
		return s, err
	}
	var devs []string
	ports := s.Ports[:0:0]
	for _, p := range s.Ports {
		if !slices.Contains(devs, p.Device) {
			devs = append(devs, p.Device)
		}
		if p.Device == opt.Device {
			ports = append(ports, p)
		}
	}
	if len(ports) == 0 {
		return s, fmt.Errorf("device %q not found in %s (devices: %s)", opt.Device, s.Source, strings.Join(devs, ", "))
	}
	s.Ports = ports
	s.QPs = slices.DeleteFunc(s.QPs, func(q metrics.QP) bool { return q.Device != opt.Device })
	return s, nil
}

// fetchSnapshot reads the JSON snapshot a process serves at url
// (json.Marshal of a metrics.Snapshot).
func fetchSnapshot(ctx context.Context, url string) (metrics.Snapshot, error) {
	var s metrics.Snapshot
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return s, fmt.Errorf("--url %s: %w", url, err)
	}
	req.Header.Set("Accept", "application/json")
	req.Close = true // one request a sample: no idle connection left behind
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s, fmt.Errorf("--url: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return s, fmt.Errorf("--url %s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return s, fmt.Errorf("--url %s: not a counters snapshot: %w", url, err)
	}
	return s, nil
}

// dotted is perfquery's line: the name, dots to column 33, the value.
func dotted(name, value string) string {
	return name + ":" + strings.Repeat(".", max(33-len(name)-1, 1)) + value
}

// writeStat prints a snapshot: per port the PMA counters perfquery's way,
// the hw counters and the others `rdma statistic`'s way; with qps a line
// per QP.
func writeStat(w io.Writer, s metrics.Snapshot, qps bool) error {
	var b strings.Builder
	if len(s.Ports) == 0 {
		fmt.Fprintf(&b, "# %s: no device open\n", s.Source)
	}
	for _, p := range s.Ports {
		fmt.Fprintf(&b, "# Port counters: %s port %d (%s, %s)\n", p.Device, p.Port, s.Source, s.Time.Format(time.RFC3339))
		for _, c := range p.PMA {
			fmt.Fprintln(&b, dotted(c.Name, fmt.Sprint(c.Value)))
		}
		fmt.Fprintf(&b, "link %s/%d%s\n", p.Device, p.Port, counterList(p.HW))
		if len(p.Extra) > 0 {
			fmt.Fprintf(&b, "link %s/%d%s\n", p.Device, p.Port, counterList(p.Extra))
		}
	}
	if qps {
		for _, q := range s.QPs {
			fmt.Fprintf(&b, "%s%s%s\n", qpPrefix(q), counterList(q.HW), counterList(q.Extra))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// qpPrefix is `rdma statistic qp show`'s start of a QP's line. ibex
// devices have one port.
func qpPrefix(q metrics.QP) string {
	s := fmt.Sprintf("link %s/1 lqpn %d state %s", q.Device, q.QPN, q.State)
	if q.PID != 0 {
		s += fmt.Sprintf(" pid %d", q.PID)
	}
	return s
}

func counterList(l []metrics.Counter) string {
	var b strings.Builder
	for _, c := range l {
		fmt.Fprintf(&b, " %s %d", c.Name, c.Value)
	}
	return b.String()
}

// writeStatDelta prints what changed from prev to cur: per port a header
// with the interval, the changed PMA counters perfquery's way and the
// changed others on a link line, each as +delta (rate/s); with qps a line
// per QP that changed (a QP new since prev counts from 0).
func writeStatDelta(w io.Writer, prev, cur metrics.Snapshot, qps bool) error {
	secs := cur.Time.Sub(prev.Time).Seconds()
	var b strings.Builder
	for _, p := range cur.Ports {
		was, _ := prev.Port(p.Device, p.Port)
		fmt.Fprintf(&b, "# %s port %d: %.2f s since the previous sample (delta, rate/s)\n", p.Device, p.Port, secs)
		changed := false
		for _, c := range p.PMA {
			if d, ok := delta(c, was.Value); ok {
				fmt.Fprintln(&b, dotted(c.Name, d.format(secs)))
				changed = true
			}
		}
		var line strings.Builder
		for _, c := range slices.Concat(p.HW, p.Extra) {
			if d, ok := delta(c, was.Value); ok {
				fmt.Fprintf(&line, " %s %s", c.Name, d.format(secs))
			}
		}
		if line.Len() > 0 {
			fmt.Fprintf(&b, "link %s/%d%s\n", p.Device, p.Port, line.String())
			changed = true
		}
		if !changed {
			b.WriteString("no change\n")
		}
	}
	if qps {
		for _, q := range cur.QPs {
			var was metrics.QP
			for _, o := range prev.QPs {
				if o.Device == q.Device && o.QPN == q.QPN && o.PID == q.PID {
					was = o
				}
			}
			var line strings.Builder
			for _, c := range slices.Concat(q.HW, q.Extra) {
				if d, ok := delta(c, was.Value); ok {
					fmt.Fprintf(&line, " %s %s", c.Name, d.format(secs))
				}
			}
			if line.Len() > 0 {
				fmt.Fprintf(&b, "%s%s\n", qpPrefix(q), line.String())
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// change is a counter's change between two samples; negative when it went
// backwards (a restarted daemon, a process that detached).
type change int64

func delta(c metrics.Counter, prev func(string) (uint64, bool)) (change, bool) {
	p, _ := prev(c.Name)
	d := change(c.Value - p)
	return d, d != 0
}

func (d change) format(secs float64) string {
	if secs <= 0 {
		return fmt.Sprintf("%+d", d)
	}
	return fmt.Sprintf("%+d (%.1f/s)", d, float64(d)/secs)
}
