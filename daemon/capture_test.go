package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ibex-rdma/ibex/daemon"
	"github.com/ibex-rdma/ibex/internal/ibexdwire"
	"github.com/ibex-rdma/ibex/internal/pcap"
	"github.com/ibex-rdma/ibex/verbs"
)

// TestCaptureProtocol: the capture op refuses what no `ibex capture` sends,
// naming it (no descriptor or two, a descriptor not open for writing, an
// unknown device, another protocol version, a second message that is not
// JSON); an asker that goes away mid-capture ends it: the daemon writes
// the file and the device can be captured again.
func TestCaptureProtocol(t *testing.T) {
	d := startDaemon(t, "127.0.0.54")
	dir := t.TempDir()
	out, err := os.Create(filepath.Join(dir, "out.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	ro, err := os.Open(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	start := map[string]any{"device": "udp0"}
	w := int(out.Fd())
	for _, c := range []struct {
		name    string
		version int
		msg     any // the second message: JSON, or raw bytes (nil: none, the first is refused)
		fds     []int
		want    string
	}{
		{"no descriptor", ibexdwire.Version, start, nil, "0 descriptors, want one: the output file"},
		{"two descriptors", ibexdwire.Version, start, []int{w, w}, "2 descriptors"},
		{"read-only", ibexdwire.Version, start, []int{int(ro.Fd())}, "not open for writing"},
		{"unknown device", ibexdwire.Version, map[string]any{"device": "udp9"}, []int{w}, `no device "udp9" (this daemon owns [udp0])`},
		{"bad snaplen", ibexdwire.Version, map[string]any{"device": "udp0", "snaplen": 3}, []int{w}, "snaplen 3"},
		{"version", ibexdwire.Version + 1, nil, nil, "protocol version"},
		{"not json", ibexdwire.Version, []byte("{capture"), []int{w}, "malformed message"},
	} {
		conn := captureConn(t, d.sock, c.version)
		var err error
		switch m := c.msg.(type) {
		case nil:
		case []byte:
			_, _, err = conn.WriteMsgUnix(m, nil, nil)
		default:
			err = ibexdwire.Send(conn, m, c.fds...)
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := captureErr(t, conn); !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
		conn.Close()
	}

	// An asker that disconnects after the start.
	conn := captureConn(t, d.sock, ibexdwire.Version)
	if err := ibexdwire.Send(conn, start, w); err != nil {
		t.Fatal(err)
	}
	if got := captureErr(t, conn); got != "" {
		t.Fatalf("capture refused: %s", got)
	}
	conn.Close()
	probe, err := os.Create(filepath.Join(dir, "probe.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		// The daemon sees the hang-up, stops, and writes the (empty)
		// capture: a pcap header.
		f, ferr := pcap.ReadFile(out.Name())
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // stop at once
		_, err := daemon.Capture(ctx, daemon.CaptureOptions{Socket: d.sock, Device: "udp0", Out: probe}, nil)
		if ferr == nil && f.LinkType == pcap.LinkEthernet && err == nil {
			break
		}
		if err != nil && !errors.Is(err, verbs.ErrBusy) {
			t.Fatalf("capture after the asker went away: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("20 s after the asker went away: file %v, capture %v", ferr, err)
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
}

// captureConn dials the daemon and sends the capture op.
func captureConn(t *testing.T, sock string, version int) *net.UnixConn {
	t.Helper()
	c, err := net.Dial("unixpacket", sock)
	if err != nil {
		t.Fatal(err)
	}
	conn := c.(*net.UnixConn)
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if err := ibexdwire.Send(conn, &ibexdwire.Request{ID: 1, Op: ibexdwire.OpCapture, Version: version}); err != nil {
		t.Fatal(err)
	}
	return conn
}

// captureErr reads the daemon's answer and returns its error ("": none).
func captureErr(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, ibexdwire.MaxMessage)
	n, _, _, _, err := conn.ReadMsgUnix(buf, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	var r struct {
		Err string `json:"err"`
	}
	if err := json.Unmarshal(buf[:n], &r); err != nil {
		t.Fatalf("answer %q: %v", buf[:n], err)
	}
	return r.Err
}
