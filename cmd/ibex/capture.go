package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/ibex-rdma/ibex/daemon"
	"github.com/ibex-rdma/ibex/provider/ibexd"
	"github.com/ibex-rdma/ibex/provider/udp"
)

// captureOptions are `ibex capture`'s flags.
type captureOptions struct {
	Device  string
	File    string
	Count   int
	Seconds int
	Ring    int
	Snaplen int
	Socket  string
}

func newCaptureCmd() *cobra.Command {
	opt := captureOptions{Device: udp.DefaultDevice}
	cmd := &cobra.Command{
		Use:   "capture -d DEVICE -w FILE [-c COUNT] [-G SECONDS] [--ring N] [--snaplen N]",
		Short: "Capture a daemon device's RoCEv2 traffic into a pcap file (Wireshark, tshark)",
		Long: "Ask the running ibexd to capture every packet its device sends and receives,\n" +
			"until COUNT packets (-c), SECONDS (-G) or Ctrl-C, and write them to FILE as\n" +
			"pcap (Ethernet frames, nanosecond timestamps) that Wireshark and tshark decode\n" +
			"as RoCEv2 (InfiniBand over UDP 4791). The daemon keeps the newest packets in a\n" +
			"ring of --ring packets (default 65536, or COUNT if larger) of --snaplen bytes\n" +
			"(default 256: every header and the start of the payload; 4286 keeps whole\n" +
			"packets) and writes it when the capture ends; older ones are overwritten, and\n" +
			"counted. FILE is opened here, with this user's rights (- is standard output),\n" +
			"and handed to the daemon; only root or the daemon's user may capture.\n\n" +
			"Without a daemon, capture a program's own devices with IBEX_CAPTURE=FILE in\n" +
			"its environment (IBEX_CAPTURE_PACKETS, IBEX_CAPTURE_SNAPLEN size the ring):\n" +
			"the file is written when the device closes, and on SIGUSR1.",
		Example: "  ibex capture -d udp0 -w roce.pcap -c 1000\n" +
			"  ibex capture -d udp0 -w roce.pcap -G 10 --snaplen 4286\n" +
			"  tshark -r roce.pcap\n" +
			"  IBEX_CAPTURE=perf.pcap ibex perf write_bw -d udp0 ...",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			return runCapture(cmd.Context(), cmd.ErrOrStderr(), opt, f.Changed("count"), f.Changed("seconds"), f.Changed("ring"))
		},
	}
	f := cmd.Flags()
	f.StringVarP(&opt.Device, "device", "d", opt.Device, "the daemon's device to capture")
	f.StringVarP(&opt.File, "write", "w", "", "pcap file to write (- for standard output)")
	f.IntVarP(&opt.Count, "count", "c", 0, "stop after this many packets")
	f.IntVarP(&opt.Seconds, "seconds", "G", 0, "stop after this many seconds")
	f.IntVar(&opt.Ring, "ring", udp.DefaultCapturePackets, "packets the daemon keeps: the newest")
	f.IntVar(&opt.Snaplen, "snaplen", udp.DefaultCaptureSnaplen, "bytes kept of each packet, headers included (at least 74)")
	f.StringVar(&opt.Socket, "socket", "", "the daemon's socket (default IBEX_DAEMON_SOCKET or "+daemon.DefaultSocket+")")
	return cmd
}

// runCapture runs a capture; the counts go to log (stderr: FILE may be
// standard output).
func runCapture(ctx context.Context, log io.Writer, opt captureOptions, count, seconds, ring bool) error {
	switch {
	case opt.File == "":
		return errors.New("capture: -w FILE is required (- for standard output)")
	case count && opt.Count <= 0:
		return fmt.Errorf("capture: -c %d: the packet count must be positive", opt.Count)
	case seconds && opt.Seconds <= 0:
		return fmt.Errorf("capture: -G %d: the duration must be positive", opt.Seconds)
	case opt.Ring <= 0:
		return fmt.Errorf("capture: --ring %d: must be positive", opt.Ring)
	}
	if count && !ring && opt.Count > opt.Ring {
		opt.Ring = opt.Count // keep every packet asked for
	}
	if opt.Socket == "" {
		opt.Socket = ibexd.SocketPath()
	}
	st, err := ibexd.QueryStatus(opt.Socket, 5*time.Second)
	if err != nil {
		return fmt.Errorf("capture: no daemon answers on %s (%v): ibex capture captures a daemon's device; "+
			"start `ibex daemon`, or capture a program's own devices with IBEX_CAPTURE=FILE", opt.Socket, err)
	}
	var names []string
	for _, d := range st.Devices {
		names = append(names, d.Name)
	}
	if !slices.Contains(names, opt.Device) {
		return fmt.Errorf("capture: the daemon (pid %d, %s) has no device %q; it owns %v", st.PID, opt.Socket, opt.Device, names)
	}

	out, created := os.Stdout, false
	if opt.File != "-" {
		_, statErr := os.Lstat(opt.File)
		if out, err = os.OpenFile(opt.File, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600); err != nil {
			return fmt.Errorf("capture: %w", err)
		}
		created = errors.Is(statErr, os.ErrNotExist)
		defer out.Close()
	}
	if seconds {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(opt.Seconds)*time.Second)
		defer cancel()
	}
	res, err := daemon.Capture(ctx, daemon.CaptureOptions{Socket: opt.Socket, Device: opt.Device, Out: out,
		Packets: opt.Ring, Snaplen: opt.Snaplen, Count: opt.Count}, func(r daemon.CaptureResult) {
		fmt.Fprintf(log, "ibex capture: capturing %s on ibexd pid %d (%s): a ring of %d packets of %d bytes; Ctrl-C stops\n",
			opt.Device, r.DaemonPID, opt.Socket, r.Packets, r.Snaplen)
	})
	if err == nil && out != os.Stdout {
		err = out.Close()
	}
	if err != nil {
		if created {
			_ = os.Remove(opt.File)
		}
		return err
	}
	name := opt.File
	if name == "-" {
		name = "standard output"
	}
	fmt.Fprintf(log, "ibex capture: %d packets written to %s (%d captured, %d overwritten by the ring, %d missed)\n",
		res.Written, name, res.Seen, res.Overwritten, res.Missed)
	return nil
}
