// Package perf is ibex's perftest: the eight benchmarks of linux-rdma's
// perftest (ib_write_bw, ib_write_lat, ib_read_bw, ib_read_lat,
// ib_send_bw, ib_send_lat, ib_atomic_bw, ib_atomic_lat) over any verbs
// provider, with perftest's flags, defaults, output and — through
// perf/oob — its out-of-band TCP exchange, so one end may be the real
// perftest.
//
// A server (no peer named) opens its device, listens, serves one client
// and returns, as perftest's do (Config.ServeForever: one client after
// another); a client opens its device, connects, runs the test and prints
// the report. Both open the device before the network, so a bad -d or a
// device that cannot start fails at once on the side that has it.
// Bandwidth tests drive traffic from the client; the server of
// write/read/atomic is passive, as in perftest, and the server of send_bw
// receives and reports too. Latency of SEND and WRITE is half a round
// trip (ping-pong), of READ and atomics a full one.
package perf

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ibex-rdma/ibex/internal/units"
	"github.com/ibex-rdma/ibex/verbs"
)

// Test names one benchmark.
type Test int

// The eight tests.
const (
	WriteBW Test = iota
	WriteLat
	ReadBW
	ReadLat
	SendBW
	SendLat
	AtomicBW
	AtomicLat
)

var testNames = [...]string{"write_bw", "write_lat", "read_bw", "read_lat", "send_bw", "send_lat", "atomic_bw", "atomic_lat"}

func (t Test) String() string {
	if int(t) < len(testNames) {
		return testNames[t]
	}
	return fmt.Sprintf("test(%d)", int(t))
}

// ParseTest accepts write_bw, ib_write_bw, ... .
func ParseTest(s string) (Test, error) {
	s = strings.TrimPrefix(s, "ib_")
	for i, n := range testNames {
		if n == s {
			return Test(i), nil
		}
	}
	return 0, fmt.Errorf("perf: unknown test %q: want one of %s", s, strings.Join(testNames[:], ", "))
}

// Tests lists every test.
func Tests() []Test {
	return []Test{WriteBW, WriteLat, ReadBW, ReadLat, SendBW, SendLat, AtomicBW, AtomicLat}
}

// Latency reports whether t is a latency test.
func (t Test) Latency() bool { return t == WriteLat || t == ReadLat || t == SendLat || t == AtomicLat }

func (t Test) verb() string {
	switch t {
	case WriteBW, WriteLat:
		return "write"
	case ReadBW, ReadLat:
		return "read"
	case SendBW, SendLat:
		return "send"
	}
	return "atomic"
}

// title is perftest's banner line.
func (t Test) title() string {
	kind := "BW"
	if t.Latency() {
		kind = "Latency"
	}
	switch t.verb() {
	case "write":
		return "RDMA_Write " + kind + " Test"
	case "read":
		return "RDMA_Read " + kind + " Test"
	case "send":
		return "Send " + kind + " Test"
	}
	return "Atomic FETCH_AND_ADD " + kind + " Test"
}

// Config is one run's settings: perftest's flags. Zero values take
// perftest's defaults.
type Config struct {
	Test     Test
	Device   string        // -d; "" opens the first device
	Size     int           // -s; default 65536 (bandwidth) or 2 (latency); atomics 8
	Iters    int           // -n; default 5000 (bandwidth) or 1000 (latency)
	All      bool          // -a: sizes 2 B to 8 MiB (atomics: 8 B only)
	Duration time.Duration // -D: run for this long instead of -n iterations
	QPs      int           // -q; default 1
	TxDepth  int           // -t; default 128 (bandwidth) or 1 (latency)
	Port     int           // -p; default 18515
	Gbits    bool          // --report_gbits
	Peer     string        // the server's address: client mode; "" is server mode
	Timeout  time.Duration // bounds connecting and every exchange; default 10 s
	// ServeForever keeps a server serving one client after another;
	// without it the server serves one client and returns, as
	// ib_write_bw does.
	ServeForever bool
	Inline       int // -I: max inline data; WRITE and SEND payloads up to it go inline (default 0)
	MTU          int // -m: MTU in bytes, at most the port's (default the port's)
	QPTimeout    int // -u: local ACK timeout, 4.096 µs × 2^QPTimeout (default 14)
	CQMod        int // -Q: one request in CQMod is signaled (default 100)
	// PostList (-l): bandwidth tests post this many requests per
	// PostSend call (default 1). As perftest: -n a multiple of it, -Q
	// defaults to it, and it must be a multiple of an explicit -Q.
	PostList int
	// Duplex (-b): both ends post and each reports the sum of both
	// directions; bandwidth tests but send_bw. Both ends must set it.
	Duplex bool
	// ReportBoth (--report-both): with Duplex, also print this end's and
	// the peer's results separately.
	ReportBoth bool
	// Events (-e): wait for completions on the completion channel
	// (verbs.CQ.Wait) instead of busy polling, as perftest's ibv_get_cq_event.
	// A write_lat end still spins on memory for the peer's WRITE, as
	// perftest's does: a WRITE completes nothing at its target. Not with
	// Duration (perftest's rule).
	Events bool
}

// Defaults perftest uses.
const (
	DefaultPort    = 18515
	defaultBWSize  = 65536
	defaultLatSize = 2
	defaultBWIters = 5000
	defaultLatIter = 1000
	defaultTx      = 128
	cqMod          = 100
	maxAllSize     = 8 << 20
)

// perftest's limits on -s and -n (perftest 4.5: MIN_ITER, MAX_ITER, and
// UINT_MAX/2 for the size).
const (
	MaxMsgSize = 1<<31 - 1
	MinIters   = 5
	MaxIters   = 100000000
)

// ParseSize reads -s as perftest's parser does: strtol with base 0
// (decimal, 0x hex, leading-0 octal) and an optional K or M suffix (binary
// multiples). ibex also takes G: perftest 4.5 reads "1G" as 1 byte. The
// range is perftest's, with its message.
func ParseSize(s string) (int, error) {
	t, mult := units.SplitSuffix(s) // a T suffix is out of range below
	v, err := strconv.ParseInt(t, 0, 64)
	if err != nil {
		//lint:ignore ST1005 perftest's message, as its users know it
		return 0, fmt.Errorf("Message Size argument %s should be a number with an optional K, M or G suffix", s)
	}
	if v < 1 || v > MaxMsgSize/mult {
		//lint:ignore ST1005 perftest's message, as its users know it
		return 0, fmt.Errorf("Message Size should be between 1 and %d", MaxMsgSize)
	}
	return int(v * mult), nil
}

// DefaultDevice is the device a run without -d opens: the first one, in
// provider order, that reaches another process (CapSameHost or
// CapOtherHosts: shm0 before udp0, never the in-process loop0), since the
// other end of a perftest run is another process. Without such a device,
// the first device.
func DefaultDevice() (string, error) {
	devs := verbs.Devices()
	if len(devs) == 0 {
		return "", fmt.Errorf("perf: no devices")
	}
	for _, d := range devs {
		vc, err := verbs.Open(d.Provider + "/" + d.Device)
		if err != nil {
			continue
		}
		caps := vc.QueryDevice().Caps
		_ = vc.Close()
		if caps&(verbs.CapSameHost|verbs.CapOtherHosts) != 0 {
			return d.Device, nil
		}
	}
	return devs[0].Device, nil
}

// withDefaults fills the zero fields and validates the rest, naming the
// bad flag.
func (c Config) withDefaults() (Config, error) {
	if c.Test < WriteBW || c.Test > AtomicLat {
		return c, fmt.Errorf("perf: unknown test %d", c.Test)
	}
	if c.Size == 0 {
		c.Size = defaultBWSize
		if c.Test.Latency() {
			c.Size = defaultLatSize
		}
	}
	if c.Test.verb() == "atomic" {
		if c.Size != 8 && c.Size != defaultBWSize && c.Size != defaultLatSize {
			return c, fmt.Errorf("perf: -s %d: atomic tests move 8 bytes", c.Size)
		}
		c.Size = 8
	}
	if c.Iters == 0 {
		c.Iters = defaultBWIters
		if c.Test.Latency() {
			c.Iters = defaultLatIter
		}
	}
	if c.QPs == 0 {
		c.QPs = 1
	}
	if c.TxDepth == 0 {
		c.TxDepth = defaultTx
		if c.Test.Latency() {
			c.TxDepth = 1
		}
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	if c.QPTimeout == 0 {
		c.QPTimeout = 14
	}
	if c.PostList == 0 {
		c.PostList = 1
	}
	if c.PostList > 1 {
		switch {
		case c.Test.Latency():
			return c, fmt.Errorf("perf: -l %d: Post list is supported in BW tests only", c.PostList)
		case c.Duration == 0 && c.Iters%c.PostList != 0:
			return c, fmt.Errorf("perf: -l %d: Number of iterations must be a multiple of post list size (-n %d)", c.PostList, c.Iters)
		case c.CQMod == 0:
			c.CQMod = c.PostList // perftest: "CQ moderation will be the size of the post list"
		case c.PostList%c.CQMod != 0:
			return c, fmt.Errorf("perf: -l %d: Post list size must be a multiple of CQ moderation (-Q %d)", c.PostList, c.CQMod)
		}
	}
	if c.CQMod == 0 {
		c.CQMod = cqMod
	}
	switch {
	case c.Size < 1 || c.Size > 1<<30:
		return c, fmt.Errorf("perf: -s %d: size must be 1 B to 1 GiB", c.Size)
	case c.Iters < 2:
		return c, fmt.Errorf("perf: -n %d: at least 2 iterations", c.Iters)
	case c.QPs < 1 || c.QPs > 1024:
		return c, fmt.Errorf("perf: -q %d: 1 to 1024 QPs", c.QPs)
	case c.TxDepth < 1 || c.TxDepth > 8192:
		return c, fmt.Errorf("perf: -t %d: tx depth 1 to 8192", c.TxDepth)
	case c.Port < 1 || c.Port > 65535:
		return c, fmt.Errorf("perf: -p %d: not a TCP port", c.Port)
	case c.Inline < 0 || c.Inline > 1024:
		return c, fmt.Errorf("perf: -I %d: Max inline should be between 0 and 1024", c.Inline)
	case c.MTU != 0 && (c.MTU < 256 || c.MTU > 4096 || c.MTU&(c.MTU-1) != 0):
		return c, fmt.Errorf("perf: -m %d: want 256, 512, 1024, 2048 or 4096", c.MTU)
	case c.QPTimeout < 1 || c.QPTimeout > 31:
		return c, fmt.Errorf("perf: -u %d: QP Timeout should be between 1 and 31", c.QPTimeout)
	case c.CQMod < 1 || c.CQMod > 1024:
		return c, fmt.Errorf("perf: -Q %d: CQ moderation should be between 1 and 1024", c.CQMod)
	case c.PostList < 1 || c.PostList > c.TxDepth:
		return c, fmt.Errorf("perf: -l %d: post list 1 to the tx depth (-t %d)", c.PostList, c.TxDepth)
	case c.Duration < 0:
		return c, fmt.Errorf("perf: -D %v: negative duration", c.Duration)
	case c.Events && c.Duration > 0:
		return c, fmt.Errorf("perf: -e with -D %v: Duration mode doesn't work with events", c.Duration)
	case c.Duplex && c.Test.Latency():
		return c, fmt.Errorf("perf: -b: Bidirectional is only available in BW test")
	case c.Test.Latency() && c.QPs > 1:
		return c, fmt.Errorf("perf: -q %d: latency tests use one QP, as perftest", c.QPs)
	}
	return c, nil
}

// sizes lists the message sizes of a run.
func (c Config) sizes() []int {
	if !c.All || c.Test.verb() == "atomic" {
		return []int{c.Size}
	}
	var s []int
	for n := 2; n <= maxAllSize; n *= 2 {
		s = append(s, n)
	}
	return s
}

// bufSize is the registered buffer per QP.
func (c Config) bufSize() int {
	n := 0
	for _, s := range c.sizes() {
		n = max(n, s)
	}
	return max((n+63)&^63, 64)
}

// Result is one line of the report.
type Result struct {
	Test  string `json:"test"`
	Bytes int    `json:"bytes"`
	Iters int    `json:"iterations"`
	// Bandwidth tests.
	BWPeak  float64 `json:"bw_peak,omitempty"`    // MiB/s (Gb/s with Gbits)
	BWAvg   float64 `json:"bw_average,omitempty"` // MiB/s (Gb/s with Gbits)
	MsgRate float64 `json:"msg_rate_mpps,omitempty"`
	Unit    string  `json:"bw_unit,omitempty"`
	// Latency tests, microseconds.
	TMin     float64 `json:"t_min_us,omitempty"`
	TMax     float64 `json:"t_max_us,omitempty"`
	TTypical float64 `json:"t_typical_us,omitempty"`
	TAvg     float64 `json:"t_avg_us,omitempty"`
	TStdev   float64 `json:"t_stdev_us,omitempty"`
	P99      float64 `json:"p99_us,omitempty"`
	P999     float64 `json:"p99_9_us,omitempty"`
	// Bandwidth tests: this process's CPU time (user+sys of every thread,
	// getrusage) over the run of this size, per GB (10^9 B) moved, and as
	// a percentage of one core. A passive server (write_bw, read_bw,
	// atomic_bw) reports it only for a single size: its span is the
	// client's whole sweep.
	CPUSeconds float64 `json:"cpu_s,omitempty"`
	CPUPerGB   float64 `json:"cpu_s_per_gb,omitempty"`
	CPUPercent float64 `json:"cpu_percent_of_core,omitempty"`
}
