package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ibex-rdma/ibex/internal/ibexdwire"
	"github.com/ibex-rdma/ibex/provider/udp"
	"github.com/ibex-rdma/ibex/verbs"
)

// Captures (`ibex capture`): a connection whose first message is
// ibexdwire.OpCapture asks the daemon to capture one of its devices
// (udp.StartCapture: a ring in the daemon) into a file. The file is opened
// by the asking process and its descriptor passed with captureStart, so the
// daemon writes nothing the asker could not write itself, and never opens
// a path. Only root or the daemon's own uid may capture: the packets carry
// every attached process's data.
//
//	asker                                   daemon
//	Request{Op: capture}               ->
//	captureStart + fd of the file      ->
//	                                   <-   captureReply{Ring...} or {Err}
//	captureStop (Ctrl-C, -G)           ->   (or Count packets, or shutdown)
//	                                   <-   captureReply{Done, counts, Err of the write}
//
// The daemon writes the ring (the newest packets, at most Packets) into
// the file when the capture ends, then answers.

// captureStart is a capture's parameters (udp.CaptureConfig's), sent with
// the output file's descriptor.
type captureStart struct {
	Device  string `json:"device"`
	Packets int    `json:"packets,omitempty"`
	Snaplen int    `json:"snaplen,omitempty"`
	Count   int    `json:"count,omitempty"`
}

// captureStop ends a capture.
type captureStop struct {
	Stop bool `json:"stop"`
}

// captureReply answers captureStart (the ring as started, or Err) and
// ends the capture (Done, with the counts and the write's error if any).
type captureReply struct {
	Err  string `json:"err,omitempty"`
	Code string `json:"code,omitempty"`
	CaptureResult
}

// CaptureResult is what a capture did.
type CaptureResult struct {
	DaemonPID   int    `json:"daemon_pid,omitempty"`
	Packets     int    `json:"packets,omitempty"` // the ring's slots
	Snaplen     int    `json:"snaplen,omitempty"`
	Done        bool   `json:"done,omitempty"`
	Written     int    `json:"written,omitempty"`     // packets written to the file
	Seen        uint64 `json:"seen,omitempty"`        // packets captured
	Overwritten uint64 `json:"overwritten,omitempty"` // the oldest, overwritten in the ring
	Missed      uint64 `json:"missed,omitempty"`
}

// captureTimeout bounds each step of the protocol but the wait for its
// end.
const captureTimeout = 10 * time.Second

// serveCapture serves a capture connection (serveConn's, which closes it).
func (d *Daemon) serveCapture(ctx context.Context, conn *net.UnixConn, req *ibexdwire.Request) {
	fail := func(err error) {
		_ = ibexdwire.Send(conn, &captureReply{Err: "capture: " + err.Error(), Code: ibexdwire.Code(err)})
	}
	if req.Version != ibexdwire.Version {
		fail(fmt.Errorf("protocol version %d, this daemon speaks %d: %w", req.Version, ibexdwire.Version, verbs.ErrUnsupported))
		return
	}
	if uid, ok := peerUID(conn); !ok || (uid != 0 && uid != os.Getuid()) {
		fail(fmt.Errorf("refused to uid %d: only root or uid %d may capture this daemon's traffic", uid, os.Getuid()))
		return
	}
	_ = conn.SetDeadline(time.Now().Add(captureTimeout))
	buf := make([]byte, 4096)
	var cs captureStart
	fds, err := ibexdwire.Recv(conn, buf, &cs)
	if err != nil {
		fail(err)
		return
	}
	if len(fds) != 1 {
		ibexdwire.CloseFDs(fds)
		fail(fmt.Errorf("%d descriptors, want one: the output file: %w", len(fds), verbs.ErrInvalidArgument))
		return
	}
	out := os.NewFile(uintptr(fds[0]), "capture output")
	defer out.Close()
	if err := checkWritable(fds[0]); err != nil {
		fail(err)
		return
	}
	if d.devs[cs.Device] == nil {
		names := make([]string, 0, len(d.devs))
		for n := range d.devs {
			names = append(names, n)
		}
		sort.Strings(names)
		fail(fmt.Errorf("no device %q (this daemon owns %v): %w", cs.Device, names, verbs.ErrInvalidArgument))
		return
	}
	cfg := udp.CaptureConfig{Packets: cs.Packets, Snaplen: cs.Snaplen, Count: cs.Count}
	c, err := udp.StartCapture(cs.Device, cfg)
	if err != nil {
		fail(err)
		return
	}
	defer c.Stop()
	res := CaptureResult{DaemonPID: os.Getpid(), Packets: cfg.Packets, Snaplen: cfg.Snaplen}
	if res.Packets == 0 {
		res.Packets = udp.DefaultCapturePackets
	}
	if res.Snaplen == 0 {
		res.Snaplen = udp.DefaultCaptureSnaplen
	}
	if err := ibexdwire.Send(conn, &captureReply{CaptureResult: res}); err != nil {
		return
	}
	_ = conn.SetDeadline(time.Time{})
	stopped := make(chan struct{})
	go func() {
		// Any message, or the asker gone, stops the capture.
		defer close(stopped)
		var m captureStop
		fds, _ := ibexdwire.Recv(conn, buf, &m)
		ibexdwire.CloseFDs(fds)
	}()
	select {
	case <-c.Done():
	case <-stopped:
	case <-ctx.Done():
	}
	st := c.Stop()
	res.Done, res.Written, res.Seen, res.Overwritten, res.Missed = true, st.Kept, st.Seen, st.Overwritten, st.Missed
	r := &captureReply{CaptureResult: res}
	if _, err := c.WriteTo(out); err != nil {
		r.Err = fmt.Sprintf("capture: writing the file: %v", err)
		r.Written = 0
	}
	_ = conn.SetWriteDeadline(time.Now().Add(captureTimeout))
	_ = ibexdwire.Send(conn, r)
	conn.Close() // ends the reader if the asker is still there
	<-stopped
}

// checkWritable refuses a descriptor not open for writing, or a
// directory.
func checkWritable(fd int) error {
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return fmt.Errorf("output descriptor: %v: %w", err, verbs.ErrInvalidArgument)
	}
	if m := fl & unix.O_ACCMODE; m != unix.O_WRONLY && m != unix.O_RDWR {
		return fmt.Errorf("output descriptor not open for writing: %w", verbs.ErrInvalidArgument)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("output descriptor: %v: %w", err, verbs.ErrInvalidArgument)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fmt.Errorf("output descriptor is a directory: %w", verbs.ErrInvalidArgument)
	}
	return nil
}

// CaptureOptions is a capture of a daemon's device.
type CaptureOptions struct {
	Socket string   // the daemon's socket
	Device string   // one of its devices (udp0)
	Out    *os.File // the file the daemon writes the pcap into: open for writing
	// The ring and the limit, as udp.CaptureConfig (0: its defaults, no
	// limit).
	Packets, Snaplen, Count int
}

// Capture asks the daemon on opt.Socket to capture opt.Device into
// opt.Out until opt.Count packets were captured or ctx ends (then it asks
// the daemon to stop), and waits for the daemon to write the file.
// started, if not nil, is called once the daemon captures.
func Capture(ctx context.Context, opt CaptureOptions, started func(CaptureResult)) (CaptureResult, error) {
	nc, err := net.DialTimeout("unixpacket", opt.Socket, captureTimeout)
	if err != nil {
		return CaptureResult{}, fmt.Errorf("ibexd: %s: %w", opt.Socket, err)
	}
	conn := nc.(*net.UnixConn)
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(captureTimeout))
	if err := ibexdwire.Send(conn, &ibexdwire.Request{ID: 1, Op: ibexdwire.OpCapture, Version: ibexdwire.Version}); err != nil {
		return CaptureResult{}, fmt.Errorf("ibexd: %s: %w", opt.Socket, err)
	}
	cs := captureStart{Device: opt.Device, Packets: opt.Packets, Snaplen: opt.Snaplen, Count: opt.Count}
	if err := ibexdwire.Send(conn, &cs, int(opt.Out.Fd())); err != nil {
		return CaptureResult{}, fmt.Errorf("ibexd: %s: %w", opt.Socket, err)
	}
	buf := make([]byte, 4096)
	r, err := recvCaptureReply(conn, buf)
	if err != nil {
		return CaptureResult{}, err
	}
	if started != nil {
		started(r.CaptureResult)
	}
	_ = conn.SetDeadline(time.Time{})
	done := make(chan error, 1)
	go func() {
		var err error
		r, err = recvCaptureReply(conn, buf)
		done <- err
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = conn.SetDeadline(time.Now().Add(time.Minute)) // the daemon writes the file first
		if err := ibexdwire.Send(conn, &captureStop{Stop: true}); err != nil {
			conn.Close()
			<-done
			return CaptureResult{}, fmt.Errorf("ibexd: capture: asking to stop: %w", err)
		}
		err = <-done
	}
	if err != nil {
		return CaptureResult{}, err
	}
	if !r.Done {
		return r.CaptureResult, errors.New("ibexd: capture: the daemon's last answer is not the end")
	}
	return r.CaptureResult, nil
}

// recvCaptureReply reads a reply; its Err is an error wrapping the
// sentinel its Code names.
func recvCaptureReply(conn *net.UnixConn, buf []byte) (*captureReply, error) {
	var r captureReply
	fds, err := ibexdwire.Recv(conn, buf, &r)
	ibexdwire.CloseFDs(fds)
	if err != nil {
		return nil, fmt.Errorf("ibexd: capture: %w", err)
	}
	if err := (&ibexdwire.Response{Err: r.Err, Code: r.Code}).Error(); err != nil {
		return nil, err
	}
	return &r, nil
}
