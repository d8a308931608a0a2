package udp

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/ibex-rdma/ibex/verbs"
)

// Captures: a device's RoCEv2 traffic as pcap that Wireshark decodes.
//
// A capture is a ring of fixed slots (CaptureConfig.Packets packets of
// Snaplen bytes, allocated when it starts) that the device's loop fills
// with every datagram it sends and receives, each as an Ethernet frame
// (capture_tap.go says how the headers are made); when the ring is full
// the oldest packet is overwritten and counted. The data path pays one
// atomic load per batch when no capture runs, and allocates nothing
// either way. One capture per device at a time: StartCapture (ibexd's
// capture op, `ibex capture`) or IBEX_CAPTURE.
//
// IBEX_CAPTURE=FILE captures every device the process starts and writes
// it to FILE when the device stops (its last context closes) and on
// SIGUSR1 while one runs; the first device the process captures writes
// FILE, a later one FILE with "-<device>" before its extension, and
// "{dev}" in FILE is replaced by the device's name. IBEX_CAPTURE_PACKETS
// and IBEX_CAPTURE_SNAPLEN size the ring. The ring of a device that stops
// is kept: the device's next start in the process goes on filling it.

// Capture defaults and limits.
const (
	DefaultCapturePackets = 65536 // ring slots
	DefaultCaptureSnaplen = 256   // bytes kept of each frame: every header, the start of the payload
	MaxCaptureBytes       = 1 << 30
)

// CaptureConfig configures StartCapture. The zero value is the default.
type CaptureConfig struct {
	// Packets is how many packets the ring keeps: the newest (0:
	// DefaultCapturePackets).
	Packets int
	// Snaplen is how many bytes of each frame, headers included, are kept
	// (0: DefaultCaptureSnaplen; at least 74, which holds every header
	// through the BTH over IPv6; more than a frame's 4,286 bytes keeps
	// whole frames). Packets*Snaplen is at most MaxCaptureBytes.
	Snaplen int
	// Count stops the capture after this many packets: Done is closed
	// then (0: no limit).
	Count int
}

// validate applies the defaults and names a bad field.
func (c *CaptureConfig) validate() error {
	if c.Packets == 0 {
		c.Packets = DefaultCapturePackets
	}
	if c.Snaplen == 0 {
		c.Snaplen = DefaultCaptureSnaplen
	}
	switch {
	case c.Packets < 0:
		return fmt.Errorf("packets %d: negative: %w", c.Packets, verbs.ErrInvalidArgument)
	case c.Snaplen < capMinSnap:
		return fmt.Errorf("snaplen %d: fewer than the %d bytes of the headers: %w", c.Snaplen, capMinSnap, verbs.ErrInvalidArgument)
	case c.Count < 0:
		return fmt.Errorf("count %d: negative: %w", c.Count, verbs.ErrInvalidArgument)
	case int64(c.Packets)*int64(min(c.Snaplen, capMaxFrame)) > MaxCaptureBytes:
		return fmt.Errorf("packets %d of snaplen %d: more than %d bytes: %w", c.Packets, c.Snaplen, MaxCaptureBytes, verbs.ErrLimit)
	}
	return nil
}

// CaptureStats are a capture's counts.
type CaptureStats struct {
	Seen        uint64 // packets recorded, the overwritten ones included
	Kept        int    // packets in the ring: what WriteTo writes
	Overwritten uint64 // the oldest packets overwritten by newer ones: Seen-Kept
	Missed      uint64 // packets not recorded because WriteTo held the ring
}

// Capture is one capture of a device: from StartCapture to Stop, whether
// the device runs meanwhile or not.
type Capture struct {
	dev string
	t   *tap
	env string // IBEX_CAPTURE's file for this device ("": StartCapture's)
}

// captures holds the capture of each device name. Lock order: prov.mu,
// then captures.mu, then a tap's mu.
var captures = struct {
	mu    sync.Mutex
	byDev map[string]*Capture
	envN  int            // IBEX_CAPTURE captures made
	live  int            // devices with an IBEX_CAPTURE capture that run: SIGUSR1 is handled while > 0
	sig   chan os.Signal // SIGUSR1 (nil while not handled)
	quit  chan struct{}  // ends the SIGUSR1 goroutine
}{byDev: map[string]*Capture{}}

// StartCapture starts capturing device: now if it runs in this process,
// else from when it starts. A device is captured by one capture at a time.
func StartCapture(device string, cfg CaptureConfig) (*Capture, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("udp: capture %s: %w", device, err)
	}
	prov.mu.Lock()
	defer prov.mu.Unlock()
	if _, ok := prov.conf[device]; !ok {
		return nil, fmt.Errorf("udp: capture %s: %w", device, verbs.ErrNoDevice)
	}
	captures.mu.Lock()
	defer captures.mu.Unlock()
	if old := captures.byDev[device]; old != nil {
		if old.env != "" {
			return nil, fmt.Errorf("udp: capture %s: already captured to %s (IBEX_CAPTURE): %w", device, old.env, verbs.ErrBusy)
		}
		return nil, fmt.Errorf("udp: capture %s: already being captured: %w", device, verbs.ErrBusy)
	}
	c := &Capture{dev: device, t: newTap(cfg)}
	captures.byDev[device] = c
	if d := prov.live[device]; d != nil {
		c.t.attach(d)
	}
	return c, nil
}

// Done is closed when Count packets have been captured.
func (c *Capture) Done() <-chan struct{} { return c.t.done }

// Stats returns the counts so far.
func (c *Capture) Stats() CaptureStats {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	return c.t.stats()
}

// Stop ends the capture; the ring stays for WriteTo. Safe to call twice.
func (c *Capture) Stop() CaptureStats {
	prov.mu.Lock()
	captures.mu.Lock()
	if captures.byDev[c.dev] == c {
		delete(captures.byDev, c.dev)
	}
	if d := prov.live[c.dev]; d != nil {
		d.tx.tap.CompareAndSwap(c.t, nil)
	}
	captures.mu.Unlock()
	prov.mu.Unlock()
	// A pass that loaded the tap before the swap may still record: it
	// holds the tap's lock, and after this it records nothing.
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	c.t.stopped = true
	return c.t.stats()
}

// WriteTo writes the packets in the ring, oldest first, to w as a classic
// pcap (LINKTYPE_ETHERNET, nanosecond timestamps). On a capture that
// runs, the packets of the batches that come meanwhile are missed.
func (c *Capture) WriteTo(w io.Writer) (int64, error) { return c.t.writeTo(w) }

// captureStarted attaches the capture of d's name, if any: StartCapture's
// or, if IBEX_CAPTURE is set, a new one (d starts: no pass runs yet).
func (d *device) captureStarted() {
	captures.mu.Lock()
	defer captures.mu.Unlock()
	c := captures.byDev[d.name]
	if c == nil {
		if c = envCapture(d.name); c == nil {
			return
		}
		captures.byDev[d.name] = c
	}
	c.t.attach(d)
	if c.env != "" {
		if captures.live++; captures.live == 1 {
			handleSIGUSR1()
		}
	}
}

// captureStopped detaches d's capture once its loop has stopped (no pass
// runs again) and writes an IBEX_CAPTURE capture's file. Safe to call
// twice.
func (d *device) captureStopped() {
	t := d.tx.tap.Swap(nil)
	if t == nil {
		return
	}
	captures.mu.Lock()
	c := captures.byDev[d.name]
	if c == nil || c.t != t || c.env == "" {
		captures.mu.Unlock()
		return
	}
	if captures.live--; captures.live == 0 {
		signal.Stop(captures.sig)
		close(captures.quit)
		captures.sig, captures.quit = nil, nil
	}
	captures.mu.Unlock()
	c.writeEnv()
}

// envCapture is the capture IBEX_CAPTURE asks for device name, or nil.
// Bad sizes are said on stderr and replaced by the defaults.
func envCapture(name string) *Capture {
	file := os.Getenv("IBEX_CAPTURE")
	if file == "" {
		return nil
	}
	var cfg CaptureConfig
	for _, e := range []struct {
		name string
		v    *int
	}{{"IBEX_CAPTURE_PACKETS", &cfg.Packets}, {"IBEX_CAPTURE_SNAPLEN", &cfg.Snaplen}} {
		if s := os.Getenv(e.name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n <= 0 {
				fmt.Fprintf(os.Stderr, "ibex: %s=%q ignored: not a positive number\n", e.name, s)
				continue
			}
			*e.v = n
		}
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintf(os.Stderr, "ibex: IBEX_CAPTURE for %s: %v; capturing with the defaults\n", name, err)
		cfg = CaptureConfig{}
		_ = cfg.validate()
	}
	switch {
	case strings.Contains(file, "{dev}"):
		file = strings.ReplaceAll(file, "{dev}", name)
	case captures.envN > 0:
		ext := filepath.Ext(file)
		file = strings.TrimSuffix(file, ext) + "-" + name + ext
	}
	captures.envN++
	return &Capture{dev: name, t: newTap(cfg), env: file}
}

// writeEnv writes an IBEX_CAPTURE capture to its file, saying on stderr
// how many packets (or what failed).
func (c *Capture) writeEnv() {
	f, err := os.Create(c.env)
	if err == nil {
		_, err = c.WriteTo(f)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "ibex: IBEX_CAPTURE: %s: %v\n", c.dev, err)
		return
	}
	st := c.Stats()
	fmt.Fprintf(os.Stderr, "ibex: IBEX_CAPTURE: %s: %d packets written to %s (%d overwritten by the ring, %d missed)\n",
		c.dev, st.Kept, c.env, st.Overwritten, st.Missed)
}

// handleSIGUSR1 writes every IBEX_CAPTURE capture's file on SIGUSR1 until
// the last captured device stops (captures.mu held).
func handleSIGUSR1() {
	sig, quit := make(chan os.Signal, 1), make(chan struct{})
	signal.Notify(sig, syscall.SIGUSR1)
	captures.sig, captures.quit = sig, quit
	go func() {
		for {
			select {
			case <-sig:
				captures.mu.Lock()
				var cs []*Capture
				for _, c := range captures.byDev {
					if c.env != "" {
						cs = append(cs, c)
					}
				}
				captures.mu.Unlock()
				for _, c := range cs {
					c.writeEnv()
				}
			case <-quit:
				return
			}
		}
	}()
}
